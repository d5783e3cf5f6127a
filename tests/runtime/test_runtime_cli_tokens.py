"""`--token` on the commands that resume a call: a call parked by `askback call --token` resumes with its token
(`inbox answer|decline|cancel --resume`, `inbox resume`, the web inbox of `inbox serve`), and a command that may
reach several servers (`inbox resume --due`, `inbox serve`) sends it only to the one `--token-server` names.

The servers are two demo servers, where `demo-<name>` is user `<name>`. The first checks tokens as a real server does
(`--token-verifier`): a request without one is 401. The second takes a request without a token as `anonymous`, and
binds its tasks to the user: a round of an anonymous call sent with alice's token is refused."""

from __future__ import annotations

import json
import re
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from _http import served
from askback.cli._runtime import bearer
from askback.cli.output import UsageError
from askback.testing import free_port, serving
from infra import ROOT, inbox_serving, run_askback

pytestmark = pytest.mark.http

DEPLOY = json.dumps({"service": "web", "environment": "production"})
DEPLOYED = "Deployed web to production."
TOKEN = "demo-alice"


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The two demo servers, each on a SQLite file and a state key of its own: their /mcp URLs."""
    one, two = tmp_path_factory.mktemp("demo-one"), tmp_path_factory.mktemp("demo-two")
    checked = {
        "ASKBACK_STATE_KEYS": secrets.token_urlsafe(48),
        "ASKBACK_DATABASE_URL": f"sqlite:///{one / 'db.sqlite'}",
        "ASKBACK_SERVE_VERIFIER": "tests.fixtures.required_tokens:verifier",
    }
    with (
        serving("askback.demo:server", port=free_port(), workers=1, env=checked, cwd=str(ROOT)) as first,
        served(f"sqlite:///{two / 'db.sqlite'}", [secrets.token_urlsafe(48)], workers=1) as second,
    ):
        assert httpx.post(first, json={}).status_code == 401
        yield first, second.url


def askback(database: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_askback(*args, "--database", database, env=env)


def park(database: str, server: str, *token: str) -> str:
    """A production deploy parked on its confirmation by `askback call --park` (as alice, or anonymous without a
    token): its call id."""
    parked = askback(database, "call", server, "deploy", "--args", DEPLOY, "--user", "alice", "--park", *token)
    assert parked.returncode == 0, parked.stderr
    call_id = parked.stdout.strip()
    assert call_id.startswith("call_"), parked.stdout
    return call_id


def shown(database: str, call_id: str) -> dict[str, Any]:
    out = askback(database, "inbox", "show", call_id, "--json")
    assert out.returncode == 0, out.stderr
    found: dict[str, Any] = json.loads(out.stdout)
    return found


def confirm(database: str, call_id: str) -> None:
    answered = askback(database, "inbox", "answer", call_id, "--json", '{"confirm": true}')
    assert answered.returncode == 0, answered.stderr


def test_a_call_parked_with_a_token_resumes_with_it_and_without_it_stays_parked(
    demos: tuple[str, str], tmp_path: Path
) -> None:
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    call_id = park(database, demos[0], "--token", TOKEN)
    confirm(database, call_id)

    without = askback(database, "inbox", "resume", call_id)
    assert without.returncode == 5, without.stdout + without.stderr
    assert without.stderr.startswith("error: ") and "HTTP 401" in without.stderr and TOKEN not in without.stderr
    assert "stays parked on its round with its answers" in without.stderr
    assert shown(database, call_id)["status"] == "parked"

    elsewhere = askback(database, "inbox", "resume", call_id, "--token", TOKEN, "--token-server", demos[1])
    assert elsewhere.returncode == 5 and "HTTP 401" in elsewhere.stderr, elsewhere.stdout + elsewhere.stderr
    assert shown(database, call_id)["status"] == "parked"

    done = askback(database, "inbox", "resume", call_id, "--token", TOKEN)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == DEPLOYED

    declined = park(database, demos[0], "--token", TOKEN)
    by_env = askback(database, "inbox", "decline", declined, "--resume", env={"ASKBACK_CALL_TOKEN": TOKEN})
    assert by_env.returncode == 0, by_env.stderr
    assert by_env.stdout.strip() == "Cancelled: production deploy not confirmed."
    assert TOKEN.encode() not in (tmp_path / "agent.db").read_bytes()


def test_resuming_every_due_call_sends_the_token_only_to_the_token_server(
    demos: tuple[str, str], tmp_path: Path
) -> None:
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    alices = park(database, demos[0], "--token", TOKEN)
    anonymous = park(database, demos[1])
    for call_id in (alices, anonymous):
        confirm(database, call_id)

    unscoped = askback(database, "inbox", "resume", "--due", "--token", TOKEN)
    assert unscoped.returncode == 2 and "--token-server" in unscoped.stderr, unscoped.stderr
    assert [shown(database, c)["status"] for c in (alices, anonymous)] == ["parked", "parked"]

    # The same endpoint, spelt with a trailing slash: the token still goes to it, and to nothing else.
    done = askback(database, "inbox", "resume", "--due", "--token", TOKEN, "--token-server", demos[0] + "/")
    assert done.returncode == 0, done.stdout + done.stderr
    for call_id in (alices, anonymous):
        record = shown(database, call_id)
        assert record["status"] == "completed", record
    assert done.stdout.count(DEPLOYED) == 2


def _csrf(page: str) -> str:
    tag = next(t for t in re.findall(r"<input[^>]*>", page) if 'name="csrf"' in t)
    found = re.search(r'value="([^"]+)"', tag)
    assert found is not None, tag
    return found.group(1)


@pytest.fixture
def inbox_with_token(demos: tuple[str, str], tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`askback inbox serve` for alice, resuming with alice's token for the first demo server: (its URL, the
    agent's database URL)."""
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    args = ["--user", "alice", "--token-server", demos[0]]
    with inbox_serving(database, *args, env={"ASKBACK_CALL_TOKEN": TOKEN}) as base:
        yield base, database


