"""Signed webhooks: account events (and, opt-in, audit events) POSTed to receivers as Standard Webhooks
(https://www.standardwebhooks.com), at least once, from the shared store.

```python
from askback.webhooks import Webhooks

app = Askback("mail", extensions=[Webhooks.from_settings()])   # endpoints from the file ASKBACK_WEBHOOKS names
```

Names are imported on first use, so that importing this module loads neither SQLAlchemy nor httpx. The parts:

- `endpoints`: the endpoints, their event filters and secrets, read from TOML and checked (no I/O but the file);
- `_destinations`: where a webhook may go, a pure decision on an address or a URL's host; `_guard` applies it to
  every address the dispatcher connects to;
- `signing`: the message body, its `webhook-id` and the signed headers (pure);
- `schedule`: when a failed delivery is tried again, and when it is given up (pure);
- `outbox`: the cursors, deliveries and attempts in the store, claimed with leases;
- `dispatcher`: the loop that queues new events and delivers what is due;
- `setup`: the extension (`Webhooks`) that runs the dispatcher in an app's process;
- `schema`: the schema history of its tables (`MIGRATIONS`), which `askback db upgrade` knows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from askback._face import resolve

if TYPE_CHECKING:
    from askback.webhooks.dispatcher import Dispatcher, SentTest, send_test
    from askback.webhooks.endpoints import Endpoint, load_endpoints
    from askback.webhooks.outbox import Attempt, Delivery, Outbox
    from askback.webhooks.schedule import RetrySchedule
    from askback.webhooks.setup import Webhooks

_WHERE = {
    "Dispatcher": "askback.webhooks.dispatcher",
    "SentTest": "askback.webhooks.dispatcher",
    "send_test": "askback.webhooks.dispatcher",
    "Endpoint": "askback.webhooks.endpoints",
    "load_endpoints": "askback.webhooks.endpoints",
    "Attempt": "askback.webhooks.outbox",
    "Delivery": "askback.webhooks.outbox",
    "Outbox": "askback.webhooks.outbox",
    "RetrySchedule": "askback.webhooks.schedule",
    "Webhooks": "askback.webhooks.setup",
}

__all__ = [
    "Attempt",
    "Delivery",
    "Dispatcher",
    "Endpoint",
    "Outbox",
    "RetrySchedule",
    "SentTest",
    "Webhooks",
    "load_endpoints",
    "send_test",
]


def __getattr__(name: str) -> Any:
    return resolve(__name__, _WHERE, name, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
