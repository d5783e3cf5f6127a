"""The vault: connected accounts' credentials, encrypted at rest.

A credential (a mapping: tokens, an API key, their expiry) is turned into JSON and sealed with AES-256-GCM under a
fresh random 96-bit nonce. The associated data binds the format version, the key id and the account id, so a sealed
value copied to another account's row, or relabelled with another key id, fails to open. What is stored is text:

    v1.<key-id>.<urlsafe base64, unpadded, of nonce (12 bytes) + ciphertext + tag (16 bytes)>

The key ring is the vault's own (`ASKBACK_VAULT_KEYS`, never the state keys): comma-separated entries
`<key-id>:<urlsafe base64 of 32 random bytes>`. The first key seals; every key opens, picked by the id written in
the sealed value. Rotation is therefore: put a new key first, `reseal` every value for which `needs_rotation` is
true, then drop the old key.

Everything here is pure and synchronous: no database, no clock. Storing sealed values and walking every row during
rotation belong to the accounts store, which calls this module.

Errors: a ring that is missing or malformed, or a value sealed with a key id the ring does not hold, is a
`ConfigurationError` naming `ASKBACK_VAULT_KEYS` (something to fix in the settings). A value that fails
authentication (altered, bound to another account, or a key with the right id but the wrong bytes) or is not a
sealed value at all is `CredentialUnreadable`. No message ever contains key material or plaintext.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from askback.errors import ConfigurationError, VaultError

if TYPE_CHECKING:
    from askback.settings import Settings

__all__ = ["CredentialUnreadable", "Vault", "VaultKey", "new_key", "parse_keys"]

ENV = "ASKBACK_VAULT_KEYS"
VERSION = "v1"
KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
# Key ids appear in every sealed value and in error messages, so they are short, public, and free of the
# separators of the ring (",", ":") and of the sealed format (".").
_KEY_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")
_MAKE_ONE = f"Make a key with `askback vault new-key` and set {ENV}=<key-id>:<key> (several: comma-separated)."


class CredentialUnreadable(VaultError, ValueError):
    """A sealed credential that cannot be opened: altered, bound to another account, sealed with other key bytes
    under the same key id, or not a sealed credential at all. The message holds no plaintext and no key."""


@dataclass(frozen=True)
class VaultKey:
    """One key of the ring. Its `repr` and `str` show the id only."""

    id: str
    material: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not _KEY_ID.fullmatch(self.id):
            raise ConfigurationError(
                f"A vault key id must be 1 to 32 letters, digits, '-' or '_'; fix the ids in {ENV}. {_MAKE_ONE}"
            )
        if len(self.material) != KEY_BYTES:
            raise ConfigurationError(
                f"Vault key {self.id!r} is {len(self.material)} bytes; a vault key is {KEY_BYTES} random bytes. "
                f"Replace it in {ENV}. {_MAKE_ONE}"
            )


def new_key(key_id: str | None = None) -> str:
    """A fresh ring entry, `<key-id>:<urlsafe base64 of 32 random bytes>`, for `askback vault new-key`.

    The id is random unless given: reusing an id for other key bytes would make values sealed under the old bytes
    unreadable, so a fresh key should get a fresh id."""
    key = VaultKey(key_id if key_id is not None else secrets.token_hex(4), secrets.token_bytes(KEY_BYTES))
    return f"{key.id}:{_b64encode(key.material)}"


def parse_keys(raw: str) -> tuple[VaultKey, ...]:
    """The ring from the text of `ASKBACK_VAULT_KEYS`, sealing key first. Raises `ConfigurationError` naming the
    variable and the entry's position, never the entry itself (it may be a key)."""
    entries = [part.strip() for part in raw.split(",") if part.strip()]
    if not entries:
        raise _missing()
    keys = []
    for position, entry in enumerate(entries, start=1):
        key_id, colon, encoded = entry.partition(":")
        if not colon or not _KEY_ID.fullmatch(key_id.strip()):
            raise ConfigurationError(
                f"{ENV}: entry {position} (counting from 1) is not `<key-id>:<key>`, where the id is 1 to 32 "
                f"letters, digits, '-' or '_'. {_MAKE_ONE}"
            )
        material = _b64decode(encoded.strip())
        if material is None:
            raise ConfigurationError(
                f"{ENV}: the key of entry {position} (id {key_id.strip()!r}) is not urlsafe base64. {_MAKE_ONE}"
            )
        if len(material) != KEY_BYTES:
            raise ConfigurationError(
                f"{ENV}: the key of entry {position} (id {key_id.strip()!r}) is {len(material)} bytes; a vault key "
                f"is {KEY_BYTES} random bytes. {_MAKE_ONE}"
            )
        keys.append(VaultKey(key_id.strip(), material))
    return tuple(keys)


