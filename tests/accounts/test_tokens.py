"""The token keeper against real parts: oidc-provider (tests/infra.py) as the provider, Chromium signing in on its
pages for a real code and refresh token, a real SQLite file and a real PostgreSQL, and a small resource server of
the test's own on loopback that asks the provider whether a token is active.

Every wait is bounded (`fail_after`); the clock is a `FrozenClock`, moved past a token's expiry instead of waiting."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import pytest
import sqlalchemy as sa
from pydantic import SecretStr

from _accounts_site import Callback, consent_at_the_provider
from askback.accounts.connections import (
    ApiKeyConnection,
    Connections,
    KeyCheck,
    OAuthConnection,
    authorization_request,
    new_code_verifier,
    new_state,
    origin,
    refresh_request,
)
from askback.accounts.repository import Account, Accounts
from askback.accounts.status import Event, Status
from askback.accounts.tokens import (
    ConnectedAccount,
    Held,
    Lapse,
    Refresh,
    RefuseToken,
    TokenKeeper,
    TokenSet,
    Use,
    decide,
    judge_token_response,
)
from askback.accounts.vault import Vault, new_key
from askback.clock import FrozenClock
from askback.db.migrate import all_components
from askback.errors import AccountStateError, ProviderError
from askback.store import Store
from askback.testing import free_port
from infra import OidcProvider, QuietHandler, async_browser_context, oidc_provider, serving_http

if TYPE_CHECKING:
    from playwright.async_api import Browser

pytestmark = [pytest.mark.anyio, pytest.mark.http]

TTL = 3600  # the provider's access-token lifetime; the clock is moved past it instead of waiting
WAIT = 60  # the bound on any one test's waiting on real parts


# --- the outside parts ----------------------------------------------------------------------------------------------


class Resource:
    """A resource server: `/data` answers 200 only for an access token the provider says is active and the test has
    not marked `stale`; `/always-401` refuses everything; `/key` accepts the API key `key` in `X-Api-Key`."""

    def __init__(self, provider: OidcProvider) -> None:
        self.stale: set[str] = set()
        self.key = "key-" + new_state()
        self.hits: Counter[str] = Counter()
        resource = self
        introspection = str(provider.metadata["introspection_endpoint"])
        client = (provider.client_id, provider.client_secret)

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                path = urlsplit(self.path).path
                resource.hits[path] += 1
                status = 401
                if path == "/data":
                    scheme, _, token = self.headers.get("Authorization", "").partition(" ")
                    if scheme == "Bearer" and token and token not in resource.stale:
                        answer = httpx.post(introspection, auth=client, data={"token": token}, timeout=5).json()
                        status = 200 if answer.get("active") is True else 401
                elif path == "/key":
                    status = 200 if self.headers.get("X-Api-Key") == resource.key else 401
                self.answer(status, json.dumps({"status": status}).encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def provider(callback: Callback) -> Iterator[OidcProvider]:
    with oidc_provider(redirect_uris=[callback.uri], access_token_ttl=TTL) as started:
        yield started


@pytest.fixture
def resource(provider: OidcProvider) -> Iterator[Resource]:
    served = Resource(provider)
    with serving_http(served.server):
        yield served


@pytest.fixture
def connection(provider: OidcProvider, resource: Resource) -> OAuthConnection:
    return OAuthConnection(
        name="oidc",
        origins=(resource.base,),  # where `account.http` may send the token
        client_id=provider.client_id,
        client_secret=SecretStr(provider.client_secret),
        authorize_url=provider.authorization_endpoint,
        token_url=provider.token_endpoint,
        revocation_url=provider.revocation_endpoint,
        # oidc-provider issues a refresh token only for offline_access asked for with prompt=consent.
        scopes=("openid", "offline_access"),
        authorize_params={"prompt": "consent"},
    )


@pytest.fixture
def vault() -> Vault:
    return Vault(new_key("test"))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = await Store.open(f"sqlite:///{tmp_path / 'askback.db'}", components=all_components())
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def keeper(
    store: Store, vault: Vault, connection: OAuthConnection, clock: FrozenClock
) -> AsyncIterator[TokenKeeper]:
    kept = TokenKeeper(Accounts(store.database), vault, Connections([connection]), clock=clock)
    try:
        yield kept
    finally:
        await kept.aclose()


# --- steps ----------------------------------------------------------------------------------------------------------


async def sign_in(browser: Browser, connection: OAuthConnection, callback: Callback) -> tuple[str, str]:
    """A person signs in and consents on the provider's pages: `(code, verifier)` from the redirect."""
    verifier = new_code_verifier()
    url = authorization_request(connection, redirect_uri=callback.uri, state=new_state(), code_verifier=verifier)
    context = await async_browser_context(browser)
    try:
        page = await context.new_page()
        await page.goto(url)
        await consent_at_the_provider(page, origin(connection.authorize_url))
        await page.wait_for_url(lambda u: u.startswith(f"{callback.uri}?"))
        landed = page.url
    finally:
        await context.close()
    return parse_qs(urlsplit(landed).query)["code"][0], verifier


