"""Single-flight refresh across real processes: two server processes, fifty callers each, one expired token, one
refresh at the provider, on SQLite (one file) and on PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import pytest

from _accounts_site import discovered_oidc
from askback.accounts.connections import (
    Connections,
    OAuthConnection,
    authorization_request,
    new_code_verifier,
    new_state,
)
from askback.accounts.repository import Accounts
from askback.accounts.status import Event
from askback.accounts.tokens import TokenKeeper
from askback.accounts.vault import Vault, new_key
from askback.clock import SystemClock
from askback.db.migrate import all_components
from askback.store import Store
from infra import FIXTURES, OidcProvider, oidc_provider

pytestmark = [pytest.mark.anyio, pytest.mark.http]

REDIRECT = "http://127.0.0.1:9/callback"  # never reached: the code is read from the redirect itself
WORKER = FIXTURES / "refresh_worker.py"
CALLERS = 50


@pytest.fixture(scope="module")
def provider() -> Iterator[OidcProvider]:
    with oidc_provider(redirect_uris=[REDIRECT]) as started:
        yield started


async def code_from_provider(provider: OidcProvider, connection: OAuthConnection, verifier: str) -> str:
    """Sign in and consent on the provider's development pages over plain HTTP (a person's clicks, as forms)."""
    state = new_state()
    url = authorization_request(connection, redirect_uri=REDIRECT, state=state, code_verifier=verifier)
    async with httpx.AsyncClient(timeout=10) as http:
        for form in ({"prompt": "login", "login": "alice", "password": "x"}, {"prompt": "consent"}, None):
            while True:
                reply = await http.get(url)
                if reply.status_code not in (302, 303):
                    break
                url = urljoin(url, reply.headers["location"])
                if url.startswith(REDIRECT):
                    query = parse_qs(urlsplit(url).query)
                    assert query["state"] == [state]
                    return query["code"][0]
            assert form is not None, reply.text[:300]
            action = reply.text.split('action="', 1)[1].split('"', 1)[0]
            posted = await http.post(urljoin(url, action), data=form)
            assert posted.status_code in (302, 303), posted.text[:300]
            url = urljoin(url, posted.headers["location"])
            if url.startswith(REDIRECT):
                query = parse_qs(urlsplit(url).query)
                return query["code"][0]
    raise AssertionError("the provider never redirected back")


def start_worker(settings: dict[str, Any]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, str(WORKER)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=FIXTURES.parent,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(settings) + "\n")
    proc.stdin.flush()
    return proc


async def test_fifty_callers_in_each_of_two_processes_on_an_expired_token_cause_exactly_one_refresh(
    provider: OidcProvider, any_database: str
) -> None:
    connection = await discovered_oidc(provider)
    key = new_key()
    vault = Vault(key)
    store = await Store.open(any_database, migrate=True, components=all_components())
    accounts = Accounts(store.database)
    keeper = TokenKeeper(accounts, vault, Connections([connection]), clock=SystemClock())
    try:
        verifier = new_code_verifier()
        code = await code_from_provider(provider, connection, verifier)
        tokens = await keeper.exchange(connection, code=code, redirect_uri=REDIRECT, code_verifier=verifier)
        account_id, _ = await accounts.begin_connect("alice", "oidc", flow_id=None, now=time.time(), ttl=600)
        expired = time.time() - 1  # as if its lifetime had run out
        sealed = vault.seal(account_id, {**tokens.to_vault(), "expires_at": expired})
        await accounts.change(account_id, Event.CONNECTED, now=time.time(), credential=sealed, expires_at=expired)
    finally:
        await keeper.aclose()
        await store.close()

    settings = {
        "database_url": any_database,
        "vault_key": key,
        "issuer": provider.issuer,
        "client_id": provider.client_id,
        "client_secret": provider.client_secret,
        "account_id": account_id,
        "callers": CALLERS,
    }
    workers = [start_worker(settings) for _ in range(2)]
    try:
        for proc in workers:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        provider.reset_counters()
        for proc in workers:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        got = []
        for proc in workers:
            out, _ = proc.communicate(timeout=60)
            assert proc.returncode == 0
            got += json.loads(out.strip().splitlines()[-1])
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    counts = provider.counters()
    assert counts["token"].get("refresh_token") == 1
    assert counts["refresh_token_reuse"] == 0
    assert len(got) == 2 * CALLERS and len(set(got)) == 1 and got[0] != tokens.access_token
