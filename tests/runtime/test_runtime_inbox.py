"""The web inbox (`askback.runtime.inbox`): each person's parked questions as pages, and their answers recorded.

The fast tests park real calls against a real askback server (`tests/fixtures/runtime_inbox_server.py`, one worker
on loopback) in a real SQLite file, and drive the inbox in process through httpx. The last test is the whole story
across processes in a real Chromium: the demo's deploy (a task, since the runtime declares the tasks extension) is
called by one process, its in-task questions answered in `askback inbox serve`, and resumed by `askback inbox
resume`, twice, until it completes.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from starlette.requests import Request

from _http import Served, served
from askback.runtime import Answer, Completed, Parked, ParkedQuestion, Runtime, WebInbox
from askback.runtime.inbox import inbox_app
from askback.settings import load_settings
from askback.testing import free_port, serving
from infra import FIXTURES, async_browser_context, async_chromium

pytestmark = [pytest.mark.anyio, pytest.mark.http]

BASE = "http://127.0.0.1:8765"


# --- reading pages --------------------------------------------------------------------------------------------------


class Page(HTMLParser):
    """A page's elements (tag and attributes, in order) and its text, read with the standard library's parser."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.html = html
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.chunks: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v if v is not None else "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        self.chunks.append(data)

    @property
    def text(self) -> str:
        return " ".join(" ".join(self.chunks).split())

    def all(self, tag: str, **attrs: str) -> list[dict[str, str]]:
        wanted = {k.rstrip("_").replace("_", "-"): v for k, v in attrs.items()}
        return [a for t, a in self.elements if t == tag and all(a.get(k) == v for k, v in wanted.items())]

    def one(self, tag: str, **attrs: str) -> dict[str, str]:
        found = self.all(tag, **attrs)
        assert len(found) == 1, f"expected one <{tag} {attrs}>, found {found}"
        return found[0]

    def field(self, name: str) -> dict[str, str]:
        """The input or select of form field `name` (sent as `f.<name>`)."""
        found = [a for t, a in self.elements if t in ("input", "select") and a.get("name") == f"f.{name}"]
        assert len(found) == 1, f"expected one control for {name}, found {found}"
        return found[0]

    def label_of(self, control_id: str) -> str:
        """The text of the <label for=control_id>."""
        start = self.html.index(f'<label for="{control_id}">')
        return Page(self.html[start : self.html.index("</label>", start)]).text

    def text_of(self, element_id: str) -> str:
        """The text of the paragraph with this id."""
        start = self.html.index(f'id="{element_id}"')
        return Page(self.html[self.html.rindex("<", 0, start) : self.html.index("</p>", start)]).text


# --- the pieces -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`askback serve runtime_inbox_server:server` (one worker, a SQLite file of its own), for the module."""
    folder = tmp_path_factory.mktemp("inbox-server")
    env = {"ASKBACK_DATABASE_URL": f"sqlite:///{folder / 'server.db'}", "ASKBACK_STATE_KEYS": secrets.token_urlsafe(48)}
    with serving("runtime_inbox_server:server", port=free_port(), workers=1, env=env, cwd=str(FIXTURES)) as url:
        yield url


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    url = f"sqlite:///{tmp_path / 'agent.db'}"
    opened = await Runtime.open(url, renderers=[WebInbox()], settings=load_settings(database_url=url))
    try:
        yield opened
    finally:
        await opened.close()


def who(request: Request) -> str | None:
    """The person, as a signing-in proxy would name them (`--user-header X-User`)."""
    return request.headers.get("x-user")


def inbox(runtime: Runtime, user: str | None = "ada", *, resume: bool = False) -> httpx.AsyncClient:
    headers = {"X-User": user} if user is not None else {}
    transport = httpx.ASGITransport(app=inbox_app(runtime, principal=who, resume=resume))
    return httpx.AsyncClient(transport=transport, base_url=BASE, headers=headers)


async def park(
    runtime: Runtime, server: str, tool: str, arguments: dict[str, Any], *, user: str = "ada"
) -> ParkedQuestion:
    outcome = await runtime.call_tool(server, tool, arguments, principal=user)
    assert isinstance(outcome, Parked), outcome
    return outcome.questions[0]


