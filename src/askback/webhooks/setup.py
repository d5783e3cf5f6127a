"""Webhooks as an extension of an `Askback` app (`askback.extension`).

```python
from askback.webhooks import Endpoint, Webhooks

app = Askback("mail", extensions=[Webhooks.from_settings()])          # the endpoints of ASKBACK_WEBHOOKS
app = Askback("mail", extensions=[Webhooks([Endpoint(url=..., events=["account.*"], secrets=[...])])])
```

The extension adds the webhooks' tables to the app's store and, once the store is open, runs the dispatcher
(`askback.webhooks.dispatcher`) in the background of the process until the app closes. Every instance of the app
runs one; they share the work through the database.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import httpx

from askback.errors import ConfigurationError
from askback.extension import ExtensionContext, Mounted, Ports
from askback.webhooks.dispatcher import CONCURRENCY, PER_ENDPOINT, TIMEOUT, Dispatcher
from askback.webhooks.endpoints import Endpoint, load_endpoints
from askback.webhooks.outbox import Outbox
from askback.webhooks.schedule import RetrySchedule
from askback.webhooks.schema import MIGRATIONS

if TYPE_CHECKING:
    from askback.clock import Clock
    from askback.settings import Settings

__all__ = ["Webhooks"]

logger = logging.getLogger("askback.webhooks")

VARIABLE = "ASKBACK_WEBHOOKS"


class Webhooks:
    """Signed webhooks for `endpoints`, delivered at least once from the app's store (see the module's docstring).

    `clock` (default: the app's), `rng`, `schedule`, `lease`, `idle`, `timeout`, `concurrency`, `per_endpoint` and
    `http` are the dispatcher's (`Dispatcher`)."""

    name = "webhooks"
    migrations = (MIGRATIONS,)
    mounts: tuple[Mounted, ...] = ()
    ports = Ports()

    def __init__(
        self,
        endpoints: Sequence[Endpoint],
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        schedule: RetrySchedule | None = None,
        lease: float = 60.0,
        idle: float = 1.0,
        timeout: float = TIMEOUT,
        concurrency: int = CONCURRENCY,
        per_endpoint: int = PER_ENDPOINT,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.endpoints = tuple(endpoints)
        urls = [endpoint.url for endpoint in self.endpoints]
        if len(set(urls)) != len(urls):
            raise ConfigurationError("two webhook endpoints share a URL; make them one, listing every event it is sent")
        self.clock = clock
        self.rng = rng
        self.schedule = schedule or RetrySchedule()
        self.lease = lease
        self.idle = idle
        self.timeout = timeout
        self.concurrency = concurrency
        self.per_endpoint = per_endpoint
        self.http = http
        self.dispatcher: Dispatcher | None = None
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def from_settings(cls, settings: Settings | None = None, *, environ: Mapping[str, str] | None = None) -> Webhooks:
        """The endpoints of the file `ASKBACK_WEBHOOKS` names, their secrets from the variables it names."""
        env = os.environ if environ is None else environ
        path = env.get(VARIABLE, "").strip()
        if not path:
            raise ConfigurationError(f"{VARIABLE} is not set; set it to the webhooks file (`[[endpoint]]` tables)")
        return cls(load_endpoints(path, environ=env))

    async def start(self, context: ExtensionContext) -> None:
        """Give new endpoints their cursors, then start the dispatcher in the background."""
        dispatcher = Dispatcher(
            Outbox(context.store.database, context.store.events),
            self.endpoints,
            clock=self.clock or context.clock,
            rng=self.rng,
            schedule=self.schedule,
            http=self.http,
            timeout=self.timeout,
            lease=self.lease,
            idle=self.idle,
            concurrency=self.concurrency,
            per_endpoint=self.per_endpoint,
        )
        try:
            await dispatcher.prepare()
        except BaseException:
            await dispatcher.aclose()
            raise
        self.dispatcher = dispatcher
        self._task = asyncio.get_running_loop().create_task(dispatcher.run(), name="askback webhooks")
        self._task.add_done_callback(_report)

    async def close(self) -> None:
        """Stop the dispatcher (an attempt under way is cut off: its delivery is taken again when its lease ends)."""
        task, self._task = self._task, None
        dispatcher, self.dispatcher = self.dispatcher, None
        if task is not None:
            task.cancel()
            # Waits for the task's end without raising what ended it (`_report` logged a crash already).
            await asyncio.wait([task])
        if dispatcher is not None:
            await dispatcher.aclose()


def _report(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("askback webhooks: the dispatcher stopped", exc_info=task.exception())
