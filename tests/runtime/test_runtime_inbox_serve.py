"""`askback inbox serve` and who reaches it: an inbox nobody signs in to (`--user`, `--user-header`) is served on
loopback, and on an address other machines reach only when `--behind-signing-in-proxy` says a proxy that signs
people in stands in front of it; otherwise it is refused with one line, before anything is bound.

Every inbox is a real `askback inbox serve` process; the reachable address is 0.0.0.0, talked to only on loopback.
The refused ones include a documentation address (192.0.2.1) that this machine does not have: refused before binding,
nothing is sent anywhere."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from askback.cli.output import ExitStatus
from askback.core.questions import is_loopback
from askback.testing import free_port
from infra import inbox_serving, run_askback

pytestmark = [pytest.mark.http]


@pytest.mark.parametrize(
    ("host", "who"),
    [
        ("0.0.0.0", ("--user", "ada")),
        ("::", ("--user", "ada")),
        ("192.0.2.1", ("--user", "ada")),
        ("0.0.0.0", ("--user-header", "X-User")),
        ("192.0.2.1", ("--user-header", "X-User")),
    ],
)
def test_an_inbox_nobody_signs_in_to_is_refused_on_a_reachable_address_with_one_line_naming_the_ways_out(
    tmp_path: Path, host: str, who: tuple[str, str]
) -> None:
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    result = run_askback(
        "inbox", "serve", "--database", database, "--host", host, "--port", str(free_port()), *who, timeout=60
    )

    assert result.returncode == ExitStatus.USAGE, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(f"error: refusing to serve the inbox on {host}, which other machines reach")
    assert "--auth-issuer" in lines[0] and "127.0.0.1" in lines[0] and "--behind-signing-in-proxy" in lines[0]
    assert not (tmp_path / "agent.db").exists()  # refused before the store was opened, and before any bind


def test_an_inbox_nobody_signs_in_to_is_served_on_loopback_and_behind_a_signing_in_proxy_on_a_reachable_one(
    tmp_path: Path,
) -> None:
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    with inbox_serving(database, "--host", "127.0.0.1", "--user", "ada") as base:
        assert httpx.get(f"{base}/", timeout=10).status_code == 200
    with inbox_serving(database, "--host", "0.0.0.0", "--user", "ada", "--behind-signing-in-proxy") as base:
        page = httpx.get(f"{base}/", timeout=10)
    assert page.status_code == 200 and "ada" in page.text


def test_the_flag_does_not_go_with_people_signing_in(tmp_path: Path) -> None:
    result = run_askback(
        "inbox", "serve", "--database", f"sqlite:///{tmp_path / 'agent.db'}", "--host", "0.0.0.0",
        "--auth-issuer", "https://login.example.com", "--auth-client-id", "inbox", "--behind-signing-in-proxy",
        timeout=60,
    )  # fmt: skip
    assert result.returncode == ExitStatus.USAGE, result
    assert "--behind-signing-in-proxy goes with --user or --user-header" in result.stderr


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("LocalHost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.0.2.1", False),
        ("localhost.example.com", False),
        ("", False),
        (None, False),
    ],
)
def test_one_predicate_says_which_addresses_only_this_machine_reaches(host: str | None, loopback: bool) -> None:
    assert is_loopback(host) is loopback