def test_the_web_inbox_resumes_an_answered_call_with_the_token_of_its_server(
    demos: tuple[str, str], inbox_with_token: tuple[str, str], tmp_path: Path
) -> None:
    base, database = inbox_with_token
    call_id = park(database, demos[0], "--token", TOKEN)
    question = shown(database, call_id)["questions"][0]
    with httpx.Client(base_url=base, timeout=60, follow_redirects=True) as inbox:
        path = f"/q/{call_id}/{question['round']}/{question['key']}"
        page = inbox.get(path)
        assert page.status_code == 200, page.text
        sent = inbox.post(path, data={"csrf": _csrf(page.text), "action": "accept", "f.confirm": "true"})
        assert sent.status_code == 200, sent.text
    record = shown(database, call_id)
    assert record["status"] == "completed", record
    assert DEPLOYED in json.dumps(record["result"])

    unscoped = run_askback("inbox", "serve", "--user", "alice", "--token", TOKEN, "--database", database)
    assert unscoped.returncode == 2 and "--token-server" in unscoped.stderr, unscoped.stderr


@pytest.mark.parametrize("token", ["", "two words", "line\r\nX-Injected: 1", "café", "=leading"])
def test_a_token_that_is_not_a_bearer_token_is_refused_before_anything_is_sent(token: str) -> None:
    with pytest.raises(UsageError, match="not a bearer token") as refused:
        bearer(token, None, one_server=True)
    assert token not in str(refused.value) or not token


def test_the_token_goes_to_its_server_however_its_url_is_spelt_and_to_no_other() -> None:
    headers = bearer("abc.DEF-_~+/==", "HTTPS://Tools.Example.com:443/mcp/", one_server=False)
    assert headers is not None
    sent = {"Authorization": "Bearer abc.DEF-_~+/=="}
    assert headers("https://tools.example.com/mcp") == sent
    for other in (
        "http://tools.example.com/mcp",
        "https://tools.example.com:8443/mcp",
        "https://tools.example.com/other",
        "https://evil.example/mcp",
        "https://tools.example.com.evil.example/mcp",
        "not a url:99999",
    ):
        assert headers(other) == {}, other
    assert bearer(None, None, one_server=False) is None
    with pytest.raises(UsageError, match="give --token"):
        bearer(None, "https://tools.example.com/mcp", one_server=False)
    with pytest.raises(UsageError, match="not an http"):
        bearer("abc", "ftp://tools.example.com/mcp", one_server=False)
    with pytest.raises(UsageError, match="--token-server"):
        bearer("abc", None, one_server=False)
