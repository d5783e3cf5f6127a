"""A connected account's credential goes only to the origins its connection declares.

`account.http` is an httpx client a model can steer (a tool that fetches a URL it was given). It must put the token
or API key on requests to the connection's `origins` only, refuse every other request with `CredentialOriginError`
before anything is sent, and never let a redirect carry the credential to another origin. A connection that declares
no origins sends its credential nowhere.

Real parts: two HTTP servers on loopback sockets that record every request they receive (with its `Authorization`
and `X-Api-Key` headers), a SQLite store, a real vault and the real token keeper. The connection definitions and the
TOML loader are checked as the functions they are.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import pytest
from pydantic import SecretStr

from askback.accounts.connections import (
    ApiKeyConnection,
    Connections,
    OAuthConnection,
    discover,
    github,
    google,
    load_connections,
    microsoft,
    origin,
    preset,
    slack,
)
from askback.accounts.repository import Account, Accounts
from askback.accounts.status import Event, Status
from askback.accounts.tokens import ConnectedAccount, TokenKeeper
from askback.accounts.vault import Vault, new_key
from askback.clock import FrozenClock
from askback.db.migrate import all_components
from askback.errors import AskbackError, ConfigurationError, CredentialOriginError, DefinitionError
from askback.store import Store
from infra import QuietHandler, serving_http

WAIT = 15
TOKEN = "at-canary-" + "7" * 24
KEY = "key-canary-" + "9" * 24


# --- the definitions ------------------------------------------------------------------------------------------------


def oauth(**changes: Any) -> OAuthConnection:
    values: dict[str, Any] = {
        "name": "api",
        "client_id": "askback",
        "client_secret": SecretStr("client-secret"),
        "authorize_url": "https://id.example/authorize",
        "token_url": "https://id.example/token",
    }
    return OAuthConnection(**{**values, **changes})


def test_origins_are_kept_normalised_once_each() -> None:
    connection = oauth(
        origins=[
            "HTTPS://API.Example.COM:443/",
            "https://api.example.com",
            "https://api.example.com:8443",
            "http://127.0.0.1:8080",
            "http://[::1]:80",
            "https://bücher.example",
        ]
    )
    assert connection.origins == (
        "https://api.example.com",
        "https://api.example.com:8443",
        "http://127.0.0.1:8080",
        "http://[::1]",
        "https://xn--bcher-kva.example",
    )
    assert ApiKeyConnection(name="k", header="X-Api-Key", origins=["https://API.example"]).origins == (
        "https://api.example",
    )
    assert origin(httpx.URL("https://API.example.com:443/v1/x?y=1")) == "https://api.example.com"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        pytest.param("http://api.example.com", "must use https", id="plain http off loopback"),
        pytest.param("https://api.example.com/v1", "scheme://host[:port] only", id="a path"),
        pytest.param("https://api.example.com?x=1", "scheme://host[:port] only", id="a query"),
        pytest.param("https://api.example.com#top", "scheme://host[:port] only", id="a fragment"),
        pytest.param("https://user:pw@api.example.com", "user name or password", id="userinfo"),
        pytest.param("https://*.example.com", "no wildcards", id="a wildcard"),
        pytest.param("api.example.com", "is not an origin", id="no scheme"),
        pytest.param("ftp://files.example.com", "not an https origin", id="another scheme"),
        pytest.param("https://api.example.com:70000", "port outside", id="a port out of range"),
        pytest.param("", "is not an origin", id="empty"),
    ],
)
def test_an_origin_that_is_not_one_is_refused_when_the_connection_is_defined(value: str, says: str) -> None:
    with pytest.raises(DefinitionError, match="origin") as refused:
        oauth(origins=[value])
    assert says in str(refused.value)
    with pytest.raises(DefinitionError, match=r"API key connection 'k': origin"):
        ApiKeyConnection(name="k", header="X-Api-Key", origins=[value])


def test_origins_written_as_one_string_are_refused() -> None:
    with pytest.raises(DefinitionError, match="single string; give a list"):
        oauth(origins="https://api.example.com")


def test_every_preset_declares_its_providers_api_origins_and_takes_more() -> None:
    assert github("id", "secret").origins == ("https://api.github.com", "https://uploads.github.com")
    assert "https://gmail.googleapis.com" in google("id", "secret").origins
    assert "https://www.googleapis.com" in google("id", "secret").origins
    assert slack("id", "secret").origins == ("https://slack.com", "https://files.slack.com")
    assert microsoft("id", "secret", tenant="contoso.onmicrosoft.com").origins == ("https://graph.microsoft.com",)
    more = preset(
        "google",
        client_id="id",
        client_secret="secret",
        origins=["https://SHEETS.googleapis.com", "https://chat.googleapis.com"],
    )
    assert more.origins[-1] == "https://chat.googleapis.com"
    assert more.origins.count("https://sheets.googleapis.com") == 1


def test_the_connections_file_names_origins_and_a_wrong_one_is_a_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "connections.toml"
    path.write_text(
        '[connections.corp]\nissuer = "https://id.corp.example"\nclient_id = "askback"\nclient_secret_env = "S"\n'
        'origins = ["https://api.corp.example", "https://files.corp.example:8443/"]\n\n'
        '[connections.gh]\npreset = "github"\nclient_id = "id"\nclient_secret_env = "S"\n'
        'origins = ["https://ghe.corp.example"]\n\n'
        '[connections.notes]\nkind = "api_key"\nheader = "X-Api-Key"\norigins = ["https://notes.example"]\n'
    )
    loaded = load_connections(path, environ={"S": "secret"})
    assert loaded["corp"].origins == ("https://api.corp.example", "https://files.corp.example:8443")
    assert loaded["gh"].origins == ("https://api.github.com", "https://uploads.github.com", "https://ghe.corp.example")
    assert loaded["notes"].origins == ("https://notes.example",)

    path.write_text('[connections.notes]\nkind = "api_key"\nheader = "X-Api-Key"\norigins = ["http://notes.example"]\n')
    with pytest.raises(
        ConfigurationError, match=r"\[connections.notes\]: .*origin 'http://notes.example' must use https"
    ):
        load_connections(path, environ={})


@contextlib.contextmanager
def metadata_server(userinfo: str) -> Iterator[str]:
    """An authorization server's metadata document at its issuer, naming `userinfo` as its userinfo endpoint."""
    issuer: list[str] = []

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            document = {
                "issuer": issuer[0],
                "authorization_endpoint": f"{issuer[0]}/authorize",
                "token_endpoint": f"{issuer[0]}/token",
                "userinfo_endpoint": userinfo,
            }
            self.answer(200, json.dumps(document).encode())

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    issuer.append(f"http://127.0.0.1:{server.server_address[1]}")
    with serving_http(server):
        yield issuer[0]


