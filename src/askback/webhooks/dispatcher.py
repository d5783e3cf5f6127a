"""The dispatcher: one loop per instance that turns new events into deliveries and delivers what is due.

Each pass (`run_once`) first reads, for every endpoint, the events after its cursor (the shared event log for the
account family, the audit log for the opt-in audit family) and queues them (`Outbox.enqueue`); then it claims the
due deliveries with a lease, POSTs each one signed (`signing`), and records the attempt: a 2xx answer delivers it,
anything else (another status, a redirect, a timeout, no connection) schedules the next try (`RetrySchedule`) or,
once the schedule ran out, fails it. Between passes it waits for a new event (`EventLog.wait_for_events`), for the next
delivery to fall due on the injected clock, or for `idle` seconds, whichever comes first: never a busy loop.

Any number of instances run this loop on one database: the outbox's conditional writes decide who queues and who
sends, and a delivery whose instance died mid-attempt is sent again once its lease ends, with the same `webhook-id`.

A receiver cannot hurt the sender, nor hold up the other receivers:

- an attempt has one deadline (`timeout`, on the injected clock) for all of it: connecting, sending, the answer's
  head and what is read of its body, so a receiver that trickles its answer a byte at a time is cut off on time;
- only the status matters: reading an answer stops once `ANSWER_READ` bytes of it came (one network read at most
  beyond), as sent (`Accept-Encoding: identity`, never inflated, whatever the receiver sends), and the connection is
  closed with the rest unread; nothing of it is kept;
- at most `concurrency` attempts are under way at once on an instance, counted per receiver origin (scheme, host,
  port) whatever the endpoints' paths: up to `per_endpoint` to a receiver whose last attempt got an answer (below
  500) within a quarter of `timeout`, one at a time to any other (not tried since start, slow, failing), and those
  together at most half of `concurrency` (`_slots`). A delivery is claimed only when a slot is free for it, and `run` starts each one on its own, without
  waiting for the others: a slow receiver holds its own slots, and the others' deliveries go out meanwhile;
- whatever goes wrong in one attempt (a URL httpx cannot send to, any exception) fails that attempt, never the loop.
"""

from __future__ import annotations

import logging
import random
import secrets
import socket
import time
import warnings
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

import anyio
import httpx
from anyio.abc import TaskGroup

from askback.clock import Clock, SystemClock
from askback.errors import AskbackError, ConfigurationError
from askback.store import Store
from askback.webhooks._guard import Resolve, guarded_transport, origin
from askback.webhooks._slots import Origin, Slots, answered_quickly
from askback.webhooks.endpoints import Endpoint, redacted_url
from askback.webhooks.outbox import Attempt, Claimed, DeliveryStatus, Outbox, Source
from askback.webhooks.schedule import RetryAt, RetrySchedule
from askback.webhooks.signing import message_body, signed_headers

__all__ = ["Dispatcher", "SentTest", "send_test"]

logger = logging.getLogger("askback.webhooks")

# Standard Webhooks' advice: a receiver answers quickly and does its work later.
TIMEOUT = 10.0
# Attempts under way at once on one instance, and to one receiver (origin).
CONCURRENCY = 16
PER_ENDPOINT = 4
# How much of an answer is read (only its status matters): enough to reuse the connection after a short answer.
ANSWER_READ = 4096
_BATCH = 500
_CLAIM = 32


def _http_client(timeout: float, endpoints: Sequence[Endpoint], resolve: Resolve | None = None) -> httpx.AsyncClient:
    """The one client webhooks are sent with: it connects only where `_destinations` allows (the private
    destinations of `endpoints` that say `allow_private` besides), resolving names with `resolve` (the system's by
    default), and ignores the environment's proxies, which would connect on its behalf where it cannot check."""
    allowed = [origin(endpoint.url) for endpoint in endpoints if endpoint.allow_private]
    transport = guarded_transport(allowed, resolve=resolve)
    return httpx.AsyncClient(timeout=timeout, follow_redirects=False, trust_env=False, transport=transport)


