"""A connected account whose provider had an outage comes back by itself, and a refresh holds no database lock while
it waits for the provider.

The provider here is a stand-in for a third-party one: a small OAuth 2.0 token endpoint on loopback (rotating refresh
tokens, each accepted once) that the test can make refuse connections, answer 503, 429 or a body that is not JSON,
hang, hold a request until released, or refuse a grant (`invalid_grant`). It counts the token requests that reach it.
The databases are a real SQLite file and a real PostgreSQL; the tool calls go over real HTTP to an askback server
with connected accounts. The clock is a `FrozenClock`: backoffs and claims expire when it is moved, never by waiting.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import anyio
import anyio.to_thread
import httpx
import pytest
import sqlalchemy as sa
from pydantic import SecretStr

from _http import RawReply, post_call
from askback import Askback, Flow, load_settings
from askback.accounts.connections import Connections, OAuthConnection
from askback.accounts.pages import DevelopmentSignIn
from askback.accounts.repository import Account, Accounts
from askback.accounts.setup import AccountsSetup, enable_accounts
from askback.accounts.status import Event, Status
from askback.accounts.tokens import Backoff, TokenKeeper, TokenSet
from askback.accounts.vault import Vault, new_key
from askback.clock import FrozenClock
from askback.db.migrate import all_components
from askback.errors import ProviderError
from askback.server import DemoTokenVerifier, Mounted, Open, build_app
from askback.store import Store
from infra import QuietHandler, serving_asgi, serving_http

pytestmark = [pytest.mark.anyio, pytest.mark.http]

WAIT = 30  # the bound on any one test's waiting on real parts
OUTAGES = ["refused", "503", "429", "not_json", "timeout"]


# --- the stand-in provider ------------------------------------------------------------------------------------------


class StandIn:
    """A third-party provider's token endpoint, for the refresh grant. `mode` says how it answers:

    - "ok": rotates the refresh token (each is accepted once; an unknown or used one is `invalid_grant`);
    - "503", "429" (with an OAuth-style `slow_down` error), "not_json" (200 with an HTML page): an outage;
    - "timeout": never answers (until `reset`); "hold": answers "ok" once the test calls `release()`;
    - `down()` closes the port (connection refused) until `up()`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.mode = "ok"
        self.requests = 0  # token requests that reached it
        self.refreshes = 0  # of which it answered with new tokens
        self._refresh_tokens: set[str] = set()
        self._access_tokens: set[str] = set()
        self._issued = 0
        self.arrived = threading.Event()  # a held (or hanging) request has come in
        self._released = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._serving: contextlib.ExitStack | None = None
        self.port = 0
        self.up()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def issue(self) -> dict[str, Any]:
        """A grant as the authorization-code exchange would have stored it (what the vault keeps)."""
        with self._lock:
            body = self._new_tokens()
        return {"access_token": body["access_token"], "token_type": "Bearer", "refresh_token": body["refresh_token"]}

    def revoke(self, refresh_token: str) -> None:
        with self._lock:
            self._refresh_tokens.discard(refresh_token)

    def accepts(self, access_token: str) -> bool:
        with self._lock:
            return access_token in self._access_tokens

    def release(self) -> None:
        self._released.set()

    def down(self) -> None:
        assert self._serving is not None
        self._serving.close()
        self._server, self._serving = None, None

    def up(self) -> None:
        stand_in = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                form = parse_qs(self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode())
                status, body, kind = stand_in._answer(form)
                if status == 0:
                    return  # never answered
                self.answer(status, body, kind)

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that gave up on a hanging answer

        self._server = Server(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        self._serving = contextlib.ExitStack()
        self._serving.enter_context(serving_http(self._server))

    def reset(self) -> None:
        self._released.set()  # frees any request still held
        with self._lock:
            self.mode, self.requests, self.refreshes = "ok", 0, 0
        self.arrived, self._released = threading.Event(), threading.Event()
        if self._server is None:
            self.up()

    def close(self) -> None:
        self._released.set()
        if self._server is not None:
            self.down()

    def _answer(self, form: dict[str, list[str]]) -> tuple[int, bytes, str]:
        with self._lock:
            self.requests += 1
            mode = self.mode
        if mode in ("timeout", "hold"):
            self.arrived.set()
            released = self._released.wait(WAIT)
            if mode == "timeout" or not released:
                return 0, b"", ""
        if mode == "503":
            return 503, b'{"error": "temporarily_unavailable"}', "application/json"
        if mode == "429":
            return 429, b'{"error": "slow_down"}', "application/json"
        if mode == "not_json":
            return 200, b"<html><h1>Down for maintenance</h1></html>", "text/html"
        with self._lock:
            token = (form.get("refresh_token") or [""])[0]
            if form.get("grant_type") != ["refresh_token"] or token not in self._refresh_tokens:
                return 400, b'{"error": "invalid_grant"}', "application/json"
            self._refresh_tokens.discard(token)
            self.refreshes += 1
            return 200, json.dumps(self._new_tokens()).encode(), "application/json"

    def _new_tokens(self) -> dict[str, Any]:
        self._issued += 1
        access, refresh = f"at-{self._issued}-{secrets.token_hex(8)}", f"rt-{self._issued}-{secrets.token_hex(8)}"
        self._access_tokens.add(access)
        self._refresh_tokens.add(refresh)
        return {"access_token": access, "token_type": "Bearer", "expires_in": 3600, "refresh_token": refresh}


@pytest.fixture(scope="module")
def module_stand_in() -> Iterator[StandIn]:
    started = StandIn()
    try:
        yield started
    finally:
        started.close()


@pytest.fixture
def stand_in(module_stand_in: StandIn) -> Iterator[StandIn]:
    module_stand_in.reset()
    try:
        yield module_stand_in
    finally:
        module_stand_in.reset()


def connection_to(stand_in: StandIn) -> OAuthConnection:
    return OAuthConnection(
        name="standin",
        client_id="askback",
        client_secret=SecretStr("client-secret"),
        authorize_url=f"{stand_in.base}/authorize",
        token_url=f"{stand_in.base}/token",
        origins=(stand_in.base,),
    )


def outage(stand_in: StandIn, kind: str) -> None:
    if kind == "refused":
        stand_in.down()
    else:
        stand_in.mode = kind


def outage_over(stand_in: StandIn) -> None:
    stand_in.reset()


async def seed(accounts: Accounts, vault: Vault, stand_in: StandIn, principal: str, *, now: float) -> Account:
    """An ACTIVE account holding a grant from the stand-in, connected at `now`, whose access token has just expired."""
    account_id, _ = await accounts.begin_connect(principal, "standin", flow_id=None, now=now, ttl=600)
    expires_at = now - 1
    sealed = vault.seal(account_id, {**stand_in.issue(), "expires_at": expires_at})
    await accounts.change(account_id, Event.CONNECTED, now=now, credential=sealed, expires_at=expires_at)
    account = await accounts.get(account_id)
    assert account is not None and account.status is Status.ACTIVE
    return account


async def row(accounts: Accounts, account_id: str) -> Any:
    async with accounts.database.engine.connect() as conn:
        found = await conn.execute(
            sa.text(
                "SELECT status, failures, retry_at, refresh_owner, refresh_until FROM askback_accounts WHERE id = :a"
            ),
            {"a": account_id},
        )
        return found.one()


async def events(accounts: Accounts, account_id: str) -> list[str]:
    return [e["event"] for e in await accounts.history(account_id)]


@dataclass
class Instances:
    """Two instances of a server on one database: each its own store (engine) and token keeper."""

    keepers: list[TokenKeeper]

    @property
    def accounts(self) -> Accounts:
        return self.keepers[0].accounts


@contextlib.asynccontextmanager
async def instances(
    url: str, vault: Vault, stand_in: StandIn, clock: FrozenClock, **options: Any
) -> AsyncIterator[Instances]:
    stores = [await Store.open(url, migrate=True, components=all_components()) for _ in range(2)]
    connections = Connections([connection_to(stand_in)])
    keepers = [TokenKeeper(Accounts(s.database), vault, connections, clock=clock, **options) for s in stores]
    try:
        yield Instances(keepers)
    finally:
        for keeper in keepers:
            await keeper.aclose()
        for store in stores:
            await store.close()


@pytest.fixture
def vault() -> Vault:
    return Vault(new_key())


# --- ERROR, then back, at the keeper ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", OUTAGES)
async def test_every_kind_of_outage_turns_the_account_error_and_the_first_call_after_the_backoff_brings_it_back(
    kind: str, stand_in: StandIn, vault: Vault, clock: FrozenClock, tmp_path: Path
) -> None:
    # A small provider timeout, so that "timeout" fails at once rather than after the default 5 s.
    async with instances(f"sqlite:///{tmp_path / 'askback.db'}", vault, stand_in, clock, provider_timeout=0.3) as two:
        keeper = two.keepers[0]
        with anyio.fail_after(WAIT):
            account = await seed(two.accounts, vault, stand_in, "alice", now=clock.now())
            outage(stand_in, kind)

            with pytest.raises(ProviderError) as failed:
                await keeper.token(account)
            assert failed.value.reason == "unreachable"
            assert failed.value.retry_at == clock.now() + 1
            assert "is ERROR until a refresh succeeds" in str(failed.value) and "again in 1 s" in str(failed.value)
            error = await two.accounts.get(account.id)
            assert error is not None and error.status is Status.ERROR

            outage_over(stand_in)
            clock.advance(1)
            fresh = await keeper.token(account)

        assert stand_in.accepts(fresh.access_token) and stand_in.refreshes == 1
        back = await two.accounts.get(account.id)
        assert back is not None and (back.status, back.reason) == (Status.ACTIVE, None)
        assert (await row(two.accounts, account.id))[1:] == (0, None, None, None)  # backoff and claim cleared
        assert (await events(two.accounts, account.id))[-2:] == ["unreachable", "refreshed"]


async def test_a_second_instance_within_the_backoff_does_not_ask_the_provider_and_after_it_does(
    any_database: str, stand_in: StandIn, vault: Vault, clock: FrozenClock
) -> None:
    async with instances(any_database, vault, stand_in, clock, backoff=Backoff(first=1, cap=3)) as two:
        first, second = two.keepers
        with anyio.fail_after(WAIT):
            account = await seed(two.accounts, vault, stand_in, "alice", now=clock.now())
            stand_in.mode = "503"
            with pytest.raises(ProviderError):
                await first.token(account)
            assert stand_in.requests == 1

            # The other instance knows of the failure from the database: it leaves the provider alone.
            with pytest.raises(ProviderError) as backing_off:
                await second.token(account)
            assert backing_off.value.reason == "unreachable" and backing_off.value.retry_at == clock.now() + 1
            assert "not asked again for 1 s" in str(backing_off.value)
            with pytest.raises(ProviderError):
                await second.refresh(account, force=True)  # a forced refresh (after a 401) waits out the backoff too
            assert stand_in.requests == 1

            # Each failure in a row doubles the wait, up to the cap (1 s, 2 s, 3 s, 3 s), and whichever instance
            # comes first after it ends is the one that asks.
            previous = 1.0
            for failures, wait in ((2, 2.0), (3, 3.0), (4, 3.0)):
                clock.advance(previous - 0.5)
                with pytest.raises(ProviderError, match="not asked again for 1 s"):
                    await first.token(account)
                assert stand_in.requests == failures - 1
                clock.advance(0.5)
                with pytest.raises(ProviderError, match="could not be refreshed"):
                    await (first if failures % 2 else second).token(account)
                assert stand_in.requests == failures
                state = await row(two.accounts, account.id)
                assert (state.status, state.failures, state.retry_at) == ("ERROR", failures, clock.now() + wait)
                previous = wait

            stand_in.mode = "ok"
            clock.advance(previous)
            fresh = await second.token(account)
            assert (await first.token(account)).access_token == fresh.access_token
        assert stand_in.requests == 5 and stand_in.refreshes == 1
        assert (await row(two.accounts, account.id))[:3] == ("ACTIVE", 0, None)


def test_the_backoff_doubles_from_its_first_wait_up_to_its_cap() -> None:
    backoff = Backoff(first=1.0, cap=300.0)
    assert [backoff.delay(n) for n in range(1, 12)] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]
    assert Backoff().delay(10_000) == Backoff().cap  # no overflow, however long the outage
    assert Backoff(first=0.25, cap=1).delay(1) == 0.25