async def connect(keeper: TokenKeeper, browser: Browser, callback: Callback, *, principal: str = "alice") -> Account:
    """An ACTIVE account holding real tokens, connected the way the service does it."""
    connection = keeper.connections.oauth("oidc")
    code, verifier = await sign_in(browser, connection, callback)
    tokens = await keeper.exchange(connection, code=code, redirect_uri=callback.uri, code_verifier=verifier)
    return await store_account(keeper, "oidc", tokens.to_vault(), tokens.expires_at, principal=principal)


async def store_account(
    keeper: TokenKeeper, connection: str, credential: dict[str, Any], expires_at: float | None, *, principal: str
) -> Account:
    accounts, now = keeper.accounts, keeper.clock.now()
    account_id, _ = await accounts.begin_connect(principal, connection, flow_id=None, now=now, ttl=600)
    sealed = keeper.vault.seal(account_id, credential)
    await accounts.change(account_id, Event.CONNECTED, now=now, credential=sealed, expires_at=expires_at)
    account = await accounts.get(account_id)
    assert account is not None and account.status is Status.ACTIVE
    return account


async def stored_tokens(keeper: TokenKeeper, account: Account) -> TokenSet:
    sealed = await keeper.accounts.sealed_credential(account.id)
    assert sealed is not None
    return TokenSet.from_vault(keeper.vault.open(account.id, sealed))


async def events(store: Store, account_id: str) -> list[str]:
    async with store.database.engine.connect() as conn:
        rows = await conn.execute(
            sa.text("SELECT event FROM askback_account_events WHERE account_id = :a ORDER BY id"), {"a": account_id}
        )
        return [row[0] for row in rows]


def unreachable(connection: OAuthConnection) -> OAuthConnection:
    """The same connection, its provider gone: its endpoints point at a port nobody listens on."""
    closed = f"http://127.0.0.1:{free_port()}"
    return dataclasses.replace(connection, token_url=f"{closed}/token", revocation_url=f"{closed}/token/revocation")


async def at_provider(provider: OidcProvider, connection: OAuthConnection, path: str, form: dict[str, str]) -> Any:
    async with httpx.AsyncClient(timeout=5) as http:
        response = await http.post(
            f"{provider.issuer}{path}",
            auth=(connection.client_id, connection.client_secret.get_secret_value()),
            data=form,
        )
    return response


# --- exchange -------------------------------------------------------------------------------------------------------


async def test_a_code_from_a_browser_sign_in_is_exchanged_for_tokens_and_a_reused_code_is_rejected(
    browser: Browser, provider: OidcProvider, callback: Callback, keeper: TokenKeeper, clock: FrozenClock
) -> None:
    connection = keeper.connections.oauth("oidc")
    code, verifier = await sign_in(browser, connection, callback)
    with anyio.fail_after(WAIT):
        tokens = await keeper.exchange(connection, code=code, redirect_uri=callback.uri, code_verifier=verifier)
        assert tokens.access_token and tokens.refresh_token and tokens.token_type == "Bearer"
        assert tokens.expires_at == clock.now() + TTL
        assert set((tokens.scope or "").split()) == {"openid", "offline_access"}

        with pytest.raises(ProviderError) as reused:
            await keeper.exchange(connection, code=code, redirect_uri=callback.uri, code_verifier=verifier)
    assert (reused.value.reason, reused.value.error) == ("rejected", "invalid_grant")
    assert "invalid_grant" in str(reused.value) and code not in str(reused.value)
    assert provider.counters()["token"] == {"authorization_code": 2, "refresh_token": 0}


async def test_a_provider_that_cannot_be_reached_fails_the_exchange_as_unreachable(
    keeper: TokenKeeper, connection: OAuthConnection, callback: Callback
) -> None:
    with anyio.fail_after(WAIT), pytest.raises(ProviderError) as failed:
        await keeper.exchange(
            unreachable(connection), code="any-code", redirect_uri=callback.uri, code_verifier=new_code_verifier()
        )
    assert failed.value.reason == "unreachable" and "ConnectError" in str(failed.value)


