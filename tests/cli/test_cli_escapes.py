"""Names in the store are data from outside: `askback audit` and `askback accounts list` print a principal or a
label full of escape sequences, line breaks and bidirectional overrides as escapes, never as what the terminal would
obey. The rows are written through the store directly, past the checks that refuse such names at the door, as rows
written before those checks (or by someone with write access) would be; the commands run as real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from askback.accounts.repository import Accounts
from askback.audit import AuditEvent
from askback.db.migrate import all_components
from askback.store import Store
from infra import ROOT

pytestmark = pytest.mark.http

OSC_52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"  # writes the person's clipboard
HOSTILE = f"mallory{OSC_52}\r\nadmin\u202egpj"


def askback(*args: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}
    done = subprocess.run(
        [sys.executable, "-m", "askback", *args],
        env={**clean, "COLUMNS": "400"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def assert_escaped(output: str) -> None:
    assert "\x1b" not in output and "\x07" not in output and "\u202e" not in output and "\r" not in output
    assert "\\x1b]52;c;ZWNobyBwd25lZA==\\x07" in output and "\\u202e" in output


def test_askback_audit_prints_a_hostile_principal_key_and_scope_as_escapes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'askback.db'}"
    event = AuditEvent(
        event="answered",
        at=1_800_000_000.0,
        tool="deploy",
        principal=HOSTILE,
        keys=(f"confirm{OSC_52}",),
        action="accept",
        scopes=(f"read\u202e{OSC_52}",),
    )

    async def write() -> None:
        store = await Store.open(url, migrate=True)
        try:
            await store.audit_log.add_many([event])
        finally:
            await store.close()

    anyio.run(write)
    for wide in ([], ["--wide"]):
        output = askback("audit", "--database", url, *wide)
        assert_escaped(output)
        assert "\\r\\n" in output.replace("\n", "")  # the line break is shown, not obeyed


def test_askback_accounts_list_prints_a_hostile_label_and_principal_as_escapes_on_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'askback.db'}"

    async def write() -> None:
        store = await Store.open(url, components=all_components(), migrate=True)
        try:
            await Accounts(store.database).begin_connect(
                HOSTILE, "gmail", label=f"work\nfake-row  ACTIVE{OSC_52}", flow_id=None, now=1_800_000_000.0, ttl=600
            )
        finally:
            await store.close()

    anyio.run(write)
    output = askback("accounts", "list", "--database", url)
    assert_escaped(output)
    assert len(output.splitlines()) == 1 and "[work\\nfake-row  ACTIVE" in output
