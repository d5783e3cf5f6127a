"""One predicate says which hosts are this machine, and every rule that allows plain http only there asks it."""

from __future__ import annotations

from pathlib import Path

import pytest

from askback.core.addresses import is_loopback

HOSTS = [
    ("127.0.0.1", True),
    ("127.1.2.3", True),
    ("::1", True),
    ("[::1]", True),
    ("localhost", True),
    ("LOCALHOST.", True),
    ("localhost.localdomain", True),
    ("0.0.0.0", False),
    ("::", False),
    ("example.com", False),
    ("127.0.0.1.nip.io", False),
    ("localhost.example.com", False),
]


@pytest.mark.parametrize(("host", "loopback"), HOSTS)
def test_the_loopback_hosts_are_the_loopback_names_and_addresses_only(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(("host", "loopback"), HOSTS)
def test_every_plain_http_rule_admits_exactly_the_loopback_hosts(host: str, loopback: bool) -> None:
    from askback.accounts.connections._checks import url_problem
    from askback.core.questions import check_link
    from askback.errors import DefinitionError, UnsafeLinkError
    from askback.identity._discovery import check_issuer
    from askback.runtime.questions import checked_link
    from askback.webhooks._destinations import host_problem

    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    url = f"http://{shown}:8000/page"

    def admits(check: object) -> bool:
        try:
            check()  # type: ignore[operator]
        except (ValueError, DefinitionError, UnsafeLinkError):
            return False
        return True

    assert admits(lambda: check_link(url)) is loopback
    assert admits(lambda: check_issuer(f"http://{shown}:8000")) is loopback
    assert (url_problem(url) is None) is loopback
    assert admits(lambda: checked_link(url, development=True)) is loopback
    if loopback:
        assert host_problem(host) is not None  # a webhook may not go to this machine


def test_the_loopback_test_is_written_once() -> None:
    src = Path(__file__).resolve().parents[2] / "src" / "askback"
    written = [
        path.relative_to(src).as_posix()
        for path in src.rglob("*.py")
        if "def is_loopback(" in path.read_text(encoding="utf-8")
        or '{"127.0.0.1", "localhost"' in path.read_text(encoding="utf-8")
    ]
    assert written == ["core/addresses.py"]