class Vault:
    """Seals and opens credentials with one key ring: the first key seals, every key opens.

    `Vault(keys)` takes the text of `ASKBACK_VAULT_KEYS` or `VaultKey`s; `Vault.from_settings(settings)` reads the
    settings. Both refuse a missing or malformed ring with `ConfigurationError`."""

    def __init__(self, keys: str | Sequence[VaultKey]) -> None:
        ring = parse_keys(keys) if isinstance(keys, str) else tuple(keys)
        if not ring:
            raise _missing()
        seen: set[str] = set()
        for key in ring:
            if key.id in seen:
                raise ConfigurationError(
                    f"{ENV}: the key id {key.id!r} appears twice; each key needs its own id, or a sealed value could "
                    f"not say which key opens it. Give the newer key a new id with `askback vault new-key`."
                )
            seen.add(key.id)
        self._sealing_id = ring[0].id
        self._ids = tuple(key.id for key in ring)
        self._ciphers = {key.id: AESGCM(key.material) for key in ring}

    @classmethod
    def from_settings(cls, settings: Settings) -> Vault:
        if settings.vault_keys is None:
            raise _missing()
        return cls(settings.vault_keys.get_secret_value())

    @property
    def sealing_key_id(self) -> str:
        """The id of the key that seals."""
        return self._sealing_id

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The ids of every key that opens, the sealing key first."""
        return self._ids

    def __repr__(self) -> str:
        return f"Vault(key_ids={list(self._ids)!r})"

    def seal(self, account_id: str, credential: Mapping[str, Any]) -> str:
        """The credential as JSON, encrypted with the sealing key and bound to `account_id`."""
        plaintext = json.dumps(dict(credential), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        nonce = os.urandom(NONCE_BYTES)
        aad = _associated_data(self._sealing_id, account_id)
        ciphertext = self._ciphers[self._sealing_id].encrypt(nonce, plaintext.encode(), aad)
        return f"{VERSION}.{self._sealing_id}.{_b64encode(nonce + ciphertext)}"

    def open(self, account_id: str, sealed: str) -> dict[str, Any]:
        """The credential sealed for `account_id`, opened with whichever key of the ring sealed it."""
        key_id, blob = _split(sealed)
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise ConfigurationError(
                f"This credential was sealed with vault key {key_id!r}, which is not in {ENV} "
                f"(it holds {', '.join(repr(i) for i in self._ids)}). Put that key back in the list, after the "
                "sealing key, and remove it only once rotation has resealed every credential."
            )
        try:
            plaintext = cipher.decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], _associated_data(key_id, account_id))
        except InvalidTag:
            raise CredentialUnreadable(
                f"The sealed credential does not open for this account with vault key {key_id!r}: it was altered, it "
                f"belongs to another account, or the key with that id in {ENV} is not the one that sealed it."
            ) from None
        try:
            credential = json.loads(plaintext)
        except ValueError:
            credential = None  # `from None` below: a decode error would carry the plaintext
        if not isinstance(credential, dict):
            raise CredentialUnreadable("The sealed credential opened but does not hold a JSON object.") from None
        return credential

    def needs_rotation(self, sealed: str) -> bool:
        """True when `sealed` was sealed with a key other than the sealing key. Reads the key id only: it does not
        authenticate the value (`open` or `reseal` does)."""
        key_id, _ = _split(sealed)
        return key_id != self._sealing_id

    def reseal(self, account_id: str, sealed: str) -> str:
        """Rotation: open `sealed` with whichever key sealed it and seal it again with the sealing key (always a fresh
        value, even when it was already sealed with that key)."""
        return self.seal(account_id, self.open(account_id, sealed))


def _associated_data(key_id: str, account_id: str) -> bytes:
    # The key id cannot contain ":", so the account id (last, any text) is unambiguous.
    return f"askback.vault:{VERSION}:{key_id}:{account_id}".encode()


def _split(sealed: str) -> tuple[str, bytes]:
    parts = sealed.split(".")
    if len(parts) != 3 or parts[0] != VERSION:
        raise CredentialUnreadable(
            f"This is not a sealed credential in the `{VERSION}.<key-id>.<data>` format this version of the vault reads."
        )
    _, key_id, encoded = parts
    blob = None if "=" in encoded else _b64decode(encoded)
    if not _KEY_ID.fullmatch(key_id) or blob is None or len(blob) < NONCE_BYTES + TAG_BYTES:
        raise CredentialUnreadable(f"The sealed credential is malformed (not `{VERSION}.<key-id>.<data>`).")
    return key_id, blob


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _b64decode(text: str) -> bytes | None:
    """Strict unpadded (or padded) urlsafe base64: anything that does not encode back to the same text is refused,
    so no altered character (a stray symbol, unused low bits of the last one) can decode to the same bytes."""
    bare = text.rstrip("=")
    try:
        data = base64.urlsafe_b64decode(bare + "=" * (-len(bare) % 4))
    except (binascii.Error, ValueError):
        return None
    return data if _b64encode(data) == bare else None


def _missing() -> ConfigurationError:
    return ConfigurationError(
        f"{ENV} is not set: connected accounts need a vault key to encrypt credentials. {_MAKE_ONE}"
    )
