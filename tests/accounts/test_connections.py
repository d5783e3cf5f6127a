"""Connections: presets build what each provider documents, the TOML file is read strictly, discovery runs against a
real metadata server on loopback, and no secret ever shows."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from pydantic import SecretStr

from askback.accounts.connections import (
    ApiKeyConnection,
    Connections,
    KeyCheck,
    OAuthConnection,
    api_key_headers,
    authorization_request,
    discover,
    discover_all,
    fetch_metadata,
    github,
    google,
    key_check_request,
    load_connections,
    metadata_urls,
    microsoft,
    new_code_verifier,
    preset,
    refresh_request,
    revocation_request,
    slack,
    token_request,
)
from askback.errors import ConfigurationError, DefinitionError, InvalidParamsError
from infra import QuietHandler, serving_http

SECRET = "the-client-secret-NEVER-SHOWN"
VERIFIER = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk-and-more-letters"
REDIRECT = "https://askback.example/connections/callback"


def challenge_of(verifier: str) -> str:
    """RFC 7636 §4.2, written out independently of the code under test."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode("ascii")).digest()).rstrip(b"=").decode("ascii")


def query_of(url: str) -> dict[str, str]:
    parsed = parse_qs(urlsplit(url).query, keep_blank_values=True, strict_parsing=True)
    assert all(len(values) == 1 for values in parsed.values()), f"a parameter appears twice in {url}"
    return {key: values[0] for key, values in parsed.items()}


def basic_credentials(header: str) -> tuple[str, str]:
    scheme, _, encoded = header.partition(" ")
    assert scheme == "Basic"
    client_id, _, secret = base64.b64decode(encoded).decode().partition(":")
    return client_id, secret


def authorize(connection: OAuthConnection) -> tuple[str, str, dict[str, str]]:
    url = authorization_request(connection, redirect_uri=REDIRECT, state="the-state", code_verifier=VERIFIER)
    parts = urlsplit(url)
    return parts.netloc, parts.path, query_of(url)


def assert_pkce_and_basics(query: dict[str, str], client_id: str) -> None:
    assert query["response_type"] == "code"
    assert query["client_id"] == client_id
    assert query["redirect_uri"] == REDIRECT
    assert query["state"] == "the-state"
    assert query["code_challenge_method"] == "S256"
    assert query["code_challenge"] == challenge_of(VERIFIER)


# --- presets --------------------------------------------------------------------------------------------------------


def test_the_github_preset_authorizes_at_github_and_posts_the_secret_in_the_token_form() -> None:
    connection = github("Iv1.abc", SECRET)
    host, path, query = authorize(connection)
    assert (host, path) == ("github.com", "/login/oauth/authorize")
    assert_pkce_and_basics(query, "Iv1.abc")
    assert query["scope"] == "read:user"

    url, headers, form = token_request(connection, code="the-code", redirect_uri=REDIRECT, code_verifier=VERIFIER)
    assert url == "https://github.com/login/oauth/access_token"
    assert headers["Accept"] == "application/json"  # GitHub answers form-encoded otherwise
    assert "Authorization" not in headers
    assert form == {
        "grant_type": "authorization_code",
        "code": "the-code",
        "redirect_uri": REDIRECT,
        "code_verifier": VERIFIER,
        "client_id": "Iv1.abc",
        "client_secret": SECRET,
    }


def test_the_google_preset_asks_for_offline_access_with_consent_and_can_revoke() -> None:
    connection = google(
        "123.apps.googleusercontent.com", SECRET, scopes=["https://www.googleapis.com/auth/gmail.readonly"]
    )
    host, path, query = authorize(connection)
    assert (host, path) == ("accounts.google.com", "/o/oauth2/v2/auth")
    assert_pkce_and_basics(query, "123.apps.googleusercontent.com")
    assert query["scope"] == "https://www.googleapis.com/auth/gmail.readonly"
    assert query["access_type"] == "offline"
    assert query["prompt"] == "consent"

    url, headers, form = token_request(connection, code="4/0Ab", redirect_uri=REDIRECT, code_verifier=VERIFIER)
    assert url == "https://oauth2.googleapis.com/token"
    assert form["client_secret"] == SECRET and form["client_id"] == "123.apps.googleusercontent.com"
    assert form["code_verifier"] == VERIFIER

    url, headers, form = revocation_request(connection, "1//refresh", "refresh_token")
    assert url == "https://oauth2.googleapis.com/revoke"
    assert headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert form["token"] == "1//refresh" and form["token_type_hint"] == "refresh_token"
    assert connection.issuer == "https://accounts.google.com"