async def test_the_providers_refusal_of_the_grant_after_an_outage_turns_the_account_expired(
    stand_in: StandIn, vault: Vault, clock: FrozenClock, tmp_path: Path
) -> None:
    async with instances(f"sqlite:///{tmp_path / 'askback.db'}", vault, stand_in, clock) as two:
        keeper = two.keepers[0]
        with anyio.fail_after(WAIT):
            account = await seed(two.accounts, vault, stand_in, "alice", now=clock.now())
            stand_in.mode = "503"
            with pytest.raises(ProviderError):
                await keeper.token(account)
            sealed = await two.accounts.sealed_credential(account.id)
            assert sealed is not None
            stand_in.revoke(str(TokenSet.from_vault(vault.open(account.id, sealed)).refresh_token))
            stand_in.mode = "ok"
            clock.advance(1)
            with pytest.raises(ProviderError) as refused:
                await keeper.token(account)
        assert (refused.value.reason, refused.value.error) == ("rejected", "invalid_grant")
        assert (await row(two.accounts, account.id))[:3] == ("EXPIRED", 0, None)


# --- no database lock across the provider's time ----------------------------------------------------------------------


async def test_while_a_refresh_waits_for_the_provider_other_writers_go_on_and_other_instances_wait_on_its_claim(
    any_database: str, stand_in: StandIn, vault: Vault, clock: FrozenClock
) -> None:
    async with instances(any_database, vault, stand_in, clock, provider_timeout=WAIT) as two:
        account = await seed(two.accounts, vault, stand_in, "alice", now=clock.now())
        stand_in.mode = "hold"
        order: list[str] = []
        got: dict[int, str] = {}

        async def call(i: int) -> None:
            got[i] = (await two.keepers[i].token(account)).access_token
            order.append(f"instance {i} has the token")

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, 0)
                assert await anyio.to_thread.run_sync(stand_in.arrived.wait, WAIT)  # the provider holds the request
                tg.start_soon(call, 1)  # the same account, on the other instance, meanwhile

                # Another person's call writes to the same database while the provider holds the refresh: on SQLite
                # this is the one write lock, which the refresh must not be holding.
                other = Accounts(two.keepers[1].accounts.database)
                await other.begin_connect("bob", "standin", flow_id=None, now=clock.now(), ttl=600)
                order.append("another write committed")
                assert stand_in.requests == 1  # the other instance is waiting on the claim, not asking

                stand_in.release()
                order.append("provider released")

        assert order[:2] == ["another write committed", "provider released"]
        assert got[0] == got[1] and stand_in.accepts(got[0])
        assert (stand_in.requests, stand_in.refreshes) == (1, 1)
        assert (await row(two.accounts, account.id))[3:] == (None, None)


