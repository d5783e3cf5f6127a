"""Turning connected accounts on for an `Askback` server.

```python
from askback.accounts import enable_accounts, load_connections, Vault

accounts = enable_accounts(
    app,
    connections=load_connections("connections.toml"),
    vault=Vault.from_settings(app.settings),
    verifier=my_sign_in,                  # who opens a hosted page: the deployment's own sign-in
    base_url="https://tools.example.com", # where people reach the hosted pages
)
http_app = build_app(app, mounts=[Mounted(accounts.prefix, accounts.pages, auth=Open())])
```

The server kit knows nothing of accounts, and accounts import nothing of the server kit: this adds the accounts'
schema history to the app's store, gives `flow.connect` its port, and hands back the hosted pages (an ASGI app that
checks who opens it itself, so it is mounted `Open()`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
import httpx
from starlette.types import Receive, Scope, Send

from askback.accounts.connections import Connections
from askback.accounts.pages import pages_app
from askback.accounts.repository import Account, Accounts
from askback.accounts.service import AccountService, SignInVerifier
from askback.accounts.store import MIGRATIONS
from askback.accounts.tokens import ConnectedAccount, TokenKeeper
from askback.accounts.vault import Vault
from askback.errors import ConfigurationError, VaultError

if TYPE_CHECKING:
    from askback.server.app import Askback
    from askback.store import Store

__all__ = ["AccountsSetup", "enable_accounts"]


class AccountsSetup:
    """The accounts service of one app, built when the app's store opens."""

    def __init__(
        self,
        app: Askback,
        *,
        connections: Connections,
        vault: Vault,
        base_url: str,
        prefix: str,
        http: httpx.AsyncClient | None,
    ) -> None:
        self.app = app
        self.connections = connections
        self.vault = vault
        self.base_url = base_url
        self.prefix = "/" + prefix.strip("/")
        self.http = http
        self.pages: Any = None
        self._service: AccountService | None = None

    async def build(self, store: Store) -> None:
        await self._check_vault(Accounts(store))
        tokens = TokenKeeper(
            Accounts(store),
            self.vault,
            self.connections,
            clock=self.app.clock,
            leeway=self.app.settings.refresh_leeway,
            http=self.http,
        )
        self._service = AccountService(
            accounts=Accounts(store),
            vault=self.vault,
            connections=self.connections,
            tokens=tokens,
            clock=self.app.clock,
            base_url=self.base_url,
            prefix=self.prefix,
            link_ttl=self.app.settings.link_ttl,
            provider_visit_ttl=self.app.settings.provider_visit_ttl,
        )

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
        if self._service is not None:
            await self._service.tokens.aclose()
            self._service = None

    async def service(self) -> AccountService:
        if self._service is None:
            await self.app.store()  # runs `build`
        assert self._service is not None
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
    """Turn connected accounts on for `app`. The returned setup's `pages` (under `prefix`) are the hosted pages to
    mount beside `/mcp`: `build_app(app, mounts=[Mounted(setup.prefix, setup.pages, auth=Open())])`."""
    setup = AccountsSetup(app, connections=connections, vault=vault, base_url=base_url, prefix=prefix, http=http)
    if MIGRATIONS not in app.components:
        app.components = (*app.components, MIGRATIONS)
    app.on_start(setup.build)
    app.on_close(setup.close)
    app.accounts_port = lambda principal: _CallerAccounts(setup, principal)
    setup.pages = _LazyPages(setup, verifier)
    return setup