def path(q: ParkedQuestion) -> str:
    return f"/q/{q.call_id}/{q.round}/{q.key}"


async def open_form(client: httpx.AsyncClient, q: ParkedQuestion) -> tuple[Page, str]:
    """The question's page and the token its form carries."""
    reply = await client.get(path(q))
    assert reply.status_code == 200, reply.text
    page = Page(reply.text)
    return page, page.one("input", name="csrf")["value"]


ORDER = {
    "f.name": "Ada Lovelace",
    "f.email": "ada@example.com",
    "f.website": "",
    "f.start": "2026-09-01",
    "f.copies": "4",
    "f.ratio": "0.5",
    "f.region": "us",
    "f.size": "m",
    "f.extras": ["gift", "bag"],
}


# --- the list -------------------------------------------------------------------------------------------------------


async def test_each_person_sees_only_their_own_questions(runtime: Runtime, server_url: str) -> None:
    mine = await park(runtime, server_url, "approve", {"item": "ada's invoice"})
    theirs = await park(runtime, server_url, "approve", {"item": "grace's invoice"}, user="grace")

    async with inbox(runtime, "ada") as ada, inbox(runtime, "bob") as bob:
        listed = Page((await ada.get("/")).text)
        assert listed.all("a", href=path(mine)) and not listed.all("a", href=path(theirs))
        assert "Approve ada's invoice?" in listed.text and "grace" not in listed.text
        assert "A form to fill in, asked by the tool approve" in listed.text

        empty = await bob.get("/")
        assert empty.status_code == 200 and "Nothing is waiting for you" in empty.text

        hidden = await ada.get(path(theirs))
        assert hidden.status_code == 404 and "grace" not in hidden.text
        _, token = await open_form(ada, mine)
        refused = await ada.post(path(theirs), data={"csrf": token, "action": "decline"})
        assert refused.status_code == 404
    assert await runtime.calls.answers(theirs.call_id, 1) == {}


async def test_nobody_signed_in_is_told_how_to_sign_in(runtime: Runtime) -> None:
    async with inbox(runtime, None) as nobody:
        reply = await nobody.get("/")
    assert reply.status_code == 401
    assert "askback inbox serve --user NAME" in Page(reply.text).text


# --- form questions -------------------------------------------------------------------------------------------------


async def test_a_form_question_is_rendered_from_its_schema(runtime: Runtime, server_url: str) -> None:
    q = await park(runtime, server_url, "order", {})
    async with inbox(runtime) as client:
        page, _ = await open_form(client, q)

    assert page.one("html")["lang"] == "en" and len(page.all("h1")) == 1 and page.all("main")
    assert page.field("email")["type"] == "email"
    assert page.field("website")["type"] == "url"
    assert page.field("start")["type"] == "date"
    copies = page.field("copies")
    assert (copies["type"], copies["min"], copies["max"], copies["step"], copies["value"]) == (
        "number",
        "1",
        "10",
        "1",
        "3",
    )
    assert page.field("ratio")["step"] == "any"
    assert page.field("express")["type"] == "checkbox" and "checked" in page.field("express")
    # A short choice is a radio group, its default chosen (and, not required, a way to give no answer); a long one a
    # select; a multi-select, checkboxes.
    regions = [(r["type"], r["value"], "checked" in r) for r in page.all("input", name="f.region")]
    assert regions == [("radio", "eu", True), ("radio", "us", False), ("radio", "", False)]
    assert page.field("size") and [o["value"] for o in page.all("option")] == ["", "xs", "s", "m", "l", "xl", "xxl"]
    assert [b["value"] for b in page.all("input", name="f.extras", type="checkbox")] == ["gift", "receipt", "bag"]
    assert len(page.all("fieldset")) == 2 and len(page.all("legend")) == 2
    # Every control has a label; required ones are marked in words and for the browser.
    name = page.field("name")
    assert "required" in name and page.label_of(name["id"]) == "Your name (required)"
    assert "required" not in page.field("website")
    hint = page.one("p", id=name["aria-describedby"])
    assert hint and "As printed on your badge." in page.text
    assert [b["value"] for b in page.all("button")] == ["accept", "decline", "cancel"]
    assert "Send answer" in page.text


