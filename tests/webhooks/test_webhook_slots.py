"""Receivers that hang cannot take the slots of the healthy ones: slots are counted per receiver (scheme, host, port),
a failing receiver gets one attempt at a time, and the failing receivers together hold at most half of the slots.
The decision is a table on plain counts; end to end, real receivers on loopback that never answer, a store on a real
SQLite file, the dispatcher's own loop, time a `FrozenClock` moved only by the test, and every wait has a deadline."""

from __future__ import annotations

import contextlib
import random
import time
from typing import Any

import anyio
import pytest
from _hooks import account_data, add_event, new_secret
from _peers import Peer, at_once, held, serving, settled

from askback.clock import FrozenClock
from askback.store import Store
from askback.webhooks import Dispatcher, Endpoint, RetrySchedule
from askback.webhooks._slots import Origin, Slots, marks_failing

DEADLINE = 20.0  # seconds any single wait of a test may take before it fails
# An attempt's deadline, longer than any wait of a test: a hung attempt ends only when the test moves the clock.
ATTEMPT = 3 * DEADLINE
A, B, C, D, H = (("https", f"{name}.example", 443) for name in "abcdh")


def origins(*names: Origin) -> list[tuple[int, Origin]]:
    return list(enumerate(names, 1))


@pytest.mark.parametrize(
    ("slots", "due", "admitted"),
    [
        # Four URLs on one origin share its `per_origin` slots; another receiver gets its own.
        (Slots(8, 2), origins(A, A, A, A, H), [1, 2, 5]),
        # A failing origin gets one attempt at a time, and none while one is under way.
        (Slots(8, 4, failing=frozenset({A})), origins(A, A, H, H), [1, 3, 4]),
        (Slots(8, 4, {A: 1}, frozenset({A})), origins(A, H), [2]),
        # The failing origins together hold at most half of `concurrency`: the healthy ones keep the rest.
        (Slots(4, 4, failing=frozenset({A, B, C, D})), origins(A, B, C, D, H, H), [1, 2, 5, 6]),
        (Slots(8, 4, {A: 1, B: 1, C: 1, D: 1}, frozenset({A, B, C, D})), origins(A, B, H, H, H, H), [3, 4, 5, 6]),
        # Never more than `concurrency` in all; with one slot, a failing origin may still have it.
        (Slots(3, 4, {H: 2}), origins(H, H, A), [1]),
        (Slots(1, 4, failing=frozenset({A})), origins(A, H), [1]),
        # An origin that is no longer failing has its `per_origin` slots again.
        (Slots(8, 2, {A: 1}), origins(A, A, A), [1]),
    ],
)
def test_which_due_deliveries_may_start_is_decided_per_origin_with_failing_origins_held_back(
    slots: Slots, due: list[tuple[int, Origin]], admitted: list[int]
) -> None:
    assert slots.admit(due) == admitted


@pytest.mark.parametrize(
    ("status", "failing"),
    [(None, True), (500, True), (503, True), (200, False), (204, False), (301, False), (404, False)],
)
def test_no_answer_or_a_5xx_makes_a_receiver_failing_and_any_other_answer_healthy(
    status: int | None, failing: bool
) -> None:
    assert marks_failing(status) is failing


def dispatcher(store: Store, urls: list[str], clock: FrozenClock, **options: Any) -> Dispatcher:
    endpoints = [Endpoint(url=url, events=["account.*"], secrets=[new_secret()], allow_private=True) for url in urls]
    schedule = RetrySchedule(delays=(5.0,), jitter=0.0)
    return Dispatcher(store, endpoints, clock=clock, rng=random.Random(3), schedule=schedule, idle=0.05, **options)


async def add_events(store: Store, clock: FrozenClock, count: int, first: int = 0) -> None:
    for number in range(first, first + count):
        await add_event(store, "account.connected", clock.now(), **account_data(principal=f"p{number}"))


async def received(peer: Peer, count: int) -> None:
    await peer.until(lambda: len(peer.requests) >= count)


@contextlib.asynccontextmanager
async def hung_receivers(count: int) -> Any:
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(serving(held)) for _ in range(count)]


@pytest.mark.anyio
async def test_four_urls_on_one_hung_host_share_its_slots_and_the_healthy_receiver_gets_every_delivery(
    store: Store,
) -> None:
    clock = FrozenClock(at=time.time())
    store.event_poll_interval = 0.02
    async with serving(held) as hung, serving(at_once) as healthy:
        # The hung host's URLs come first: their deliveries are due first.
        urls = [f"{hung.url}/{number}" for number in range(4)] + [healthy.url]
        hooks = dispatcher(store, urls, clock, concurrency=4, per_endpoint=2, timeout=ATTEMPT)
        await hooks.prepare()
        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(hooks.run)
                for number in range(3):
                    await add_events(store, clock, 1, first=number)
                    await received(healthy, number + 1)
                tasks.cancel_scope.cancel()
        await hooks.aclose()
    assert len(hung.requests) == 2 and hung.most == 2  # per origin, not per URL


@pytest.mark.anyio
async def test_hung_receivers_get_one_attempt_each_and_half_the_slots_while_the_healthy_one_gets_every_delivery(
    store: Store,
) -> None:
    clock = FrozenClock(at=time.time())
    store.event_poll_interval = 0.02
    async with hung_receivers(5) as hung, serving(at_once) as healthy:
        hooks = dispatcher(
            store, [peer.url for peer in hung] + [healthy.url], clock, concurrency=8, per_endpoint=2, timeout=ATTEMPT
        )
        await hooks.prepare()

        async def each_has(peers: list[Peer], count: int) -> None:
            for peer in peers:
                await received(peer, count)

        with anyio.fail_after(DEADLINE), settled() as attempts:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(hooks.run)
                # The first event reaches everyone; the hung receivers' attempts run out their deadline and fail.
                await add_events(store, clock, 1)
                await each_has([*hung, healthy], 1)
                await clock.until_sleeping(5)
                clock.advance(ATTEMPT)
                await attempts.until(6)
                # From now on the clock stands still: no hung attempt ends, and the healthy receiver still gets
                # each new event, while the failing ones hold one attempt each and four slots in all.
                for number in range(1, 5):
                    await add_events(store, clock, 1, first=number)
                    await received(healthy, number + 1)
                tasks.cancel_scope.cancel()
        await hooks.aclose()
    assert sum(len(peer.requests) for peer in hung) == 5 + 4  # the first attempts, then half of `concurrency`
    assert max(len(peer.requests) for peer in hung) == 2
