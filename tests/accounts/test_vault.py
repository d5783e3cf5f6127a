"""The vault seals credentials at rest: round trips, binding to the account, tampering, rotation, and a key ring
whose errors name what to set without ever showing a key."""

from __future__ import annotations

import base64
import re
import string

import pytest

from askback import ConfigurationError, load_settings
from askback.accounts.vault import CredentialUnreadable, Vault, VaultKey, new_key, parse_keys

CREDENTIAL = {"access_token": "at-123", "refresh_token": "rt-456", "expires_at": 1_800_000_000, "scopes": ["read"]}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def payload(sealed: str) -> bytes:
    """The bytes of `v1.<key-id>.<payload>`: nonce, ciphertext, tag."""
    return base64.urlsafe_b64decode(sealed.split(".")[2] + "==")


def key_text(value: str) -> str:
    """The key part of a ring entry `<id>:<key>`."""
    return value.partition(":")[2]


def test_a_sealed_credential_opens_to_what_was_sealed() -> None:
    vault = Vault(new_key())
    sealed = vault.seal("acct-1", CREDENTIAL)
    assert vault.open("acct-1", sealed) == CREDENTIAL


def test_sealed_text_is_versioned_and_names_the_sealing_key() -> None:
    vault = Vault(new_key("k2026") + "," + new_key("k2025"))
    assert vault.seal("acct-1", CREDENTIAL).startswith("v1.k2026.")


def test_non_ascii_text_survives_a_round_trip() -> None:
    vault = Vault(new_key())
    credential = {"api_key": "clé-🔑", "note": "naïve"}
    assert vault.open("acct-1", vault.seal("acct-1", credential)) == credential


def test_sealing_the_same_credential_twice_gives_different_text() -> None:
    vault = Vault(new_key())
    first, second = vault.seal("acct-1", CREDENTIAL), vault.seal("acct-1", CREDENTIAL)
    assert first != second
    assert payload(first)[:12] != payload(second)[:12]  # the nonce


def test_a_credential_sealed_for_one_account_does_not_open_for_another() -> None:
    vault = Vault(new_key())
    sealed = vault.seal("acct-1", CREDENTIAL)
    with pytest.raises(CredentialUnreadable, match="another account"):
        vault.open("acct-2", sealed)


def test_changing_any_character_of_the_sealed_text_makes_it_unreadable() -> None:
    vault = Vault(new_key("main"))
    sealed = vault.seal("acct-1", CREDENTIAL)
    header = len("v1.main.")
    for i, char in enumerate(sealed):
        for replacement in {"A" if char != "A" else "B", "=", "."} - {char}:
            tampered = sealed[:i] + replacement + sealed[i + 1 :]
            # A changed key id names a key the ring does not hold: that is a configuration error, not a bad value.
            expected = (CredentialUnreadable, ConfigurationError) if 3 <= i < header - 1 else CredentialUnreadable
            with pytest.raises(expected):
                vault.open("acct-1", tampered)


def test_flipping_any_bit_of_the_payload_makes_it_unreadable() -> None:
    vault = Vault(new_key("main"))
    prefix, _, encoded = vault.seal("acct-1", CREDENTIAL).rpartition(".")
    blob = base64.urlsafe_b64decode(encoded + "==")
    for i in range(len(blob)):
        altered = blob[:i] + bytes([blob[i] ^ 0x01]) + blob[i + 1 :]
        with pytest.raises(CredentialUnreadable):
            vault.open("acct-1", f"{prefix}.{b64(altered)}")


def test_truncated_extended_or_foreign_text_is_unreadable() -> None:
    vault = Vault(new_key("main"))
    sealed = vault.seal("acct-1", CREDENTIAL)
    for bad in [sealed[:-1], sealed + "A", sealed[:20], "", "v1.main.", "v2" + sealed[2:], "plain text", "v1.main.@@"]:
        with pytest.raises(CredentialUnreadable):
            vault.open("acct-1", bad)


