"""`askback serve --auth-issuer` names itself from its configuration and its socket, never from headers a client
sends: a real server process on loopback (where uvicorn would trust `X-Forwarded-*` by default), trusting an issuer
of the tests' own."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from _loopback_issuer import AUDIENCE, LoopbackIssuer, loopback_issuer
from test_bearer_e2e import tools_call

from askback.testing import free_port, serving
from infra import ROOT

pytestmark = pytest.mark.http

SERVER = "tests.fixtures.identity_server:server"
FORWARDED = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9", "X-Forwarded-Host": "evil.example"}


@pytest.fixture(scope="module")
def issuer() -> Iterator[LoopbackIssuer]:
    with loopback_issuer() as running:
        yield running


@pytest.fixture(scope="module")
def base(issuer: LoopbackIssuer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp: Path = tmp_path_factory.mktemp("forwarded")
    env = {
        "ASKBACK_STATE_KEYS": secrets.token_urlsafe(32),
        "ASKBACK_DATABASE_URL": f"sqlite:///{tmp / 'server.db'}",
        "ASKBACK_AUTH_ISSUER": issuer.issuer,
        "ASKBACK_AUTH_AUDIENCE": AUDIENCE,
    }
    with serving(SERVER, port=free_port(), workers=1, env=env, cwd=str(ROOT)) as url:
        yield url.removesuffix("/mcp")


def test_x_forwarded_proto_changes_neither_the_resource_metadata_nor_the_challenge(base: str) -> None:
    metadata_url = f"{base}/.well-known/oauth-protected-resource/mcp"
    plain = httpx.get(metadata_url, timeout=10)
    forwarded = httpx.get(metadata_url, headers=FORWARDED, timeout=10)
    assert plain.status_code == forwarded.status_code == 200, (plain.text, forwarded.text)
    assert forwarded.json() == plain.json()
    assert plain.json()["resource"] == f"{base}/mcp"

    call, headers = tools_call("greet", None)
    plain = httpx.post(f"{base}/mcp", json=call, headers=headers, timeout=10)
    forwarded = httpx.post(f"{base}/mcp", json=call, headers={**headers, **FORWARDED}, timeout=10)
    assert plain.status_code == forwarded.status_code == 401
    assert forwarded.headers["www-authenticate"] == plain.headers["www-authenticate"]
    assert f'resource_metadata="{metadata_url}"' in plain.headers["www-authenticate"]
