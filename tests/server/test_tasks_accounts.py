"""A task waiting only for a connected account goes on by itself once exactly that account connects, end to end:
`askback serve tests.fixtures.task_accounts_server:server` with two worker processes (two instances on one SQLite
database), raw 2026-07-28 JSON-RPC with the tasks extension declared, and accounts connected in the server's own
store, as the hosted pages' callback connects them. Nobody sends `tasks/update`."""

from __future__ import annotations

import errno
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.infra import ROOT, wait_until
from tests.server._tasks import call, get, rpc, until_status

from askback.accounts.repository import Accounts
from askback.accounts.status import Event
from askback.accounts.vault import new_key
from askback.core.questions import connect_key
from askback.db.migrate import all_components
from askback.store import Store
from askback.testing import free_port, serving

pytestmark = [pytest.mark.anyio, pytest.mark.http]

SERVER = "tests.fixtures.task_accounts_server:server"


@dataclass
class Setting:
    url: str
    database: str
    runs: Path

    def ran(self, tool: str, label: str) -> int:
        """How many runs of `tool`'s handler for `label` so far, on either instance."""
        found = self.runs.read_text().splitlines() if self.runs.exists() else []
        return found.count(f"{tool} {label}")


@pytest.fixture
def setting(tmp_path: Path) -> Iterator[Setting]:
    """Two instances (two worker processes) on one SQLite database."""
    yield from _serve(tmp_path, workers=2)


@pytest.fixture
def one_instance(tmp_path: Path) -> Iterator[Setting]:
    """One instance: a task it resumed proves its one reader of the log has passed that event."""
    yield from _serve(tmp_path, workers=1)


def _serve(tmp_path: Path, *, workers: int) -> Iterator[Setting]:
    port = free_port()
    database = f"sqlite:///{tmp_path / 'server.db'}"
    env = {
        "ASKBACK_STATE_KEYS": secrets.token_urlsafe(48),
        "ASKBACK_DATABASE_URL": database,
        "ASKBACK_VAULT_KEYS": new_key(),
        "ASKBACK_TASK_POLL_INTERVAL": "250",
        "TASK_ACCOUNTS_BASE_URL": f"http://127.0.0.1:{port}",
        "TASK_ACCOUNTS_RUNS": str(tmp_path / "runs.txt"),
    }
    with serving(SERVER, port=port, workers=workers, env=env, cwd=str(ROOT)) as url:
        yield Setting(url, database, tmp_path / "runs.txt")


@pytest.fixture
async def http() -> Any:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


async def waiting_task(
    http: httpx.AsyncClient, setting: Setting, who: str, label: str, *, tool: str = "read_mail"
) -> dict[str, Any]:
    """A new task of `tool` for `who`'s account `label`, once it waits for answers (its connect link among them)."""
    created = await call(http, setting.url, tool, {"label": label}, token=f"demo-{who}")
    assert created["result"]["resultType"] == "task", created
    task = await until_status(http, setting.url, created["result"]["taskId"], "input_required", token=f"demo-{who}")
    assert any(entry["key"] == connect_key("heldmail", label) for entry in _outstanding(task)), task
    return task


