"""A URL question's link is read as a browser reads it (`askback.runtime.questions.checked_link`, the WHATWG URL rules
through `ada-url`): the host shown is the one the browser reaches, an internationalised host is shown with its
punycode beside it, a host written with invisible or direction-changing characters is refused, and the inbox's
"Open" link is the address that was checked. The last tests open the inbox (`askback inbox serve`, its own process)
in a real Chromium, follow "Open" and compare where Chromium goes with the host the page showed (every request off
loopback is intercepted, so nothing leaves the machine).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import ada_url
import pytest
from rich.console import Console
from tests.fixtures.hostile_server import serving_hostile

from askback.errors import UnsafeLinkError
from askback.runtime import ParkedQuestion
from askback.runtime.questions import checked_link, safe_link
from askback.runtime.terminal import TerminalRenderer
from askback.testing import free_port
from infra import browser_context, chromium, inbox_serving

BACKSLASH = "https://evil.example\\.accounts.example.com/login"


def test_a_backslash_ends_the_host_as_it_does_in_a_browser() -> None:
    link = checked_link(BACKSLASH)

    assert (link.host, link.href) == ("evil.example", "https://evil.example/.accounts.example.com/login")
    assert safe_link(BACKSLASH) == "evil.example"


@pytest.mark.parametrize(
    ("url", "host", "href"),
    [
        ("https://accounts.exa\tmple.com/\nlogin", "accounts.example.com", "https://accounts.example.com/login"),
        ("https://accounts.%65xample.com/login", "accounts.example.com", "https://accounts.example.com/login"),
        ("HTTPS://Accounts.Example.COM", "accounts.example.com", "https://accounts.example.com/"),
        ("https:/\\accounts.example.com\\login", "accounts.example.com", "https://accounts.example.com/login"),
        ("https://0x7f.1/login", "127.0.0.1", "https://127.0.0.1/login"),
    ],
    ids=["tab and newline", "percent-encoded", "upper case", "slash and backslash", "hexadecimal address"],
)
def test_the_host_shown_is_the_one_a_browser_reaches(url: str, host: str, href: str) -> None:
    link = checked_link(url)

    assert (link.host, link.href) == (host, href)


def test_an_internationalised_host_is_shown_in_unicode_with_its_punycode_beside_it() -> None:
    for url in ("https://bücher.example/login", "https://xn--bcher-kva.example/login"):
        link = checked_link(url)
        assert (link.host, link.ascii_host, link.href) == (
            "bücher.example",
            "xn--bcher-kva.example",
            "https://xn--bcher-kva.example/login",
        )
        assert safe_link(url) == "bücher.example (xn--bcher-kva.example)"


@pytest.mark.parametrize(
    "url",
    [
        "https://accounts.\u202emoc.elpmaxe.example/login",
        "https://accounts\u200b.example.com/login",
        "https://accounts%E2%80%8B.example.com/login",
        "https://accounts\u2066.example.com/login",
        "https://accounts\u00ad.example.com/login",
        "https://accounts\ufe0f.example.com/login",
        "https://a\u200db.example/login",
    ],
    ids=["U+202E", "U+200B", "U+200B percent-encoded", "U+2066", "soft hyphen", "variation selector", "U+200D"],
)
def test_a_host_written_with_an_invisible_or_direction_changing_character_is_refused(url: str) -> None:
    with pytest.raises(UnsafeLinkError, match="invisible or direction-changing character"):
        checked_link(url)


@pytest.mark.parametrize(
    "url", ["https://", "https://exa mple.com/", "https://[::1/", "not a link at all", "https://ex%00ample.com/"]
)
def test_a_link_a_browser_cannot_parse_is_refused(url: str) -> None:
    with pytest.raises(UnsafeLinkError):
        checked_link(url)


@pytest.mark.anyio
async def test_the_terminal_shows_the_host_a_browser_reaches_and_the_address_it_was_handed() -> None:
    console = Console(file=io.StringIO(), width=120)
    renderer = TerminalRenderer(console=console, read_line=lambda prompt: "c")
    question = ParkedQuestion("call_l1", 1, "connect", "elicitation/create", "url", "Sign in.", url=BACKSLASH)

    await renderer.ask(question)

    screen = console.file.getvalue()  # type: ignore[attr-defined]
    assert "This link goes to: evil.example\n" in screen
    assert "https://evil.example/.accounts.example.com/login\n" in screen


# In a real Chromium -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    with serving_hostile(free_port()) as url:
        yield url


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}


def park(url: str, tool: str, database: str) -> str:
    parked = subprocess.run(
        [sys.executable, "-m", "askback", "call", url, tool, "--park", "--database", database, "--user", "ada"],
        capture_output=True,
        text=True,
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert parked.returncode == 0, parked.stderr
    return parked.stdout.strip()


@pytest.mark.http
@pytest.mark.parametrize(
    ("tool", "shown"),
    [("link_backslash", "evil.example"), ("link_idna", "bücher.example")],
)
def test_the_inbox_open_link_takes_chromium_to_the_host_the_page_shows(
    hostile: str, tmp_path: Path, tool: str, shown: str
) -> None:
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    call_id = park(hostile, tool, database)
    reached: list[str] = []
    with inbox_serving(database, "--user", "ada") as base, chromium() as browser:
        context = browser_context(browser, timeout_ms=30_000)

        def off_loopback(route: object) -> None:
            request = route.request  # type: ignore[attr-defined]
            if urlsplit(request.url).hostname == "127.0.0.1":
                route.continue_()  # type: ignore[attr-defined]
                return
            reached.append(request.url)
            route.fulfill(status=200, content_type="text/plain", body="arrived")  # type: ignore[attr-defined]

        context.route("**/*", off_loopback)
        page = context.new_page()
        page.goto(f"{base}/")
        page.get_by_role("link", name="Sign in there.").click()
        assert call_id in page.url
        host = page.locator(".host").inner_text()
        assert host == shown
        with context.expect_page() as opened:
            page.locator("a.open").click()
        opened.value.wait_for_load_state()
        context.close()
    assert len(reached) == 1, reached
    assert urlsplit(reached[0]).hostname == ada_url.idna_to_ascii(host).decode()


@pytest.mark.http
@pytest.mark.parametrize("tool", ["link_rlo", "link_zwsp"])
def test_the_inbox_offers_no_open_link_for_a_host_with_hidden_characters(
    hostile: str, tmp_path: Path, tool: str
) -> None:
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    park(hostile, tool, database)
    with inbox_serving(database, "--user", "ada") as base, chromium() as browser:
        page = browser_context(browser, timeout_ms=30_000).new_page()
        page.goto(f"{base}/")
        page.get_by_role("link", name="Sign in there.").click()
        assert page.locator("a.open").count() == 0
        assert "invisible or direction-changing character" in page.locator(".error").inner_text()
        assert page.get_by_role("button", name="Decline").is_visible()