def test_the_google_preset_defaults_to_openid_and_email() -> None:
    _, _, query = authorize(google("id", SECRET))
    assert query["scope"] == "openid email"


def test_the_slack_preset_joins_scopes_with_commas_and_authenticates_with_http_basic() -> None:
    connection = slack("1111.2222", SECRET, authorize_params={"user_scope": "search:read"})
    host, path, query = authorize(connection)
    assert (host, path) == ("slack.com", "/oauth/v2/authorize")
    assert_pkce_and_basics(query, "1111.2222")
    assert query["scope"] == "channels:read,chat:write"
    assert query["user_scope"] == "search:read"

    url, headers, form = token_request(connection, code="c0de", redirect_uri=REDIRECT, code_verifier=VERIFIER)
    assert url == "https://slack.com/api/oauth.v2.access"
    assert basic_credentials(headers["Authorization"]) == ("1111.2222", SECRET)
    assert "client_secret" not in form and "client_id" not in form
    assert form["code_verifier"] == VERIFIER
    with pytest.raises(ConfigurationError, match="no revocation_url"):
        revocation_request(connection, "xoxb-1")


def test_the_microsoft_preset_uses_the_common_tenant_unless_told_otherwise() -> None:
    connection = microsoft("00000000-aaaa", SECRET)
    host, path, query = authorize(connection)
    assert (host, path) == ("login.microsoftonline.com", "/common/oauth2/v2.0/authorize")
    assert_pkce_and_basics(query, "00000000-aaaa")
    assert query["scope"] == "offline_access User.Read"
    url, _, form = token_request(connection, code="M.C1", redirect_uri=REDIRECT, code_verifier=VERIFIER)
    assert url == "https://login.microsoftonline.com/common/oauth2/v2.0/token"
    assert form["client_secret"] == SECRET

    tenant = "72f988bf-86f1-41af-91ab-2d7cd011db47"
    own = microsoft("00000000-aaaa", SECRET, tenant=tenant)
    assert own.token_url == f"https://login.microsoftonline.com/{tenant}/oauth2/v2.0/token"
    assert own.issuer == f"https://login.microsoftonline.com/{tenant}/v2.0"
    assert microsoft("x", SECRET, tenant="organizations").issuer is None


def test_a_microsoft_tenant_that_is_not_a_tenant_is_refused() -> None:
    with pytest.raises(DefinitionError, match="tenant"):
        microsoft("x", SECRET, tenant="../evil")


@pytest.mark.parametrize("name", ["github", "google", "slack", "microsoft"])
def test_every_preset_sends_the_s256_challenge_of_a_fresh_verifier(name: str) -> None:
    verifier = new_code_verifier()
    connection = preset(name, client_id="cid", client_secret=SECRET)
    url = authorization_request(connection, redirect_uri=REDIRECT, state="s", code_verifier=verifier)
    query = query_of(url)
    assert query["code_challenge"] == challenge_of(verifier)
    assert query["code_challenge_method"] == "S256"
    assert 43 <= len(verifier) <= 128


def test_preset_by_name_is_the_same_connection_as_the_named_function() -> None:
    assert preset("github", client_id="a", client_secret=SECRET) == github("a", SECRET)
    assert preset("microsoft", client_id="a", client_secret=SECRET, tenant="consumers") == microsoft(
        "a", SECRET, tenant="consumers"
    )


