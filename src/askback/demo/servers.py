"""The demo's processes: its SQLite database, made fresh on every run and marked as the demo's (`prepare_database`),
and its servers (`serving_demo`): Demo Mail in a thread of this process and the demo server's worker processes, each
with keys of their own, stopped when the block ends (the server's whole process group, on Ctrl-C too)."""

from __future__ import annotations

import contextlib
import secrets
import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from askback.accounts.vault import new_key
from askback.demo.asking import console
from askback.demo.mail import (
    CLIENT_SECRET_ENV,
    ISSUER_ENV,
    PUBLIC_URL_ENV,
    SIGN_IN_SECRET_ENV,
    callback_url,
)
from askback.demo.provider import NAME, DevProvider, serving_provider
from askback.demo.rounds import serving_workers
from askback.errors import ConfigurationError
from askback.testing import serving

__all__ = ["DemoServers", "demo_servers", "prepare_database", "serving_demo"]

_MARKER = "askback_demo"


def prepare_database(database: str) -> None:
    """Start the demo on a fresh SQLite database: create it marked as the demo's, or replace one the demo made
    before. An existing file without the mark is somebody else's and is refused. Other databases are used as
    they are."""
    from sqlalchemy.engine import make_url

    from askback.db.urls import normalize_database_url

    parsed = make_url(normalize_database_url(database))
    name = parsed.database
    if parsed.get_backend_name() != "sqlite" or not name or name == ":memory:" or name.startswith("file:"):
        return
    path = Path(name)
    if path.exists():
        if not _made_by_demo(path):
            raise ConfigurationError(
                f"{path} already exists and was not made by `askback demo`, which replaces its database on every "
                f"run; pass --database sqlite:///ANOTHER.db, or delete {path} yourself"
            )
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    try:
        with contextlib.closing(sqlite3.connect(path)) as conn, conn:
            conn.execute(f"CREATE TABLE {_MARKER} (note TEXT NOT NULL)")
            conn.execute(
                f"INSERT INTO {_MARKER} VALUES ('made by askback demo, which replaces this database on every run')"
            )
    except sqlite3.Error as exc:
        raise ConfigurationError(
            f"cannot create the demo database {path} ({exc}); pass --database sqlite:///PATH in a writable folder"
        ) from exc


def _made_by_demo(path: Path) -> bool:
    try:
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            found = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", (_MARKER,))
            return bool(found.fetchone()[0])
    except sqlite3.Error:  # not an SQLite file at all, or unreadable: not ours either way
        return False


@dataclass(frozen=True)
class DemoServers:
    """The demo's servers while they run: the demo server's /mcp `url`, and Demo Mail (`mail`, in this process)."""

    url: str
    mail: DevProvider


@contextlib.contextmanager
def serving_demo(
    *, workers: int, port: int, database: str, env: Mapping[str, str] | None = None, mail_port: int = 0
) -> Iterator[DemoServers]:
    """Demo Mail on loopback (on `mail_port`, 0: a free one) and the demo server (`askback serve askback.demo:server`)
    on `port`, connected to it, with keys of their own and `env` besides (e.g. `ASKBACK_WEBHOOKS`), until the block
    ends."""
    public_url = f"http://127.0.0.1:{port}"
    client_secret = secrets.token_urlsafe(32)
    redirect_uris = [callback_url(public_url)]
    with serving_provider(client_secret=client_secret, redirect_uris=redirect_uris, port=mail_port) as mail:
        server_env = {
            **(env or {}),
            "ASKBACK_STATE_KEYS": secrets.token_urlsafe(48),
            "ASKBACK_DATABASE_URL": database,
            "ASKBACK_VAULT_KEYS": new_key(),
            ISSUER_ENV: mail.issuer,
            CLIENT_SECRET_ENV: client_secret,
            PUBLIC_URL_ENV: public_url,
            SIGN_IN_SECRET_ENV: secrets.token_urlsafe(32),
        }
        console.print(f"Starting {NAME}, a development OAuth provider, on {mail.issuer}")
        console.print(f"Starting the demo server, database {database}: {serving_workers(workers, f'127.0.0.1:{port}')}")
        with serving("askback.demo:server", port=port, workers=workers, env=server_env) as url:
            yield DemoServers(url, mail)


@contextlib.contextmanager
def demo_servers(
    *, workers: int, port: int, database: str, env: Mapping[str, str] | None = None, mail_port: int = 0
) -> Iterator[str]:
    """`serving_demo`, yielding the demo server's /mcp URL."""
    with serving_demo(workers=workers, port=port, database=database, env=env, mail_port=mail_port) as servers:
        yield servers.url
