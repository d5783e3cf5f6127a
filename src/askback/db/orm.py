"""What every product's declarative models share: one naming convention for constraints and indexes.

Each product keeps its own `MetaData` (its own Alembic history compares against it alone), made here so that a
primary key, a unique constraint or an index is named the same way in every product's tables.
"""

from __future__ import annotations

from sqlalchemy import MetaData

__all__ = ["NAMING_CONVENTION", "product_metadata"]

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_name)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "pk": "pk_%(table_name)s",
}


def product_metadata() -> MetaData:
    """A fresh `MetaData` for one product's tables, named by the shared convention."""
    return MetaData(naming_convention=NAMING_CONVENTION)