async def test_a_claim_left_by_a_holder_that_died_is_taken_over_once_it_expires(
    any_database: str, stand_in: StandIn, vault: Vault, clock: FrozenClock
) -> None:
    async with instances(any_database, vault, stand_in, clock, lease=10) as two:
        keeper = two.keepers[0]
        account = await seed(two.accounts, vault, stand_in, "alice", now=clock.now())
        # What a process killed while asking the provider leaves behind: its claim, until its lease runs out.
        async with two.accounts.database.engine.begin() as conn:
            await conn.execute(
                sa.text("UPDATE askback_accounts SET refresh_owner = 'dead', refresh_until = :until WHERE id = :a"),
                {"until": clock.now() + 10, "a": account.id},
            )
        got: list[str] = []

        async def call() -> None:
            got.append((await keeper.token(account)).access_token)

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await clock.until_sleeping()  # waiting on the claim, until it expires
                assert stand_in.requests == 0 and not got
                clock.advance(10)

        assert len(got) == 1 and stand_in.accepts(got[0]) and stand_in.refreshes == 1
        assert (await row(two.accounts, account.id))[3:] == (None, None)


# --- over MCP: flow.connect tries the token, not the person ----------------------------------------------------------


@dataclass
class Served:
    mcp: str
    setup: AccountsSetup
    clock: FrozenClock


