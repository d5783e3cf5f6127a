"""The connected-accounts service: what the asking API and the hosted pages call.

It ties the pieces together: the accounts and links in the store (`repository`), the vault, the connections, and
the token keeper (`tokens`). The asking API reads an account's real status and, when it is not usable, asks for a
fresh authorization link; the hosted pages check who opens a link, send the person to the provider, take the
callback (state, PKCE verifier, code exchange) or the API key, and store the credential sealed.

The pages give the service the random value the person's browser holds (`browser`, from a cookie): an authorization
started in one browser can be finished only in that browser (`links.bound_state`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol
from urllib.parse import urlencode

from askback.accounts.connections import (
    ApiKeyConnection,
    Connections,
    authorization_request,
    new_code_verifier,
    new_state,
)
from askback.accounts.links import AuthorizationLink, Refused, bound_state
from askback.accounts.repository import Account, Accounts
from askback.accounts.status import Event, Status
from askback.accounts.vault import Vault
from askback.core.connecting import checked_label
from askback.errors import AccountStateError, InvalidParamsError, ProviderError, ToolError

if TYPE_CHECKING:
    from starlette.requests import Request

    from askback.accounts.tokens import TokenKeeper
    from askback.clock import Clock

__all__ = [
    "AccountService",
    "AskForKey",
    "Done",
    "Failed",
    "Redirect",
    "SignInVerifier",
]


class SignInVerifier(Protocol):
    """Who the person opening a hosted page is: the deployment's own sign-in (a session cookie, a proxy header),
    answering the same principal names as the MCP endpoint's token verifier; `None` when nobody is signed in."""

    async def __call__(self, request: Request) -> str | None: ...


@dataclass(frozen=True)
class Redirect:
    """Send the person to the provider's consent page."""

    url: str
    kind: Literal["redirect"] = "redirect"


@dataclass(frozen=True)
class AskForKey:
    """Show the API-key form for `connection`; the form posts `state` back."""

    connection: ApiKeyConnection
    state: str
    kind: Literal["ask_for_key"] = "ask_for_key"


@dataclass(frozen=True)
class Done:
    """The account is connected: tell the person to return to their assistant."""

    account: Account
    kind: Literal["done"] = "done"


@dataclass(frozen=True)
class Failed:
    """Nothing was connected: `message` says what happened, in plain words, for the page."""

    message: str
    status_code: int = 400
    kind: Literal["failed"] = "failed"


# How many configured connection names an error about an unknown one lists (each is at most 64 characters).
_NAMES_SHOWN = 20

_UNKNOWN_STATE = (
    "This sign-in was not started here, in this browser, or it has already been finished. Nothing was changed. Ask "
    "your assistant again for a new link."
)
_OTHER_BROWSER = (
    "This sign-in was not started in this browser, so it cannot be finished here, whoever is signed in. Nothing was "
    "changed. Open the link from your assistant in the browser you sign in with (one that keeps cookies), or ask "
    "your assistant again for a new link."
)