@pytest.mark.anyio
@pytest.mark.http
async def test_discovery_adds_the_origin_of_the_providers_userinfo_endpoint_to_those_declared() -> None:
    with metadata_server("http://localhost:9/me") as issuer:
        discovered = await discover(
            OAuthConnection(
                name="oidc", client_id="c", client_secret="s", issuer=issuer, origins=["https://api.example"]
            )
        )
    assert discovered.origins == ("https://api.example", "http://localhost:9")


# --- account.http, against real servers -----------------------------------------------------------------------------


@dataclass
class Seen:
    path: str
    authorization: str | None
    api_key: str | None


@dataclass
class Recorder:
    """A loopback server that records what it receives; `/to?url=U` answers 302 to U."""

    server: ThreadingHTTPServer
    seen: list[Seen] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])


def recorder() -> Recorder:
    made: list[Recorder] = []

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            made[0].seen.append(Seen(parts.path, self.headers.get("Authorization"), self.headers.get("X-Api-Key")))
            if parts.path == "/to":
                self.answer(302, headers={"Location": parse_qs(parts.query)["url"][0]})
                return
            self.answer(200, b'{"ok": true}')

    made.append(Recorder(ThreadingHTTPServer(("127.0.0.1", 0), Handler)))
    return made[0]


@pytest.fixture
def api() -> Iterator[Recorder]:
    """The API the connections' credential is for."""
    served = recorder()
    with serving_http(served.server):
        yield served


@pytest.fixture
def other() -> Iterator[Recorder]:
    """Somewhere else on loopback: another origin (same host, another port)."""
    served = recorder()
    with serving_http(served.server):
        yield served


@dataclass
class Accounts_:
    keeper: TokenKeeper
    api: Recorder
    other: Recorder

    async def handle(self, connection: str, credential: dict[str, Any]) -> ConnectedAccount:
        accounts, now = self.keeper.accounts, self.keeper.clock.now()
        account_id, _ = await accounts.begin_connect("alice", connection, flow_id=None, now=now, ttl=600)
        sealed = self.keeper.vault.seal(account_id, credential)
        await accounts.change(account_id, Event.CONNECTED, now=now, credential=sealed, expires_at=None)
        account = await accounts.get(account_id)
        assert isinstance(account, Account) and account.status is Status.ACTIVE
        return ConnectedAccount(account, self.keeper)

    async def oauth(self, connection: str = "api") -> ConnectedAccount:
        return await self.handle(connection, {"access_token": TOKEN, "token_type": "Bearer"})

    async def keyed(self) -> ConnectedAccount:
        return await self.handle("keyed", {"api_key": KEY})


@pytest.fixture
async def setup(tmp_path: Path, api: Recorder, other: Recorder) -> AsyncIterator[Accounts_]:
    store = await Store.open(f"sqlite:///{tmp_path / 'askback.db'}", components=all_components())
    connections = Connections(
        [
            oauth(name="api", origins=[api.base]),
            oauth(name="bare"),
            ApiKeyConnection(name="keyed", header="X-Api-Key", origins=[api.base]),
        ]
    )
    keeper = TokenKeeper(
        Accounts(store.database), Vault(new_key("test")), connections, clock=FrozenClock(at=1_800_000_000)
    )
    try:
        yield Accounts_(keeper, api, other)
    finally:
        await keeper.aclose()
        await store.close()