@pytest.fixture(scope="module")
async def served(
    listener: socket.socket, module_stand_in: StandIn, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Served]:
    base = f"http://127.0.0.1:{listener.getsockname()[1]}"
    database = tmp_path_factory.mktemp("recovery") / "askback.db"
    settings = load_settings(database_url=f"sqlite:///{database}", state_keys=secrets.token_urlsafe(32))
    clock = FrozenClock(at=1_800_000_000.0)
    app = Askback("mail", settings=settings, clock=clock)

    @app.tool()
    async def whoami(flow: Flow) -> str:
        account = await flow.connect("standin")
        token = await account.token()
        return f"{account.status.value}, and the provider accepts its token: {module_stand_in.accepts(token)}"

    # The provider's timeout, short, so that a hanging provider fails the call at once.
    to_providers = httpx.AsyncClient(timeout=0.5)
    setup = enable_accounts(
        app,
        connections=Connections([connection_to(module_stand_in)]),
        vault=Vault(new_key()),
        verifier=DevelopmentSignIn(secrets.token_bytes(32)),
        base_url=base,
        http=to_providers,
    )
    http_app = build_app(
        app, token_verifier=DemoTokenVerifier(), mounts=[Mounted(setup.prefix, setup.pages, auth=Open())]
    )
    async with serving_asgi(http_app, listener):
        yield Served(f"{base}/mcp", setup, clock)
    await to_providers.aclose()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=WAIT) as client:
        yield client


