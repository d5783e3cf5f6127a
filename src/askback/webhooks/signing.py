"""Standard Webhooks (https://www.standardwebhooks.com) messages: the body, its id and the signed headers.

A delivery is a POST of a JSON body `{"type", "timestamp", "data"}` with three headers:

- `webhook-id`: the message's id, the same on every retry of one event to one endpoint (a receiver drops repeats
  by it): `msg_<cursor>_<endpoint>` for the shared event log, `msg_audit<id>_<endpoint>` for the audit log;
- `webhook-timestamp`: the attempt's time in whole seconds since the epoch (a receiver refuses old ones);
- `webhook-signature`: `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`, one per secret, space-separated,
  so that a receiver holding either the old or the new secret accepts it while secrets rotate.

Pure functions: the clock and the secrets are given. The signing itself is `askback.web.standard_webhooks`, which the
runtime's receiver checks with.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from askback.web.standard_webhooks import sign, signed_headers

__all__ = ["message_body", "sign", "signed_headers", "webhook_id"]


def webhook_id(source: str, event_id: int, endpoint_key: str) -> str:
    """The id of the message carrying event `event_id` of `source` (`events` or `audit`) to one endpoint."""
    prefix = "" if source == "events" else source
    return f"msg_{prefix}{event_id}_{endpoint_key}"


def message_body(event_type: str, at: float, data: Mapping[str, Any]) -> str:
    """The JSON body: the event's type, its time (ISO 8601, UTC) and its data."""
    timestamp = dt.datetime.fromtimestamp(at, dt.UTC).isoformat().replace("+00:00", "Z")
    return json.dumps({"type": event_type, "timestamp": timestamp, "data": dict(data)}, sort_keys=True)
