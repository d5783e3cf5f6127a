"""The tasks tests' server and wire: the tasks fixture server on loopback, raw 2026-07-28 JSON-RPC over HTTP
(`tools/call` with or without the tasks extension declared, the `tasks/*` methods with their `Mcp-Name`), and a
bounded wait for a task's status."""

from __future__ import annotations

import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
from tests.fixtures.tasks_server import build
from tests.infra import serving_asgi

from askback import load_settings
from askback.clock import FrozenClock
from askback.server.http import build_app

TASKS = "io.modelcontextprotocol/tasks"


@asynccontextmanager
async def serving_tasks(
    database_url: str,
    clock: FrozenClock | None = None,
    *,
    wrap: Callable[[Any], Any] = lambda asgi: asgi,
    **settings: Any,
) -> AsyncIterator[str]:
    """The tasks fixture server (tests/fixtures/tasks_server.py) on `database_url` and `clock`, its ASGI app passed
    through `wrap`, under uvicorn on loopback, with the development sign-in, a 250 ms poll interval and `settings`
    on top; yields its /mcp URL."""
    loaded = load_settings(
        **{
            "database_url": database_url,
            "state_keys": secrets.token_urlsafe(32),
            "demo_auth": True,
            "task_poll_interval": 250,
            **settings,
        }
    )
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        async with serving_asgi(wrap(build_app(build(loaded, clock))), listener) as base:
            yield f"{base}/mcp"


async def rpc(
    http: httpx.AsyncClient,
    url: str,
    method: str,
    params: dict[str, Any],
    *,
    token: str = "demo-alice",
    tasks: bool = True,
    name: str | None = None,
) -> dict[str, Any]:
    """One request; the JSON-RPC message that answers it. `name`: the `Mcp-Name` header (by default the tool's name
    or the task id)."""
    capabilities: dict[str, Any] = {"elicitation": {"form": {}, "url": {}}}
    if tasks:
        capabilities["extensions"] = {TASKS: {}}
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }
    header = name if name is not None else params.get("name", params.get("taskId"))
    headers = {
        "Authorization": f"Bearer {token}",
        "MCP-Protocol-Version": "2026-07-28",
        "Accept": "application/json, text/event-stream",
        "Mcp-Method": method,
    }
    if header is not None:
        headers["Mcp-Name"] = str(header)
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
    reply = await http.post(url, json=body, headers=headers)
    message: dict[str, Any] = reply.json()
    return message


async def call(http: httpx.AsyncClient, url: str, tool: str, arguments: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return await rpc(http, url, "tools/call", {"name": tool, "arguments": arguments}, **kw)


async def get(http: httpx.AsyncClient, url: str, task_id: str, **kw: Any) -> dict[str, Any]:
    return await rpc(http, url, "tasks/get", {"taskId": task_id}, **kw)


async def until_status(
    http: httpx.AsyncClient, url: str, task_id: str, *statuses: str, token: str = "demo-alice", within: float = 20
) -> dict[str, Any]:
    """`tasks/get` until the task is in one of `statuses`; every answer on the way must be the task."""
    return await until(http, url, task_id, lambda task: task["status"] in statuses, token=token, within=within)


async def until(
    http: httpx.AsyncClient,
    url: str,
    task_id: str,
    done: Callable[[dict[str, Any]], bool],
    *,
    token: str = "demo-alice",
    within: float = 20,
) -> dict[str, Any]:
    """`tasks/get` until `done(task)`, as a client polls a task (the protocol has no push here), failing past
    `within` seconds; every answer on the way must be the task."""
    deadline = time.monotonic() + within
    while True:
        reply = await get(http, url, task_id, token=token)
        assert "result" in reply, reply
        if done(reply["result"]):
            result: dict[str, Any] = reply["result"]
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"task not as wanted within {within} s: {reply}")
        await anyio.sleep(0.02)


def accept(**content: Any) -> dict[str, Any]:
    return {"action": "accept", "content": content}


def lines(path: Path) -> list[str]:
    """The lines of an effects log a fixture tool writes (none before it is written)."""
    return path.read_text().splitlines() if path.exists() else []
