"""What handing out a connected account's credential costs, and how many refreshes a crowd of callers causes.

1. Fetch latency: `TokenKeeper.token()` of an ACTIVE account whose token is far from expiry (one read of the
   account's row and one vault open; no provider is involved). Each round starts `--callers` coroutines at once; each
   times its own call, from the moment it starts to the moment it has the token. Printed per store: p50 and p99 over
   every call of every round (after one warm-up round), the worst round's p99, and a round's wall time. SQLite is a
   file in a temporary folder; PostgreSQL is a throwaway cluster started the way tests/infra.py does (skipped, with a
   message, when PostgreSQL's initdb is not installed). Once its store is open and its accounts connected, the heap
   is frozen as a started server's is (`askback.server.heap`, `ASKBACK_GC_FREEZE`); `--no-freeze` leaves it as a
   server with that setting off has it. The full collections during the measured rounds are printed with each line.
2. Single-flight: an account connected at a real authorization server (oidc-provider, as the tests run it; signed in
   over plain HTTP, no browser) whose access token has expired (the clock is moved past it), and `--crowd` callers of
   `token()` spread over two keepers on two stores of one database (what two server instances see). Printed: how many
   refresh requests reached the provider (its own counters) and how many reused a refresh token, per round. Skipped
   when Node 22 and interop/node_modules cannot be had.

Targets are printed beside the figures, never asserted: p99 <= 2 ms on SQLite, <= 5 ms on PostgreSQL, and exactly
one refresh request per round.

    python benchmarks/bench_credentials.py            # about half a minute
    python benchmarks/bench_credentials.py --quick    # a few seconds, rough figures
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import glob
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
from pydantic import SecretStr

from askback.accounts.connections import (
    Connections,
    OAuthConnection,
    authorization_request,
    new_code_verifier,
    new_state,
)
from askback.accounts.repository import Account, Accounts
from askback.accounts.status import Event
from askback.accounts.tokens import TokenKeeper, TokenSet
from askback.accounts.vault import Vault, new_key
from askback.clock import FrozenClock
from askback.db.migrate import all_components
from askback.server.heap import frozen_while_running
from askback.store import Store

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the test suite's infrastructure: PostgreSQL, oidc-provider

from infra import OidcProvider, oidc_provider, postgres  # noqa: E402

TARGET_P99_MS = {"sqlite": 2.0, "postgresql": 5.0}
REDIRECT_URI = "http://127.0.0.1:9/callback"  # never opened: the sign-in stops at the redirect


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class FullCollections:
    """Python's full (generation 2) garbage collections while measuring: how many, and how long they stopped the
    event loop. One of this process's heap (SQLAlchemy, pydantic's validators, the SDK's models) takes tens of
    milliseconds, and a round it lands in shows it in every caller's time."""

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.count += 1
            self.seconds += time.perf_counter() - self._began

    @contextlib.contextmanager
    def watching(self) -> Iterator[FullCollections]:
        gc.callbacks.append(self)
        try:
            yield self
        finally:
            gc.callbacks.remove(self)


def pg_available() -> bool:
    return bool(glob.glob("/usr/lib/postgresql/*/bin/initdb"))


@contextlib.contextmanager
def databases(include_pg: bool) -> Iterator[list[tuple[str, str]]]:
    """`[(kind, url)]`: a SQLite file, and a throwaway PostgreSQL database when asked for and installed."""
    with tempfile.TemporaryDirectory(prefix="askback-bench-credentials-") as folder, contextlib.ExitStack() as stack:
        found = [("sqlite", f"sqlite:///{folder}/askback.db")]
        if include_pg and pg_available():
            cluster = stack.enter_context(postgres())
            cluster.create_database("bench")
            found.append(("postgresql", cluster.url("bench")))
        elif include_pg:
            print("PostgreSQL: skipped (initdb is not installed: apt-get install postgresql)")
        yield found


async def connected(keeper: TokenKeeper, connection: str, tokens: TokenSet, principal: str) -> Account:
    now = keeper.clock.now()
    account_id, _ = await keeper.accounts.begin_connect(principal, connection, flow_id=None, now=now, ttl=600)
    sealed = keeper.vault.seal(account_id, tokens.to_vault())
    await keeper.accounts.change(account_id, Event.CONNECTED, now=now, credential=sealed, expires_at=tokens.expires_at)
    account = await keeper.accounts.get(account_id)
    assert account is not None
    return account


# --- 1. fetch latency -----------------------------------------------------------------------------------------------


