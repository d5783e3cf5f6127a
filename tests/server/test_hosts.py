"""Which hosts an askback HTTP surface answers (`askback.web.asgi.HostGuard`, `AllowedHosts`, `parse_host`), and which
origins its forms are taken from (`FormGuard`): configured ones only, never one built from the request's `Host`."""

from __future__ import annotations

import logging
import secrets
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from askback import Askback, ConfigurationError, load_settings
from askback.server.http import build_app
from askback.web.asgi import AllowedHosts, FormGuard, HostGuard, parse_host

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("127.0.0.1:8000", ("127.0.0.1", 8000)),
        ("LocalHost.", ("localhost", None)),
        ("[::1]:80", ("[::1]", 80)),
        ("[0:0:0:0:0:0:0:1]", ("[::1]", None)),
        ("Tools.Example.COM:443", ("tools.example.com", 443)),
        ("", None),
        ("alice@127.0.0.1", None),
        ("127.0.0.1/x", None),
        ("a b", None),
        ("bücher.example", None),
        ("evil\x00.example", None),
        ("[::1%25eth0]", None),
        ("::1", None),
        ("host:", None),
        ("host:65536", None),
        ("host:80:80", None),
        ("a..example", None),
        ("-a.example", None),
    ],
)
def test_a_host_header_is_read_strictly(value: str, parsed: tuple[str, int | None] | None) -> None:
    assert parse_host(value) == parsed


def test_the_loopback_names_on_any_port_and_the_configured_hosts_are_served_and_no_other() -> None:
    hosts = AllowedHosts.of(["*.corp.example", "10.0.0.5:8000"], urls=["https://Tools.Example.com/base", None])
    served = ["localhost", "127.0.0.1:1", "[::1]:8765", "tools.example.com", "a.b.corp.example", "10.0.0.5:9"]
    assert {host: hosts.judge([host]) for host in served} == dict.fromkeys(served, "served")
    assert hosts.judge(["rebind.example:8765"]) == "misdirected"
    assert hosts.judge(["corp.example"]) == "misdirected"
    assert hosts.judge(["127.0.0.1", "127.0.0.1"]) == "malformed"
    assert hosts.judge([]) == "malformed"
    assert hosts.judge(["127.0.0.1 "]) == "malformed"


def test_a_bad_allowed_host_is_refused_at_start_naming_the_setting() -> None:
    with pytest.raises(ConfigurationError, match="ASKBACK_ALLOWED_HOSTS"):
        load_settings(allowed_hosts="tools.example.com, not a host")


def _guarded(allowed: AllowedHosts) -> HostGuard:
    async def hello(request: Request) -> Response:
        return PlainTextResponse("hello")

    app = Starlette(routes=[Route("/", hello), Route("/healthz", hello)])
    return HostGuard(app, allowed=allowed, exempt=["/healthz"])


async def test_a_guarded_app_refuses_other_hosts_with_421_and_the_headers_and_logs_each_host_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    transport = httpx.ASGITransport(app=_guarded(AllowedHosts.of()))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as http:
        with caplog.at_level(logging.WARNING, logger="askback"):
            pages = [await http.get("/", headers={"Host": "rebind.example", "Accept": "text/html"}) for _ in range(3)]
        as_json = await http.get("/", headers={"Host": "rebind.example"})
        twice = await http.get("/", headers=[("Host", "127.0.0.1"), ("Host", "127.0.0.1")])
        probe = await http.get("/healthz", headers={"Host": "10.1.2.3:8000"})
        served = await http.get("/")
    assert [p.status_code for p in pages] == [421, 421, 421]
    assert pages[0].headers["content-type"].startswith("text/html") and "hello" not in pages[0].text
    assert pages[0].headers["content-security-policy"].startswith("default-src 'none'")
    assert pages[0].headers["x-frame-options"] == "DENY" and pages[0].headers["cache-control"] == "no-store"
    assert as_json.json()["error"] == "misdirected_request"
    assert twice.status_code == 400 and twice.json()["error"] == "invalid_host"
    assert (probe.status_code, served.status_code, served.text) == (200, 200, "hello")
    lines = [r.getMessage() for r in caplog.records if "rebind.example" in r.getMessage()]
    assert len(lines) == 1 and "ASKBACK_ALLOWED_HOSTS" in lines[0]


def _form_request(host: str, origin: str) -> Request:
    scope = {
        "type": "http",
        "method": "POST",
        "scheme": "http",
        "path": "/",
        "query_string": b"",
        "server": ("127.0.0.1", 8765),
        "headers": [(b"host", host.encode()), (b"origin", origin.encode())],
    }
    return Request(scope)


def test_the_form_guard_refuses_an_origin_equal_to_the_requests_own_unconfigured_host() -> None:
    guard = FormGuard("csrf", origins=["https://tools.example.com"])
    rebound = _form_request("rebind.example:8765", "http://rebind.example:8765")
    assert guard.cross_site(rebound)
    assert not guard.cross_site(_form_request("127.0.0.1:8765", "http://127.0.0.1:8765"))
    assert guard.cross_site(_form_request("127.0.0.1:8765", "http://127.0.0.1:8766"))  # another port: another site
    assert not guard.cross_site(_form_request("tools.example.com", "https://tools.example.com"))
    configured = FormGuard("csrf", hosts=AllowedHosts.of(["inbox.example.com"]))
    assert not configured.cross_site(_form_request("inbox.example.com:8765", "http://inbox.example.com:8765"))
    assert configured.cross_site(_form_request("inbox.example.com:8765", "https://elsewhere.example"))


def _server(tmp_path: Path, **settings: object) -> Askback:
    given = load_settings(
        database_url=f"sqlite:///{tmp_path / 'a.db'}", state_keys=secrets.token_urlsafe(32), **settings
    )
    return Askback("hosts", settings=given)


async def test_mcp_refuses_a_page_of_another_origin_and_serves_a_host_the_setting_adds(tmp_path: Path) -> None:
    server = _server(tmp_path, allowed_hosts="askback.example.com", demo_auth=True)
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {}}
    headers = {"MCP-Protocol-Version": "2025-11-25", "Accept": "application/json, text/event-stream"}
    app = build_app(server)
    async with server.running(), app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://askback.example.com") as http:
            init = {**body, "method": "initialize", "params": _initialize()}
            served = await http.post("/mcp", json=init, headers=headers)
            from_a_page = await http.post("/mcp", json=init, headers={**headers, "Origin": "https://evil.example"})
            misdirected = await http.post("/mcp", json=init, headers={**headers, "Host": "rebind.example"})
    assert served.status_code == 200, served.text
    assert from_a_page.status_code == 403 and from_a_page.json()["error"] == "invalid_origin"
    assert misdirected.status_code == 421


def _initialize() -> dict[str, object]:
    return {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
