"""`askback serve` and authentication: it says which token check is active, and it will not serve an address other
machines can reach without one, unless told `--allow-anonymous`.

Every server is a real `askback serve` process; the reachable address is 0.0.0.0, talked to only on loopback."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from test_serve_cli import serving, settings, the_one_error_line

from askback.testing import free_port
from infra import run_askback, wait_until

pytestmark = [pytest.mark.http]


# The demo's tokens make anyone anyone: served where others reach it, they are no authentication at all, so the
# demo (which always takes them) stands for a server without a token check.


@pytest.mark.parametrize("extra", [[], ["--workers", "2"]])
def test_a_reachable_address_without_a_token_check_is_refused_with_one_line_and_exit_2(
    tmp_path: Path, extra: list[str]
) -> None:
    env = settings(tmp_path)
    result = run_askback(
        "serve", "askback.demo:server", "--host", "0.0.0.0", "--port", str(free_port()), *extra,
        cwd=tmp_path, env=env, timeout=120,
    )  # fmt: skip
    line = the_one_error_line(result)
    assert "refusing to serve 0.0.0.0 without checking tokens" in line
    assert "--auth-issuer" in line and "--allow-anonymous" in line


def test_allow_anonymous_serves_a_reachable_address_and_warns(tmp_path: Path) -> None:
    env = settings(tmp_path, ASKBACK_LOG_FORMAT="text")
    with serving("--host", "0.0.0.0", "--allow-anonymous", cwd=tmp_path, env=env) as server:
        server.announced()
        warning = server.output.until(lambda line: "anyone can be anyone" in line, "the warning")
        assert "WARNING" in warning and "0.0.0.0" in warning and "--auth-issuer" in warning
        wait_until(
            lambda: httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=2).status_code == 200,
            timeout=30,
            what="/healthz",
        )


def test_on_loopback_the_active_check_is_named_at_start_up(tmp_path: Path) -> None:
    env = settings(tmp_path, ASKBACK_LOG_FORMAT="text")
    with serving(cwd=tmp_path, env=env) as server:
        line = server.output.until(lambda line: "bearer tokens of /mcp are checked by" in line, "the check line")
        assert "demo tokens" in line and "never for real users" in line


def test_an_issuer_and_a_token_verifier_together_are_refused(tmp_path: Path) -> None:
    env = settings(tmp_path)
    result = run_askback(
        "serve", "askback.demo:server", "--port", str(free_port()), "--auth-issuer", "https://issuer.example",
        "--auth-audience", "https://mcp.example/mcp", "--token-verifier", "askback.server:DemoTokenVerifier",
        cwd=tmp_path, env=env, timeout=120,
    )  # fmt: skip
    assert "either --auth-issuer" in the_one_error_line(result)


def test_a_bad_issuer_is_one_line_naming_the_variable(tmp_path: Path) -> None:
    # Plain http is for loopback only: tokens from an issuer reached in clear could be anyone's.
    env = settings(tmp_path)
    result = run_askback(
        "serve", "askback.demo:server", "--port", str(free_port()), "--auth-issuer", "http://issuer.example",
        "--auth-audience", "https://mcp.example/mcp", cwd=tmp_path, env=env, timeout=120,
    )  # fmt: skip
    line = the_one_error_line(result)
    assert "ASKBACK_AUTH_ISSUER" in line


def test_a_reachable_resource_server_without_a_configured_resource_is_refused_with_one_line(tmp_path: Path) -> None:
    # Its metadata and every 401 name the resource: on a reachable address, only configuration may say what it is.
    env = settings(tmp_path)
    result = run_askback(
        "serve", "askback.demo:server", "--host", "0.0.0.0", "--port", str(free_port()),
        "--auth-issuer", "https://issuer.example", "--auth-audience", "askback",
        cwd=tmp_path, env=env, timeout=120,
    )  # fmt: skip
    line = the_one_error_line(result)
    assert "ASKBACK_AUTH_RESOURCE" in line and "0.0.0.0" in line
