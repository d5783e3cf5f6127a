"""The presets: each provider's documented endpoints, API origins and defaults (`github`, `google`, `slack`,
`microsoft`, or `preset(name, ...)`), made into an `OAuthConnection` with the app's own client id and secret."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import SecretStr

from askback.accounts.connections._checks import checked_origins, checked_scopes
from askback.accounts.connections._definitions import OAuthConnection, TokenAuthMethod
from askback.errors import DefinitionError


@dataclass(frozen=True)
class _Preset:
    authorize_url: str
    token_url: str
    revocation_url: str | None
    scopes: tuple[str, ...]
    token_auth_method: TokenAuthMethod
    origins: tuple[str, ...]
    authorize_params: Mapping[str, str] = field(default_factory=dict)
    issuer: str | None = None
    scope_separator: str = " "


# Each provider's documented endpoints. None of GitHub, Slack or Microsoft offers an RFC 7009 revocation endpoint
# (GitHub's is `DELETE /applications/{client_id}/token`, Slack's is `auth.revoke`; both take other requests).
_GITHUB = _Preset(
    # https://docs.github.com/en/apps/oauth-apps/building-oauth-apps/authorizing-oauth-apps (PKCE: S256 only)
    authorize_url="https://github.com/login/oauth/authorize",
    token_url="https://github.com/login/oauth/access_token",
    revocation_url=None,
    scopes=("read:user",),
    token_auth_method="client_secret_post",
    # The REST and GraphQL APIs, and release asset uploads.
    origins=("https://api.github.com", "https://uploads.github.com"),
)
_GOOGLE = _Preset(
    # https://developers.google.com/identity/protocols/oauth2/web-server
    authorize_url="https://accounts.google.com/o/oauth2/v2/auth",
    token_url="https://oauth2.googleapis.com/token",
    revocation_url="https://oauth2.googleapis.com/revoke",
    scopes=("openid", "email"),
    token_auth_method="client_secret_post",
    # Google's APIs each have a host of their own under googleapis.com; more can be added with `origins`.
    origins=(
        "https://www.googleapis.com",
        "https://gmail.googleapis.com",
        "https://people.googleapis.com",
        "https://openidconnect.googleapis.com",
        "https://sheets.googleapis.com",
        "https://docs.googleapis.com",
        "https://slides.googleapis.com",
        "https://tasks.googleapis.com",
        "https://youtube.googleapis.com",
    ),
    # A refresh token is issued only for offline access, and again only when consent is shown again.
    authorize_params={"access_type": "offline", "prompt": "consent"},
    issuer="https://accounts.google.com",
)
_SLACK = _Preset(
    # https://docs.slack.dev/authentication/installing-with-oauth and the oauth.v2.access method, which takes
    # `code_verifier` and asks for the client credentials in HTTP Basic rather than in the form.
    authorize_url="https://slack.com/oauth/v2/authorize",
    token_url="https://slack.com/api/oauth.v2.access",
    revocation_url=None,
    scopes=("channels:read", "chat:write"),
    token_auth_method="client_secret_basic",
    # The Web API, and `url_private` file downloads, which take the token as a bearer too.
    origins=("https://slack.com", "https://files.slack.com"),
    scope_separator=",",
)
_MICROSOFT_ALIASES = frozenset({"common", "organizations", "consumers"})
_TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,255}")
_GUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _microsoft_preset(tenant: str) -> _Preset:
    # https://learn.microsoft.com/entra/identity-platform/v2-oauth2-auth-code-flow
    if not _TENANT.fullmatch(tenant):
        raise DefinitionError(
            f"Microsoft tenant {tenant!r} is not a tenant: use 'common', 'organizations', 'consumers', a tenant id "
            "(GUID) or a domain such as 'contoso.onmicrosoft.com'."
        )
    base = f"https://login.microsoftonline.com/{tenant}"
    return _Preset(
        authorize_url=f"{base}/oauth2/v2.0/authorize",
        token_url=f"{base}/oauth2/v2.0/token",
        revocation_url=None,
        # offline_access is what makes the token endpoint return a refresh token.
        scopes=("offline_access", "User.Read"),
        token_auth_method="client_secret_post",
        origins=("https://graph.microsoft.com",),
        # Only a tenant id has a fixed issuer; the aliases' metadata carries a `{tenantid}` template instead.
        issuer=f"{base}/v2.0" if _GUID.fullmatch(tenant) else None,
    )


PRESETS: tuple[str, ...] = ("github", "google", "microsoft", "slack")


def preset(
    provider: str,
    /,
    *,
    client_id: str,
    client_secret: SecretStr | str,
    name: str | None = None,
    scopes: Sequence[str] | None = None,
    authorize_params: Mapping[str, str] | None = None,
    tenant: str | None = None,
    origins: Sequence[str] | None = None,
) -> OAuthConnection:
    """The connection for a known provider (one of `PRESETS`), named after it unless `name` is given.

    `scopes` replace the preset's defaults; `authorize_params` are merged over the preset's; `origins` are added to
    the preset's (its provider's own API origins). `tenant` is Microsoft's (default `common`) and refused for the
    others.
    """
    if provider not in PRESETS:
        raise DefinitionError(f"No preset named {provider!r}; the presets are {', '.join(PRESETS)}.")
    if tenant is not None and provider != "microsoft":
        raise DefinitionError(f"The {provider} preset takes no tenant; only microsoft does.")
    if provider == "microsoft":
        spec = _microsoft_preset("common" if tenant is None else tenant)
    else:
        spec = {"github": _GITHUB, "google": _GOOGLE, "slack": _SLACK}[provider]
    return OAuthConnection(
        name=provider if name is None else name,
        client_id=client_id,
        client_secret=client_secret if isinstance(client_secret, SecretStr) else SecretStr(client_secret),
        authorize_url=spec.authorize_url,
        token_url=spec.token_url,
        revocation_url=spec.revocation_url,
        scopes=spec.scopes if scopes is None else checked_scopes(scopes, f"{provider} preset", spec.scope_separator),
        authorize_params={**spec.authorize_params, **(authorize_params or {})},
        token_auth_method=spec.token_auth_method,
        issuer=spec.issuer,
        scope_separator=spec.scope_separator,
        origins=(*spec.origins, *checked_origins(() if origins is None else origins, f"{provider} preset")),
    )


def github(
    client_id: str,
    client_secret: SecretStr | str,
    *,
    name: str = "github",
    scopes: Sequence[str] | None = None,
    authorize_params: Mapping[str, str] | None = None,
    origins: Sequence[str] | None = None,
) -> OAuthConnection:
    """GitHub (OAuth app or GitHub App user authorization); default scope `read:user`; the token goes to
    `https://api.github.com` and `https://uploads.github.com`."""
    return preset(
        "github",
        client_id=client_id,
        client_secret=client_secret,
        name=name,
        scopes=scopes,
        authorize_params=authorize_params,
        origins=origins,
    )


def google(
    client_id: str,
    client_secret: SecretStr | str,
    *,
    name: str = "google",
    scopes: Sequence[str] | None = None,
    authorize_params: Mapping[str, str] | None = None,
    origins: Sequence[str] | None = None,
) -> OAuthConnection:
    """Google; default scopes `openid email`, with `access_type=offline` and `prompt=consent` for a refresh token;
    the token goes to Google's API hosts (`https://www.googleapis.com`, `https://gmail.googleapis.com`, ...: see
    `docs/connections.md`)."""
    return preset(
        "google",
        client_id=client_id,
        client_secret=client_secret,
        name=name,
        scopes=scopes,
        authorize_params=authorize_params,
        origins=origins,
    )


def slack(
    client_id: str,
    client_secret: SecretStr | str,
    *,
    name: str = "slack",
    scopes: Sequence[str] | None = None,
    authorize_params: Mapping[str, str] | None = None,
    origins: Sequence[str] | None = None,
) -> OAuthConnection:
    """Slack (OAuth v2); default bot scopes `channels:read,chat:write`. User scopes go in
    `authorize_params={"user_scope": "..."}`; Slack then returns the user token under `authed_user`. The token goes
    to `https://slack.com` and `https://files.slack.com`."""
    return preset(
        "slack",
        client_id=client_id,
        client_secret=client_secret,
        name=name,
        scopes=scopes,
        authorize_params=authorize_params,
        origins=origins,
    )


def microsoft(
    client_id: str,
    client_secret: SecretStr | str,
    *,
    tenant: str = "common",
    name: str = "microsoft",
    scopes: Sequence[str] | None = None,
    authorize_params: Mapping[str, str] | None = None,
    origins: Sequence[str] | None = None,
) -> OAuthConnection:
    """Microsoft identity platform (v2.0 endpoints) for `tenant`; default scopes `offline_access User.Read`; the
    token goes to `https://graph.microsoft.com`."""
    return preset(
        "microsoft",
        client_id=client_id,
        client_secret=client_secret,
        name=name,
        scopes=scopes,
        authorize_params=authorize_params,
        tenant=tenant,
        origins=origins,
    )
