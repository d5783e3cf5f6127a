"""Receivers that hang cannot take the slots of the healthy ones: slots are counted per receiver (scheme, host, port),
only a receiver known fast gets several attempts at once, any other (new, slow, failing) one at a time, and those
together hold at most half of the slots.
The decision is a table on plain counts; end to end, real receivers on loopback that never answer, a store on a real
SQLite file, the dispatcher's own loop, time a `FrozenClock` moved only by the test, and every wait has a deadline."""

from __future__ import annotations

import asyncio
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
from askback.webhooks import Dispatcher, Endpoint, Outbox, RetrySchedule
from askback.webhooks._slots import Origin, Slots, answered_quickly

DEADLINE = 20.0  # seconds any single wait of a test may take before it fails
# An attempt's deadline, longer than any wait of a test: a hung attempt ends only when the test moves the clock.
ATTEMPT = 3 * DEADLINE
A, B, C, D, H = (("https", f"{name}.example", 443) for name in "abcdh")


def origins(*names: Origin) -> list[tuple[int, Origin]]:
    return list(enumerate(names, 1))


FAST = frozenset({H})


@pytest.mark.parametrize(
    ("slots", "due", "admitted"),
    [
        # Four URLs on one known fast origin share its `per_origin` slots; another fast receiver gets its own.
        (Slots(8, 2, fast=frozenset({A, H})), origins(A, A, A, A, H), [1, 2, 5]),
        # An origin not known fast (never tried, slow, failing) gets one attempt at a time, none while one is under way.
        (Slots(8, 4, fast=FAST), origins(A, A, H, H), [1, 3, 4]),
        (Slots(8, 4, {A: 1}, FAST), origins(A, H), [2]),
        (Slots(8, 2), origins(A, A, H, H), [1, 3]),
        # Those origins together hold at most half of `concurrency`: the fast ones keep the rest.
        (Slots(4, 4, fast=FAST), origins(A, B, C, D, H, H), [1, 2, 5, 6]),
        (Slots(8, 4, {A: 1, B: 1, C: 1, D: 1}, FAST), origins(A, B, H, H, H, H), [3, 4, 5, 6]),
        # Never more than `concurrency` in all; with one slot, an origin not known fast may still have it.
        (Slots(3, 4, {H: 2}, FAST), origins(H, H, A), [1]),
        (Slots(1, 4, fast=FAST), origins(A, H), [1]),
        # An origin known fast again has its `per_origin` slots again.
        (Slots(8, 2, {A: 1}, frozenset({A})), origins(A, A, A), [1]),
    ],
)
def test_which_due_deliveries_may_start_is_decided_per_origin_with_origins_not_known_fast_held_back(
    slots: Slots, due: list[tuple[int, Origin]], admitted: list[int]
) -> None:
    assert slots.admit(due) == admitted


@pytest.mark.parametrize(
    ("status", "took", "fast"),
    [
        (None, 0.0, False),
        (500, 0.0, False),
        (503, 0.0, False),
        (204, 2.6, False),  # answered, but after more than a quarter of the 10 s deadline
        (200, 2.5, True),
        (204, 0.0, True),
        (301, 0.0, True),
        (404, 1.0, True),
    ],
)
def test_a_receiver_is_known_fast_only_when_it_answered_below_500_within_a_quarter_of_the_deadline(
    status: int | None, took: float, fast: bool
) -> None:
    assert answered_quickly(status, took, 10.0) is fast


def dispatcher(store: Store, urls: list[str], clock: FrozenClock, **options: Any) -> Dispatcher:
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
@pytest.mark.http
async def test_four_urls_on_one_hung_host_share_its_slots_and_the_healthy_receiver_gets_every_delivery(
    store: Store,
) -> None:
    clock = FrozenClock(at=time.time())
    store.events.poll_interval = 0.02
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
    # One origin not known fast: one attempt, however many URLs (counted per URL, two would have started).
    assert len(hung.requests) == 1 and hung.most == 1


@pytest.mark.anyio
@pytest.mark.http
async def test_hung_receivers_get_one_attempt_each_and_half_the_slots_while_the_healthy_one_gets_every_delivery(
    store: Store,
) -> None:
    clock = FrozenClock(at=time.time())
    store.events.poll_interval = 0.02
    async with hung_receivers(5) as hung, serving(at_once) as healthy:
        hooks = dispatcher(
            store, [healthy.url] + [peer.url for peer in hung], clock, concurrency=8, per_endpoint=2, timeout=ATTEMPT
        )
        await hooks.prepare()

        async def each_has(peers: list[Peer], count: int) -> None:
            for peer in peers:
                await received(peer, count)

        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(hooks.run)
                # The first event: no receiver is known yet, each gets one attempt and together half of the slots.
                # The healthy one answers at once, and its slot goes to a fourth hung one; the fifth waits.
                await add_events(store, clock, 1)
                await each_has([healthy, *hung[:4]], 1)
                # The clock stands still: no hung attempt ends, and the healthy receiver, now known fast, gets each
                # new event while the hung ones hold their four slots.
                for number in range(1, 5):
                    await add_events(store, clock, 1, first=number)
                    await received(healthy, number + 1)
                tasks.cancel_scope.cancel()
        await hooks.aclose()
    assert [len(peer.requests) for peer in hung] == [1, 1, 1, 1, 0]
    assert max(peer.most for peer in hung) == 1


@pytest.mark.anyio
@pytest.mark.parametrize(("answer_after", "at_once_most"), [(0.0, 2), (ATTEMPT / 2, 1)])
@pytest.mark.http
async def test_a_receiver_that_answered_slowly_gets_one_attempt_at_a_time_and_a_quick_one_per_endpoint(
    store: Store, answer_after: float, at_once_most: int
) -> None:
    clock = FrozenClock(at=time.time())
    store.events.poll_interval = 0.02
    async with serving(held) as receiver, serving(at_once) as other:
        hooks = dispatcher(store, [receiver.url, other.url], clock, concurrency=8, per_endpoint=2, timeout=ATTEMPT)
        await hooks.prepare()
        with anyio.fail_after(DEADLINE), settled() as attempts:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(hooks.run)
                await add_events(store, clock, 1)
                await received(receiver, 1)
                clock.advance(answer_after)  # well within the attempt's deadline: a 204, quick or slow
                receiver.release.set()
                await attempts.until(2)
                receiver.release = asyncio.Event()
                # Three more events: each reaches the other receiver; this one gets `per_endpoint` (2) attempts at
                # once after a quick answer, one after a slow one.
                await add_events(store, clock, 3, first=1)
                await received(other, 4)
                await received(receiver, 1 + at_once_most)
                assert receiver.under_way == at_once_most
                most = receiver.most
                receiver.release.set()
                await attempts.until(8)
                tasks.cancel_scope.cancel()
        await hooks.aclose()
    assert most == at_once_most
    deliveries = await Outbox(store.database, store.events).deliveries()
    assert len(deliveries) == 8 and {d.status for d in deliveries} == {"delivered"}
