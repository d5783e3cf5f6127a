"""The development sign-in stays what it is for: marked as such on its page, refused on a site reached outside
loopback, and an `askback.web.pages.SignIn` whose page brings the person back to where they were."""

from __future__ import annotations

import secrets

import httpx
import pytest
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from askback.accounts.connections import ApiKeyConnection, Connections
from askback.accounts.pages import DevelopmentSignIn
from askback.accounts.setup import AccountsSetup
from askback.accounts.vault import Vault, new_key
from askback.errors import ConfigurationError
from askback.identity import PeopleSignIn
from askback.web.pages import SignIn

pytestmark = pytest.mark.anyio


def setup_at(base_url: str, verifier: object) -> AccountsSetup:
    return AccountsSetup(
        connections=Connections([ApiKeyConnection(name="notes")]),
        vault=Vault(new_key()),
        verifier=verifier,  # type: ignore[arg-type]
        base_url=base_url,
    )


@pytest.mark.parametrize("base_url", ["https://tools.example.com", "http://10.0.0.5:8000", "http://0.0.0.0:8000"])
def test_the_development_sign_in_refuses_a_site_outside_loopback(base_url: str) -> None:
    with pytest.raises(ConfigurationError, match="anyone sign in as anyone"):
        setup_at(base_url, DevelopmentSignIn(secrets.token_bytes(32)))


@pytest.mark.parametrize("base_url", ["http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:8000"])
def test_the_development_sign_in_serves_a_site_on_loopback(base_url: str) -> None:
    assert setup_at(base_url, DevelopmentSignIn(secrets.token_bytes(32))).base_url == base_url


def test_a_real_sign_in_serves_a_site_anywhere() -> None:
    async def from_the_proxy(request: Request) -> str | None:
        return request.headers.get("x-user")

    assert setup_at("https://tools.example.com", from_the_proxy).base_url == "https://tools.example.com"


def test_the_development_and_oidc_sign_ins_are_sign_ins_and_a_plain_verifier_is_not() -> None:
    async def plain(request: Request) -> str | None:
        return None

    people = PeopleSignIn(
        issuer="https://login.example.com",
        client_id="askback",
        client_secret=SecretStr("x"),
        base_url="https://tools.example.com",
        session_secret=secrets.token_bytes(32),
    )
    assert isinstance(DevelopmentSignIn(secrets.token_bytes(32)), SignIn)
    assert isinstance(people, SignIn)
    assert not isinstance(plain, SignIn)


async def test_the_development_sign_in_page_says_anyone_can_be_anyone_and_its_url_keeps_the_way_back() -> None:
    verifier = DevelopmentSignIn(secrets.token_bytes(32))

    async def where(request: Request) -> PlainTextResponse:
        return PlainTextResponse(verifier.sign_in_url(request, request.query_params["next"]))

    app = Starlette(routes=[Mount("/accounts", routes=[Route("/where", where)])])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as http:
        kept = await http.get("/accounts/where", params={"next": "/accounts/start?t=abc"})
        dropped = await http.get("/accounts/where", params={"next": "https://evil.example/"})
    assert kept.text == "/accounts/dev/sign-in?next=%2Faccounts%2Fstart%3Ft%3Dabc"
    assert dropped.text == "/accounts/dev/sign-in"

    from askback.accounts import pages
    from askback.web.pages import PageKit

    kit: PageKit = pages._KIT
    html = kit.render("sign_in.html", action="/x", current=None, problem=None, next_path=None, csrf="t")
    assert "Development sign-in: anyone can be anyone." in html