class AccountService:
    """Connected accounts for one server: `base_url` is where the hosted pages are reached (scheme, host, port),
    `prefix` the path they are mounted under. A link can be opened for `link_ttl` seconds; once it is opened, the
    person has `provider_visit_ttl` seconds to sign in at the provider (or enter the key) and come back. A principal
    holds at most `pending_per_principal` accounts whose link was never used to connect (none: no cap); a link for
    one more is refused with `LimitReachedError`."""

    def __init__(
        self,
        *,
        accounts: Accounts,
        vault: Vault,
        connections: Connections,
        tokens: TokenKeeper,
        clock: Clock,
        base_url: str,
        prefix: str = "/accounts",
        link_ttl: float = 600.0,
        provider_visit_ttl: float = 1800.0,
        pending_per_principal: int | None = None,
    ) -> None:
        self.accounts = accounts
        self.vault = vault
        self.connections = connections
        self.tokens = tokens
        self.clock = clock
        self.base_url = base_url.rstrip("/")
        self.prefix = "/" + prefix.strip("/")
        self.link_ttl = link_ttl
        self.provider_visit_ttl = provider_visit_ttl
        self.pending_per_principal = pending_per_principal

    # -- URLs --

    def start_url(self, token: str) -> str:
        return f"{self.base_url}{self.prefix}/start?{urlencode({'t': token})}"

    @property
    def callback_url(self) -> str:
        return f"{self.base_url}{self.prefix}/callback"

    @property
    def key_url(self) -> str:
        return f"{self.base_url}{self.prefix}/key"

    # -- for the asking API --

    async def accounts_of(self, principal: str, connection: str) -> list[Account]:
        self._known(connection)
        return await self.accounts.of(principal, connection)

    async def link(self, principal: str, connection: str, *, label: str = "", flow_id: str | None) -> str:
        """A fresh single-use authorization link for `principal`'s account on `connection` (labelled `label`)."""
        self._known(connection)
        checked_label(label)
        _, token = await self.accounts.begin_connect(
            principal,
            connection,
            label=label,
            flow_id=flow_id,
            now=self.clock.now(),
            ttl=self.link_ttl,
            most_pending=self.pending_per_principal,
        )
        return self.start_url(token)

    # -- for the hosted pages --

    async def start(self, token: str, *, opener: str | None, browser: str) -> Redirect | AskForKey | Failed:
        """The start page: who opens the link is checked first, then the link is used up, then the person is sent
        to the provider (OAuth) or shown the key form (API key). The authorization is bound to `browser`, the random
        value the opening browser holds, and must be finished within `provider_visit_ttl`."""
        now = self.clock.now()
        decision = await self.accounts.use_link(token, opener=opener, now=now)
        if isinstance(decision, Refused):
            return Failed(decision.message, status_code=403 if decision.reason == "other_user" else 400)
        link = decision.link
        connection = self.connections[link.connection]
        state = new_state()
        verifier = "" if isinstance(connection, ApiKeyConnection) else new_code_verifier()
        await self.accounts.remember_state(
            token,
            state=bound_state(state, browser),
            sealed_verifier=self._seal_verifier(link, verifier),
            until=now + self.provider_visit_ttl,
        )
        if isinstance(connection, ApiKeyConnection):
            return AskForKey(connection, state)
        url = authorization_request(connection, redirect_uri=self.callback_url, state=state, code_verifier=verifier)
        return Redirect(url)

    async def finish_oauth(
        self, *, state: str | None, code: str | None, error: str | None, opener: str | None, browser: str | None
    ) -> Done | Failed:
        """The OAuth callback: the state must be one this service issued to this browser and not yet used, the
        person the same one the link was made for, the time to come back not run out; then the code is exchanged
        (with the PKCE verifier, to the exact redirect URI) and the tokens are stored sealed."""
        taken = await self._take(state, opener, browser)
        if isinstance(taken, Failed):
            return taken
        link_account, verifier = taken
        connection = self.connections.oauth(link_account.connection)
        if error is not None or not code:
            await self._fail(link_account, f"the provider answered {error or 'without a code'}")
            return Failed(
                "Access was not granted"
                + (f" (the provider said {error})" if error else "")
                + ". Nothing was connected. Ask your assistant again when you want to connect."
            )
        try:
            tokens = await self.tokens.exchange(
                connection, code=code, redirect_uri=self.callback_url, code_verifier=verifier
            )
        except ProviderError as exc:
            await self._fail(link_account, str(exc))
            return Failed(
                "The provider did not accept this sign-in. Nothing was connected. Ask your assistant again for a new "
                "link.",
                status_code=502 if exc.reason == "unreachable" else 400,
            )
        account = await self._connect(link_account, tokens.to_vault(), tokens.expires_at)
        return Done(account)

    async def finish_key(
        self, *, state: str | None, key: str, opener: str | None, browser: str | None
    ) -> Done | Failed:
        """The API-key form: the same checks as the OAuth callback, then the key (validated by the connection's
        check request, when it has one) is stored sealed."""
        taken = await self._take(state, opener, browser)
        if isinstance(taken, Failed):
            return taken
        link_account, _ = taken
        connection = self.connections.api_key(link_account.connection)
        key = key.strip()
        if not key:
            return Failed("No key was entered. Nothing was connected. Ask your assistant again for a new link.")
        try:
            await self.tokens.check_key(connection, key)
        except InvalidParamsError:
            return Failed(
                f"That {connection.label} has characters a key cannot have. Nothing was connected. Ask your assistant "
                "again for a new link."
            )
        except ProviderError as exc:
            await self._fail(link_account, str(exc))
            return Failed(
                f"{connection.label} was not accepted by the provider. Nothing was connected. Ask your assistant "
                "again for a new link."
            )
        account = await self._connect(link_account, {"api_key": key}, None)
        return Done(account)

    # -- internals --

    def _known(self, connection: str) -> None:
        """A connection name the caller gave (through `flow.connect` or the META tools) that is not configured is a
        `ToolError` naming the configured ones, for the model to read: never the connections file's path."""
        names = self.connections.names()
        if connection in names:
            return
        shown = ", ".join(names[:_NAMES_SHOWN]) or "none"
        if len(names) > _NAMES_SHOWN:
            shown += f" and {len(names) - _NAMES_SHOWN} more"
        raise ToolError(
            f"There is no connection named {connection[:64]!a}; the connections are: {shown}. Use one of those names."
        )

    def _seal_verifier(self, link: AuthorizationLink, verifier: str) -> str:
        return self.vault.seal(link.account_id, {"v": verifier})

    async def _take(self, state: str | None, opener: str | None, browser: str | None) -> tuple[Account, str] | Failed:
        if not state:
            return Failed(_UNKNOWN_STATE)
        if browser is None:
            # Nothing is looked up, so a callback from another browser cannot even learn whether the state is real.
            return Failed(_OTHER_BROWSER, status_code=403)
        taken = await self.accounts.take_state(bound_state(state, browser), opener=opener, now=self.clock.now())
        if isinstance(taken, Refused):
            return Failed(taken.message, status_code=403 if taken.reason == "other_user" else 400)
        if taken is None:
            return Failed(_UNKNOWN_STATE)
        link, sealed_verifier = taken
        account = await self.accounts.get(link.account_id)
        if account is None:
            return Failed(_UNKNOWN_STATE)
        verifier = str(self.vault.open(link.account_id, sealed_verifier)["v"])
        return account, verifier

    async def _connect(self, account: Account, credential: dict[str, object], expires_at: float | None) -> Account:
        sealed = self.vault.seal(account.id, credential)
        await self.accounts.change(
            account.id, Event.CONNECTED, now=self.clock.now(), credential=sealed, expires_at=expires_at
        )
        connected = await self.accounts.get(account.id)
        assert connected is not None
        return connected

    async def _fail(self, account: Account, reason: str) -> None:
        """A pending account whose authorization failed is ERROR with the reason; an account that was connected
        before (reconnecting) keeps its status."""
        if account.status is Status.PENDING:
            # Changed meanwhile (connected through another link): leave it.
            with contextlib.suppress(AccountStateError):
                await self.accounts.change(account.id, Event.FAILED, now=self.clock.now(), reason=reason)
