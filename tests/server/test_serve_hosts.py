"""`askback serve` answers only its configured hosts, on `/mcp` and on every mounted route (the hosted account pages
here), and names its protected resource from configuration alone, never from a request's `Host`. Real `askback
serve` processes on loopback."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from askback.accounts.vault import new_key
from askback.testing import free_port, serving

pytestmark = [pytest.mark.http]

REBIND = "rebind.example"
PAGE = "/accounts/dev/sign-in"
MCP_HEADERS = {"MCP-Protocol-Version": "2025-11-25", "Accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


def _demo_env(tmp_path: Path, port: int, **more: str) -> dict[str, str]:
    """The demo server with its mail accounts' hosted pages (at /accounts; the mail issuer is never reached here)."""
    return {
        "ASKBACK_DATABASE_URL": f"sqlite:///{tmp_path / 'server.db'}",
        "ASKBACK_STATE_KEYS": secrets.token_urlsafe(48),
        "ASKBACK_VAULT_KEYS": new_key(),
        "ASKBACK_DEMO_MAIL_ISSUER": "http://127.0.0.1:9",
        "ASKBACK_DEMO_MAIL_CLIENT_SECRET": secrets.token_urlsafe(16),
        "ASKBACK_DEMO_PUBLIC_URL": f"http://127.0.0.1:{port}",
        "ASKBACK_DEMO_SIGN_IN_SECRET": secrets.token_urlsafe(32),
        **more,
    }


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    env = _demo_env(tmp_path, port, ASKBACK_ALLOWED_HOSTS="askback.example.com")
    with serving("askback.demo:server", port=port, workers=1, env=env) as url:
        yield url.removesuffix("/mcp")


def _reached(base: str, host: str) -> tuple[httpx.Response, httpx.Response]:
    """`/mcp` (initialize) and a hosted page, each asked for `host`."""
    port = urlsplit(base).port
    named = {"Host": host if ":" in host else f"{host}:{port}"}
    mcp = httpx.post(f"{base}/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **named}, timeout=10)
    page = httpx.get(f"{base}{PAGE}", headers={**named, "Accept": "text/html"}, timeout=10)
    return mcp, page


def test_serve_refuses_a_rebinding_host_on_mcp_and_on_a_hosted_page_and_serves_loopback(demo: str) -> None:
    mcp, page = _reached(demo, REBIND)
    assert (mcp.status_code, page.status_code) == (421, 421)
    assert mcp.json()["error"] == "misdirected_request"
    assert "Sign in" not in page.text and page.headers["x-frame-options"] == "DENY"
    assert page.headers["content-security-policy"].startswith("default-src 'none'")
    mcp, page = _reached(demo, "127.0.0.1")
    assert (mcp.status_code, page.status_code) == (200, 200)
    probe = httpx.get(f"{demo}/healthz", headers={"Host": "10.1.2.3:8000"}, timeout=10)
    assert probe.status_code == 200


def test_serve_answers_a_public_host_the_setting_adds_on_mcp_and_on_a_hosted_page(demo: str) -> None:
    mcp, page = _reached(demo, "askback.example.com")
    assert (mcp.status_code, page.status_code) == (200, 200), mcp.text


# --- the protected resource: named from configuration --------------------------------------------------------------


@contextlib.contextmanager
def _identity(tmp_path: Path, **more: str) -> Iterator[str]:
    env = {
        "ASKBACK_DATABASE_URL": f"sqlite:///{tmp_path / 'server.db'}",
        "ASKBACK_STATE_KEYS": secrets.token_urlsafe(48),
        # Never reached: the metadata and the challenge need nothing of the issuer.
        "ASKBACK_AUTH_ISSUER": "http://127.0.0.1:9",
        "ASKBACK_AUTH_AUDIENCE": "askback-tests",
        **more,
    }
    with serving("tests.fixtures.identity_server:server", port=free_port(), workers=1, env=env) as url:
        yield url.removesuffix("/mcp")


def _metadata_and_challenge(base: str, host: str) -> tuple[httpx.Response, str]:
    named = {"Host": f"{host}:{urlsplit(base).port}"}
    metadata = httpx.get(f"{base}/.well-known/oauth-protected-resource/mcp", headers=named, timeout=10)
    refused = httpx.post(f"{base}/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **named}, timeout=10)
    assert refused.status_code == 401
    return metadata, refused.headers["www-authenticate"]


def test_without_a_configured_resource_the_metadata_and_the_challenge_name_the_served_url_whatever_the_host(
    tmp_path: Path,
) -> None:
    with _identity(tmp_path) as base:
        by_address, challenge = _metadata_and_challenge(base, "127.0.0.1")
        by_name, other_challenge = _metadata_and_challenge(base, "localhost")
    assert by_address.json() == by_name.json()
    assert by_address.json()["resource"] == f"{base}/mcp"
    assert challenge == other_challenge
    assert f'resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"' in challenge
    assert by_address.headers["cache-control"] == by_name.headers["cache-control"] == "no-store"


def test_the_public_url_names_the_resource_whatever_the_host_and_its_metadata_may_be_cached(tmp_path: Path) -> None:
    resource = "https://askback.example.com/mcp"
    with _identity(tmp_path, ASKBACK_PUBLIC_URL="https://askback.example.com") as base:
        metadata, challenge = _metadata_and_challenge(base, "localhost")
        public, public_challenge = _metadata_and_challenge(base, "askback.example.com")
    assert metadata.json() == public.json() and challenge == public_challenge
    assert metadata.json()["resource"] == resource
    assert 'resource_metadata="https://askback.example.com/.well-known/oauth-protected-resource/mcp"' in challenge
    assert metadata.headers["cache-control"] == "public, max-age=300"


@pytest.mark.parametrize(
    ("method", "path", "status"), [("GET", "/nope", 404), ("GET", "/mcp/x", 404), ("PUT", "/mcp", 405)]
)
def test_serves_own_404_and_405_carry_the_security_headers(demo: str, method: str, path: str, status: int) -> None:
    answer = httpx.request(method, f"{demo}{path}", timeout=10)

    assert answer.status_code == status, answer.text
    assert answer.headers["content-security-policy"].startswith("default-src 'none'")
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["x-frame-options"] == "DENY"
    assert answer.headers["referrer-policy"] == "no-referrer"


def test_a_hosted_page_keeps_its_own_policy_with_its_style_hash(demo: str) -> None:
    page = httpx.get(f"{demo}{PAGE}", headers={"Accept": "text/html"}, timeout=10)

    assert page.status_code == 200, page.text
    assert "style-src 'sha256-" in page.headers["content-security-policy"]
