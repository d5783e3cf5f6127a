"""`askback accounts` and `askback connections` from the command line, on a real database file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from askback.accounts.repository import Accounts
from askback.accounts.status import Event
from askback.accounts.vault import Vault, new_key
from askback.db.migrate import all_components
from askback.store import Store
from infra import run_askback

pytestmark = [pytest.mark.http, pytest.mark.anyio]

KEY = new_key("k1")
SECRET = "sk-canary-0d9f3a"
CONNECTIONS = """
[connections.openai]
kind = "api_key"
label = "OpenAI API key"
header = "Authorization"
scheme = "Bearer"

[connections.gmail]
preset = "google"
client_id = "123.apps.googleusercontent.com"
client_secret_env = "ASKBACK_TEST_GMAIL_SECRET"
"""


async def seeded(tmp_path: Path) -> tuple[dict[str, str], str, str]:
    url = f"sqlite:///{tmp_path / 'askback.db'}"
    store = await Store.open(url, migrate=True, components=all_components())
    try:
        accounts = Accounts(store.database)
        key_account, _ = await accounts.begin_connect("alice", "openai", flow_id="f1", now=1_000.0, ttl=600)
        sealed = Vault(KEY).seal(key_account, {"api_key": SECRET})
        await accounts.change(key_account, Event.CONNECTED, now=1_001.0, credential=sealed)
        pending, _ = await accounts.begin_connect("bob", "gmail", flow_id="f2", now=1_002.0, ttl=600)
    finally:
        await store.close()
    (tmp_path / "connections.toml").write_text(CONNECTIONS)
    env = {
        "ASKBACK_DATABASE_URL": url,
        "ASKBACK_VAULT_KEYS": KEY,
        "ASKBACK_CONNECTIONS_FILE": str(tmp_path / "connections.toml"),
        "ASKBACK_TEST_GMAIL_SECRET": "gmail-client-secret",
    }
    return env, key_account, pending


async def test_accounts_are_listed_and_shown_without_their_credentials(tmp_path: Path) -> None:
    env, key_account, pending = await seeded(tmp_path)
    listed = run_askback("accounts", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["principal"], r["connection"], r["status"]) for r in rows] == [
        ("alice", "openai", "ACTIVE"),
        ("bob", "gmail", "PENDING"),
    ]
    only_bob = json.loads(run_askback("accounts", "list", "--principal", "bob", "--json", env=env).stdout)
    assert [r["id"] for r in only_bob] == [pending]
    shown = run_askback("accounts", "show", key_account, env=env)
    assert shown.returncode == 0 and "status ACTIVE" in shown.stdout
    assert "start: - -> PENDING" in shown.stdout and "connected: PENDING -> ACTIVE" in shown.stdout
    for out in (listed.stdout, shown.stdout, run_askback("accounts", "list", env=env).stdout):
        assert SECRET not in out


async def test_revoking_an_account_deletes_its_credential_and_says_revoked(tmp_path: Path) -> None:
    env, key_account, _ = await seeded(tmp_path)
    revoked = run_askback("accounts", "revoke", key_account, env=env)
    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stdout.strip() == f"{key_account}: REVOKED"
    shown = json.loads(run_askback("accounts", "show", key_account, "--json", env=env).stdout)
    assert shown["status"] == "REVOKED" and shown["events"][-1]["event"] == "revoked"
    store = await Store.open(env["ASKBACK_DATABASE_URL"], components=all_components())
    try:
        assert await Accounts(store.database).sealed_credential(key_account) is None
    finally:
        await store.close()


async def test_an_unknown_account_is_an_error_naming_the_list_command(tmp_path: Path) -> None:
    env, _, _ = await seeded(tmp_path)
    missing = run_askback("accounts", "show", "acc_nope", env=env)
    assert missing.returncode == 2 and "askback accounts list" in missing.stderr


async def test_connections_are_listed_without_secrets(tmp_path: Path) -> None:
    env, _, _ = await seeded(tmp_path)
    listed = run_askback("connections", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert rows["openai"]["kind"] == "api_key" and rows["gmail"]["kind"] == "oauth"
    assert rows["gmail"]["authorize_url"].startswith("https://accounts.google.com/")
    assert "gmail-client-secret" not in listed.stdout
