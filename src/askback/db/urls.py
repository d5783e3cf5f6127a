"""Database URLs: the forms askback accepts, and the async-driver form it uses."""

from __future__ import annotations

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, make_url

from askback.errors import ConfigurationError

__all__ = ["normalize_database_url", "safe_database_url"]

# Query parameters that carry a secret (libpq's and asyncpg's spellings): hidden as the password is.
_SECRET_QUERY_KEYS = frozenset({"password", "passwd", "sslpassword"})

_ASYNC_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "postgresql+psycopg2": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
}
_ACCEPTED_URLS = (
    "sqlite:///PATH (sqlite:////ABSOLUTE/PATH) or postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE; "
    "postgres://, postgresql+psycopg2://, postgresql+asyncpg:// and sqlite+aiosqlite:/// are accepted too"
)


def normalize_database_url(url: str) -> str:
    """The async-driver form of a database URL: `sqlite+aiosqlite://` or `postgresql+asyncpg://`.

    Raises `ConfigurationError` for anything else; the message shows the accepted forms but never the URL
    itself, which may hold a password.
    """
    scheme, separator, rest = url.partition("://")
    driver = _ASYNC_DRIVERS.get(scheme.lower()) if separator else None
    if driver is None:
        # Only text before "://" is shown: a password can only come after it.
        found = f"the scheme {scheme!r}" if separator else "no scheme (nothing before '://')"
        raise ConfigurationError(
            f"The database URL (ASKBACK_DATABASE_URL) has {found}, which askback cannot use. "
            f"Set it to {_ACCEPTED_URLS}."
        )
    if driver.startswith("sqlite") and not rest.startswith("/"):
        # sqlite://name.db would silently become an in-memory database that vanishes with the process.
        raise ConfigurationError(
            "The SQLite database URL (ASKBACK_DATABASE_URL) needs three slashes before a relative path "
            "(sqlite:///askback.db) and four before an absolute one (sqlite:////var/lib/askback.db)."
        )
    normalized = f"{driver}://{rest}"
    try:
        parsed = make_url(normalized)
    except (sa_exc.ArgumentError, ValueError) as exc:
        raise ConfigurationError(
            f"The database URL (ASKBACK_DATABASE_URL) could not be parsed; set it to {_ACCEPTED_URLS} "
            "(percent-encode special characters in the user name and password)."
        ) from exc
    if driver.startswith("postgresql") and "sslmode" in parsed.query:
        # libpq's spelling, which tools sharing the URL use; asyncpg calls it `ssl` and takes the same values.
        query = dict(parsed.query)
        query["ssl"] = query.pop("sslmode")
        normalized = parsed.set(query=query).render_as_string(hide_password=False)
    return normalized


def safe_database_url(url: URL) -> str:
    """`url` as it may be shown or logged: the password hidden, whether it is given before the host or as a query
    parameter (`?password=...`, which asyncpg also reads)."""
    query = {k: ("***" if k.lower() in _SECRET_QUERY_KEYS else v) for k, v in url.query.items()}
    return url.set(query=query).render_as_string(hide_password=True)
