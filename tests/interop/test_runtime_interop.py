"""The agent runtime against servers it did not write: one written with the official Python SDK's `MCPServer`
(`tests/fixtures/sdk_asking_server.py`, asking through `Resolve(...)`/`Elicit(...)`) and one with the official
TypeScript SDK (`interop/ts-asking-server.mjs`, returning `inputRequired(...)`), each in a process of its own on
loopback, over Streamable HTTP at 2026-07-28.

A call is parked by one `Runtime` in this process; each later round is answered and resumed by a fresh Python
process opening the same SQLite file (`_STEP`), which prints the outcome as one JSON line. So what carries a call
from one round to the next is only what the runtime stored: the server's questions and its sealed `requestState`,
echoed back as it was sent, which both servers verify before they run the tool again."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from askback.runtime import Answer, Completed, Parked, Runtime, WebInbox
from askback.testing import free_port
from infra import FIXTURES, INTEROP, interop_node, running_process

pytestmark = [pytest.mark.anyio, pytest.mark.http]

SDK_SERVER = FIXTURES / "sdk_asking_server.py"
TS_SERVER = INTEROP / "ts-asking-server.mjs"

# One round from a fresh process: record the answers (JSON: key -> {"action", "content"?}), resume, print the outcome.
_STEP = """
import dataclasses, json, sys
import anyio
from askback.runtime import Answer, Runtime, WebInbox

async def main() -> None:
    db, call_id, answers = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    async with await Runtime.open(db, renderers=[WebInbox()]) as runtime:
        for key, answer in answers.items():
            await runtime.answer(call_id, key, Answer(answer["action"], answer.get("content")))
        outcome = await runtime.resume(call_id)
    print(json.dumps({"type": type(outcome).__name__, **dataclasses.asdict(outcome)}))

anyio.run(main)
"""


@contextlib.contextmanager
def _peer(argv: list[str], *, port: int, env: Mapping[str, str], cwd: Path | None = None) -> Iterator[str]:
    """Run a server in a process group of its own until the block ends; yields its /mcp URL once it accepts
    connections. Its output goes to a log file, printed when it fails to start or when the block raises."""

    def accepting() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    log = Path(tempfile.mkdtemp(prefix="askback-peer-")) / "server.log"
    try:
        what = f"{Path(argv[1]).name} on port {port}"
        with running_process(argv, ready=accepting, what=what, log=log, cwd=cwd, env=dict(env)):
            yield f"http://127.0.0.1:{port}/mcp"
    finally:
        log.unlink(missing_ok=True)
        log.parent.rmdir()


@pytest.fixture(scope="module")
def sdk_server() -> Iterator[str]:
    port = free_port()
    env = {"SDK_SERVER_STATE_KEY": os.urandom(32).hex()}
    with _peer([sys.executable, str(SDK_SERVER), str(port)], port=port, env=env) as url:
        yield url


@pytest.fixture(scope="module")
def ts_server() -> Iterator[str]:
    node = interop_node()
    port = free_port()
    env = {"TS_ASKING_SERVER_STATE_KEY": os.urandom(32).hex()}
    with _peer([str(node), str(TS_SERVER), "--port", str(port)], port=port, env=env, cwd=INTEROP) as url:
        yield url


def _described(outcome: object) -> dict[str, Any]:
    """An outcome as the `_STEP` process prints it."""
    assert dataclasses.is_dataclass(outcome) and not isinstance(outcome, type)
    described: dict[str, Any] = json.loads(json.dumps({"type": type(outcome).__name__, **dataclasses.asdict(outcome)}))
    return described


async def _park(db: str, server: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Call `tool` with a runtime that only has the web inbox: the call comes back parked. The runtime is closed."""
    async with await Runtime.open(db, renderers=[WebInbox()]) as runtime:
        outcome = await runtime.call_tool(server, tool, arguments, principal="ada")
    assert isinstance(outcome, Parked), outcome
    return _described(outcome)


