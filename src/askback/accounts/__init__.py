"""Connected accounts: when a tool needs the user's third-party account, a URL-mode question links to a hosted
authorization page; the credential lands in an encrypted vault and never reaches the handler, the client, the
model, the logs, the audit trail or `requestState`.

```python
from askback.accounts import Vault, enable_accounts, load_connections
```

The public surface is this module: turning accounts on (`enable_accounts`), the connections (`OAuthConnection`,
`ApiKeyConnection`, the presets, `load_connections`, discovery), the vault, the token keeper and the handle a tool
gets (`ConnectedAccount`), the hosted pages, and the account records. Names are imported on first use, so that
importing it loads neither SQLAlchemy nor the HTTP stack. The parts, each also importable on its own:

- `status`: the account statuses and every allowed transition, in one table (no I/O).
- `vault`: credentials encrypted at rest (AES-256-GCM, the account id bound as associated data), with its own key
  ring and rotation.
- `connections`: what a connection is (OAuth 2.0 authorization code with PKCE, or an API key), presets, discovery,
  and the requests built for a provider (no I/O).
- `tokens`: exchanging, refreshing (once for everyone) and revoking tokens, and using an account over HTTP.
- `events`: the lifecycle events (`account.connected`, ...) and a subscription to them on every instance.
- `repository`, `links`, `service`, `pages`, `setup`: the accounts' rows, the one-use links, the flows behind the
  hosted pages, the pages themselves, and the extension that adds them to an `Askback` app.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from askback._face import resolve

if TYPE_CHECKING:
    from askback.accounts.connections import (
        PRESETS,
        ApiKeyConnection,
        Connection,
        Connections,
        KeyCheck,
        OAuthConnection,
        discover,
        discover_all,
        github,
        google,
        load_connections,
        microsoft,
        origin,
        preset,
        secret_from_env,
        slack,
    )
    from askback.accounts.events import AccountEvent, AccountEvents
    from askback.accounts.pages import DevelopmentSignIn, pages_app
    from askback.accounts.repository import Account, Accounts
    from askback.accounts.service import AccountService, SignInVerifier
    from askback.accounts.setup import AccountsSetup, enable_accounts
    from askback.accounts.status import Status
    from askback.accounts.tokens import Backoff, ConnectedAccount, TokenKeeper, TokenSet
    from askback.accounts.vault import CredentialUnreadable, Vault, new_key

_WHERE = {
    "ApiKeyConnection": "askback.accounts.connections",
    "Connection": "askback.accounts.connections",
    "Connections": "askback.accounts.connections",
    "KeyCheck": "askback.accounts.connections",
    "OAuthConnection": "askback.accounts.connections",
    "PRESETS": "askback.accounts.connections",
    "discover": "askback.accounts.connections",
    "discover_all": "askback.accounts.connections",
    "github": "askback.accounts.connections",
    "google": "askback.accounts.connections",
    "load_connections": "askback.accounts.connections",
    "microsoft": "askback.accounts.connections",
    "origin": "askback.accounts.connections",
    "preset": "askback.accounts.connections",
    "secret_from_env": "askback.accounts.connections",
    "slack": "askback.accounts.connections",
    "AccountEvent": "askback.accounts.events",
    "AccountEvents": "askback.accounts.events",
    "DevelopmentSignIn": "askback.accounts.pages",
    "pages_app": "askback.accounts.pages",
    "Account": "askback.accounts.repository",
    "Accounts": "askback.accounts.repository",
    "AccountService": "askback.accounts.service",
    "SignInVerifier": "askback.accounts.service",
    "AccountsSetup": "askback.accounts.setup",
    "enable_accounts": "askback.accounts.setup",
    "Status": "askback.accounts.status",
    "Backoff": "askback.accounts.tokens",
    "ConnectedAccount": "askback.accounts.tokens",
    "TokenKeeper": "askback.accounts.tokens",
    "TokenSet": "askback.accounts.tokens",
    "CredentialUnreadable": "askback.accounts.vault",
    "Vault": "askback.accounts.vault",
    "new_key": "askback.accounts.vault",
}

__all__ = [
    "PRESETS",
    "Account",
    "AccountEvent",
    "AccountEvents",
    "AccountService",
    "Accounts",
    "AccountsSetup",
    "ApiKeyConnection",
    "Backoff",
    "ConnectedAccount",
    "Connection",
    "Connections",
    "CredentialUnreadable",
    "DevelopmentSignIn",
    "KeyCheck",
    "OAuthConnection",
    "SignInVerifier",
    "Status",
    "TokenKeeper",
    "TokenSet",
    "Vault",
    "discover",
    "discover_all",
    "enable_accounts",
    "github",
    "google",
    "load_connections",
    "microsoft",
    "new_key",
    "origin",
    "pages_app",
    "preset",
    "secret_from_env",
    "slack",
]


def __getattr__(name: str) -> Any:
    return resolve(__name__, _WHERE, name, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