def test_rotation_reseals_with_the_new_key_so_the_old_one_can_be_removed() -> None:
    a, b = new_key("a"), new_key("b")
    sealed_with_a = Vault(a).seal("acct-1", CREDENTIAL)

    rotating = Vault(f"{b},{a}")
    assert rotating.open("acct-1", sealed_with_a) == CREDENTIAL
    assert rotating.needs_rotation(sealed_with_a)

    sealed_with_b = rotating.reseal("acct-1", sealed_with_a)
    assert sealed_with_b.startswith("v1.b.")
    assert not rotating.needs_rotation(sealed_with_b)
    assert Vault(b).open("acct-1", sealed_with_b) == CREDENTIAL
    with pytest.raises(ConfigurationError, match="ASKBACK_VAULT_KEYS") as refused:
        Vault(a).open("acct-1", sealed_with_b)
    assert "'b'" in str(refused.value)


def test_a_value_sealed_with_the_sealing_key_needs_no_rotation() -> None:
    vault = Vault(new_key("b") + "," + new_key("a"))
    assert not vault.needs_rotation(vault.seal("acct-1", CREDENTIAL))


def test_a_reseal_keeps_the_binding_to_the_account() -> None:
    a, b = new_key("a"), new_key("b")
    resealed = Vault(f"{b},{a}").reseal("acct-1", Vault(a).seal("acct-1", CREDENTIAL))
    with pytest.raises(CredentialUnreadable):
        Vault(b).open("acct-2", resealed)


def test_a_key_with_the_right_id_but_other_bytes_fails_clearly() -> None:
    sealed = Vault(new_key("main")).seal("acct-1", CREDENTIAL)
    other = new_key("main")
    with pytest.raises(CredentialUnreadable, match="ASKBACK_VAULT_KEYS") as refused:
        Vault(other).open("acct-1", sealed)
    assert key_text(other) not in str(refused.value)


def test_a_key_id_missing_from_the_ring_is_a_configuration_error_naming_it() -> None:
    sealed = Vault(new_key("gone")).seal("acct-1", CREDENTIAL)
    ring = new_key("current")
    with pytest.raises(ConfigurationError, match=r"'gone'.*ASKBACK_VAULT_KEYS") as refused:
        Vault(ring).open("acct-1", sealed)
    assert key_text(ring) not in str(refused.value)


@pytest.mark.parametrize("ring", [None, "", "  ", " , ,"])
def test_a_missing_ring_is_a_configuration_error_saying_what_to_set(ring: str | None) -> None:
    with pytest.raises(ConfigurationError, match=r"ASKBACK_VAULT_KEYS is not set.*askback vault new-key"):
        Vault.from_settings(load_settings(vault_keys=ring))


def test_the_ring_is_read_from_the_settings() -> None:
    a, b = new_key("a"), new_key("b")
    vault = Vault.from_settings(load_settings(vault_keys=f"{b}, {a}"))
    assert vault.key_ids == ("b", "a")
    assert vault.sealing_key_id == "b"


SHORT = "s:" + b64(b"sixteen-byte-key")
LONG = "l:" + b64(b"x" * 48)
PADDED_SHORT = "p:" + base64.urlsafe_b64encode(b"k" * 31).decode()


@pytest.mark.parametrize(
    ("ring", "says"),
    [
        (SHORT, "16 bytes"),
        (LONG, "48 bytes"),
        (PADDED_SHORT, "31 bytes"),
        (b64(b"k" * 32), "entry 1 .*is not `<key-id>:<key>`"),
        (new_key() + ",bad id:" + b64(b"k" * 32), "entry 2 .*is not `<key-id>:<key>`"),
        ("x:not base64!!", "not urlsafe base64"),
        ("x:" + b64(b"k" * 32) + "+", "not urlsafe base64"),
        ("a.b:" + b64(b"k" * 32), "entry 1"),
    ],
)
def test_a_malformed_ring_is_a_configuration_error_that_does_not_echo_the_key(ring: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match="ASKBACK_VAULT_KEYS") as refused:
        Vault(ring)
    message = str(refused.value)
    assert re.search(says, message), message
    for entry in ring.split(","):
        secret = entry.partition(":")[2] or entry
        assert secret not in message