@pytest.mark.anyio
@pytest.mark.http
async def test_a_request_to_a_declared_origin_carries_the_credential(setup: Accounts_) -> None:
    with anyio.fail_after(WAIT):
        async with await setup.oauth() as account:
            assert (await account.http.get(f"{setup.api.base}/data")).status_code == 200
        async with await setup.keyed() as keyed:
            assert (await keyed.http.get(f"{setup.api.base}/key")).status_code == 200
    assert [(s.path, s.authorization, s.api_key) for s in setup.api.seen] == [
        ("/data", f"Bearer {TOKEN}", None),
        ("/key", None, KEY),
    ]


@pytest.mark.anyio
@pytest.mark.parametrize(
    "where",
    [
        pytest.param("other", id="another port"),
        pytest.param("localhost", id="another host name for the same socket"),
        pytest.param("userinfo", id="the allowed origin written as userinfo"),
        pytest.param("https", id="another scheme"),
    ],
)
@pytest.mark.parametrize("kind", ["oauth", "api_key"])
@pytest.mark.http
async def test_a_model_supplied_url_to_another_origin_is_refused_and_nothing_is_sent(
    setup: Accounts_, where: str, kind: str
) -> None:
    api, other = setup.api, setup.other
    url = {
        "other": f"{other.base}/attachment?id=1",
        "localhost": f"http://localhost:{api.port}/data",
        "userinfo": f"http://127.0.0.1:{api.port}@127.0.0.1:{other.port}/attachment",
        "https": f"https://127.0.0.1:{api.port}/data",
    }[where]
    with anyio.fail_after(WAIT):
        account = await (setup.oauth() if kind == "oauth" else setup.keyed())
        async with account:
            with pytest.raises(CredentialOriginError) as refused:
                await account.http.get(url)
    message = str(refused.value)
    assert f"Nothing was sent to {origin(url)}" in message
    assert f"is for {api.base} only" in message
    assert "httpx.AsyncClient()" in message  # what to do instead
    assert TOKEN not in message and KEY not in message
    assert api.seen == [] and other.seen == []
    assert isinstance(refused.value, AskbackError) and refused.value.tool_error  # the model reads it as a tool error


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["oauth", "api_key"])
@pytest.mark.http
async def test_a_redirect_to_another_origin_is_followed_without_the_credential(setup: Accounts_, kind: str) -> None:
    api, other = setup.api, setup.other
    with anyio.fail_after(WAIT):
        account = await (setup.oauth() if kind == "oauth" else setup.keyed())
        async with account:
            reply = await account.http.get(
                f"{api.base}/to", params={"url": f"{other.base}/landing"}, follow_redirects=True
            )
            assert reply.status_code == 200
            back = await account.http.get(f"{api.base}/to", params={"url": f"{api.base}/home"}, follow_redirects=True)
            assert back.status_code == 200
    [first, again, home] = api.seen
    assert (first.path, again.path, home.path) == ("/to", "/to", "/home")
    assert all((s.authorization or s.api_key) for s in (first, again, home))  # within the origin it is kept
    [landing] = other.seen
    assert landing.path == "/landing"
    assert landing.authorization is None and landing.api_key is None


@pytest.mark.anyio
@pytest.mark.http
async def test_a_redirect_not_followed_cannot_be_sent_on_to_another_origin(setup: Accounts_) -> None:
    with anyio.fail_after(WAIT):
        async with await setup.keyed() as account:
            reply = await account.http.get(f"{setup.api.base}/to", params={"url": f"{setup.other.base}/landing"})
            assert reply.status_code == 302 and reply.next_request is not None
            with pytest.raises(CredentialOriginError):
                await account.http.send(reply.next_request)
    assert setup.other.seen == []


@pytest.mark.anyio
@pytest.mark.http
async def test_a_connection_without_origins_sends_its_credential_nowhere_and_says_what_to_set(
    setup: Accounts_,
) -> None:
    with anyio.fail_after(WAIT):
        async with await setup.oauth("bare") as account:
            with pytest.raises(CredentialOriginError) as refused:
                await account.http.get(f"{setup.api.base}/data")
            assert await account.token() == TOKEN  # the escape hatch is the connection's own decision
    message = str(refused.value)
    assert "connection 'bare' declares no origins" in message
    assert 'origins = ["https://api.example.com"] in [connections.bare]' in message
    assert setup.api.seen == []


def test_connections_written_in_python_without_origins_are_still_valid() -> None:
    # Refused at use, not at definition: a connection used only through `token()` needs none.
    assert oauth().origins == () and ApiKeyConnection(name="k").origins == ()


def test_the_error_is_in_the_one_tree() -> None:
    assert issubclass(CredentialOriginError, AskbackError)
    assert not issubclass(CredentialOriginError, ConfigurationError)
