"""Receivers that misbehave cannot hurt the sender: a huge answer or a gzip bomb is read a few KiB at most, a receiver
that trickles its answer is cut off at the attempt's deadline, and a slow receiver holds only its own slots while
the other receivers' deliveries go out. Real receivers on loopback (`_peers`), a store on a real SQLite file, the
dispatcher driven as an app drives it; time is a `FrozenClock`, and every wait has a deadline."""

from __future__ import annotations

import asyncio
import random
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from _hooks import account_data, add_event, new_secret
from _peers import Peer, at_once, gzip_bomb, held, huge, serving, settled, trickle

from askback.clock import FrozenClock
from askback.errors import ConfigurationError
from askback.store import Store
from askback.webhooks import Dispatcher, Endpoint, Outbox, RetrySchedule, send_test

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024
# What an attempt may add to the process's peak of allocated memory, whatever the receiver answers.
BOUND = 4 * MiB
DEADLINE = 20.0  # seconds any single wait of a test may take before it fails


def dispatcher(store: Store, urls: list[str], clock: FrozenClock, **options: Any) -> Dispatcher:
    """A dispatcher for `urls` on `clock`; `options` are the `Dispatcher`'s (`timeout`, `concurrency`, ...)."""
    endpoints = [Endpoint(url=url, events=["account.*"], secrets=[new_secret()], allow_private=True) for url in urls]
    schedule = RetrySchedule(delays=(5.0,), jitter=0.0)
    return Dispatcher(
        Outbox(store.database, store.events),
        endpoints,
        clock=clock,
        rng=random.Random(3),
        schedule=schedule,
        idle=0.05,
        **options,
    )


@pytest.fixture
def peak() -> Iterator[list[int]]:
    """Traces allocations while the test runs; the list gets the peak above where it started, once measured."""
    tracemalloc.start()
    try:
        yield []
    finally:
        tracemalloc.stop()


def measure_from_here() -> int:
    tracemalloc.reset_peak()
    return tracemalloc.get_traced_memory()[0]


@pytest.mark.http
async def test_a_32_mib_answer_is_read_a_few_kib_at_most_and_its_connection_closed(
    store: Store, peak: list[int]
) -> None:
    clock = FrozenClock(at=time.time())
    async with serving(huge(32 * MiB)) as peer:
        hooks = dispatcher(store, [peer.url], clock)
        await hooks.prepare()
        await add_event(store, "account.connected", clock.now(), **account_data())
        start = measure_from_here()
        with anyio.fail_after(DEADLINE):
            await hooks.run_once()
        grew = tracemalloc.get_traced_memory()[1] - start
        assert grew < BOUND, f"the attempt allocated {grew / MiB:.1f} MiB"
        with anyio.fail_after(DEADLINE):
            await peer.closed.wait()  # the rest of the answer was left unread
        await hooks.aclose()
    [delivery] = await Outbox(store.database, store.events).deliveries()
    assert (delivery.status, delivery.last_status) == ("delivered", 200)


@pytest.mark.http
async def test_a_gzip_bomb_is_neither_asked_for_nor_inflated(store: Store, peak: list[int]) -> None:
    clock = FrozenClock(at=time.time())
    bomb, compressed = gzip_bomb(64 * MiB)
    assert compressed < MiB
    async with serving(bomb) as peer:
        hooks = dispatcher(store, [peer.url], clock)
        await hooks.prepare()
        await add_event(store, "account.connected", clock.now(), **account_data())
        start = measure_from_here()
        with anyio.fail_after(DEADLINE):
            await hooks.run_once()
        grew = tracemalloc.get_traced_memory()[1] - start
        await hooks.aclose()
    assert grew < BOUND, f"the attempt allocated {grew / MiB:.1f} MiB"
    assert [r["accept-encoding"] for r in peer.requests] == ["identity"]
    [delivery] = await Outbox(store.database, store.events).deliveries()
    assert (delivery.status, delivery.last_status) == ("delivered", 200)


@pytest.mark.http
async def test_the_test_message_reads_no_more_of_an_answer_than_a_delivery(peak: list[int]) -> None:
    bomb, _ = gzip_bomb(64 * MiB)
    async with serving(bomb) as peer:
        endpoint = Endpoint(url=peer.url, events=["account.*"], secrets=[new_secret()], allow_private=True)
        start = measure_from_here()
        with anyio.fail_after(DEADLINE):
            sent = await send_test(endpoint)
        grew = tracemalloc.get_traced_memory()[1] - start
    assert sent.delivered and grew < BOUND, f"the test message allocated {grew / MiB:.1f} MiB"
    assert [r["accept-encoding"] for r in peer.requests] == ["identity"]