async def _post(
    http: httpx.AsyncClient, url: str, headers: dict[str, str], body: str, *, clock: Clock, within: float
) -> tuple[int | None, str | None]:
    """POST `body`, all of the attempt within `within` seconds on `clock`: the HTTP status, or `None` and the kind of
    failure. Reading the answer stops after `ANSWER_READ` bytes; it is never inflated, and none of it is kept."""
    deadline = clock.now() + within
    outcome: tuple[int | None, str | None] = (None, "timeout")
    async with anyio.create_task_group() as tasks:

        async def cut_off() -> None:
            await clock.sleep_until(deadline)
            tasks.cancel_scope.cancel()

        tasks.start_soon(cut_off)
        try:
            outcome = await _exchange(http, url, headers, body)
        except Exception as exc:  # one attempt's failure, whatever it is, must not end the loop
            # Only the class's name: a message may quote the URL, whose query can hold the receiver's token.
            logger.warning(
                "askback webhooks: an attempt to %s failed unexpectedly (%s); it counts as a failed attempt",
                redacted_url(url),
                type(exc).__name__,
            )
            outcome = (None, type(exc).__name__[:64])
        tasks.cancel_scope.cancel()
    return outcome


async def _exchange(
    http: httpx.AsyncClient, url: str, headers: dict[str, str], body: str
) -> tuple[int | None, str | None]:
    try:
        # `identity`: a compressed answer is not asked for, and `aiter_raw` would not inflate one sent all the same.
        sent = {**headers, "accept-encoding": "identity"}
        async with http.stream("POST", url, content=body.encode(), headers=sent) as response:
            read = 0
            async with aclosing(cast(AsyncGenerator[bytes, None], response.aiter_raw())) as chunks:
                async for chunk in chunks:
                    read += len(chunk)
                    if read >= ANSWER_READ:
                        break  # leaving the block closes the connection, with the rest of the answer unread
            return response.status_code, None
    except httpx.TimeoutException:
        return None, "timeout"
    except httpx.ConnectError:
        return None, "connect"
    except httpx.HTTPError as exc:
        return None, type(exc).__name__


def _origin(url: str) -> Origin:
    """The receiver `url` is counted against: its scheme, its host as sent, its port (from the URL's text alone for a
    URL httpx cannot parse, whose attempts fail anyway)."""
    try:
        host, port = origin(url)
        return httpx.URL(url).scheme, host, port
    except (httpx.InvalidURL, ValueError):
        parts = urlsplit(url)
        return parts.scheme, parts.hostname or url, 0


