"""On PostgreSQL, the accounts that many callers ask for in one moment are read with one query."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from sqlalchemy import event

from askback.accounts.connections import ApiKeyConnection, Connections
from askback.accounts.repository import Account, Accounts
from askback.accounts.status import Event
from askback.accounts.tokens import TokenKeeper
from askback.accounts.vault import Vault, new_key
from askback.clock import SystemClock
from askback.db.migrate import all_components
from askback.store import Store

pytestmark = pytest.mark.anyio


async def test_fifty_callers_for_fifty_accounts_at_once_cost_one_read(fresh_pg_url: str) -> None:
    store = await Store.open(fresh_pg_url, migrate=True, components=all_components())
    vault = Vault(new_key())
    accounts = Accounts(store.database)
    keeper = TokenKeeper(accounts, vault, Connections([ApiKeyConnection(name="notes")]), clock=SystemClock())
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "askback_account_events" in statement and statement.lstrip().upper().startswith("SELECT"):
            statements.append(statement)

    try:
        made: list[Account] = []
        for n in range(50):
            account_id, _ = await accounts.begin_connect(f"user{n}", "notes", flow_id=None, now=time.time(), ttl=60)
            sealed = vault.seal(account_id, {"api_key": f"key-{n}"})
            await accounts.change(account_id, Event.CONNECTED, now=time.time(), credential=sealed)
            account = await accounts.get(account_id)
            assert account is not None
            made.append(account)
        event.listen(store.database.engine.sync_engine, "before_cursor_execute", seen)
        got: dict[str, str] = {}

        async def call(account: Account) -> None:
            got[account.principal] = (await keeper.token(account)).access_token

        async with anyio.create_task_group() as tg:
            for account in made:
                tg.start_soon(call, account)
        assert got == {f"user{n}": f"key-{n}" for n in range(50)}
        assert len(statements) == 1, statements  # one query read all fifty accounts
    finally:
        event.remove(store.database.engine.sync_engine, "before_cursor_execute", seen)
        await keeper.aclose()
        await store.close()