def _outstanding(task: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": wire.rsplit(".", 1)[0], **request} for wire, request in task["inputRequests"].items()]


async def connect(setting: Setting, who: str, label: str, connection: str = "heldmail") -> None:
    """`who`'s `connection` account `label` becomes ACTIVE in the server's store, as the hosted pages' callback makes
    it (the change and its `account.connected` event in one transaction)."""
    parts = tuple(c for c in all_components() if c.name in ("server", "accounts"))
    store = await Store.open(setting.database, migrate=False, components=parts)
    try:
        accounts = Accounts(store.database)
        [account] = [a for a in await accounts.of(who, connection) if a.label == label]
        await accounts.change(account.id, Event.CONNECTED, now=time.time(), reason="granted", credential="sealed")
    finally:
        await store.close()


async def still_waiting(http: httpx.AsyncClient, setting: Setting, task: dict[str, Any], who: str) -> dict[str, Any]:
    now = (await get(http, setting.url, task["taskId"], token=f"demo-{who}"))["result"]
    assert now["status"] == "input_required", now
    assert now["inputRequests"].keys() == task["inputRequests"].keys()
    return now


async def test_a_task_waiting_for_alices_work_account_completes_by_itself_once_it_connects(
    http: httpx.AsyncClient, setting: Setting
) -> None:
    task = await waiting_task(http, setting, "alice", "work")
    assert task["statusMessage"] == "Waiting for your answer."

    await connect(setting, "alice", "work")
    done = await until_status(http, setting.url, task["taskId"], "completed", "failed", token="demo-alice")

    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"] == "Read the work account."
    # Rerun once, by one of the two instances: both read the event, one took the task.
    assert setting.ran("read_mail", "work") == 2


async def test_a_task_waiting_for_alices_default_account_stays_waiting_when_her_work_account_connects(
    http: httpx.AsyncClient, setting: Setting
) -> None:
    default = await waiting_task(http, setting, "alice", "")
    work = await waiting_task(http, setting, "alice", "work")

    await connect(setting, "alice", "work")
    await until_status(http, setting.url, work["taskId"], "completed", token="demo-alice")

    await still_waiting(http, setting, default, "alice")
    assert setting.ran("read_mail", "") == 1


async def test_bobs_task_waiting_for_his_work_account_stays_waiting_when_alices_work_account_connects(
    http: httpx.AsyncClient, setting: Setting
) -> None:
    bobs = await waiting_task(http, setting, "bob", "work")
    alices = await waiting_task(http, setting, "alice", "work")

    await connect(setting, "alice", "work")
    await until_status(http, setting.url, alices["taskId"], "completed", token="demo-alice")

    await still_waiting(http, setting, bobs, "bob")
    assert setting.ran("read_mail", "work") == 3  # alice's twice, bob's once


async def test_a_task_waiting_also_for_another_answer_stays_waiting_when_its_account_connects(
    http: httpx.AsyncClient, setting: Setting
) -> None:
    both = await waiting_task(http, setting, "alice", "work", tool="read_mail_if_ok")
    assert sorted(entry["key"] for entry in _outstanding(both)) == [connect_key("heldmail", "work"), "ok"]
    only_link = await waiting_task(http, setting, "alice", "work")

    await connect(setting, "alice", "work")
    await until_status(http, setting.url, only_link["taskId"], "completed", token="demo-alice")

    await still_waiting(http, setting, both, "alice")
    assert setting.ran("read_mail_if_ok", "work") == 1


def release(gate: Path) -> None:
    """Open the gate the handler waits at (once it waits there)."""

    def opened() -> bool:
        try:
            fd = os.open(gate, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # nobody reads the pipe yet
                return False
            raise
        os.write(fd, b"go")
        os.close(fd)
        return True

    wait_until(opened, what=f"the handler at {gate.name}")


async def test_an_account_connected_while_the_handler_still_runs_lets_the_task_go_on_by_itself(
    http: httpx.AsyncClient, one_instance: Setting
) -> None:
    gate = Path(f"{one_instance.runs}.work.gate")
    os.mkfifo(gate)
    created = await call(http, one_instance.url, "read_mail_gated", {"label": "work"}, token="demo-alice")
    task_id = created["result"]["taskId"]
    # The handler found the account not connected and has not asked for it yet: the task is still `working`.
    wait_until(lambda: one_instance.ran("read_mail_gated", "work waits") == 1, what="the handler at its gate")
    witness = await waiting_task(http, one_instance, "alice", "work")

    await connect(one_instance, "alice", "work")
    # The one reader of the log has handled the event: it resumed the task waiting for it then.
    await until_status(http, one_instance.url, witness["taskId"], "completed", token="demo-alice")
    release(gate)
    done = await until_status(http, one_instance.url, task_id, "completed", "failed", token="demo-alice")

    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"] == "Read the work account."
    assert one_instance.ran("read_mail_gated", "work") == 2


async def test_a_task_waiting_for_two_accounts_goes_on_once_both_connect_and_not_after_only_one(
    http: httpx.AsyncClient, setting: Setting
) -> None:
    created = await call(http, setting.url, "read_both", {"label": "work"}, token="demo-alice")
    both = await until_status(http, setting.url, created["result"]["taskId"], "input_required", token="demo-alice")
    links = sorted(connect_key(connection, "work") for connection in ("heldmail", "othermail"))
    assert sorted(entry["key"] for entry in _outstanding(both)) == links
    witness = await waiting_task(http, setting, "alice", "work")

    await connect(setting, "alice", "work")
    await until_status(http, setting.url, witness["taskId"], "completed", token="demo-alice")
    await still_waiting(http, setting, both, "alice")

    await connect(setting, "alice", "work", connection="othermail")
    done = await until_status(http, setting.url, both["taskId"], "completed", "failed", token="demo-alice")

    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"] == "Read both work accounts."
    assert setting.ran("read_both", "work") == 2


async def test_a_task_left_waiting_only_for_an_account_that_connected_meanwhile_goes_on_once_its_other_answer_comes(
    http: httpx.AsyncClient, one_instance: Setting
) -> None:
    both = await waiting_task(http, one_instance, "alice", "work", tool="read_mail_if_ok")
    witness = await waiting_task(http, one_instance, "alice", "work")
    await connect(one_instance, "alice", "work")
    await until_status(http, one_instance.url, witness["taskId"], "completed", token="demo-alice")
    await still_waiting(http, one_instance, both, "alice")

    (ok,) = [wire for wire in both["inputRequests"] if wire.startswith("ok.")]
    answer = {ok: {"action": "accept", "content": {"ok": True}}}
    await rpc(http, one_instance.url, "tasks/update", {"taskId": both["taskId"], "inputResponses": answer})
    done = await until_status(http, one_instance.url, both["taskId"], "completed", "failed", token="demo-alice")

    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"] == "Read the work account."
    assert one_instance.ran("read_mail_if_ok", "work") == 2
