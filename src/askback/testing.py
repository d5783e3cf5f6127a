"""Helpers for testing askback servers, in this project and in yours.

- `FrozenClock`: a clock that moves only when told to (pass it to `Askback(clock=...)`).
- `free_port` and `serving`: run `askback serve TARGET` in a child process on a free loopback port.
- `call_round` and `drive_flow`: drive a tool over Streamable HTTP with the official SDK client, one round per
  fresh connection (so consecutive rounds can land on different workers or instances), until the call completes;
  the loop itself is `askback.core.plan.flow_plan`.
- `accept`, `decline` and `cancel`: answers to put in `inputResponses` (or to return from a callback).
- `answering` and `answered_by_hand`: elicitation callbacks for the SDK's `Client`, in memory or over HTTP: one
  answers pushed questions by their form fields and records them, the other only declares elicitation, for rounds
  answered by hand through `inputResponses`.
- `text`, `state_of` and `asked_keys`: what a round or a result says: its text, its sealed state, its questions.

```python
from askback.testing import accept, drive_flow, serving, free_port

with serving("myapp:server", port=(port := free_port()), workers=2, env={...}) as url:
    sent = anyio.run(drive_flow, url, "delete_project", {"project_id": "prj_42"},
                     lambda key, params: accept(project_name="billing-legacy"))
```
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult

from askback.clock import FrozenClock
from askback.core.capabilities import MRTR_REVISION
from askback.core.plan import Answerer, Next, Round, flow_plan
from askback.errors import ConfigurationError

__all__ = [
    "Answering",
    "FrozenClock",
    "Next",
    "Round",
    "accept",
    "answered_by_hand",
    "answering",
    "asked_keys",
    "call_round",
    "cancel",
    "decline",
    "drive_flow",
    "free_port",
    "serving",
    "state_of",
    "text",
]


def accept(**content: Any) -> ElicitResult:
    """An accepted answer with these form fields (none for a URL question)."""
    return ElicitResult(action="accept", content=content or None)


def decline() -> ElicitResult:
    """A declined answer: the person said no."""
    return ElicitResult(action="decline")


def cancel() -> ElicitResult:
    """A cancelled answer: the person dismissed the question."""
    return ElicitResult(action="cancel")


async def answered_by_hand(context: Any, params: Any) -> ElicitResult:
    """An elicitation callback that only declares elicitation: the rounds are answered through `inputResponses`."""
    raise AssertionError("this client answers questions through inputResponses, not its elicitation callback")


class Answering:
    """An elicitation callback answering each pushed question by one of its form fields; `asked` records them."""

    def __init__(self, by_field: Mapping[str, ElicitResult]) -> None:
        self.by_field = dict(by_field)
        self.asked: list[dict[str, Any]] = []

    async def __call__(self, context: Any, params: Any) -> ElicitResult:
        asked: dict[str, Any] = params.model_dump(by_alias=True, exclude_none=True)
        self.asked.append(asked)
        fields = asked.get("requestedSchema", {}).get("properties", {})
        for name, answer in self.by_field.items():
            if name in fields:
                return answer
        raise AssertionError(f"a question the test has no answer for: {asked}")


def answering(**by_field: ElicitResult) -> Answering:
    """An `Answering` callback from answers keyed by form field: `answering(project_name=accept(project_name="x"))`."""
    return Answering(by_field)


def text(result: CallToolResult | InputRequiredResult | None) -> str:
    """The text of a completed call (its text contents, joined by spaces); anything else fails the test."""
    if not isinstance(result, CallToolResult):
        raise AssertionError(f"expected a complete result, got {result!r}")
    return " ".join(getattr(c, "text", "") for c in result.content)


def state_of(rnd: Round) -> str:
    """The sealed `requestState` of an `input_required` round; anything else fails the test."""
    if rnd.error is not None:
        raise AssertionError(f"expected input_required, got the error {rnd.error!r}")
    if not isinstance(rnd.result, InputRequiredResult) or rnd.result.request_state is None:
        raise AssertionError(f"expected input_required with a requestState, got {rnd.result!r}")
    return rnd.result.request_state


def asked_keys(rnd: Round) -> set[str]:
    """The keys of the questions an `input_required` round asks; anything else fails the test."""
    if not isinstance(rnd.result, InputRequiredResult):
        raise AssertionError(f"expected input_required, got {rnd!r}")
    return set(rnd.result.input_requests or {})


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(target: str, *, port: int, workers: int, env: dict[str, str], cwd: str | None = None) -> Iterator[str]:
    """Run `askback serve TARGET` in a child process until the block ends; yields the /mcp URL. The server's own
    output goes to a log file (never an unread pipe, which would stall a chatty server), named if it fails.

    The server runs in a session of its own, so a Ctrl-C at the terminal reaches this process only; leaving the block
    in any way, `KeyboardInterrupt` included, stops the server's whole process group (its workers too)."""
    log = tempfile.NamedTemporaryFile(prefix="askback-serve-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "askback", "serve", target, "--port", str(port), "--workers", str(workers)],
        env={**os.environ, **env},
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    keep_log = False
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                keep_log = True
                lines = Path(log.name).read_text(errors="replace").strip().splitlines()
                last = lines[-1] if lines else f"exit status {proc.returncode}"
                raise ConfigurationError(f"the server stopped while starting: {last} (its output: {log.name})")
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                keep_log = True
                raise ConfigurationError(f"the server did not start within 60 seconds (its output: {log.name})")
            time.sleep(0.1)
        yield f"{base}/mcp"
    finally:
        _stop(proc)
        if not keep_log:
            Path(log.name).unlink(missing_ok=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the process group led by `proc`: SIGTERM, then SIGKILL after 15 seconds or at a second Ctrl-C."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        _kill(proc)
    except KeyboardInterrupt:
        _kill(proc)
        raise


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


async def call_round(
    url: str,
    tool: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    token: str | None = None,
    responses: Mapping[str, ElicitResult] | None = None,
    request_state: str | None = None,
    elicitation: bool = True,
    timeout_seconds: float = 30.0,
) -> Round:
    """One `tools/call` on a fresh connection. `elicitation=False` declares no capabilities."""
    seen: dict[str, Any] = {}

    async def on_response(response: httpx2.Response) -> None:
        # The client may send other requests too (a tools/list to check the output schema): keep the call's.
        if response.request.method == "POST" and b'"tools/call"' in response.request.content:
            seen["instance"] = response.headers.get("x-askback-instance")
            seen["status"] = response.status_code

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(
        headers=headers,
        timeout=httpx2.Timeout(timeout_seconds),
        limits=httpx2.Limits(max_keepalive_connections=0),
        event_hooks={"response": [on_response]},
    ) as http:
        transport = streamable_http_client(url, http_client=http)
        client = Client(transport, mode=MRTR_REVISION, elicitation_callback=answered_by_hand if elicitation else None)
        async with client:
            try:
                result = await client.session.call_tool(
                    tool,
                    dict(arguments or {}),
                    input_responses=dict(responses) if responses else None,
                    request_state=request_state,
                    allow_input_required=True,
                )
            except MCPError as exc:
                return Round(None, exc, seen.get("instance"), seen.get("status"))
    assert isinstance(result, CallToolResult | InputRequiredResult)
    return Round(result, None, seen.get("instance"), seen.get("status"))


async def drive_flow(
    url: str,
    tool: str,
    arguments: Mapping[str, Any],
    answer: Answerer,
    *,
    token: str | None = None,
    start: Next | None = None,
    max_rounds: int = 8,
) -> list[tuple[Next, Round]]:
    """Call `tool` round by round (each on a new connection) until it completes or fails, answering every question
    with `answer`; every request sent with the round that came back."""
    plan = flow_plan(answer, start=start, max_rounds=max_rounds)
    sent: list[tuple[Next, Round]] = []
    request = next(plan)
    while True:
        rnd = await call_round(
            url, tool, arguments, token=token, responses=request.responses, request_state=request.request_state
        )
        sent.append((request, rnd))
        try:
            request = plan.send(rnd)
        except StopIteration:
            return sent
