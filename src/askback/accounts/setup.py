"""Connected accounts as an extension of an `Askback` server (`askback.extension`).

```python
from askback.accounts import AccountsSetup, Vault, load_connections

settings = load_settings()
accounts = AccountsSetup(
    connections=load_connections("connections.toml"),
    vault=Vault.from_settings(settings),
    verifier=my_sign_in,                  # who opens a hosted page: the deployment's own sign-in
    base_url="https://tools.example.com", # where people reach the hosted pages
)
app = Askback("mail", settings=settings, extensions=[accounts])
http_app = build_app(app, token_verifier=my_tokens)   # serves the hosted pages at /accounts too
```

The server kit knows nothing of accounts, and accounts import nothing of the server kit: the extension says, as
data, that the app's store needs the accounts' schema history, that `flow.connect` reaches the accounts through its
port, and that the hosted pages (an ASGI app that checks who opens it itself, so it is mounted `Open()`) are served
under `prefix`; the app does the wiring. `enable_accounts(app, ...)` builds the same extension for an app already
made.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import httpx
from starlette.types import Receive, Scope, Send

from askback.accounts.connections import Connections
from askback.accounts.events import AccountEvent, AccountEvents
from askback.accounts.pages import DevelopmentSignIn, pages_app
from askback.accounts.repository import Account, Accounts
from askback.accounts.schema import MIGRATIONS
from askback.accounts.service import AccountService, SignInVerifier
from askback.accounts.tokens import ConnectedAccount, TokenKeeper
from askback.accounts.vault import Vault
from askback.errors import ConfigurationError, VaultError
from askback.extension import ExtensionContext, Mounted, Open, Ports

if TYPE_CHECKING:
    from askback.server.app import Askback

__all__ = ["AccountsSetup", "enable_accounts"]


class AccountsSetup:
    """Connected accounts for one app: an extension (`Askback(..., extensions=[AccountsSetup(...)])`) whose start
    builds the accounts service on the app's store, with the app's clock and settings (`link_ttl`,
    `provider_visit_ttl`, `refresh_leeway`, `pending_accounts_per_principal`). `pages` are the hosted pages, served
    under `prefix`. The development sign-in is refused for a `base_url` outside loopback (`ConfigurationError`)."""

    name = "accounts"
    migrations = (MIGRATIONS,)

    def __init__(
        self,
        *,
        connections: Connections,
        vault: Vault,
        verifier: SignInVerifier,
        base_url: str,
        prefix: str = "/accounts",
        http: httpx.AsyncClient | None = None,
    ) -> None:
        if isinstance(verifier, DevelopmentSignIn):
            DevelopmentSignIn.check_site(base_url)
        self.connections = connections
        self.vault = vault
        self.base_url = base_url
        self.prefix = "/" + prefix.strip("/")
        self.http = http
        self.pages = _LazyPages(self, verifier)
        self.mounts = (Mounted(self.prefix, self.pages, auth=Open(), public_url=base_url),)
        self.ports = Ports(accounts=lambda principal: _CallerAccounts(self, principal))
        self._service: AccountService | None = None
        self._events: AccountEvents | None = None

    async def start(self, context: ExtensionContext) -> None:
        database, settings = context.store.database, context.settings
        await self._check_vault(Accounts(database))
        tokens = TokenKeeper(
            Accounts(database),
            self.vault,
            self.connections,
            clock=context.clock,
            leeway=settings.refresh_leeway,
            http=self.http,
        )
        self._service = AccountService(
            accounts=Accounts(database),
            vault=self.vault,
            connections=self.connections,
            tokens=tokens,
            clock=context.clock,
            base_url=self.base_url,
            prefix=self.prefix,
            link_ttl=settings.link_ttl,
            provider_visit_ttl=settings.provider_visit_ttl,
            pending_per_principal=settings.pending_accounts_per_principal,
        )
        self._events = AccountEvents(context.store.events)

    async def _check_vault(self, accounts: Accounts) -> None:
        """Refuse to start with a key ring that cannot read the stored credentials (a wrong key, a key removed too
        early), rather than fail each account's first use."""
        found = await accounts.one_sealed()
        if found is None:
            return
        try:
            self.vault.open(*found)
        except VaultError as exc:
            raise ConfigurationError(
                f"ASKBACK_VAULT_KEYS cannot open the credentials already stored ({exc}) Set the key ring the "
                "credentials were sealed with (keep old keys after the new one until `askback vault rotate` has run)."
            ) from None

    async def close(self) -> None:
        """Close the token keeper's HTTP client (the app runs this when it closes)."""
        self._events = None
        if self._service is not None:
            await self._service.tokens.aclose()
            self._service = None

    def events(
        self,
        *,
        types: Sequence[str] = ("account.*",),
        principal: str | None = None,
        connection: str | None = None,
        since: int | None = None,
    ) -> AsyncIterator[AccountEvent]:
        """The accounts' lifecycle events as they happen on any instance, once the app has started:
        `async for event in accounts.events(types=["account.connected"], principal=...)` (`AccountEvents.events`)."""
        if self._events is None:
            raise ConfigurationError(
                "Account events are subscribed to before their app started: open it first (`async with "
                "app.running()`, or serve it with `build_app` / `askback serve`), then call `events()`."
            )
        return self._events.events(types=types, principal=principal, connection=connection, since=since)

    async def service(self) -> AccountService:
        """The accounts service, once the app has started (its store opened)."""
        if self._service is None:
            raise ConfigurationError(
                "Connected accounts are used before their app started: open it first (`async with app.running()`, "
                "or serve it with `build_app` / `askback serve`, which open it before taking requests)."
            )
        return self._service


