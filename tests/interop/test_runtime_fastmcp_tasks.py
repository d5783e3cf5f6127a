"""The agent runtime drives the tasks of a server it did not write: FastMCP with fastmcp-tasks (its implementation of
the tasks extension, SEP-2663, running tasks on pydocket over a real `redis-server`), `interop/fastmcp/tasks_server.py`
in a virtualenv of its own (`interop/fastmcp.sh`), over Streamable HTTP at 2026-07-28 on loopback.

A fastmcp-tasks task asks by ending a leg with `inputRequests` under keys it mints, and runs its tool again from the
top once `tasks/update` answers them; it refuses `tasks/*` without the extension declared on the request (-32021)
and with an `Mcp-Name` other than the task id. So a call that completes here shows the runtime parks the task, puts
each leg's questions in the inbox, sends the answers where the peer reads them, and polls as the peer asks, also
from another process opening the same runtime database."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import pytest
from tests.infra import INTEROP, ROOT, running_process
from tests.runtime import _driving as driving
from tests.server._tasks import get

from askback import load_settings
from askback.clock import FrozenClock
from askback.runtime import Answer, Completed, Parked, Runtime, WebInbox
from askback.testing import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.http]

T = TypeVar("T")
PEER = INTEROP / "fastmcp" / "tasks_server.py"
REGISTRY_UNREACHABLE = 75  # interop/fastmcp.sh's exit code when pip cannot reach the package registry


@contextlib.contextmanager
def _running(argv: list[str], *, ready: Callable[[], bool], what: str, cwd: Path) -> Iterator[None]:
    """`running_process`, its log `cwd/WHAT.log`."""
    with running_process(argv, ready=ready, what=what, log=cwd / f"{what}.log", cwd=cwd):
        yield


def _pong(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _answers_http(url: str) -> bool:
    try:
        httpx.get(url, timeout=1)
    except httpx.TransportError:
        return False
    return True


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A `redis-server` of the module's own on a free loopback port, persisting nothing."""
    binary = shutil.which("redis-server", path=f"{os.environ.get('PATH', '')}:/usr/bin:/usr/sbin")
    if binary is None:
        pytest.skip("redis-server is not installed (Debian package redis-server), and fastmcp-tasks needs Redis")
    port = free_port()
    folder = tmp_path_factory.mktemp("redis")
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    with _running([*argv, "--dir", str(folder)], ready=lambda: _pong(port), what="redis-server", cwd=folder):
        yield f"redis://127.0.0.1:{port}/0"