async def fetch_latency(kind: str, url: str, *, callers: int, rounds: int, spread: bool, freeze: bool) -> None:
    """One line of figures: `callers` at once asking for one account's token, or (`spread`) each for its own."""
    store = await Store.open(url, migrate=True, components=all_components())
    clock = FrozenClock()
    # Endpoints that are never called: a token far from expiry is handed out without the provider.
    connection = OAuthConnection(
        name="bench",
        client_id="bench",
        client_secret=SecretStr("bench-secret"),
        authorize_url="http://127.0.0.1:9/auth",
        token_url="http://127.0.0.1:9/token",
    )
    keeper = TokenKeeper(Accounts(store.database), Vault(new_key()), Connections([connection]), clock=clock)
    running = contextlib.ExitStack()
    try:
        tokens = TokenSet("at-" + new_state(), refresh_token="rt-" + new_state(), expires_at=clock.now() + 86400)
        accounts = [
            await connected(keeper, "bench", tokens, principal=f"bench-{spread}-{i}")
            for i in range(callers if spread else 1)
        ]
        # What a server does once started (`ASKBACK_GC_FREEZE`, on by default): what exists now, the store and its
        # engine included, is left out of full collections until it stops.
        running.enter_context(frozen_while_running(freeze))
        per_call: list[float] = []
        from_burst: list[float] = []
        walls: list[float] = []
        full = FullCollections()
        for round_ in range(rounds + 1):
            took: list[float] = []
            waited: list[float] = []
            began = time.perf_counter()

            async def call(
                account: Account, took: list[float] = took, waited: list[float] = waited, began: float = began
            ) -> None:
                started = time.perf_counter()
                got = await keeper.token(account)
                ended = time.perf_counter()
                took.append(ended - started)
                waited.append(ended - began)
                assert got.access_token == tokens.access_token

            with full.watching() if round_ else contextlib.nullcontext():
                async with anyio.create_task_group() as tg:
                    for i in range(callers):
                        tg.start_soon(call, accounts[i % len(accounts)])
            if round_ == 0:
                continue  # warm-up: connections opened, statements compiled
            walls.append(time.perf_counter() - began)
            per_call += took
            from_burst += waited
        p99 = percentile(per_call, 0.99) * 1000
        target = TARGET_P99_MS[kind]
        verdict = "within target" if p99 <= target else "ABOVE target"
        print(
            f"{kind:<11} {len(accounts):>8} {len(per_call):>6}  {percentile(per_call, 0.5) * 1000:8.3f} {p99:8.3f}"
            f"   {percentile(from_burst, 0.5) * 1000:8.3f} {percentile(from_burst, 0.99) * 1000:8.3f}"
            f"   {statistics.median(walls) * 1000:8.1f}   {full.count:>3} / {full.seconds * 1000:5.0f} ms"
            f"   (target p99 <= {target:g} ms: {verdict})"
        )
    finally:
        running.close()
        await keeper.aclose()
        await store.close()


# --- 2. single-flight -----------------------------------------------------------------------------------------------


async def sign_in(connection: OAuthConnection) -> tuple[str, str]:
    """oidc-provider's development login and consent pages, over plain HTTP with a cookie jar: `(code, verifier)`."""
    verifier = new_code_verifier()
    url = authorization_request(connection, redirect_uri=REDIRECT_URI, state=new_state(), code_verifier=verifier)
    async with httpx.AsyncClient(timeout=10) as http:

        async def follow(response: httpx.Response) -> httpx.Response:
            while response.is_redirect:
                location = response.headers["location"]
                if location.startswith(REDIRECT_URI):
                    return response
                response = await http.get(response.url.join(location))
            return response

        page = await follow(await http.get(url))
        page = await follow(await http.post(page.url, data={"prompt": "login", "login": "bench", "password": "x"}))
        landed = await follow(await http.post(page.url, data={"prompt": "consent"}))
    if not landed.is_redirect:
        raise RuntimeError(f"the sign-in did not come back to the redirect URI (HTTP {landed.status_code})")
    return parse_qs(urlsplit(landed.headers["location"]).query)["code"][0], verifier


@contextlib.asynccontextmanager
async def keepers(url: str, connection: OAuthConnection, clock: FrozenClock) -> AsyncIterator[list[TokenKeeper]]:
    """Two keepers, each on its own store (engine) of one database, sharing the vault."""
    vault = Vault(new_key())
    stores = [await Store.open(url, migrate=True, components=all_components()) for _ in range(2)]
    kept = [TokenKeeper(Accounts(s.database), vault, Connections([connection]), clock=clock, leeway=60) for s in stores]
    try:
        yield kept
    finally:
        for keeper in kept:
            await keeper.aclose()
        for store in stores:
            await store.close()