def test_an_unknown_preset_or_a_tenant_for_another_provider_is_a_definition_error() -> None:
    with pytest.raises(DefinitionError, match=r"'gitlab'.*github, google, microsoft, slack"):
        preset("gitlab", client_id="a", client_secret=SECRET)
    with pytest.raises(DefinitionError, match="tenant"):
        preset("google", client_id="a", client_secret=SECRET, tenant="common")


def test_scopes_replace_the_preset_defaults_and_authorize_params_merge_over_them() -> None:
    connection = google("id", SECRET, scopes=["openid"], authorize_params={"prompt": "select_account", "hd": "x.com"})
    assert connection.scopes == ("openid",)
    assert dict(connection.authorize_params) == {"access_type": "offline", "prompt": "select_account", "hd": "x.com"}


def test_authorize_params_may_not_replace_what_the_request_sets() -> None:
    with pytest.raises(DefinitionError, match="code_challenge_method"):
        github("a", SECRET, authorize_params={"code_challenge_method": "plain"})


def test_a_single_string_of_scopes_is_refused_rather_than_split_into_letters() -> None:
    with pytest.raises(DefinitionError, match="single string"):
        github("a", SECRET, scopes="repo")  # type: ignore[arg-type]


def test_a_refresh_request_with_basic_auth_carries_the_credentials_in_the_header_only() -> None:
    connection = OAuthConnection(
        name="corp",
        client_id="my client",
        client_secret=SecretStr("p@ss:word+/"),
        authorize_url="https://id.corp.example/authorize",
        token_url="https://id.corp.example/token",
    )
    url, headers, form = refresh_request(connection, "rt-1")
    assert url == "https://id.corp.example/token"
    assert form == {"grant_type": "refresh_token", "refresh_token": "rt-1"}
    # RFC 6749 §2.3.1: form-urlencoded before base64.
    assert basic_credentials(headers["Authorization"]) == ("my+client", "p%40ss%3Aword%2B%2F")


def test_a_refresh_request_with_post_auth_carries_the_credentials_in_the_form() -> None:
    _, headers, form = refresh_request(google("id", SECRET), "1//rt")
    assert "Authorization" not in headers
    assert form == {"grant_type": "refresh_token", "refresh_token": "1//rt", "client_id": "id", "client_secret": SECRET}


def test_a_verifier_outside_rfc_7636_is_refused() -> None:
    with pytest.raises(ValueError, match="43 to 128"):
        authorization_request(github("a", SECRET), redirect_uri=REDIRECT, state="s", code_verifier="short")


def test_a_connection_with_only_an_issuer_cannot_build_requests_until_discovered() -> None:
    connection = OAuthConnection(
        name="idp", client_id="a", client_secret=SecretStr(SECRET), issuer="https://idp.example"
    )
    assert connection.needs_discovery
    with pytest.raises(ConfigurationError, match="discover"):
        authorization_request(connection, redirect_uri=REDIRECT, state="s", code_verifier=VERIFIER)


def test_plain_http_endpoints_are_refused_except_on_loopback() -> None:
    with pytest.raises(DefinitionError, match="https"):
        OAuthConnection(
            name="x", client_id="a", client_secret=SecretStr(SECRET),
            authorize_url="http://idp.example/a", token_url="https://idp.example/t",
        )  # fmt: skip
    OAuthConnection(name="x", client_id="a", client_secret=SecretStr(SECRET), issuer="http://127.0.0.1:9")


# --- API keys -------------------------------------------------------------------------------------------------------


def test_an_api_key_goes_in_the_header_and_scheme_the_connection_names() -> None:
    bearer = ApiKeyConnection(name="openai", label="OpenAI API key", header="Authorization", scheme="Bearer")
    assert api_key_headers(bearer, SecretStr(" sk-123 ")) == {"Authorization": "Bearer sk-123"}
    plain = ApiKeyConnection(name="weather", header="X-Api-Key")
    assert api_key_headers(plain, "k") == {"X-Api-Key": "k"}