async def call_whoami(http: httpx.AsyncClient, served: Served, principal: str) -> dict[str, Any]:
    reply: RawReply = await post_call(http, served.mcp, "whoami", {}, token=f"demo-{principal}")
    return reply.message()


async def served_account(served: Served, stand_in: StandIn, principal: str) -> tuple[Accounts, Account]:
    service = await served.setup.service()
    account = await seed(service.accounts, service.vault, stand_in, principal, now=served.clock.now())
    return service.accounts, account


@pytest.mark.parametrize("kind", OUTAGES)
async def test_after_an_outage_the_next_call_refreshes_the_account_instead_of_asking_the_person_to_connect_again(
    kind: str, served: Served, stand_in: StandIn, http: httpx.AsyncClient
) -> None:
    principal = f"p-{kind}"
    with anyio.fail_after(WAIT):
        accounts, account = await served_account(served, stand_in, principal)
        outage(stand_in, kind)

        failed = await call_whoami(http, served, principal)
        assert failed["error"]["code"] == -32603, failed
        assert "could not be refreshed" in failed["error"]["message"]
        assert (await accounts.get(account.id)).status is Status.ERROR  # type: ignore[union-attr]

        # Still within the backoff: the call says when, and nothing reaches the provider.
        reached = stand_in.requests
        backing_off = await call_whoami(http, served, principal)
        assert backing_off["error"]["code"] == -32603
        assert "not asked again for 1 s" in backing_off["error"]["message"]
        assert stand_in.requests == reached

        outage_over(stand_in)
        served.clock.advance(1)
        back = await call_whoami(http, served, principal)

    result = back["result"]
    assert "inputRequests" not in result, "the person was sent a new authorization link for an outage"
    assert result["content"][0]["text"] == "ACTIVE, and the provider accepts its token: True"
    assert (await accounts.get(account.id)).status is Status.ACTIVE  # type: ignore[union-attr]
    assert stand_in.refreshes == 1


async def test_only_the_providers_refusal_of_the_grant_asks_the_person_to_connect_again(
    served: Served, stand_in: StandIn, http: httpx.AsyncClient
) -> None:
    principal = "p-refused-grant"
    with anyio.fail_after(WAIT):
        accounts, account = await served_account(served, stand_in, principal)
        stand_in.mode = "503"
        assert (await call_whoami(http, served, principal))["error"]["code"] == -32603

        # Meanwhile the grant was revoked at the provider: the refresh after the backoff is refused.
        service = await served.setup.service()
        sealed = await accounts.sealed_credential(account.id)
        assert sealed is not None
        stand_in.revoke(str(TokenSet.from_vault(service.vault.open(account.id, sealed)).refresh_token))
        stand_in.mode = "ok"
        served.clock.advance(1)
        asked = await call_whoami(http, served, principal)

    result = asked["result"]
    [(_, request)] = result["inputRequests"].items()
    assert request["params"]["mode"] == "url"
    assert request["params"]["message"].startswith("Your standin account needs to be connected again")
    assert (await accounts.get(account.id)).status is Status.EXPIRED  # type: ignore[union-attr]