def test_two_keys_with_the_same_id_are_refused_without_echoing_either() -> None:
    first, second = new_key("same"), new_key("same")
    with pytest.raises(ConfigurationError, match=r"ASKBACK_VAULT_KEYS.*'same' appears twice") as refused:
        Vault(f"{first},{second}")
    assert key_text(first) not in str(refused.value)
    assert key_text(second) not in str(refused.value)


def test_a_key_built_in_code_is_checked_like_one_from_the_environment() -> None:
    with pytest.raises(ConfigurationError, match="ASKBACK_VAULT_KEYS"):
        VaultKey("k", b"short")
    with pytest.raises(ConfigurationError, match="ASKBACK_VAULT_KEYS"):
        VaultKey("no:colons", b"k" * 32)
    with pytest.raises(ConfigurationError, match="ASKBACK_VAULT_KEYS"):
        Vault([])


def test_a_ring_of_keys_built_in_code_seals_and_opens() -> None:
    vault = Vault([VaultKey("k1", b"\x01" * 32), VaultKey("k0", b"\x00" * 32)])
    assert vault.open("acct-1", vault.seal("acct-1", CREDENTIAL)) == CREDENTIAL
    assert vault.sealing_key_id == "k1"


def test_new_key_makes_a_fresh_32_byte_key_under_a_fresh_id() -> None:
    first, second = parse_keys(new_key())[0], parse_keys(new_key())[0]
    assert len(first.material) == len(second.material) == 32
    assert first.material != second.material
    assert first.id != second.id
    assert parse_keys(new_key("2026-01"))[0].id == "2026-01"


def test_a_padded_key_is_accepted() -> None:
    material = bytes(range(32))
    (key,) = parse_keys("p:" + base64.urlsafe_b64encode(material).decode())
    assert key.material == material


def test_neither_a_vault_nor_a_key_shows_key_material() -> None:
    entry = new_key("shown-id")
    vault = Vault(entry)
    (key,) = parse_keys(entry)
    for text in (repr(vault), str(vault), repr(key), str(key)):
        assert "shown-id" in text
        assert key_text(entry) not in text
        assert repr(key.material) not in text
        assert key.material.hex() not in text


def test_the_plaintext_of_a_credential_never_appears_in_the_sealed_text() -> None:
    canary = "CANARY-7f3a9c-do-not-leak"
    vault = Vault(new_key())
    sealed = vault.seal("acct-1", {"access_token": canary})
    assert canary not in sealed
    assert canary.encode() not in payload(sealed)
    # base64 of the canary at each of the three alignments it could take inside a larger encoded text
    for shift in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(b"x" * shift + canary.encode()).decode().rstrip("=")[4:-4]
            assert encoded not in sealed


def test_an_unreadable_credential_says_nothing_about_its_content_or_key() -> None:
    entry = new_key("k")
    vault = Vault(entry)
    sealed = vault.seal("acct-1", {"access_token": "CANARY-secret"})
    with pytest.raises(CredentialUnreadable) as refused:
        vault.open("acct-2", sealed)
    message = str(refused.value)
    assert "CANARY" not in message
    assert key_text(entry) not in message
    assert refused.value.__cause__ is None and refused.value.__suppress_context__


def test_key_ids_use_only_characters_that_cannot_break_the_formats() -> None:
    for bad in ["a.b", "a,b", "a:b", "a b", "", "x" * 33, "é"]:
        with pytest.raises(ConfigurationError):
            new_key(bad)
    ok = string.ascii_letters[:20] + "-_09"
    assert parse_keys(new_key(ok))[0].id == ok
