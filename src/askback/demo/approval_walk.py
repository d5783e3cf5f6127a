"""`askback demo`'s walk through an approval: bob, who is in `sre`, asks to drop a database, and someone else in `sre`
must approve that exact call first (`askback.demo.approving`).

    round 1: input_required, the link to bob's request's status page (askback.approval.drop_database)
      bob signs in on the approvals' pages: his status page says it waits; the request's own page says he cannot
      approve his own request, and offers him no form
      erin (sre) signs in on the same pages, opens the request and approves it, with a reason
    round 2: complete, "Dropped the database billing-legacy, approved by erin."
      the final round sent again answers the same and drops nothing more; `list_databases` shows one drop

The people's part is plain HTTP from this process with a cookie jar (`ApproverBrowser`), as the demo's person connects
an account (`askback.demo.person`): the development sign-in's page, the request page, its form. With `--interactive`,
the person at the terminal gets the request's page to open in their own browser (signing in as erin), or types `a`
to let the demo approve as erin, or `n` to withdraw the request.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from html import unescape
from urllib.parse import urljoin, urlsplit

import httpx
from mcp_types import CallToolResult, ElicitResult
from rich.markup import escape

from askback.demo.asking import ask, console
from askback.demo.rounds import drive, one_round, said

__all__ = ["APPROVER", "REASON", "REQUESTER", "TOOL", "ApproverBrowser", "walk_approval"]

TOOL = "drop_database"
DATABASE = "billing-legacy"
REQUESTER = "bob"
APPROVER = "erin"
REASON = "billing-legacy went with its project; its backup is kept for 30 days"
_TIMEOUT = 10.0


def _text(html: str, pattern: str) -> str | None:
    found = re.search(pattern, html, re.DOTALL)
    return None if found is None else " ".join(unescape(re.sub(r"<[^>]+>", " ", found.group(1))).split())


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


class ApproverBrowser:
    """One person on the approvals' pages, as a browser would be: a cookie jar, no redirects followed unasked, each
    form posted with the token its page gave and the site's `Origin`."""

    def __init__(self, user: str) -> None:
        self.user = user
        self.http = httpx.Client(follow_redirects=False, timeout=_TIMEOUT)

    def __enter__(self) -> ApproverBrowser:
        return self

    def __exit__(self, *_: object) -> None:
        self.http.close()

    def open(self, url: str) -> httpx.Response:
        """`url`, signing in first with the development sign-in when the pages ask who this is."""
        page = self.http.get(url)
        if page.status_code == 303 and "/dev/sign-in" in page.headers.get("location", ""):
            sign_in = urljoin(url, page.headers["location"])
            form = self.http.get(sign_in)
            csrf = _text(form.text, r'name="csrf" value="([^"]*)"')
            next_path = _text(form.text, r'name="next" value="([^"]*)"') or ""
            signed = self.http.post(
                sign_in,
                data={"user": self.user, "csrf": csrf or "", "next": next_path},
                headers={"Origin": _origin(url)},
            )
            if signed.status_code != 303:
                return signed
            page = self.http.get(urljoin(url, signed.headers["location"]))
        return page

    def decide(self, request_url: str, decision: str, reason: str) -> str:
        """Open the request's page and send `decision` with `reason` on its form; what the page then says."""
        page = self.open(request_url)
        digest = _text(page.text, r'name="digest" value="([0-9a-f]{64})"')
        csrf = _text(page.text, r'name="csrf" value="([^"]*)"')
        if page.status_code != 200 or digest is None or csrf is None:
            return f"no form to decide on: {said_by(page)}"
        form = {"decision": decision, "reason": reason, "digest": digest, "csrf": csrf}
        return said_by(self.http.post(request_url, data=form, headers={"Origin": _origin(request_url)}))


def said_by(page: httpx.Response) -> str:
    """What a page of the approvals says: its status or refusal line, else its heading."""
    for pattern in (r'role="status"><p[^>]*>(.*?)</p>', r"<main>.*?<p>(.*?)</p>", r"<h1>(.*?)</h1>"):
        found = _text(page.text, pattern)
        if found:
            return found
    return f"HTTP {page.status_code}"