@pytest.mark.http
async def test_a_receiver_trickling_its_answer_is_cut_off_at_the_attempts_deadline(store: Store) -> None:
    clock = FrozenClock(at=time.time())
    async with serving(trickle(length=40)) as peer:
        hooks = dispatcher(store, [peer.url], clock, timeout=2.0)
        await hooks.prepare()
        await add_event(store, "account.connected", clock.now(), **account_data())
        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(hooks.run_once)
                await peer.arrived.wait()
                # A byte every half second keeps every read short; the attempt as a whole still ends at 2 s.
                for _ in range(40):
                    if peer.closed.is_set():
                        break
                    await peer.trickle_one()
                    clock.advance(0.5)
        [delivery] = await Outbox(store.database, store.events).deliveries()
        assert (delivery.status, delivery.last_status, delivery.last_error) == ("pending", None, "timeout")
        [attempt] = await Outbox(store.database, store.events).attempts(delivery.id)
        assert attempt.error == "timeout"
        with anyio.fail_after(DEADLINE):
            await peer.closed.wait()
        await hooks.aclose()


async def known_fast(hooks: Dispatcher, store: Store, clock: FrozenClock, peers: list[Peer]) -> None:
    """Make each of `peers` (`held` receivers) known fast to `hooks`: one event each answers at once; then they hold
    again."""
    for peer in peers:
        peer.release.set()
    await add_event(store, "account.connected", clock.now(), **account_data(principal="warm-up"))
    with anyio.fail_after(DEADLINE):
        await hooks.run_once()
    for peer in peers:
        assert len(peer.requests) == 1
        peer.release = asyncio.Event()
        peer.most = 0


async def slow_and_fast(store: Store, slow: Peer, fast: Peer, clock: FrozenClock) -> None:
    hooks = dispatcher(store, [slow.url, fast.url], clock, per_endpoint=2, concurrency=4)
    store.events.poll_interval = 0.02
    await hooks.prepare()
    for number in range(5):
        await add_event(store, "account.connected", clock.now(), **account_data(principal=f"p{number}"))
    with anyio.fail_after(DEADLINE), settled() as attempts:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(hooks.run)
            await fast.until(lambda: len(fast.requests) == 5)
            await slow.until(lambda: len(slow.requests) == 1)
            # A new event while the slow receiver still holds its slot reaches the fast one all the same.
            await add_event(store, "account.revoked", clock.now(), **account_data(new_status="revoked"))
            await fast.until(lambda: len(fast.requests) == 6)
            assert (len(slow.requests), slow.under_way) == (1, 1)
            slow.release.set()
            await attempts.until(12)
            tasks.cancel_scope.cancel()
    await hooks.aclose()


@pytest.mark.http
async def test_a_slow_receiver_holds_only_its_own_slots_while_the_others_deliveries_go_out(store: Store) -> None:
    clock = FrozenClock(at=time.time())
    async with serving(held) as slow, serving(at_once) as fast:
        await slow_and_fast(store, slow, fast, clock)
    assert slow.most == 1  # a receiver not known fast gets one attempt at a time
    deliveries = await Outbox(store.database, store.events).deliveries()
    assert len(deliveries) == 12 and {d.status for d in deliveries} == {"delivered"}


@pytest.mark.http
async def test_no_more_attempts_than_the_global_cap_are_under_way_at_once(store: Store) -> None:
    clock = FrozenClock(at=time.time())
    async with serving(held) as one, serving(held) as two:
        hooks = dispatcher(store, [one.url, two.url], clock, per_endpoint=2, concurrency=3)
        await hooks.prepare()
        await known_fast(hooks, store, clock, [one, two])
        for number in range(4):
            await add_event(store, "account.connected", clock.now(), **account_data(principal=f"p{number}"))
        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(hooks.run_once)
                await one.until(lambda: one.under_way + two.under_way == 3)
                assert (one.under_way, two.under_way) in ((2, 1), (1, 2))
                one.release.set()
                two.release.set()
        await hooks.aclose()
    assert one.most + two.most <= 4 and max(one.most, two.most) == 2
    deliveries = await Outbox(store.database, store.events).deliveries()
    assert len(deliveries) == 2 + 8 and {d.status for d in deliveries} == {"delivered"}


async def test_a_concurrency_below_one_is_refused_when_the_dispatcher_is_made(store: Store) -> None:
    with pytest.raises(ConfigurationError, match="at least 1"):
        Dispatcher(Outbox(store.database, store.events), [], per_endpoint=0)