async def _step(db: str, call_id: str, answers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Answer and resume the call from a fresh Python process; its outcome."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}
    done = await anyio.run_process(
        [sys.executable, "-c", _STEP, db, call_id, json.dumps(answers)], env=clean, check=False
    )
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 0, f"the resuming process exited {done.returncode}:\n{stderr}"
    lines = done.stdout.decode().strip().splitlines()
    assert len(lines) == 1, f"expected one JSON line, got:\n{done.stdout.decode()}\n{stderr}"
    outcome: dict[str, Any] = json.loads(lines[0])
    return outcome


def _asked(parked: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(q["mode"], q["message"], q["method"]) for q in parked["questions"]]


# --- the official Python SDK's MCPServer ------------------------------------------------------------------------


async def test_a_call_parked_on_an_sdk_server_is_answered_and_completed_by_another_process(
    sdk_server: str, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'runtime.db'}"
    with anyio.fail_after(60):
        parked = await _park(db, sdk_server, "book_table", {"guests": 2})
        assert (parked["round"], _asked(parked)) == (1, [("form", "Which date for 2 guests?", "elicitation/create")])
        (question,) = parked["questions"]
        assert question["schema"]["required"] == ["date"]
        assert question["key"].endswith("ask_date")  # the SDK keys a resolver's question by its qualified name
        done = await _step(
            db, parked["call_id"], {question["key"]: {"action": "accept", "content": {"date": "2026-12-24"}}}
        )
    assert done["type"] == "Completed", done
    assert Completed(done["call_id"], done["result"], done["rounds"]).text == "Booked a table for 2 on 2026-12-24."
    assert (done["call_id"], done["rounds"], done["result"]["isError"]) == (parked["call_id"], 2, False)


async def test_an_sdk_tool_that_asks_twice_parks_twice_and_each_round_resumes_in_a_fresh_process(
    sdk_server: str, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'runtime.db'}"
    with anyio.fail_after(90):
        first = await _park(db, sdk_server, "star_repo", {"repo": "octo/hello"})
        assert (first["round"], _asked(first)) == (1, [("form", "Who are you?", "elicitation/create")])
        login = first["questions"][0]["key"]
        second = await _step(db, first["call_id"], {login: {"action": "accept", "content": {"username": "ada"}}})
        assert second["type"] == "Parked", second
        assert (second["round"], _asked(second)) == (2, [("form", "Star octo/hello as ada?", "elicitation/create")])
        confirm = second["questions"][0]["key"]
        assert confirm != login
        done = await _step(db, first["call_id"], {confirm: {"action": "accept", "content": {"ok": True}}})
    assert done["type"] == "Completed", done
    # The last round carried only `ok`: the name answered in round 1 came back inside the sealed requestState.
    assert Completed(done["call_id"], done["result"], done["rounds"]).text == "Starred octo/hello as ada."
    assert done["rounds"] == 3


async def test_a_declined_question_reaches_the_sdk_tool_as_a_decline(sdk_server: str, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'runtime.db'}"
    with anyio.fail_after(60):
        async with await Runtime.open(db, renderers=[WebInbox()]) as runtime:
            parked = await runtime.call_tool(sdk_server, "book_table", {"guests": 4}, principal="ada")
            assert isinstance(parked, Parked), parked
            assert await runtime.answer(parked.call_id, parked.questions[0].key, Answer("decline")) == 0
            done = await runtime.resume(parked.call_id)
    assert isinstance(done, Completed), done
    assert (done.text, done.is_error, done.rounds) == ("No booking: declined.", False, 2)


# --- the official TypeScript SDK's McpServer (@modelcontextprotocol/server) ------------------------------------------


async def test_a_ts_sdk_call_parks_on_a_form_then_a_link_and_completes_from_fresh_processes(
    ts_server: str, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'runtime.db'}"
    with anyio.fail_after(90):
        first = await _park(db, ts_server, "deploy", {"env": "staging"})
        assert (first["round"], _asked(first)) == (1, [("form", "Deploy to staging?", "elicitation/create")])
        (confirm,) = first["questions"]
        assert (confirm["key"], confirm["schema"]["required"]) == ("confirm", ["confirm"])
        answer = {"action": "accept", "content": {"confirm": True, "note": "release 7"}}
        second = await _step(db, first["call_id"], {"confirm": answer})
        assert second["type"] == "Parked", second
        assert (second["round"], _asked(second)) == (
            2,
            [("url", "Sign in to deploy to staging, then come back.", "elicitation/create")],
        )
        (sign_in,) = second["questions"]
        assert (sign_in["key"], sign_in["url"], sign_in["schema"]) == (
            "sign_in",
            "https://example.com/sign-in?env=staging",
            None,
        )
        done = await _step(db, first["call_id"], {"sign_in": {"action": "accept"}})
    assert done["type"] == "Completed", done
    # The note was answered in round 1 and comes back in round 3: it crossed round 2 inside the sealed requestState.
    assert Completed(done["call_id"], done["result"], done["rounds"]).text == "Deployed staging (note: release 7)."
    assert (done["rounds"], done["result"].get("isError", False)) == (3, False)


async def test_declining_the_ts_sdk_form_ends_the_call_without_asking_again(ts_server: str, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'runtime.db'}"
    with anyio.fail_after(60):
        async with await Runtime.open(db, renderers=[WebInbox()]) as runtime:
            parked = await runtime.call_tool(ts_server, "deploy", {"env": "production"}, principal="ada")
            assert isinstance(parked, Parked), parked
            assert [q.key for q in parked.questions] == ["confirm"]
            await runtime.answer(parked.call_id, "confirm", Answer("decline"))
            done = await runtime.resume(parked.call_id)
    assert isinstance(done, Completed), done
    assert (done.text, done.is_error, done.rounds) == ("Not deployed: confirm was decline.", False, 2)
