"""`askback demo`: start the demo server with several workers and walk through two flows, round by round.

Every round is a new connection, so the retry can land on another worker process; each round prints the
questions, the answers, and the worker that served it. `--interactive` asks the person at the terminal instead of
answering from the script.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult
from rich.console import Console
from rich.prompt import Confirm as RichConfirm
from rich.prompt import Prompt

from askback.errors import ConfigurationError
from askback.rounds import call_round

console = Console()

_SCRIPT: dict[str, dict[str, Any]] = {
    "confirm_project": {"project_name": "billing-legacy"},
    "pick_env": {"environment": "production"},
    "confirm_prod": {"confirm": True},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(target: str, *, port: int, workers: int, env: dict[str, str], cwd: str | None = None) -> Iterator[str]:
    """Run `askback serve TARGET` in a child process until the block ends; yields the /mcp URL. The server's own
    output goes to a log file (never an unread pipe, which would stall a chatty server), shown if it fails."""
    log = tempfile.NamedTemporaryFile(prefix="askback-serve-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "askback", "serve", target, "--port", str(port), "--workers", str(workers)],
        env={**os.environ, **env},
        cwd=cwd,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                out = Path(log.name).read_text(errors="replace")[-4000:]
                raise ConfigurationError(f"the server stopped while starting:\n{out}")
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise ConfigurationError("the server did not start within 60 seconds")
            time.sleep(0.1)
        yield f"{base}/mcp"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        Path(log.name).unlink(missing_ok=True)


def _answer(key: str, params: dict[str, Any], interactive: bool) -> ElicitResult:
    schema = params.get("requestedSchema", {})
    if not interactive:
        return ElicitResult(action="accept", content=_SCRIPT[key])
    if params.get("mode") == "url":
        console.print(f"    open [link]{params['url']}[/link]")
        ok = RichConfirm.ask("    Open this link?", console=console)
        return ElicitResult(action="accept" if ok else "decline")
    content: dict[str, Any] = {}
    for name, prop in schema.get("properties", {}).items():
        title = prop.get("title", name)
        if prop.get("type") == "boolean":
            content[name] = RichConfirm.ask(f"    {title}", console=console)
        elif "enum" in prop:
            content[name] = Prompt.ask(f"    {title}", choices=list(prop["enum"]), console=console)
        else:
            content[name] = Prompt.ask(f"    {title} (empty to decline)", default="", console=console)
            if content[name] == "":
                return ElicitResult(action="decline")
    return ElicitResult(action="accept", content=content)


async def _drive(url: str, user: str, tool: str, arguments: dict[str, Any], interactive: bool) -> set[str]:
    console.rule(f"[bold]{user}[/] calls [cyan]{tool}[/] {arguments}")
    responses: dict[str, ElicitResult] | None = None
    state: str | None = None
    instances: set[str] = set()
    for number in range(1, 10):
        rnd = await call_round(url, tool, arguments, token=f"demo-{user}", responses=responses, request_state=state)
        instances.add(rnd.instance or "?")
        where = f"[dim]served by worker {rnd.instance}[/]"
        if rnd.error is not None:
            console.print(f"  round {number}: error {rnd.error.error.code} {rnd.error.error.message} {where}")
            break
        if isinstance(rnd.result, CallToolResult):
            text = " ".join(getattr(c, "text", "") for c in rnd.result.content)
            console.print(f"  round {number}: [green]complete[/] {text!r} {where}")
            break
        assert isinstance(rnd.result, InputRequiredResult)
        console.print(f"  round {number}: [yellow]input_required[/] {where}")
        responses = {}
        for key, request in (rnd.result.input_requests or {}).items():
            params = request.params.model_dump(by_alias=True, exclude_none=True) if request.params else {}
            console.print(f"    asks [bold]{key}[/]: {params.get('message')}")
            answer = _answer(key, params, interactive)
            console.print(f"    answers {answer.action} {answer.content or ''}")
            responses[key] = answer
        state = rnd.result.request_state
    return instances


def run_demo(*, interactive: bool, workers: int, port: int, database: str) -> int:
    if database.startswith("sqlite:///"):
        path = Path(database.removeprefix("sqlite:///"))
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    env = {"ASKBACK_STATE_KEYS": secrets.token_urlsafe(48), "ASKBACK_DATABASE_URL": database}
    port = port or free_port()
    console.print(f"Starting the demo server: {workers} worker processes on 127.0.0.1:{port}, database {database}")
    with serving("askback.demo:server", port=port, workers=workers, env=env) as url:

        async def main() -> set[str]:
            seen = await _drive(url, "alice", "delete_project", {"project_id": "prj_99"}, interactive)
            seen |= await _drive(url, "bob", "deploy", {"service": "web-frontend"}, interactive)
            return seen

        seen = anyio.run(main)
    console.rule()
    console.print(f"Rounds were served by {len(seen)} different worker process(es): {', '.join(sorted(seen))}.")
    console.print(
        "Who confirmed the deletion of billing-legacy, and when:\n"
        f"  askback audit --database {database} --tool delete_project --event answered --contains billing-legacy"
    )
    return 0