async def test_an_answer_that_does_not_fit_the_form_is_shown_again_with_its_errors(
    runtime: Runtime, server_url: str
) -> None:
    q = await park(runtime, server_url, "order", {})
    async with inbox(runtime) as client:
        _, token = await open_form(client, q)
        sent = {**ORDER, "f.name": "", "f.email": "not an address", "f.copies": "11", "csrf": token, "action": "accept"}
        reply = await client.post(path(q), data=sent)

    assert reply.status_code == 400
    page = Page(reply.text)
    assert page.one("div", role="alert")
    for error in ("Your name: required", "Email: must be an email address", "Copies: must be at most 10"):
        assert error in page.text
    email = page.field("email")
    assert email["value"] == "not an address" and email["aria-invalid"] == "true"
    assert page.text_of(email["aria-describedby"].split()[-1]) == "Error: Email: must be an email address"
    assert page.one("a", href=f"#{email['id']}")
    # What the person chose is kept, not reset to the defaults.
    assert "checked" in page.one("input", name="f.region", value="us")
    assert "checked" not in page.field("express")
    assert [b["value"] for b in page.all("input", name="f.extras") if "checked" in b] == ["gift", "bag"]
    assert await runtime.calls.answers(q.call_id, 1) == {}


async def test_an_accepted_form_is_recorded_with_typed_values(runtime: Runtime, server_url: str) -> None:
    q = await park(runtime, server_url, "order", {})
    async with inbox(runtime) as client:
        _, token = await open_form(client, q)
        reply = await client.post(path(q), data={**ORDER, "csrf": token, "action": "accept"})
        assert (reply.status_code, reply.headers["location"]) == (303, "/?done=accept&ready=1")
        after = await client.get(reply.headers["location"])
    assert "Your answer is recorded." in Page(after.text).text
    answers = await runtime.calls.answers(q.call_id, 1)
    assert answers == {
        "order": Answer(
            "accept",
            {
                "name": "Ada Lovelace",
                "email": "ada@example.com",
                "start": "2026-09-01",
                "copies": 4,
                "ratio": 0.5,
                "express": False,  # unticked
                "region": "us",
                "size": "m",
                "extras": ["gift", "bag"],
            },
        )
    }


async def test_decline_and_cancel_buttons_record_those_answers(runtime: Runtime, server_url: str) -> None:
    declined = await park(runtime, server_url, "approve", {"item": "a"})
    cancelled = await park(runtime, server_url, "approve", {"item": "b"})
    async with inbox(runtime) as client:
        _, token = await open_form(client, declined)
        first = await client.post(path(declined), data={"csrf": token, "action": "decline"})
        second = await client.post(path(cancelled), data={"csrf": token, "action": "cancel"})
        listed = await client.get(second.headers["location"])
    assert (first.status_code, first.headers["location"]) == (303, "/?done=decline&ready=1")
    assert second.headers["location"] == "/?done=cancel&ready=1"
    assert "You cancelled the question." in Page(listed.text).text
    assert await runtime.calls.answers(declined.call_id, 1) == {"ok": Answer("decline")}
    assert await runtime.calls.answers(cancelled.call_id, 1) == {"ok": Answer("cancel")}


async def test_a_question_answered_already_is_refused_with_409(runtime: Runtime, server_url: str) -> None:
    q = await park(runtime, server_url, "approve", {"item": "twice"})
    async with inbox(runtime) as client:
        _, token = await open_form(client, q)
        await client.post(path(q), data={"csrf": token, "action": "decline"})
        again = await client.post(path(q), data={"csrf": token, "action": "cancel"})
        shown = await client.get(path(q))
    assert again.status_code == 409 and "Already answered" in Page(again.text).text
    assert shown.status_code == 409
    assert await runtime.calls.answers(q.call_id, 1) == {"ok": Answer("decline")}


async def test_with_resume_on_the_last_answer_sends_the_round_and_the_page_shows_the_result(
    runtime: Runtime, server_url: str
) -> None:
    q = await park(runtime, server_url, "approve", {"item": "the budget"})
    async with inbox(runtime, resume=True) as client:
        _, token = await open_form(client, q)
        reply = await client.post(path(q), data={"csrf": token, "action": "accept", "f.ok": "true"})
        assert (reply.status_code, reply.headers["location"]) == (303, f"/calls/{q.call_id}?resumed=1")
        outcome = Page((await client.get(reply.headers["location"])).text)
    assert "the budget: approved" in outcome.text
    assert (await runtime.calls.get(q.call_id)).status == "completed"


