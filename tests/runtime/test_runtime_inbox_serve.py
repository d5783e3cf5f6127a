"""`askback inbox serve` and who reaches it: an inbox nobody signs in to (`--user`, `--user-header`) is served on
loopback, and on an address other machines reach only when `--behind-signing-in-proxy` says a proxy that signs
people in stands in front of it; otherwise it is refused with one line, before anything is bound.

Every inbox is a real `askback inbox serve` process; the reachable address is 0.0.0.0, talked to only on loopback.
The refused ones include a documentation address (192.0.2.1) that this machine does not have: refused before binding,
nothing is sent anywhere.

What a server says reaches the inbox's log only escaped, one JSON record a line: a hostile server
(`tests/fixtures/hostile_server.py`) refuses the answers with escape sequences and a fake log line of its own."""

from __future__ import annotations

import json
import re
import socket
import sys
from pathlib import Path

import httpx
import pytest
from tests.fixtures.hostile_server import serving_hostile

from askback.cli.output import ExitStatus
from askback.core.addresses import is_loopback
from askback.testing import free_port
from infra import inbox_serving, run_askback, running_process, wait_until

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


def test_a_servers_refusal_reaches_the_inbox_log_escaped_inside_one_json_record(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    log = tmp_path / "inbox.log"
    with serving_hostile(free_port()) as url:
        parked = run_askback("call", url, "refused_on_retry", "--park", "--user", "erin", "--database", database)
        assert parked.returncode == ExitStatus.OK, parked
        call_id = parked.stdout.strip()
        with inbox_serving(database, "--user", "erin", log=log) as base, httpx.Client(base_url=base) as page:
            path = f"/q/{call_id}/1/ok"
            form = page.get(path)
            token = re.search(r'name="csrf" value="([^"]+)"', form.text)
            assert form.status_code == 200 and token is not None, form.text
            answered = page.post(path, data={"csrf": token[1], "action": "decline"}, headers={"Origin": base})
            assert answered.status_code == 502, answered.text
            wait_until(lambda: "could not resume" in log.read_text(errors="replace"), timeout=30, what="the log line")
    written = log.read_bytes()
    assert b"\x1b" not in written and b"\x07" not in written, written
    lines = written.decode().splitlines()
    assert not [line for line in lines if line.startswith("FAKE LOG LINE")], written
    (record,) = [json.loads(line) for line in lines if "could not resume" in line]
    assert record["level"] == "warning" and "Refused \x1b]52;c;" in record["message"]
    assert "\nFAKE LOG LINE" in record["message"]


def test_an_inbox_on_the_ipv6_loopback_names_its_address_in_brackets(tmp_path: Path) -> None:
    port = free_port()
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", port))
    except OSError:
        pytest.skip("this machine cannot bind the IPv6 loopback ::1")
    log = tmp_path / "inbox.log"
    argv = [sys.executable, "-m", "askback", "inbox", "serve", "--database", f"sqlite:///{tmp_path / 'agent.db'}"]
    argv += ["--user", "alice", "--host", "::1", "--port", str(port)]

    def ready() -> bool:
        try:
            return httpx.get(f"http://[::1]:{port}/", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    with running_process(argv, ready=ready, what="askback inbox serve", log=log, own_settings=True):
        banner = [line for line in log.read_text().splitlines() if line.startswith("askback inbox: ")]
    assert banner == [f"askback inbox: http://[::1]:{port}/"], log.read_text()