# --- single-flight --------------------------------------------------------------------------------------------------


@pytest.fixture
async def two_stores(any_database: str) -> AsyncIterator[tuple[Store, Store]]:
    """Two stores on one database, each with its own engine: what two instances of a server see."""
    url = any_database
    first = await Store.open(url, migrate=True, components=all_components())
    second = await Store.open(url, migrate=True, components=all_components())
    try:
        yield first, second
    finally:
        await first.close()
        await second.close()


async def test_a_hundred_callers_on_two_instances_of_an_expired_token_cause_exactly_one_refresh(
    browser: Browser,
    provider: OidcProvider,
    callback: Callback,
    two_stores: tuple[Store, Store],
    vault: Vault,
    connection: OAuthConnection,
    clock: FrozenClock,
) -> None:
    keepers = [TokenKeeper(Accounts(s.database), vault, Connections([connection]), clock=clock) for s in two_stores]
    try:
        with anyio.fail_after(WAIT):
            account = await connect(keepers[0], browser, callback)
            before = await stored_tokens(keepers[0], account)
            provider.reset_counters()
            clock.advance(TTL + 1)

            got: list[str] = [""] * 100

            async def call(i: int) -> None:
                got[i] = (await keepers[i % 2].token(account)).access_token

            async with anyio.create_task_group() as tg:
                for i in range(100):
                    tg.start_soon(call, i)

        counts = provider.counters()
        assert counts["token"]["refresh_token"] == 1
        assert counts["refresh_token_reuse"] == 0
        assert len(set(got)) == 1 and got[0] != before.access_token
        after = await stored_tokens(keepers[1], account)
        assert after.access_token == got[0] and after.refresh_token not in (None, before.refresh_token)
        assert after.expires_at == clock.now() + TTL
        assert (await keepers[1].accounts.get(account.id)).status is Status.ACTIVE  # type: ignore[union-attr]
        assert (await events(two_stores[1], account.id)).count("refreshed") == 1
    finally:
        for kept in keepers:
            await kept.aclose()


# --- failures -------------------------------------------------------------------------------------------------------


async def test_a_refresh_token_revoked_at_the_provider_turns_the_account_expired_with_a_reason(
    browser: Browser,
    provider: OidcProvider,
    callback: Callback,
    keeper: TokenKeeper,
    connection: OAuthConnection,
    clock: FrozenClock,
) -> None:
    with anyio.fail_after(WAIT):
        account = await connect(keeper, browser, callback)
        tokens = await stored_tokens(keeper, account)
        assert tokens.refresh_token is not None
        revoked = await at_provider(
            provider,
            connection,
            "/token/revocation",
            {"token": tokens.refresh_token, "token_type_hint": "refresh_token"},
        )
        assert revoked.status_code == 200
        clock.advance(TTL + 1)

        with pytest.raises(ProviderError) as refused:
            await keeper.token(account)
        assert (refused.value.reason, refused.value.error) == ("rejected", "invalid_grant")
        expired = await keeper.accounts.get(account.id)
        assert expired is not None and expired.status is Status.EXPIRED
        assert expired.reason is not None and "invalid_grant" in expired.reason

        with pytest.raises(AccountStateError, match="EXPIRED"):
            await keeper.token(account)
    assert provider.counters()["token"]["refresh_token"] == 1


async def test_an_unreachable_provider_turns_the_account_error_once_and_a_later_refresh_brings_it_back(
    browser: Browser,
    provider: OidcProvider,
    callback: Callback,
    keeper: TokenKeeper,
    connection: OAuthConnection,
    vault: Vault,
    store: Store,
    clock: FrozenClock,
) -> None:
    down = TokenKeeper(Accounts(store.database), vault, Connections([unreachable(connection)]), clock=clock)
    try:
        with anyio.fail_after(WAIT):
            account = await connect(keeper, browser, callback)
            before = await stored_tokens(keeper, account)
            clock.advance(TTL + 1)
            failures: list[ProviderError] = []

            async def call() -> None:
                try:
                    await down.token(account)
                except ProviderError as exc:
                    failures.append(exc)

            async with anyio.create_task_group() as tg:
                for _ in range(20):
                    tg.start_soon(call)

            assert len(failures) == 20 and {f.reason for f in failures} == {"unreachable"}
            failed = await keeper.accounts.get(account.id)
            assert failed is not None and failed.status is Status.ERROR
            assert failed.reason is not None and "could not be reached" in failed.reason
            # One attempt: the 19 callers waiting behind it shared its failure instead of trying again.
            assert (await events(store, account.id)).count("unreachable") == 1

            provider.reset_counters()
            clock.advance(1)  # past the backoff after one failed refresh (1 s by default)
            fresh = await keeper.token(account)
        assert fresh.access_token != before.access_token
        back = await keeper.accounts.get(account.id)
        assert back is not None and (back.status, back.reason) == (Status.ACTIVE, None)
        assert provider.counters()["token"]["refresh_token"] == 1
    finally:
        await down.aclose()