def test_an_api_key_check_is_a_get_with_the_key_in_place() -> None:
    connection = ApiKeyConnection(
        name="openai", header="Authorization", scheme="Bearer",
        validation=KeyCheck(url="https://api.openai.com/v1/models", expected_status=200),
    )  # fmt: skip
    method, url, headers = key_check_request(connection, "sk-123")
    assert (method, url, headers["Authorization"]) == ("GET", "https://api.openai.com/v1/models", "Bearer sk-123")
    assert "sk-123" not in repr(key_check_request(connection, "sk-123"))


def test_an_api_key_with_a_line_break_is_refused_without_echoing_it() -> None:
    connection = ApiKeyConnection(name="weather", header="X-Api-Key")
    with pytest.raises(InvalidParamsError) as caught:
        api_key_headers(connection, "sk-secret\r\nX-Evil: 1")
    assert "sk-secret" not in str(caught.value)


def test_an_api_key_connection_that_cannot_send_its_key_is_a_definition_error() -> None:
    with pytest.raises(DefinitionError, match="no header"):
        ApiKeyConnection(name="x", validation=KeyCheck(url="https://api.example/me"))
    with pytest.raises(DefinitionError, match="scheme but no header"):
        ApiKeyConnection(name="x", scheme="Bearer")


# --- Python registry ------------------------------------------------------------------------------------------------


def test_connections_are_looked_up_by_name_with_an_error_that_lists_the_known_ones() -> None:
    connections = Connections([github("a", SECRET), ApiKeyConnection(name="openai", header="Authorization")])
    assert connections["github"].name == "github"
    assert connections.oauth("github").token_url == "https://github.com/login/oauth/access_token"
    assert connections.api_key("openai").header == "Authorization"
    assert "openai" in connections and len(connections) == 2
    with pytest.raises(ConfigurationError, match=r"'gmail' \(configured: github, openai\)"):
        connections["gmail"]
    with pytest.raises(ConfigurationError, match="API key connection"):
        connections.oauth("openai")


def test_two_connections_with_one_name_are_a_definition_error() -> None:
    with pytest.raises(DefinitionError, match="'github'"):
        Connections([github("a", SECRET), github("b", SECRET)])


# --- the TOML file --------------------------------------------------------------------------------------------------

GOOD = """
[connections.gmail]
preset = "google"
client_id = "123.apps.googleusercontent.com"
client_secret_env = "ASKBACK_GMAIL_CLIENT_SECRET"
scopes = ["https://www.googleapis.com/auth/gmail.readonly"]

[connections.work]
preset = "microsoft"
tenant = "contoso.onmicrosoft.com"
client_id = "abc"
client_secret_env = "WORK_SECRET"

[connections.corp]
issuer = "https://id.corp.example"
client_id = "askback"
client_secret_env = "CORP_SECRET"
token_auth_method = "client_secret_post"
scopes = ["openid", "repo.read"]
authorize_params = { audience = "api" }

[connections.openai]
kind = "api_key"
label = "OpenAI API key"
header = "Authorization"
scheme = "Bearer"
validation_url = "https://api.openai.com/v1/models"
"""
ENVIRON = {"ASKBACK_GMAIL_CLIENT_SECRET": SECRET, "WORK_SECRET": SECRET + "-work", "CORP_SECRET": SECRET + "-corp"}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "connections.toml"
    path.write_text(text)
    return path


def test_a_connections_file_gives_presets_custom_providers_and_api_keys_with_secrets_from_the_environment(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, GOOD)
    connections = load_connections(path, environ=ENVIRON)
    assert connections.names() == ("gmail", "work", "corp", "openai")
    assert connections.source == str(path)

    gmail = connections.oauth("gmail")
    assert gmail == google(
        "123.apps.googleusercontent.com",
        SECRET,
        name="gmail",
        scopes=["https://www.googleapis.com/auth/gmail.readonly"],
    )
    assert gmail.client_secret.get_secret_value() == SECRET
    assert connections.oauth("work").authorize_url == (
        "https://login.microsoftonline.com/contoso.onmicrosoft.com/oauth2/v2.0/authorize"
    )
    corp = connections.oauth("corp")
    assert corp.needs_discovery and corp.issuer == "https://id.corp.example"
    assert corp.token_auth_method == "client_secret_post"
    assert dict(corp.authorize_params) == {"audience": "api"}
    assert connections.api_key("openai") == ApiKeyConnection(
        name="openai", label="OpenAI API key", header="Authorization", scheme="Bearer",
        validation=KeyCheck(url="https://api.openai.com/v1/models", expected_status=200),
    )  # fmt: skip