async def single_flight(kind: str, url: str, provider: OidcProvider, *, crowd: int, rounds: int) -> None:
    connection = OAuthConnection(
        name="oidc",
        client_id=provider.client_id,
        client_secret=SecretStr(provider.client_secret),
        authorize_url=provider.authorization_endpoint,
        token_url=provider.token_endpoint,
        revocation_url=provider.revocation_endpoint,
        scopes=("openid", "offline_access"),
        authorize_params={"prompt": "consent"},
    )
    clock = FrozenClock()
    async with keepers(url, connection, clock) as (first, second):
        code, verifier = await sign_in(connection)
        tokens = await first.exchange(connection, code=code, redirect_uri=REDIRECT_URI, code_verifier=verifier)
        account = await connected(first, "oidc", tokens, principal=f"bench-sf-{kind}")
        for round_ in range(1, rounds + 1):
            provider.reset_counters()
            clock.advance(provider.access_token_ttl + 1)
            got: set[str] = set()
            failed: list[BaseException] = []

            async def call(keeper: TokenKeeper, got: set[str] = got, failed: list[BaseException] = failed) -> None:
                try:
                    got.add((await keeper.token(account)).access_token)
                except Exception as exc:  # a benchmark reports what went wrong rather than stopping at the first
                    failed.append(exc)

            began = time.perf_counter()
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    for i in range(crowd):
                        tg.start_soon(call, (first, second)[i % 2])
            wall = time.perf_counter() - began
            counts = provider.counters()
            refreshes, reused = counts["token"].get("refresh_token", 0), counts["refresh_token_reuse"]
            verdict = "within target" if refreshes == 1 and reused == 0 and not failed else "OFF target"
            print(
                f"{kind:<11} round {round_}: {crowd} callers on 2 instances -> {refreshes} refresh request(s) at the "
                f"provider, {reused} reused refresh token(s), {len(got)} distinct new token(s), {len(failed)} "
                f"failure(s), {wall * 1000:.0f} ms   (target: 1 refresh, 0 reused: {verdict})"
            )
            for problem in failed[:3]:
                print(f"    {type(problem).__name__}: {problem}")


# --- running --------------------------------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> None:
    print(
        f"askback credentials bench: python {sys.version.split()[0]}, {args.callers} concurrent callers x "
        f"{args.rounds} rounds (after 1 warm-up round); single-flight {args.crowd} callers x {args.sf_rounds} rounds"
    )
    with databases(include_pg=not args.no_pg) as found:
        print(
            f"\ncredential fetch latency: {args.callers} callers of token() at once, ACTIVE accounts far from expiry;"
            "\nper call = from the call's start to its token; from burst = from the moment all callers were started;"
            "\nfull GCs = Python's full garbage collections during the measured rounds, and the time they stopped the loop"
        )
        print(
            f"{'store':<11} {'accounts':>8} {'calls':>6}  {'per call p50 / p99 ms':>17}   {'from burst p50 / p99':>17}   wall ms"
            "   full GCs / took"
        )
        for kind, url in found:
            for spread in (False, True):
                await fetch_latency(
                    kind, url, callers=args.callers, rounds=args.rounds, spread=spread, freeze=not args.no_freeze
                )

        print("\nsingle-flight: token() of an expired account, refresh requests that reach the provider")
        with contextlib.ExitStack() as stack:
            try:
                provider = stack.enter_context(oidc_provider(redirect_uris=[REDIRECT_URI], access_token_ttl=3600))
            except (RuntimeError, TimeoutError, OSError) as exc:
                print(f"skipped: the authorization server could not be started ({exc})")
                return
            for kind, url in found:
                await single_flight(kind, url, provider, crowd=args.crowd, rounds=args.sf_rounds)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--callers", type=int, default=200, help="concurrent token() callers per round (200)")
    parser.add_argument("--rounds", type=int, default=20, help="measured rounds per store (20)")
    parser.add_argument("--crowd", type=int, default=100, help="callers of an expired token per round (100)")
    parser.add_argument("--sf-rounds", type=int, default=3, help="single-flight rounds per store (3)")
    parser.add_argument("--no-pg", action="store_true", help="SQLite only")
    parser.add_argument(
        "--no-freeze", action="store_true", help="leave the heap unfrozen (a server with ASKBACK_GC_FREEZE=false)"
    )
    parser.add_argument("--quick", action="store_true", help="3 rounds, 1 single-flight round: rough figures")
    args: Any = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.sf_rounds = 3, 1
    began = time.perf_counter()
    anyio.run(run, args)
    print(f"\ndone in {time.perf_counter() - began:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
