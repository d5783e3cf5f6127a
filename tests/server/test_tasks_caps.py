"""The cap on the tasks one principal holds that have not ended (`ASKBACK_TASKS_PER_PRINCIPAL`), over real HTTP on
loopback, on SQLite and PostgreSQL: one task more is refused with -32602 naming the limit, another principal is not
affected, a task that ended no longer counts, and two instances on one database creating tasks for one principal at
the same moment never pass the cap between them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from tests.server._tasks import call, rpc, serving_tasks, until_status

from askback.store import Store

pytestmark = [pytest.mark.http, pytest.mark.anyio]

CAP = 2


@pytest.fixture
async def database(any_database: str) -> str:
    """A new SQLite file or PostgreSQL database, migrated (two instances then share it)."""
    await (await Store.open(any_database, migrate=True)).close()
    return any_database


@pytest.fixture
async def url(database: str) -> AsyncIterator[str]:
    async with serving_tasks(database, tasks_per_principal=CAP) as found:
        yield found


async def create(http: httpx.AsyncClient, url: str, log: Path, token: str) -> dict[str, Any]:
    return await call(http, url, "confirm_delete", {"filename": "a.txt", "log": str(log)}, token=token)


async def test_one_task_past_the_cap_is_refused_naming_the_limit_and_another_principal_is_not_affected(
    http: httpx.AsyncClient, url: str, tmp_path: Path
) -> None:
    log = tmp_path / "effects"
    held = [(await create(http, url, log, "demo-alice"))["result"]["taskId"] for _ in range(CAP)]
    refused = await create(http, url, log, "demo-alice")
    assert "result" not in refused, refused
    error = refused["error"]
    assert error["code"] == -32602 and error["data"] == {"limit": CAP}
    assert f"you already hold {CAP} tasks that have not ended" in error["message"]
    assert "tasks/cancel" in error["message"]

    other = await create(http, url, log, "demo-bob")
    assert other["result"]["resultType"] == "task", other

    # A task that ended (cancelled, completed) no longer counts.
    await until_status(http, url, held[0], "input_required")
    await rpc(http, url, "tasks/cancel", {"taskId": held[0]})
    assert (await until_status(http, url, held[0], "cancelled"))["status"] == "cancelled"
    again = await create(http, url, log, "demo-alice")
    assert again["result"]["resultType"] == "task", again
    assert "error" in await create(http, url, log, "demo-alice")


async def test_two_instances_creating_tasks_for_one_principal_at_once_never_pass_the_cap(
    http: httpx.AsyncClient, database: str, tmp_path: Path
) -> None:
    log = tmp_path / "effects"
    replies: list[dict[str, Any]] = []
    async with (
        serving_tasks(database, tasks_per_principal=CAP) as first,
        serving_tasks(database, tasks_per_principal=CAP) as second,
    ):

        async def one(url: str) -> None:
            replies.append(await create(http, url, log, "demo-carol"))

        async with anyio.create_task_group() as group:
            for n in range(6 * CAP):
                group.start_soon(one, (first, second)[n % 2])
        made = [r for r in replies if "result" in r]
        assert len(made) == CAP, replies
        assert all(r["error"]["data"] == {"limit": CAP} for r in replies if "error" in r)
        for reply in made:
            await until_status(http, first, reply["result"]["taskId"], "input_required", token="demo-carol")
