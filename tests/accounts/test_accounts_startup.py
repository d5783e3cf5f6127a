"""A server with connected accounts refuses to start with a vault key ring that cannot read what is stored."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pytest

from askback import Askback, ConfigurationError, load_settings
from askback.accounts.connections import ApiKeyConnection, Connections
from askback.accounts.pages import DevelopmentSignIn
from askback.accounts.repository import Accounts
from askback.accounts.setup import enable_accounts
from askback.accounts.status import Event
from askback.accounts.vault import Vault, new_key

pytestmark = pytest.mark.anyio

KEY = new_key("a")


def app_with(database: Path, key: str) -> Askback:
    settings = load_settings(database_url=f"sqlite:///{database}", state_keys=secrets.token_urlsafe(32))
    app = Askback("notes", settings=settings)
    enable_accounts(
        app,
        connections=Connections([ApiKeyConnection(name="notes")]),
        vault=Vault(key),
        verifier=DevelopmentSignIn(secrets.token_bytes(32)),
        base_url="http://127.0.0.1:9",
    )
    return app


async def stored_credential(database: Path) -> None:
    app = app_with(database, KEY)
    async with app.running():
        accounts = Accounts((await app.store()).database)
        account_id, _ = await accounts.begin_connect("alice", "notes", flow_id=None, now=time.time(), ttl=60)
        sealed = Vault(KEY).seal(account_id, {"api_key": "k"})
        await accounts.change(account_id, Event.CONNECTED, now=time.time(), credential=sealed)


@pytest.mark.parametrize(
    ("key", "says"),
    [
        pytest.param(new_key("b"), "not in ASKBACK_VAULT_KEYS", id="a key ring without the sealing key"),
        pytest.param(new_key("a"), "cannot open the credentials already stored", id="the same key id, other bytes"),
    ],
)
async def test_a_key_ring_that_cannot_open_the_stored_credentials_stops_the_start(
    tmp_path: Path, key: str, says: str
) -> None:
    await stored_credential(tmp_path / "askback.db")
    with pytest.raises(ConfigurationError, match=says) as refused:
        await app_with(tmp_path / "askback.db", key).store()
    assert key.split(":")[1] not in str(refused.value) and KEY.split(":")[1] not in str(refused.value)


async def test_the_right_key_ring_starts_and_a_new_one_with_the_old_key_after_it_too(tmp_path: Path) -> None:
    await stored_credential(tmp_path / "askback.db")
    for ring in (KEY, f"{new_key('b')},{KEY}"):
        app = app_with(tmp_path / "askback.db", ring)
        async with app.running():
            pass
