"""The ASGI app around a server: authentication, health and readiness, the serving instance header."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from askback import Askback, load_settings
from askback.http import DemoTokenVerifier, build_app

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def client_for(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000") as http,
    ):
        yield http


async def test_with_a_real_verifier_a_request_without_a_token_is_401(make_settings: Callable[..., Any]) -> None:
    server = Askback("auth-test", settings=make_settings(demo_auth=False))
    async with server.running(), client_for(build_app(server, token_verifier=DemoTokenVerifier())) as http:
        missing = await http.post("/mcp", json={})
        health = await http.get("/healthz")
        wrong = await http.post("/mcp", json={}, headers={"Authorization": "Bearer nope"})
        right = await http.post("/mcp", json={}, headers={"Authorization": "Bearer demo-alice"})
    assert missing.status_code == 401 and "Bearer" in missing.headers["www-authenticate"]
    assert health.status_code == 200  # probes carry no token
    assert wrong.status_code == 401
    assert right.status_code != 401


async def test_readiness_needs_a_shared_key_ring(db_url: str) -> None:
    server = Askback("ready-test", settings=load_settings(database_url=db_url, state_keys=None))
    async with server.running(), client_for(build_app(server)) as http:
        health = await http.get("/healthz")
        ready = await http.get("/readyz")
    assert health.status_code == 200 and health.headers["x-askback-instance"].count(":") == 1
    assert ready.status_code == 503
    assert any("ASKBACK_STATE_KEYS" in p for p in ready.json()["problems"])


async def test_readiness_is_ok_with_keys_and_a_current_database(make_settings: Callable[..., Any]) -> None:
    server = Askback("ready-test", settings=make_settings())
    async with server.running(), client_for(build_app(server)) as http:
        ready = await http.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