def test_a_client_secret_written_in_the_file_is_refused_and_not_repeated(tmp_path: Path) -> None:
    path = write(tmp_path, f'[connections.gh]\npreset = "github"\nclient_id = "a"\nclient_secret = "{SECRET}"\n')
    with pytest.raises(ConfigurationError) as caught:
        load_connections(path, environ={})
    message = str(caught.value)
    assert "client_secret_env" in message and str(path) in message and "[connections.gh]" in message
    assert SECRET not in message


def test_a_missing_environment_variable_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    with pytest.raises(ConfigurationError, match=r"\[connections.work\].*WORK_SECRET is not set"):
        load_connections(path, environ={k: v for k, v in ENVIRON.items() if k != "WORK_SECRET"})
    with pytest.raises(ConfigurationError, match="WORK_SECRET is empty"):
        load_connections(path, environ={**ENVIRON, "WORK_SECRET": " "})


def test_an_unknown_preset_is_named_with_the_file_and_the_connection(tmp_path: Path) -> None:
    path = write(tmp_path, '[connections.lab]\npreset = "gitlab"\nclient_id = "a"\nclient_secret_env = "S"\n')
    with pytest.raises(ConfigurationError) as caught:
        load_connections(path, environ={"S": SECRET})
    message = str(caught.value)
    assert str(path) in message and "[connections.lab]" in message and "'gitlab'" in message
    assert "github, google, microsoft, slack" in message


def test_an_unknown_key_is_named_with_the_keys_there_are(tmp_path: Path) -> None:
    path = write(
        tmp_path, '[connections.gh]\npreset = "github"\nclient_id = "a"\nclient_secret_env = "S"\nscope = "x"\n'
    )
    with pytest.raises(ConfigurationError, match=r"\[connections.gh\]: unknown key 'scope' \(the keys are: .*scopes"):
        load_connections(path, environ={"S": SECRET})


def test_a_connection_defined_twice_in_the_file_is_refused(tmp_path: Path) -> None:
    entry = '[connections.gh]\npreset = "github"\nclient_id = "a"\nclient_secret_env = "S"\n'
    path = write(tmp_path, entry + "\n" + entry)
    with pytest.raises(
        ConfigurationError, match=r"connections.toml is not valid TOML \(each connection may be defined once\).*gh"
    ):
        load_connections(path, environ={"S": SECRET})


def test_endpoints_next_to_a_preset_and_a_tenant_for_another_preset_are_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[connections.gh]\npreset = "github"\nclient_id = "a"\nclient_secret_env = "S"\n'
        'token_url = "https://x.example/t"\n',
    )
    with pytest.raises(ConfigurationError, match="sets token_url itself"):
        load_connections(path, environ={"S": SECRET})
    path = write(
        tmp_path, '[connections.gh]\npreset = "github"\ntenant = "x"\nclient_id = "a"\nclient_secret_env = "S"\n'
    )
    with pytest.raises(ConfigurationError, match="tenant is for the microsoft preset only"):
        load_connections(path, environ={"S": SECRET})


def test_an_api_key_written_in_the_file_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, f'[connections.openai]\nkind = "api_key"\napi_key = "{SECRET}"\n')
    with pytest.raises(ConfigurationError, match="hosted page") as caught:
        load_connections(path, environ={})
    assert SECRET not in str(caught.value)


