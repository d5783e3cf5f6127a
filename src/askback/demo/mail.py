"""The demo's connected account: `summarize_inbox` reads the caller's mailbox at Demo Mail, the development OAuth
provider that `askback demo` starts on loopback (`askback.demo.provider`).

The demo server has it only when `ASKBACK_DEMO_MAIL_ISSUER` is set: `mail_from_env` reads that and the rest of what
the demo passes to its server (the client secret, where people reach the server, the development sign-in's secret),
`mail_accounts` is the connected accounts extension the demo server is made with (the hosted pages served beside
`/mcp`, with the development sign-in), and `add_mail` adds the tool. The vault's key ring is askback's own setting, `ASKBACK_VAULT_KEYS`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import SecretStr

from askback import Askback, Flow, Settings
from askback.accounts.connections import Connections, OAuthConnection, origin
from askback.accounts.pages import DevelopmentSignIn
from askback.accounts.setup import AccountsSetup
from askback.accounts.vault import Vault
from askback.demo.provider import AUTHORIZE_PATH, CLIENT_ID, MESSAGES_PATH, NAME, SCOPE, TOKEN_PATH
from askback.errors import ConfigurationError

__all__ = ["CONNECTION", "DemoMail", "add_mail", "callback_url", "mail_accounts", "mail_from_env", "summarize"]

CONNECTION = "demo-mail"
PAGES_PREFIX = "/accounts"

ISSUER_ENV = "ASKBACK_DEMO_MAIL_ISSUER"
CLIENT_SECRET_ENV = "ASKBACK_DEMO_MAIL_CLIENT_SECRET"
PUBLIC_URL_ENV = "ASKBACK_DEMO_PUBLIC_URL"
SIGN_IN_SECRET_ENV = "ASKBACK_DEMO_SIGN_IN_SECRET"


@dataclass(frozen=True)
class DemoMail:
    """Where Demo Mail is (`issuer`), the demo server's client secret there, where people reach the demo server
    (`public_url`: its links and its OAuth callback), and the development sign-in's secret, the same in every
    worker."""

    issuer: str
    client_secret: SecretStr
    public_url: str
    sign_in_secret: SecretStr


def callback_url(public_url: str) -> str:
    """The demo server's OAuth redirect URI, to register with Demo Mail: its hosted pages' callback."""
    return f"{public_url.rstrip('/')}{PAGES_PREFIX}/callback"


def mail_from_env(environ: Mapping[str, str] | None = None) -> DemoMail | None:
    """The demo's mail settings from the environment; `None` without `ASKBACK_DEMO_MAIL_ISSUER`. Set without the
    rest, a `ConfigurationError` naming what is missing."""
    env = os.environ if environ is None else environ
    names = (ISSUER_ENV, CLIENT_SECRET_ENV, PUBLIC_URL_ENV, SIGN_IN_SECRET_ENV)
    values = {name: env.get(name, "").strip() for name in names}
    if not values[ISSUER_ENV]:
        return None
    missing = [name for name, value in values.items() if not value]
    if missing:
        raise ConfigurationError(
            f"{ISSUER_ENV} is set, so the demo server connects to {NAME}, which also needs {', '.join(missing)}; "
            "`askback demo` sets them all (or unset the first to serve the demo without it)"
        )
    if len(values[SIGN_IN_SECRET_ENV]) < 16:
        raise ConfigurationError(f"{SIGN_IN_SECRET_ENV} needs at least 16 characters (secrets.token_urlsafe(32))")
    return DemoMail(
        issuer=values[ISSUER_ENV].rstrip("/"),
        client_secret=SecretStr(values[CLIENT_SECRET_ENV]),
        public_url=values[PUBLIC_URL_ENV].rstrip("/"),
        sign_in_secret=SecretStr(values[SIGN_IN_SECRET_ENV]),
    )


def summarize(mailbox: Mapping[str, Any]) -> str:
    """One line about a mailbox as Demo Mail returns it (`{"user": ..., "messages": [...]}`, newest first)."""
    messages = list(mailbox.get("messages") or [])
    user = mailbox.get("user", "you")
    if not messages:
        return f"No messages for {user}."
    unread = sum(1 for m in messages if m.get("unread"))
    latest = messages[0]
    return (
        f"{len(messages)} messages for {user}, {unread} unread; the latest is "
        f'"{latest.get("subject")}" from {latest.get("from")}.'
    )


def mail_accounts(mail: DemoMail, settings: Settings) -> AccountsSetup:
    """Connected accounts with the one connection `demo-mail`, the hosted pages at `/accounts` (with the development
    sign-in, and so served open: the pages check who opens them themselves), the vault's key ring from `settings`."""
    connection = OAuthConnection(
        name=CONNECTION,
        client_id=CLIENT_ID,
        client_secret=mail.client_secret,
        issuer=mail.issuer,
        authorize_url=f"{mail.issuer}{AUTHORIZE_PATH}",
        token_url=f"{mail.issuer}{TOKEN_PATH}",
        scopes=(SCOPE,),
        # Demo Mail serves its mailbox API itself: the one origin the token may go to.
        origins=(origin(mail.issuer),),
    )
    return AccountsSetup(
        connections=Connections([connection]),
        vault=Vault.from_settings(settings),
        verifier=DevelopmentSignIn(mail.sign_in_secret.get_secret_value()),
        base_url=mail.public_url,
        prefix=PAGES_PREFIX,
    )


def add_mail(app: Askback, mail: DemoMail) -> None:
    """The tool `summarize_inbox` on `app`, made with `mail_accounts(mail, ...)` among its extensions."""
    messages_url = f"{mail.issuer}{MESSAGES_PATH}"

    @app.tool(connections=[CONNECTION])
    async def summarize_inbox(flow: Flow) -> str:
        """Summarize the caller's inbox at Demo Mail, read with their connected account."""
        mail_account = await flow.connect(CONNECTION)
        reply = await mail_account.http.get(messages_url)
        if reply.status_code != 200:
            raise ToolError(
                f"{NAME} refused to read the inbox (HTTP {reply.status_code}): it keeps its grants in memory, so "
                "they end when it stops; run `askback demo` again"
            )
        return summarize(reply.json())