class Dispatcher:
    """Deliveries of `endpoints`' events from `outbox` (on a store's database and event log), signed with their secrets; see the module's docstring.

    `clock` and `rng` decide when retries fall due and when an attempt's `timeout` (seconds, for all of it) runs out
    (inject them to control time and jitter); `lease` is how long an attempt holds its delivery (longer than
    `timeout`); `idle` the longest wait between passes (the audit log, which wakes no one, is read at least that
    often); `concurrency` and `per_endpoint` how many attempts may be under way at once, in all and to one receiver
    (an origin: endpoints whose URLs share scheme, host and port share these slots)."""

    def __init__(
        self,
        outbox: Outbox | Store,
        endpoints: Sequence[Endpoint],
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        schedule: RetrySchedule | None = None,
        http: httpx.AsyncClient | None = None,
        timeout: float = TIMEOUT,
        lease: float = 60.0,
        idle: float = 1.0,
        instance: str | None = None,
        concurrency: int = CONCURRENCY,
        per_endpoint: int = PER_ENDPOINT,
    ) -> None:
        if concurrency < 1 or per_endpoint < 1:
            raise ConfigurationError("webhook concurrency and per_endpoint must be at least 1; give positive numbers")
        if isinstance(outbox, Store):
            warnings.warn(
                "Dispatcher(store, ...) is deprecated: give it an outbox on the store's parts, "
                "Dispatcher(Outbox(store.database, store.events), ...)",
                DeprecationWarning,
                stacklevel=2,
            )
            outbox = Outbox(outbox.database, outbox.events)
        self.outbox = outbox
        self.endpoints = tuple(endpoints)
        self.clock: Clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self.schedule = schedule or RetrySchedule()
        self.lease = lease
        self.idle = idle
        self.timeout = timeout
        self.concurrency = concurrency
        self.per_endpoint = per_endpoint
        self.instance = instance or f"{socket.gethostname()[:40]}:{secrets.token_hex(4)}"
        self._own_http = http is None
        self._http = http or _http_client(timeout, self.endpoints)
        self._by_key = {endpoint.key: endpoint for endpoint in self.endpoints}
        # The lowest event cursor the last `collect` left: a newer event wakes `wait`.
        self._seen: int | None = None
        self._origins = {endpoint.key: _origin(endpoint.url) for endpoint in self.endpoints}
        # The attempts under way here, by receiver and by delivery id; `_freed` is set when one ends. `_fast`: the
        # receivers whose last attempt from here was answered quickly (`answered_quickly`).
        self._sending: dict[Origin, int] = {}
        self._under_way: set[int] = set()
        self._fast: set[Origin] = set()
        self._freed: anyio.Event | None = None

    def _sources(self) -> list[tuple[Endpoint, Source]]:
        found: list[tuple[Endpoint, Source]] = []
        for endpoint in self.endpoints:
            if endpoint.wants_logged_events:
                found.append((endpoint, "events"))
            if endpoint.wants_audit_events:
                found.append((endpoint, "audit"))
        return found

    async def prepare(self) -> None:
        """Give each endpoint its cursors (at the newest event, for an endpoint seen for the first time)."""
        latest: dict[Source, int] = {}
        for endpoint, source in self._sources():
            if source not in latest:
                latest[source] = await self.outbox.latest(source)
            await self.outbox.start_cursor(endpoint, source, latest[source])

    async def collect(self) -> int:
        """Queue every event after each endpoint's cursor; the number of deliveries added."""
        added = 0
        seen: list[int] = []
        for endpoint, source in self._sources():
            while True:
                cursor = await self.outbox.cursor(endpoint, source)
                if cursor is None:
                    await self.outbox.start_cursor(endpoint, source, await self.outbox.latest(source))
                    break
                events = await self.outbox.events_after(source, cursor, _BATCH)
                queued = await self.outbox.enqueue(endpoint, source, cursor, events, now=self.clock.now())
                added += queued or 0
                if len(events) < _BATCH:
                    if source == "events":
                        seen.append(events[-1].id if events and queued is not None else cursor)
                    break
        self._seen = min(seen) if seen else None
        return added

    def _origin_of(self, key: str) -> Origin:
        # A delivery queued for an endpoint no longer configured here sends nothing: it counts only in all.
        return self._origins.get(key) or ("", key, 0)

    def _slots(self) -> Slots:
        return Slots(self.concurrency, self.per_endpoint, dict(self._sending), frozenset(self._fast))

    def _pick(self, due: Sequence[tuple[int, str]]) -> list[int]:
        return self._slots().admit([(delivery, self._origin_of(key)) for delivery, key in due])

    def _room(self) -> tuple[int, list[str]]:
        """The free slots in all, and the configured endpoints no attempt may start to now."""
        slots = self._slots()
        free = self.concurrency - sum(self._sending.values())
        return free, [key for key, found in self._origins.items() if slots.room(found) <= 0]

    async def _start_due(self, tasks: TaskGroup) -> int:
        """Claim due deliveries while slots are free and start each attempt in `tasks`; the number started."""
        started = 0
        while True:
            free, _ = self._room()
            if free <= 0:
                return started
            now = self.clock.now()
            claimed = await self.outbox.claim(
                now=now,
                until=now + self.lease,
                by=self.instance,
                limit=min(free, _CLAIM),
                each=self.per_endpoint,
                scan=min(free, _CLAIM) + self.per_endpoint * len(self._origins),
                pick=self._pick,
            )
            fresh = [delivery for delivery in claimed if delivery.id not in self._under_way]
            if not fresh:
                # Nothing due, or only attempts still under way here whose lease ran out (and was just renewed).
                return started
            for delivery in fresh:
                receiver = self._origin_of(delivery.endpoint)
                self._sending[receiver] = self._sending.get(receiver, 0) + 1
                self._under_way.add(delivery.id)
                tasks.start_soon(self._send, delivery)
            started += len(fresh)

    async def _send(self, delivery: Claimed) -> None:
        try:
            await self._attempt(delivery)
        except AskbackError as exc:
            logger.warning("askback webhooks: %s (%s is tried again when its lease ends)", exc, delivery.webhook_id)
        except Exception as exc:  # one attempt's failure, whatever it is, must not end the loop
            logger.error(
                "askback webhooks: recording the attempt of %s to %s failed (%s); it is tried again when its lease "
                "ends",
                delivery.webhook_id,
                delivery.url,
                type(exc).__name__,
            )
        finally:
            self._under_way.discard(delivery.id)
            receiver = self._origin_of(delivery.endpoint)
            left = self._sending.pop(receiver) - 1
            if left:
                self._sending[receiver] = left
            if self._freed is not None:
                self._freed.set()

    async def deliver_due(self) -> int:
        """Attempt every delivery due now, within the slots (`concurrency`, `per_endpoint`), and wait until they all
        ended; the number of attempts made."""
        made = 0
        async with anyio.create_task_group() as tasks:
            while True:
                self._freed = anyio.Event()
                started = await self._start_due(tasks)
                made += started
                if not started:
                    if not self._sending:
                        return made
                    await self._freed.wait()
        return made  # pragma: no cover (the loop returns)

    async def _attempt(self, delivery: Claimed) -> None:
        endpoint = self._by_key.get(delivery.endpoint)
        number = delivery.attempts + 1
        at = self.clock.now()
        started = time.perf_counter()
        status: int | None = None
        error: str | None = "unconfigured"  # queued for an endpoint no longer configured here: no secret to sign with
        if endpoint is not None:
            headers = signed_headers(endpoint.keys, delivery.webhook_id, int(at), delivery.body)
            status, error = await _post(
                self._http, endpoint.url, headers, delivery.body, clock=self.clock, within=self.timeout
            )
            receiver = self._origin_of(endpoint.key)
            if answered_quickly(status, self.clock.now() - at, self.timeout):
                self._fast.add(receiver)
            else:
                self._fast.discard(receiver)
        attempt = Attempt(delivery.id, number, at, time.perf_counter() - started, status, error)
        now = self.clock.now()
        outcome: DeliveryStatus
        if status is not None and 200 <= status < 300:
            outcome, next_at = "delivered", now
        else:
            decision = self.schedule.after_failure(number, now, self.rng)
            outcome, next_at = ("pending", decision.at) if isinstance(decision, RetryAt) else ("failed", now)
        kept = await self.outbox.settle(delivery, attempt, by=self.instance, status=outcome, next_attempt_at=next_at)
        logger.info(
            "askback webhook %s attempt %d to %s: %s -> %s",
            delivery.webhook_id,
            number,
            delivery.url,
            status if status is not None else error,
            outcome if kept else "lease lost",
        )

    async def run_once(self) -> int:
        """One pass: queue new events, then attempt what is due. The number of deliveries queued and attempted."""
        return await self.collect() + await self.deliver_due()

    async def wait(self) -> None:
        """Wait for a new event, the next due delivery that a slot is free for, a slot freed while every one was
        taken, or `idle` seconds, whichever comes first."""
        seen = self._seen if self._seen is not None else await self.outbox.events.latest_event_id()
        free, full = self._room()
        due = await self.outbox.next_due(skip=full) if free > 0 else None
        wake_at = self.clock.now() + self.idle if due is None else min(due, self.clock.now() + self.idle)
        freed = self._freed if self._freed is not None and (free <= 0 or full) else None
        async with anyio.create_task_group() as tasks:

            async def events() -> None:
                await self.outbox.events.wait_for_events(seen, timeout=self.idle)
                tasks.cancel_scope.cancel()

            async def clock() -> None:
                await self.clock.sleep_until(wake_at)
                tasks.cancel_scope.cancel()

            async def slot() -> None:
                assert freed is not None
                await freed.wait()
                tasks.cancel_scope.cancel()

            tasks.start_soon(events)
            tasks.start_soon(clock)
            if freed is not None:
                tasks.start_soon(slot)

    async def run(self) -> None:
        """Pass and wait until cancelled, each attempt under way on its own meanwhile (an attempt under way when it
        is cancelled is cut off: its delivery is taken again when its lease ends). A database that cannot be reached
        is logged and tried again."""
        await self.prepare()
        async with anyio.create_task_group() as sending:
            while True:
                try:
                    self._freed = anyio.Event()
                    await self.collect()
                    await self._start_due(sending)
                    await self.wait()
                except AskbackError as exc:
                    logger.warning("askback webhooks: %s (trying again in %s s)", exc, self.idle)
                    await anyio.sleep(self.idle)

    async def aclose(self) -> None:
        if self._own_http:
            await self._http.aclose()


@dataclass(frozen=True)
class SentTest:
    """What `send_test` got: the receiver's HTTP status, or the kind of failure; and the message's id."""

    webhook_id: str
    status: int | None
    error: str | None

    @property
    def delivered(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


async def send_test(
    endpoint: Endpoint, *, clock: Clock | None = None, http: httpx.AsyncClient | None = None
) -> SentTest:
    """Send `endpoint` one signed `webhook.test` message now (not through the outbox, whatever it subscribes to)."""
    at = (clock or SystemClock()).now()
    msg_id = f"msg_test{secrets.token_hex(6)}_{endpoint.key}"
    body = message_body("webhook.test", at, {"url": endpoint.url})
    client = http or _http_client(TIMEOUT, (endpoint,))
    try:
        headers = signed_headers(endpoint.keys, msg_id, int(at), body)
        status, error = await _post(client, endpoint.url, headers, body, clock=clock or SystemClock(), within=TIMEOUT)
    finally:
        if http is None:
            await client.aclose()
    return SentTest(msg_id, status, error)