# --- revocation -----------------------------------------------------------------------------------------------------


async def test_revoking_an_account_revokes_its_grant_at_the_provider_and_deletes_the_credential(
    browser: Browser, provider: OidcProvider, callback: Callback, keeper: TokenKeeper, connection: OAuthConnection
) -> None:
    with anyio.fail_after(WAIT):
        account = await connect(keeper, browser, callback)
        tokens = await stored_tokens(keeper, account)
        assert tokens.refresh_token is not None
        introspected = await at_provider(provider, connection, "/token/introspection", {"token": tokens.access_token})
        assert introspected.json()["active"] is True
        provider.reset_counters()

        await keeper.revoke(account)

        assert provider.counters()["revocation"] == 1
        revoked = await keeper.accounts.get(account.id)
        assert revoked is not None and revoked.status is Status.REVOKED
        assert await keeper.accounts.sealed_credential(account.id) is None
        # The refresh token revoked the grant: the access token is dead too, and no refresh works.
        introspected = await at_provider(provider, connection, "/token/introspection", {"token": tokens.access_token})
        assert introspected.json()["active"] is False
        refused = await at_provider(
            provider, connection, "/token", refresh_request(connection, tokens.refresh_token).form
        )
        assert refused.json()["error"] == "invalid_grant"
        with pytest.raises(AccountStateError, match="REVOKED"):
            await keeper.token(account)


