"""Keys the approvals derive from the state keys, each for one purpose (HKDF-SHA256), and what they key (HMAC-SHA256):
the digest a request is stored under (`service`) and the approver's form token (`pages`). Never the sealing key
itself, nor one purpose's key for another."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from typing import Final

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = ["FORM_TOKEN", "STORED_DIGEST", "derived", "keyed"]

FORM_TOKEN: Final = b"askback: approval page form token, v1"
STORED_DIGEST: Final = b"askback approvals: stored call digest"


def derived(state_keys: Sequence[bytes], purpose: bytes) -> list[bytes]:
    """A key for `purpose` from each state key, in the ring's order (the current key's first)."""
    return [HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(k) for k in state_keys]


def keyed(key: bytes, message: bytes) -> str:
    """`message` under `key`, as 64 hex digits."""
    return hmac.new(key, message, hashlib.sha256).hexdigest()