def _request_url(status_url: str) -> str:
    return status_url.removesuffix("/status")


def _requester_looks(status_url: str, say: Callable[[str], None]) -> None:
    with ApproverBrowser(REQUESTER) as bob:
        status = bob.open(status_url)
        say(f"{REQUESTER} opens it and signs in on the approvals' pages: {said_by(status)}")
        own = bob.open(_request_url(status_url))
        offered = 'name="digest"' in own.text
        say(f"{REQUESTER} opens the request to approve it himself: {said_by(own)}" + (" (a form!)" if offered else ""))


def _approve_as_erin(status_url: str, say: Callable[[str], None]) -> None:
    with ApproverBrowser(APPROVER) as erin:
        outcome = erin.decide(_request_url(status_url), "approve", REASON)
    say(f"{APPROVER} (sre) signs in on the same pages, opens the request and approves it ({REASON}): {outcome}")


def _dim(line: str) -> None:
    console.print(f"    [dim]{escape(line)}[/]")


def _scripted(key: str, params: dict[str, object]) -> ElicitResult:
    status_url = str(params.get("url", ""))
    if "Not decided yet" not in str(params.get("message")):
        _requester_looks(status_url, _dim)
        _approve_as_erin(status_url, _dim)
    return ElicitResult(action="accept")


def _at_the_terminal(key: str, params: dict[str, object]) -> ElicitResult:
    status_url = str(params.get("url", ""))
    console.print(
        f"    [dim]Someone in sre other than {REQUESTER} must approve. To do it yourself, open "
        f"{escape(_request_url(status_url))} in your browser and sign in as {APPROVER}.[/]"
    )
    typed = ask(f"    Press Enter once {APPROVER} has decided (a: the demo approves as {APPROVER}, n: withdraw): ")
    if typed is None:
        return ElicitResult(action="cancel")
    typed = typed.strip().lower()
    if typed in ("n", "no"):
        return ElicitResult(action="decline")
    if typed == "a":
        _approve_as_erin(status_url, _dim)
    return ElicitResult(action="accept")


def walk_approval(url: str, *, interactive: bool) -> frozenset[str]:
    """Walk the approval on the demo server's /mcp `url` (see the module's docstring); the workers that served it."""
    arguments = {"name": DATABASE}
    console.rule(
        f"[bold]{REQUESTER}[/] calls [cyan]{TOOL}[/] {escape(str(arguments))} [dim](someone else in sre must approve)[/]"
    )
    respond = _at_the_terminal if interactive else _scripted

    def answer(key: str, params: dict[str, object]) -> ElicitResult:
        console.print(f"    asks [bold]{escape(key)}[/]: {escape(str(params.get('message')))}")
        console.print(f"    link {escape(str(params.get('url')))}")
        given = respond(key, params)
        console.print(f"    answers {given.action}")
        return given

    driven = drive(url, REQUESTER, TOOL, arguments, answer)
    if isinstance(driven.last.result, CallToolResult) and said(driven.last).startswith("Dropped"):
        again = one_round(
            url,
            TOOL,
            arguments,
            token=f"demo-{REQUESTER}",
            responses=driven.request.responses,
            request_state=driven.request.request_state,
        )
        console.print(f"  the final round sent again: {escape(repr(said(again)))}")
    listed = one_round(url, "list_databases", {}, token=f"demo-{REQUESTER}")
    if isinstance(listed.result, CallToolResult) and isinstance(listed.result.structured_content, dict):
        found = listed.result.structured_content
        drops = ", ".join(f"{d['name']} by {d['by']}, approved by {d['approved_by']}" for d in found.get("drops", []))
        console.print(
            f"  [dim]databases left: {escape(', '.join(found.get('databases', [])) or 'none')}; "
            f"dropped: {escape(drops or 'none')}[/]"
        )
    return driven.instances
