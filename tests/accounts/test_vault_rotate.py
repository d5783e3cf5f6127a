"""`askback vault rotate` re-encrypts every stored credential, after which the old key can go."""

from __future__ import annotations

from pathlib import Path

import pytest

from askback.accounts.repository import Accounts
from askback.accounts.status import Event
from askback.accounts.vault import CredentialUnreadable, Vault, new_key
from askback.db.migrate import all_components
from askback.errors import ConfigurationError
from askback.store import Store
from infra import run_askback

pytestmark = [pytest.mark.http, pytest.mark.anyio]

CANARY = "canary-token-5f1c9e0d"
KEY_A, KEY_B = new_key("a"), new_key("b")


async def connected_accounts(url: str, vault: Vault, count: int) -> list[str]:
    store = await Store.open(url, migrate=True, components=all_components())
    accounts, ids = Accounts(store.database), []
    try:
        for n in range(count):
            account_id, _ = await accounts.begin_connect(f"user{n}", "gmail", flow_id=None, now=1.0, ttl=600)
            sealed = vault.seal(account_id, {"access_token": f"{CANARY}-{n}"})
            await accounts.change(account_id, Event.CONNECTED, now=2.0, credential=sealed)
            ids.append(account_id)
    finally:
        await store.close()
    return ids


async def read_all(url: str, vault: Vault, ids: list[str]) -> list[dict[str, object]]:
    store = await Store.open(url, components=all_components())
    try:
        accounts = Accounts(store.database)
        return [vault.open(i, sealed) for i in ids if (sealed := await accounts.sealed_credential(i)) is not None]
    finally:
        await store.close()


async def test_rotation_reencrypts_every_credential_so_the_old_key_can_be_removed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'askback.db'}"
    ids = await connected_accounts(url, Vault(KEY_A), 5)
    assert CANARY.encode() not in (tmp_path / "askback.db").read_bytes()

    done = run_askback("vault", "rotate", env={"ASKBACK_VAULT_KEYS": f"{KEY_B},{KEY_A}", "ASKBACK_DATABASE_URL": url})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "re-encrypted 5 of 5 credential(s) with key b"

    opened = await read_all(url, Vault(KEY_B), ids)  # the new key alone opens every credential
    assert [c["access_token"] for c in opened] == [f"{CANARY}-{n}" for n in range(5)]
    with pytest.raises(
        ConfigurationError, match="vault key 'b', which is not in ASKBACK_VAULT_KEYS"
    ):  # and the old key alone no longer does
        await read_all(url, Vault(KEY_A), ids)

    again = run_askback("vault", "rotate", env={"ASKBACK_VAULT_KEYS": KEY_B, "ASKBACK_DATABASE_URL": url})
    assert again.stdout.strip() == "re-encrypted 0 of 5 credential(s) with key b"


async def test_rotation_with_keys_that_cannot_open_the_vault_fails_and_changes_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'askback.db'}"
    ids = await connected_accounts(url, Vault(KEY_A), 3)
    before = await read_all(url, Vault(KEY_A), ids)
    impostor = new_key("a")  # the same id, other key bytes

    for keys, message in ((new_key("c"), "ASKBACK_VAULT_KEYS"), (impostor, "does not open for this account")):
        failed = run_askback("vault", "rotate", env={"ASKBACK_VAULT_KEYS": keys, "ASKBACK_DATABASE_URL": url})
        assert failed.returncode == 2 and failed.stderr.startswith("error: ") and message in failed.stderr, (
            failed.stderr
        )
        assert KEY_A.split(":")[1] not in failed.stderr and keys.split(":")[1] not in failed.stderr
    assert await read_all(url, Vault(KEY_A), ids) == before
    with pytest.raises(CredentialUnreadable):
        await read_all(url, Vault(impostor), ids)


def test_rotation_without_a_key_ring_names_the_setting() -> None:
    failed = run_askback("vault", "rotate", env={"ASKBACK_DATABASE_URL": "sqlite:///nowhere.db"})
    assert failed.returncode == 2 and "ASKBACK_VAULT_KEYS" in failed.stderr