class _CallerAccounts:
    """`flow.connect`'s view of connected accounts for one caller."""

    def __init__(self, setup: AccountsSetup, principal: str | None) -> None:
        self.setup = setup
        self.principal = principal
        self._handles: list[ConnectedAccount] = []

    def _who(self) -> str:
        if self.principal is None:
            raise ConfigurationError(
                "Connected accounts need to know who is calling: serve this server with a token verifier (an "
                "unauthenticated caller has no accounts)."
            )
        return self.principal

    async def accounts(self, connection: str) -> Sequence[Account]:
        return await (await self.setup.service()).accounts_of(self._who(), connection)

    async def link(self, connection: str, label: str, flow_id: str) -> str:
        return await (await self.setup.service()).link(self._who(), connection, label=label, flow_id=flow_id)

    async def recover(self, account: Any) -> Account:
        assert isinstance(account, Account)
        return await (await self.setup.service()).tokens.recover(account)

    def handle(self, account: Any) -> ConnectedAccount:
        assert self.setup._service is not None and isinstance(account, Account)
        handle = ConnectedAccount(account, self.setup._service.tokens)
        self._handles.append(handle)
        return handle

    async def aclose(self) -> None:
        handles, self._handles = self._handles, []
        for handle in handles:
            await handle.aclose()


class _LazyPages:
    """The hosted pages, built on their first request (once the store is open)."""

    def __init__(self, setup: AccountsSetup, verifier: SignInVerifier) -> None:
        self.setup = setup
        self.verifier = verifier
        self._app: Any = None
        self._lock = anyio.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._app is None:
            async with self._lock:
                if self._app is None:
                    self._app = pages_app(await self.setup.service(), self.verifier)
        await self._app(scope, receive, send)


def enable_accounts(
    app: Askback,
    *,
    connections: Connections,
    vault: Vault,
    verifier: SignInVerifier,
    base_url: str,
    prefix: str = "/accounts",
    http: httpx.AsyncClient | None = None,
) -> AccountsSetup:
    """Turn connected accounts on for `app`, already made and not yet started: `AccountsSetup(...)` given to
    `app.extend`. The app then serves the hosted pages under `prefix` (`build_app`, `askback serve`); passing the
    returned setup's mount to `build_app(mounts=...)` again serves them once."""
    setup = AccountsSetup(
        connections=connections, vault=vault, verifier=verifier, base_url=base_url, prefix=prefix, http=http
    )
    app.extend(setup)
    return setup
