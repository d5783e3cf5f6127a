"""The database layer every askback product shares: URLs and engines (`engine`), the SQLite fast path (`sqlite`),
one classification of driver errors (`classify`), and a migration runner that applies each component's own
Alembic history (`migrate`). It knows nothing of flows, effects or accounts: those are the products' tables."""