def test_a_bad_value_in_the_file_becomes_a_configuration_error_naming_the_connection(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[connections.x]\nclient_id = "a"\nclient_secret_env = "S"\nauthorize_url = "http://idp.example/a"\ntoken_url = "https://idp.example/t"\n',
    )
    with pytest.raises(ConfigurationError, match=r"\[connections.x\]: .*authorize_url .*https"):
        load_connections(path, environ={"S": SECRET})
    path = write(tmp_path, '[connections.x]\nclient_id = "a"\nclient_secret_env = "S"\nscopes = "repo"\n')
    with pytest.raises(ConfigurationError, match=r"\[connections.x\]: scopes: "):
        load_connections(path, environ={"S": SECRET})


def test_a_missing_connections_file_says_which_variable_points_at_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="ASKBACK_CONNECTIONS_FILE"):
        load_connections(tmp_path / "nope.toml")


# --- discovery against a metadata server on loopback ----------------------------------------------------------------


@dataclass
class MetadataServer:
    """A tiny authorization server front: serves the JSON documents it is given, 404 for any other path."""

    origin: str
    documents: dict[str, object] = field(default_factory=dict)
    requested: list[str] = field(default_factory=list)


@pytest.fixture
def metadata_server() -> Iterator[MetadataServer]:
    served = MetadataServer(origin="")

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            served.requested.append(self.path)
            document = served.documents.get(self.path)
            body = json.dumps(document).encode() if document is not None else b'{"error": "not found"}'
            self.answer(200 if document is not None else 404, body)

    with serving_http(ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as origin:
        served.origin = origin
        yield served


def metadata(issuer: str, **extra: object) -> dict[str, object]:
    return {
        "issuer": issuer,
        "authorization_endpoint": f"{issuer}/auth",
        "token_endpoint": f"{issuer}/token",
        "revocation_endpoint": f"{issuer}/token/revocation",
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        **extra,
    }


def issuer_only(issuer: str, **extra: object) -> OAuthConnection:
    return OAuthConnection(name="idp", client_id="askback", client_secret=SecretStr(SECRET), issuer=issuer, **extra)  # type: ignore[arg-type]


@pytest.mark.anyio
@pytest.mark.http
async def test_discovery_fills_the_endpoints_from_the_openid_configuration(metadata_server: MetadataServer) -> None:
    issuer = metadata_server.origin
    metadata_server.documents["/.well-known/openid-configuration"] = metadata(issuer)
    connection = await discover(issuer_only(issuer))
    assert not connection.needs_discovery
    assert (connection.authorize_url, connection.token_url, connection.revocation_url) == (
        f"{issuer}/auth",
        f"{issuer}/token",
        f"{issuer}/token/revocation",
    )
    assert metadata_server.requested == ["/.well-known/openid-configuration"]
    url = authorization_request(connection, redirect_uri="http://127.0.0.1/callback", state="s", code_verifier=VERIFIER)
    assert url.startswith(f"{issuer}/auth?")


@pytest.mark.anyio
@pytest.mark.http
async def test_discovery_falls_back_to_rfc_8414_inserted_before_the_issuer_path(
    metadata_server: MetadataServer,
) -> None:
    issuer = f"{metadata_server.origin}/tenant-1"
    metadata_server.documents["/.well-known/oauth-authorization-server/tenant-1"] = metadata(issuer)
    connection = await discover(issuer_only(issuer, token_url="https://token.example/override"))
    assert connection.authorize_url == f"{issuer}/auth"
    assert connection.token_url == "https://token.example/override"  # what the connection sets wins
    assert metadata_server.requested == [
        "/tenant-1/.well-known/openid-configuration",
        "/.well-known/oauth-authorization-server/tenant-1",
    ]
    assert metadata_urls(issuer) == tuple(metadata_server.origin + p for p in metadata_server.requested)


@pytest.mark.anyio
@pytest.mark.http
async def test_discovery_refuses_a_document_that_names_another_issuer(metadata_server: MetadataServer) -> None:
    issuer = metadata_server.origin
    metadata_server.documents["/.well-known/openid-configuration"] = metadata("https://evil.example")
    metadata_server.documents["/.well-known/oauth-authorization-server"] = metadata(issuer)
    with pytest.raises(ConfigurationError, match=r"names 'https://evil.example' as its issuer.*RFC 8414 §3.3"):
        await discover(issuer_only(issuer))
    # Refused at once: a wrong document is not skipped in favour of another.
    assert metadata_server.requested == ["/.well-known/openid-configuration"]


@pytest.mark.anyio
@pytest.mark.http
async def test_discovery_with_no_document_anywhere_lists_what_it_tried(metadata_server: MetadataServer) -> None:
    issuer = metadata_server.origin
    with pytest.raises(ConfigurationError) as caught:
        await fetch_metadata(issuer)
    message = str(caught.value)
    assert f"GET {issuer}/.well-known/openid-configuration: HTTP 404" in message
    assert f"GET {issuer}/.well-known/oauth-authorization-server: HTTP 404" in message
    assert "authorize_url and token_url" in message


@pytest.mark.anyio
@pytest.mark.http
async def test_discovery_refuses_a_document_without_a_token_endpoint(metadata_server: MetadataServer) -> None:
    issuer = metadata_server.origin
    document = metadata(issuer)
    del document["token_endpoint"]
    metadata_server.documents["/.well-known/openid-configuration"] = document
    with pytest.raises(ConfigurationError, match="has no token_endpoint"):
        await discover(issuer_only(issuer))


@pytest.mark.anyio
@pytest.mark.http
async def test_discovery_refuses_a_provider_without_pkce_s256_or_the_connections_client_auth(
    metadata_server: MetadataServer,
) -> None:
    issuer = metadata_server.origin
    metadata_server.documents["/.well-known/openid-configuration"] = metadata(
        issuer, code_challenge_methods_supported=["plain"]
    )
    with pytest.raises(ConfigurationError, match="without S256"):
        await discover(issuer_only(issuer))
    metadata_server.documents["/.well-known/openid-configuration"] = metadata(
        issuer, token_endpoint_auth_methods_supported=["client_secret_post"]
    )
    with pytest.raises(ConfigurationError, match="set token_auth_method"):
        await discover(issuer_only(issuer))


@pytest.mark.anyio
@pytest.mark.http
async def test_discovering_a_loaded_file_fills_only_the_connections_that_need_it(
    metadata_server: MetadataServer, tmp_path: Path
) -> None:
    issuer = metadata_server.origin
    metadata_server.documents["/.well-known/openid-configuration"] = metadata(issuer)
    path = write(
        tmp_path,
        f'[connections.gh]\npreset = "github"\nclient_id = "a"\nclient_secret_env = "S"\n'
        f'[connections.local]\nissuer = "{issuer}"\nclient_id = "b"\nclient_secret_env = "S"\n',
    )
    connections = await discover_all(load_connections(path, environ={"S": SECRET}))
    assert connections.oauth("local").token_url == f"{issuer}/token"
    assert connections.oauth("gh") == github("a", SECRET, name="gh")
    assert metadata_server.requested == ["/.well-known/openid-configuration"]


# --- secrets never show ---------------------------------------------------------------------------------------------


def test_no_repr_str_or_request_description_shows_a_secret() -> None:
    connection = slack("1.2", SECRET)
    connections = Connections([connection])
    token = token_request(connection, code="the-code-123", redirect_uri=REDIRECT, code_verifier=VERIFIER)
    refresh = refresh_request(google("id", SECRET), "refresh-token-456")
    for shown in (repr(connection), str(connection), repr(connections), repr(token), str(token), repr(refresh)):
        for secret in (SECRET, "the-code-123", VERIFIER, "refresh-token-456", token.headers["Authorization"]):
            assert secret not in shown


def test_no_error_message_holds_the_secret_from_the_environment(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace('scheme = "Bearer"', 'scheme = "Bearer"\nvalidation_status = "200"'))
    with pytest.raises(ConfigurationError) as caught:
        load_connections(path, environ=ENVIRON)
    assert "validation_status" in str(caught.value)
    for value in ENVIRON.values():
        assert value not in str(caught.value)
