"""Answers held on the server (`ASKBACK_ANSWERS=server`): sealed at rest with the state key ring.

By default a flow's accepted answers ride inside the sealed `requestState`, which the client holds and echoes. Some
deployments may not let personal data leave the server, even encrypted. In `server` mode the sealed state carries
only the flow's handle (its id and round) and the digests of the questions asked; the answers are stored under
(flow id, round), sealed here, and read back when the next round arrives, on any instance.

Sealing is AES-256-GCM under a key derived (HKDF-SHA256, its own purpose) from each state key, so the state keys
are never used directly for two jobs. The first key seals; every key of the ring opens (rotation as for the state).
The associated data binds the flow id and the round, so a sealed row copied to another flow or round fails to open.
What is stored is text: `a1.<key id>.<urlsafe base64 of nonce + ciphertext + tag>`. Pure and synchronous.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from askback.core.state import RecordedAnswer, answers_from_json, answers_to_json

__all__ = ["AnswerSeal"]

_PURPOSE = b"askback: answers held on the server, v1"
_PREFIX = "a1"


def _derive(state_key: str) -> tuple[str, AESGCM]:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_PURPOSE).derive(state_key.encode())
    return hashlib.sha256(key).hexdigest()[:12], AESGCM(key)


class AnswerSeal:
    """Seals and opens a flow's recorded answers with keys derived from the state key ring."""

    def __init__(self, state_keys: Sequence[str]) -> None:
        if not state_keys:
            raise ValueError("server-held answers need the state key ring")
        derived = [_derive(k) for k in state_keys]
        self._sealing = derived[0]
        self._opening = dict(derived)

    def seal(self, flow_id: str, round_: int, answers: Mapping[str, RecordedAnswer]) -> str:
        plaintext = json.dumps(answers_to_json(answers), separators=(",", ":"), sort_keys=True).encode()
        key_id, aead = self._sealing
        nonce = os.urandom(12)
        sealed = aead.encrypt(nonce, plaintext, _associated(key_id, flow_id, round_))
        return f"{_PREFIX}.{key_id}.{base64.urlsafe_b64encode(nonce + sealed).decode().rstrip('=')}"

    def open(self, flow_id: str, round_: int, sealed: str) -> dict[str, RecordedAnswer] | None:
        """The answers, or None when the value does not open (another flow's or round's, altered, an unknown key)."""
        prefix, _, rest = sealed.partition(".")
        key_id, _, body = rest.partition(".")
        aead = self._opening.get(key_id)
        if prefix != _PREFIX or aead is None:
            return None
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            plaintext = aead.decrypt(raw[:12], raw[12:], _associated(key_id, flow_id, round_))
            decoded: dict[str, Any] = json.loads(plaintext)
            return answers_from_json(decoded)
        except (InvalidTag, ValueError, binascii.Error, KeyError, TypeError):
            return None


def _associated(key_id: str, flow_id: str, round_: int) -> bytes:
    return json.dumps([_PREFIX, key_id, flow_id, round_], separators=(",", ":")).encode()