async def test_revoking_while_the_provider_cannot_be_reached_still_deletes_the_credential(
    browser: Browser,
    callback: Callback,
    keeper: TokenKeeper,
    connection: OAuthConnection,
    vault: Vault,
    store: Store,
    clock: FrozenClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    down = TokenKeeper(Accounts(store.database), vault, Connections([unreachable(connection)]), clock=clock)
    try:
        with anyio.fail_after(WAIT):
            account = await connect(keeper, browser, callback)
            with caplog.at_level(logging.WARNING, logger="askback.accounts"):
                await down.revoke(account)
    finally:
        await down.aclose()
    revoked = await keeper.accounts.get(account.id)
    assert revoked is not None and revoked.status is Status.REVOKED
    assert await keeper.accounts.sealed_credential(account.id) is None
    assert any("could not be reached to revoke" in r.getMessage() for r in caplog.records)


# --- using an account over HTTP -------------------------------------------------------------------------------------


async def test_a_request_answered_401_refreshes_once_and_is_sent_again_with_the_new_token(
    browser: Browser, provider: OidcProvider, callback: Callback, keeper: TokenKeeper, resource: Resource
) -> None:
    with anyio.fail_after(WAIT):
        account = await connect(keeper, browser, callback)
        async with ConnectedAccount(account, keeper) as handle:
            provider.reset_counters()
            assert (await handle.http.get(f"{resource.base}/data")).status_code == 200
            assert provider.counters()["token"]["refresh_token"] == 0

            old = await handle.token()
            resource.stale.add(old)
            answered = await handle.http.get(f"{resource.base}/data")

            assert answered.status_code == 200
            assert provider.counters()["token"]["refresh_token"] == 1
            assert resource.hits["/data"] == 3
            assert await handle.token() != old


async def test_a_second_401_is_returned_to_the_caller_after_one_refresh(
    browser: Browser, provider: OidcProvider, callback: Callback, keeper: TokenKeeper, resource: Resource
) -> None:
    with anyio.fail_after(WAIT):
        account = await connect(keeper, browser, callback)
        async with ConnectedAccount(account, keeper) as handle:
            provider.reset_counters()
            answered = await handle.http.get(f"{resource.base}/always-401")
    assert answered.status_code == 401
    assert resource.hits["/always-401"] == 2
    assert provider.counters()["token"]["refresh_token"] == 1


async def test_a_401_for_a_token_refreshed_on_its_way_out_gets_one_forced_refresh_of_its_own(
    browser: Browser,
    provider: OidcProvider,
    callback: Callback,
    keeper: TokenKeeper,
    resource: Resource,
    clock: FrozenClock,
) -> None:
    with anyio.fail_after(WAIT):
        account = await connect(keeper, browser, callback)
        clock.advance(TTL + 1)
        async with ConnectedAccount(account, keeper) as handle:
            provider.reset_counters()
            answered = await handle.http.get(f"{resource.base}/always-401")
    # Refreshed because it had expired, refused all the same, refreshed once more (forced), refused again: returned.
    assert answered.status_code == 401
    assert resource.hits["/always-401"] == 2
    assert provider.counters()["token"]["refresh_token"] == 2


async def test_an_api_key_is_checked_by_the_connections_request_and_sent_in_its_header_without_refresh(
    store: Store, vault: Vault, clock: FrozenClock, resource: Resource
) -> None:
    keyed = ApiKeyConnection(
        name="keyed",
        header="X-Api-Key",
        validation=KeyCheck(url=f"{resource.base}/key", expected_status=200),
        origins=(resource.base,),
    )
    gone = ApiKeyConnection(
        name="gone", header="X-Api-Key", validation=KeyCheck(url=f"http://127.0.0.1:{free_port()}/key")
    )
    keeper = TokenKeeper(Accounts(store.database), vault, Connections([keyed, gone]), clock=clock)
    try:
        with anyio.fail_after(WAIT):
            await keeper.check_key(keyed, resource.key)
            with pytest.raises(ProviderError) as wrong:
                await keeper.check_key(keyed, "not-the-key")
            assert wrong.value.reason == "rejected" and "not-the-key" not in str(wrong.value)
            with pytest.raises(ProviderError) as down:
                await keeper.check_key(gone, resource.key)
            assert down.value.reason == "unreachable"
            await keeper.check_key(ApiKeyConnection(name="unchecked"), "anything")  # nothing to check with

            account = await store_account(keeper, "keyed", {"api_key": resource.key}, None, principal="bob")
            async with ConnectedAccount(account, keeper) as handle:
                assert (await handle.http.get(f"{resource.base}/key")).status_code == 200
                assert (await handle.http.get(f"{resource.base}/always-401")).status_code == 401
                assert await handle.token() == resource.key
    finally:
        await keeper.aclose()
    assert resource.hits["/always-401"] == 1


# --- secrecy --------------------------------------------------------------------------------------------------------


async def test_token_values_never_appear_in_the_database_file_the_logs_or_a_repr(
    browser: Browser,
    provider: OidcProvider,
    callback: Callback,
    keeper: TokenKeeper,
    connection: OAuthConnection,
    resource: Resource,
    store: Store,
    tmp_path: Path,
    clock: FrozenClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    shown: list[object] = [keeper]
    with anyio.fail_after(WAIT):
        code, verifier = await sign_in(browser, connection, callback)
        first = await keeper.exchange(connection, code=code, redirect_uri=callback.uri, code_verifier=verifier)
        account = await store_account(keeper, "oidc", first.to_vault(), first.expires_at, principal="carol")
        clock.advance(TTL + 1)
        second = await keeper.token(account)
        handle = ConnectedAccount(account, keeper)
        resource.stale.add(second.access_token)
        response = await handle.http.get(f"{resource.base}/data")  # a 401, a refresh, a retry
        third = await stored_tokens(keeper, account)
        with pytest.raises(ProviderError) as reused:
            await keeper.exchange(connection, code=code, redirect_uri=callback.uri, code_verifier=verifier)
        shown.append(reused.value)
        shown += [
            first,
            second,
            third,
            account,
            handle,
            keeper.auth(account),
            response,
            await keeper.accounts.get(account.id),
        ]
        await handle.aclose()
    assert response.status_code == 200 and len({first.access_token, second.access_token, third.access_token}) == 3

    secrets = {t for s in (first, second, third) for t in (s.access_token, s.refresh_token) if t}
    assert len(secrets) == 6
    files = database_files(tmp_path)
    assert "askback.db" in files
    for name, data in files.items():
        assert not [s for s in secrets if s.encode() in data], f"a token is in {name}"
    logged = caplog.text + "".join(repr(vars(r)) for r in caplog.records)
    assert "askback.accounts" in logged  # the keeper did log
    assert not [s for s in secrets if s in logged]
    for thing in shown:
        assert not [s for s in secrets if s in repr(thing) or s in str(thing)], f"a token is in {thing!r}"


def database_files(folder: Path) -> dict[str, bytes]:
    """The SQLite file and its WAL and shared-memory files, as bytes."""
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.name.startswith("askback.db")}


# --- the decision alone ---------------------------------------------------------------------------------------------

NOW = 1_000_000.0


def held(
    status: Status = Status.ACTIVE,
    *,
    access: str = "a1",
    expires_at: float | None = NOW + 3600,
    version: int = 1,
    refresh: str | None = "r1",
    reason: str | None = None,
) -> Held:
    return Held(status, reason, TokenSet(access, refresh_token=refresh, expires_at=expires_at), version)


@dataclass
class Case:
    now: Held
    seen: Held | None
    force: bool = False


def decided(case: Case) -> Use | Refresh | Lapse | RefuseToken:
    return decide("acc_1", case.now, seen=case.seen, now=NOW, leeway=60, force=case.force)


def test_a_token_far_from_expiry_is_used_and_one_within_the_leeway_is_refreshed() -> None:
    assert isinstance(decided(Case(held(), None)), Use)
    assert isinstance(decided(Case(held(expires_at=NOW + 30), None)), Refresh)
    assert isinstance(decided(Case(held(expires_at=None), None)), Use)


def test_a_caller_who_waited_takes_the_token_another_stored_meanwhile() -> None:
    seen = held(expires_at=NOW - 1)
    after = held(access="a2", expires_at=NOW + 30, version=2)  # even within the leeway: it is the newest
    assert decided(Case(after, seen)) == Use(after.tokens)  # type: ignore[arg-type]
    assert isinstance(decided(Case(held(expires_at=NOW - 1), seen)), Refresh)  # nobody did: this caller does


def test_a_forced_refresh_is_skipped_when_the_token_was_replaced_since_it_was_used() -> None:
    used = held()
    assert isinstance(decided(Case(held(), used, force=True)), Refresh)
    assert isinstance(decided(Case(held(access="a2", version=2), used, force=True)), Use)


def test_a_caller_who_waited_behind_a_failed_attempt_shares_its_failure() -> None:
    failed = decided(Case(held(Status.ERROR, version=2, reason="down"), held(expires_at=NOW - 1)))
    assert isinstance(failed, RefuseToken) and isinstance(failed.error, ProviderError)
    assert failed.error.reason == "unreachable"
    # Finding the account in ERROR on the first look, though, is a reason to try.
    assert isinstance(decided(Case(held(Status.ERROR, reason="down"), None)), Refresh)


def test_an_expired_token_without_a_refresh_token_lapses_and_unusable_accounts_are_refused() -> None:
    assert isinstance(decided(Case(held(refresh=None, expires_at=NOW - 1), None)), Lapse)
    assert isinstance(decided(Case(held(refresh=None, expires_at=NOW + 30), None)), Use)
    for status in (Status.PENDING, Status.EXPIRED, Status.REVOKED):
        refused = decided(Case(held(status), None))
        assert isinstance(refused, RefuseToken) and isinstance(refused.error, AccountStateError)
    gone = decide("acc_1", None, seen=None, now=NOW, leeway=60, force=False)
    assert isinstance(gone, RefuseToken) and "no connected account" in str(gone.error)


def test_a_token_endpoint_answer_is_judged_without_repeating_its_body() -> None:
    body = judge_token_response(200, b'{"access_token": "at-1", "expires_in": 60}', provider="p", doing="refresh")
    assert body["access_token"] == "at-1"
    with pytest.raises(ProviderError) as refused:
        judge_token_response(400, b'{"error": "invalid_grant"}', provider="p", doing="refresh")
    assert (refused.value.reason, refused.value.error) == ("rejected", "invalid_grant")
    with pytest.raises(ProviderError) as odd:
        judge_token_response(400, b'{"error": "at-secret with spaces"}', provider="p", doing="refresh")
    assert (odd.value.reason, odd.value.error) == ("rejected", None) and "at-secret" not in str(odd.value)
    for status, raw in ((200, b"<html>"), (200, b'{"token": "at-2"}'), (503, b'{"error": "x"}'), (400, b"[]")):
        with pytest.raises(ProviderError) as failed:
            judge_token_response(status, raw, provider="p", doing="refresh")
        assert failed.value.reason == "unreachable" and "at-2" not in str(failed.value)
