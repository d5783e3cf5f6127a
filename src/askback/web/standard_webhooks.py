"""Standard Webhooks (https://www.standardwebhooks.com) signatures, signed and checked in one place.

A message is signed with HMAC-SHA256, keyed with the bytes a secret `whsec_<base64>` encodes, over
`{webhook-id}.{webhook-timestamp}.{body}`; `webhook-signature` holds one `v1,<base64>` per secret, space-separated,
so that a receiver holding either the old or the new secret believes it while secrets rotate. The sender
(`askback.webhooks`) signs with `signed_headers`; a receiver (the runtime's, `askback.runtime.webhooks`) checks with
`verify`, in constant time, refusing a timestamp more than `tolerance` seconds from now either way.

Pure functions of the headers, the body, the keys and the time. This module belongs to no product, so that the
sender and the receiver share it without importing each other.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from askback.errors import ConfigurationError

__all__ = ["SECRET_PREFIX", "Refused", "Verified", "secret_keys", "sign", "signed_headers", "verify"]

SECRET_PREFIX = "whsec_"
_MAX_ID = 255


def secret_keys(secrets: Sequence[str]) -> tuple[bytes, ...]:
    """The HMAC keys of `whsec_<base64>` secrets (the prefix optional); `ConfigurationError`, naming the secret by
    position and never by value, when one is not base64 or is empty, or when none is given."""
    found: list[bytes] = []
    for n, secret in enumerate(secrets, start=1):
        encoded = secret.strip().removeprefix(SECRET_PREFIX)
        try:
            key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except (binascii.Error, ValueError):
            key = b""
        if not key:
            raise ConfigurationError(f"webhook secret {n} is not whsec_ followed by base64: give the sender's secret")
        found.append(key)
    if not found:
        raise ConfigurationError("the webhook receiver needs at least one secret (whsec_...), the sender's")
    return tuple(found)


def sign(key: bytes, msg_id: str, timestamp: int, body: str | bytes) -> str:
    """One `v1,<base64>` signature of `body` under `key` (the bytes after a secret's `whsec_`)."""
    raw = body.encode() if isinstance(body, str) else body
    digest = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + raw, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signed_headers(keys: Sequence[bytes], msg_id: str, timestamp: int, body: str) -> dict[str, str]:
    """The headers of one attempt, signed with every key."""
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(sign(key, msg_id, timestamp, body) for key in keys),
    }


@dataclass(frozen=True)
class Verified:
    """A webhook whose signature and timestamp hold: its `webhook-id` and its body."""

    webhook_id: str
    body: bytes
    kind: Literal["verified"] = "verified"


@dataclass(frozen=True)
class Refused:
    """Why a webhook is not believed (answered 401), short enough to send back."""

    reason: str
    kind: Literal["refused"] = "refused"


def verify(
    headers: Mapping[str, str], body: bytes, *, keys: Sequence[bytes], now: float, tolerance: float = 300
) -> Verified | Refused:
    """Whether a Standard Webhooks request is believed: given its headers (names in lower case), its body as sent,
    the HMAC keys (`secret_keys(secrets)`), the time now and how far from it the timestamp may be."""
    webhook_id = headers.get("webhook-id", "")
    stamp = headers.get("webhook-timestamp", "")
    signatures = headers.get("webhook-signature", "")
    if not webhook_id or not stamp or not signatures:
        missing = [n for n, v in (("id", webhook_id), ("timestamp", stamp), ("signature", signatures)) if not v]
        return Refused(f"missing webhook-{missing[0]} header")
    if len(webhook_id) > _MAX_ID:
        return Refused("webhook-id is too long")
    if not stamp.isascii() or not stamp.isdigit():
        return Refused("webhook-timestamp is not a number of seconds")
    if abs(now - int(stamp)) > tolerance:
        return Refused("webhook-timestamp is too far from now")
    expected = [sign(key, webhook_id, int(stamp), body).partition(",")[2] for key in keys]
    for sent in signatures.split(" "):
        version, _, value = sent.partition(",")
        if version != "v1":
            continue
        # Every key is tried, match or not, so that the time taken says nothing about which one matched.
        matched = [hmac.compare_digest(value.encode(), e.encode()) for e in expected]
        if any(matched):
            return Verified(webhook_id, body)
    return Refused("no signature matches")