# --- forged posts ---------------------------------------------------------------------------------------------------


async def test_a_post_without_this_browsers_token_or_from_another_origin_is_refused(
    runtime: Runtime, server_url: str
) -> None:
    q = await park(runtime, server_url, "approve", {"item": "forged"})
    async with inbox(runtime) as client:
        missing = await client.post(path(q), data={"action": "decline"})
        _, token = await open_form(client, q)
        wrong = await client.post(path(q), data={"action": "decline", "csrf": secrets.token_urlsafe(32)})
        elsewhere = await client.post(
            path(q), data={"action": "decline", "csrf": token}, headers={"Origin": "https://evil.example"}
        )
    assert [r.status_code for r in (missing, wrong, elsewhere)] == [403, 403, 403]
    assert "This form cannot be sent" in Page(missing.text).text
    assert await runtime.calls.answers(q.call_id, 1) == {}


async def test_every_response_carries_the_security_headers(runtime: Runtime, server_url: str) -> None:
    q = await park(runtime, server_url, "approve", {"item": "headers"})
    async with inbox(runtime) as client:
        page = await client.get(path(q))
        token = Page(page.text).one("input", name="csrf")["value"]
        replies = [
            page,
            await client.get("/"),
            await client.get("/nowhere"),
            await client.post("/", data={}),
            await client.post(path(q), data={"action": "decline"}),
            await client.post(path(q), data={"csrf": token, "action": "decline"}),
        ]
    assert [r.status_code for r in replies] == [200, 200, 404, 405, 403, 303]
    assert "HttpOnly" in page.headers["set-cookie"] and "SameSite=strict" in page.headers["set-cookie"]
    for reply in replies:
        csp = reply.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "form-action 'self'" in csp and "frame-ancestors 'none'" in csp
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert reply.headers["referrer-policy"] == "no-referrer"
        assert reply.headers["cache-control"] == "no-store"


# --- URL questions --------------------------------------------------------------------------------------------------


async def test_a_url_question_shows_its_full_host_and_a_link_the_person_opens_themselves(
    runtime: Runtime, server_url: str
) -> None:
    url = "https://login.accounts.example.com/connect?flow=42"
    q = await park(runtime, server_url, "open_page", {"url": url})
    async with inbox(runtime) as client:
        page, token = await open_form(client, q)
        done = await client.post(path(q), data={"csrf": token, "action": "accept"})

    assert page.one("p", **{"class": "host"}) and "This link goes to login.accounts.example.com" in page.text
    link = page.one("a", href=url)
    assert (link["rel"], link["target"]) == ("noopener noreferrer", "_blank")
    assert "Open login.accounts.example.com" in page.text
    assert [b["value"] for b in page.all("button")] == ["accept", "decline", "cancel"]
    assert "I have finished" in page.text
    assert done.status_code == 303
    assert await runtime.calls.answers(q.call_id, 1) == {"page": Answer("accept")}


async def test_a_plain_http_link_to_another_host_is_shown_as_text_and_cannot_be_accepted(
    runtime: Runtime, server_url: str
) -> None:
    url = "http://pay.example.org/checkout"
    outcome = await runtime.get_prompt(server_url, "raw_link", {"url": url}, principal="ada")
    assert isinstance(outcome, Parked)
    q = outcome.questions[0]
    async with inbox(runtime) as client:
        page, token = await open_form(client, q)
        accepted = await client.post(path(q), data={"csrf": token, "action": "accept"})

    assert not page.all("a", href=url) and url in page.text
    assert "uses http: only https links are shown" in page.text
    assert [b["value"] for b in page.all("button")] == ["decline", "cancel"]
    assert accepted.status_code == 400
    assert await runtime.calls.answers(q.call_id, 1) == {}


# --- end to end, in a real browser ----------------------------------------------------------------------------------