@pytest.fixture(scope="module")
def peer_python() -> Path:
    """The python of the peer's virtualenv, which interop/fastmcp.sh makes when missing or out of date."""
    home = os.environ.get("HOME") or tempfile.mkdtemp(prefix="askback-pip-home-")
    built = subprocess.run(
        ["bash", str(INTEROP / "fastmcp.sh")],
        env={**os.environ, "HOME": home},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if built.returncode == REGISTRY_UNREACHABLE:
        last = built.stderr.strip().splitlines()[-1:]
        pytest.skip(f"pip cannot reach the package registry to install the fastmcp-tasks peer ({''.join(last)})")
    assert built.returncode == 0, f"interop/fastmcp.sh failed:\n{built.stderr[-4000:]}"
    return Path(built.stdout.strip().splitlines()[-1])


@dataclass
class Peer:
    url: str
    effects: Path

    def refunds(self, order: str) -> list[str]:
        """The lines the peer's `approve_refund` wrote for `order`: one per refund it carried out."""
        log = self.effects / f"{order}.log"
        return log.read_text().splitlines() if log.exists() else []


@pytest.fixture(scope="module")
def peer(peer_python: Path, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    """interop/fastmcp/tasks_server.py on a free loopback port, its tasks in the module's Redis."""
    port = free_port()
    folder = tmp_path_factory.mktemp("fastmcp-peer")
    effects = folder / "effects"
    url = f"http://127.0.0.1:{port}/mcp"
    argv = [str(peer_python), str(PEER), "--port", str(port), "--redis", redis_url, "--effects", str(effects)]
    with _running(argv, ready=lambda: _answers_http(url), what="fastmcp-tasks-peer", cwd=folder):
        yield Peer(url, effects)


@dataclass
class RecordingClock(FrozenClock):
    """A frozen clock that also notes how long each wait on it was meant to last (seconds from then)."""

    waits: list[float] = field(default_factory=list)

    async def sleep_until(self, at: float) -> None:
        self.waits.append(at - self.now())
        await super().sleep_until(at)


@pytest.fixture
def clock() -> RecordingClock:
    return RecordingClock(1_900_000_000.0)


@pytest.fixture
def runtime_db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runtime.db'}"


async def open_runtime(runtime_db: str, clock: FrozenClock, *, answer_wait: float = 3600) -> Runtime:
    settings = load_settings(development=True, answer_wait=answer_wait)
    return await Runtime.open(runtime_db, renderers=[WebInbox()], clock=clock, settings=settings)


async def driven(clock: FrozenClock, work: Callable[[], Awaitable[T]], *, step: float = 1.0) -> T:
    """`driving.driven` within 30 s: the peer's worker polls Redis in real time."""
    return await driving.driven(clock, work, step=step, within=30)


async def parked(clock: FrozenClock, runtime: Runtime, url: str, tool: str, arguments: dict[str, Any]) -> Parked:
    return await driving.parked(clock, runtime, url, tool, arguments, principal="ada", within=30)


async def peer_task(url: str, task_id: str) -> dict[str, Any]:
    """The task as the peer shows it (`tasks/get`, sent here directly)."""
    async with httpx.AsyncClient(timeout=20) as http:
        reply = await get(http, url, task_id)
    assert "result" in reply, reply
    task: dict[str, Any] = reply["result"]
    return task


# Resume a call from a fresh process on the same runtime database (its own clock: the system's), print the outcome.
_RESUME = textwrap.dedent(
    """
    import json, sys
    import anyio
    from askback.runtime import Runtime, WebInbox
    from askback.settings import load_settings

    async def main():
        rt = await Runtime.open(sys.argv[1], renderers=[WebInbox()], settings=load_settings(development=True))
        try:
            outcome = await rt.resume(sys.argv[2])
        finally:
            await rt.close()
        print(json.dumps({"kind": type(outcome).__name__, "text": getattr(outcome, "text", None)}))

    anyio.run(main)
    """
)


async def test_a_fastmcp_task_s_questions_wait_in_the_inbox_and_another_process_polls_it_to_its_refund(
    runtime_db: str, clock: RecordingClock, peer: Peer
) -> None:
    runtime = await open_runtime(runtime_db, clock)
    try:
        first = await parked(clock, runtime, peer.url, "approve_refund", {"order": "A-1", "amount": 250})
        (approve,) = first.questions
        assert (approve.mode, approve.message, approve.method) == ("form", "Refund 250 on A-1?", "elicitation/create")
        assert approve.schema is not None and approve.schema["required"] == ["approve"]
        record = await runtime.calls.get(first.call_id)
        assert record.task_id is not None and record.poll_interval == 0.3
        task = await peer_task(peer.url, record.task_id)
        assert task["status"] == "input_required" and list(task["inputRequests"]) == [approve.key]
        assert [p.question.key for p in await runtime.inbox(principal="ada")] == [approve.key]

        assert await runtime.answer(first.call_id, approve.key, Answer("accept", {"approve": True}), by="ada") == 0
        second = await driven(clock, lambda: runtime.resume(first.call_id))
        assert isinstance(second, Parked) and second.round > first.round, second
        (reason,) = second.questions
        assert reason.message == "Why refund 250 on A-1?" and reason.key != approve.key
        assert [p.question.key for p in await runtime.inbox(principal="ada")] == [reason.key]
        assert peer.refunds("A-1") == []
        assert await runtime.answer(first.call_id, reason.key, Answer("accept", {"reason": "arrived broken"})) == 0
    finally:
        await runtime.close()

    clean = {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}
    done = await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            [sys.executable, "-c", _RESUME, runtime_db, first.call_id],
            cwd=ROOT,
            env=clean,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"kind": "Completed", "text": "Refunded A-1"}
    assert peer.refunds("A-1") == ["refund A-1 250 arrived broken"]
    assert (await peer_task(peer.url, record.task_id))["status"] == "completed"

    again = await open_runtime(runtime_db, clock)
    try:
        finished = await again.resume(first.call_id)  # a finished call gives its result again, sending nothing
        assert await again.inbox(principal="ada") == []
    finally:
        await again.close()
    assert isinstance(finished, Completed) and finished.text == "Refunded A-1" and not finished.is_error
    assert peer.refunds("A-1") == ["refund A-1 250 arrived broken"]


async def test_a_declined_fastmcp_question_completes_the_task_as_the_tool_says_and_refunds_nothing(
    runtime_db: str, clock: RecordingClock, peer: Peer
) -> None:
    runtime = await open_runtime(runtime_db, clock)
    try:
        outcome = await parked(clock, runtime, peer.url, "approve_refund", {"order": "B-2", "amount": 20})
        (approve,) = outcome.questions
        assert await runtime.answer(outcome.call_id, approve.key, Answer("decline"), by="ada") == 0
        done = await driven(clock, lambda: runtime.resume(outcome.call_id))
        task_id = (await runtime.calls.get(outcome.call_id)).task_id
    finally:
        await runtime.close()
    # fastmcp-tasks hands the decline to the tool on its next leg; the tool's answer is the task's result.
    assert isinstance(done, Completed), done
    assert (done.text, done.is_error, done.cancelled) == ("Not refunded: B-2 was declined.", False, False)
    assert task_id is not None and (await peer_task(peer.url, task_id))["status"] == "completed"
    assert peer.refunds("B-2") == []


async def test_a_fastmcp_question_left_unanswered_past_the_deadline_cancels_the_task(
    runtime_db: str, clock: RecordingClock, peer: Peer
) -> None:
    runtime = await open_runtime(runtime_db, clock, answer_wait=60)
    try:
        outcome = await parked(clock, runtime, peer.url, "approve_refund", {"order": "C-3", "amount": 20})
        assert outcome.deadline is not None
        clock.advance(outcome.deadline - clock.now())
        done = await driven(clock, lambda: runtime.resume(outcome.call_id))
        task_id = (await runtime.calls.get(outcome.call_id)).task_id
    finally:
        await runtime.close()
    assert isinstance(done, Completed) and done.cancelled and done.is_error
    assert task_id is not None and (await peer_task(peer.url, task_id))["status"] == "cancelled"
    assert peer.refunds("C-3") == []


async def test_the_runtime_polls_a_fastmcp_task_at_the_interval_the_peer_gives_and_backs_off_from_it(
    runtime_db: str, clock: RecordingClock, peer: Peer, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    rt = await open_runtime(runtime_db, clock)
    done: list[Any] = []
    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tasks:

                async def call() -> None:
                    arguments = {"order": "D-4", "gate": str(gate)}
                    done.append(await rt.call_tool(peer.url, "held_refund", arguments, principal="ada"))
                    tasks.cancel_scope.cancel()

                tasks.start_soon(call)
                await clock.until_sleeping()  # parked, polled once, found working: waiting to poll again
                (record,) = await rt.calls.listing(principal="ada")
                assert record.task_id is not None
                task = await peer_task(peer.url, record.task_id)
                assert (task["status"], task["pollIntervalMs"]) == ("working", 750)
                assert record.poll_interval == 0.75  # from the peer's CreateTaskResult
                assert clock.waits == [pytest.approx(0.75)]

                clock.advance(0.75)
                await clock.until_sleeping()  # polled again, still working: waits longer
                assert clock.waits == [pytest.approx(0.75), pytest.approx(1.125)]

                gate.touch()
                while True:
                    clock.advance(clock.waits[-1])
                    await clock.until_sleeping()
    finally:
        await rt.close()
    (outcome,) = done
    assert isinstance(outcome, Completed) and outcome.text == "Refunded D-4"