PARK_DEPLOY = """
import sys

import anyio

from askback.runtime import Parked, Runtime, WebInbox


async def main() -> None:
    runtime = await Runtime.open(sys.argv[1], renderers=[WebInbox()])
    try:
        outcome = await runtime.call_tool(sys.argv[2], "deploy", {"service": "web"}, principal="ada")
    finally:
        await runtime.close()
    assert isinstance(outcome, Parked), outcome
    print(outcome.call_id)


anyio.run(main)
"""


def _clean_env() -> dict[str, str]:
    """This process's environment without its ASKBACK_* settings: each process is configured by its arguments."""
    return {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}


@pytest.fixture
def demo_served(tmp_path: Path) -> Iterator[Served]:
    """`askback serve askback.demo:server --workers 3` on a SQLite file, with a state key shared by its workers."""
    with served(f"sqlite:///{tmp_path / 'server.db'}", [secrets.token_urlsafe(48)], workers=3) as server:
        yield server


@pytest.fixture
def inbox_served(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`askback inbox serve` for ada over the agent's database, without resuming: (its URL, the database URL)."""
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    port = free_port()
    command = ["inbox", "serve", "--database", database, "--user", "ada", "--port", str(port), "--no-resume"]
    log = (tmp_path / "inbox.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "askback", *command],
        env=_clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield f"http://127.0.0.1:{port}", database
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


async def _askback(*args: str) -> subprocess.CompletedProcess[bytes]:
    return await anyio.run_process([sys.executable, "-m", "askback", *args], env=_clean_env(), check=False)


async def test_a_deploy_task_is_answered_in_chromium_and_resumed_by_other_processes_until_it_completes(
    demo_served: Served, inbox_served: tuple[str, str]
) -> None:
    from playwright.async_api import expect

    inbox_url, database = inbox_served
    with anyio.fail_after(180):
        # The inbox is up once it answers (it has created the database by then); the transport retries the
        # connection, backing off, while it starts.
        async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(retries=7)) as http:
            assert (await http.get(inbox_url)).status_code == 200

        parked = await anyio.run_process(
            [sys.executable, "-c", PARK_DEPLOY, database, demo_served.url], env=_clean_env(), check=True
        )
        call_id = parked.stdout.decode().strip()
        assert call_id.startswith("call_"), parked

        async with async_chromium() as browser:
            page = await (await async_browser_context(browser, timeout_ms=15_000)).new_page()

            async def answer(message: str, choose: str) -> None:
                await page.goto(inbox_url)
                await page.get_by_role("link", name=message).click()
                await expect(page.get_by_role("heading", level=1)).to_have_text("A question from the tool deploy")
                await page.get_by_label(choose).check()
                await page.get_by_role("button", name="Send answer").click()
                await expect(page.get_by_role("status")).to_contain_text("Your answer is recorded.")

            await answer("Which environment should I deploy to?", "production")
            resumed = await _askback("inbox", "resume", call_id, "--database", database)
            assert resumed.returncode == 3, resumed
            # A task call's rounds alternate: waiting on the server (1), pick_env (2), on the server (3), confirm_prod
            # (4); the keys are the server's, never reused over the task's life.
            assert f"{call_id}: parked on round 4, waiting for confirm_prod.2" in resumed.stdout.decode()

            await answer("Deploy to production? This affects every user.", "Yes, deploy to production")
            done = await _askback("inbox", "resume", call_id, "--database", database)
            assert done.returncode == 0, done
            assert done.stdout.decode().strip() == "Deployed web to production."

            await page.goto(f"{inbox_url}/calls/{call_id}")
            await expect(page.get_by_role("heading", level=1)).to_have_text("Done")
            await expect(page.locator("pre")).to_have_text("Deployed web to production.")

        runtime = await Runtime.open(database, settings=load_settings(database_url=database))
        try:
            record = await runtime.calls.get(call_id)
            answered = [await runtime.calls.answers(call_id, r) for r in (2, 4)]
        finally:
            await runtime.close()
    assert record.status == "completed" and record.principal == "ada" and record.task_id is not None
    assert Completed(record.id, record.result or {}, rounds=record.round).text == "Deployed web to production."
    assert answered == [
        {"pick_env.1": Answer("accept", {"environment": "production"})},
        {"confirm_prod.2": Answer("accept", {"confirm": True})},
    ]
