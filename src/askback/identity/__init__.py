"""Identity: askback as an OAuth 2.1 resource server, checking the bearer tokens sent to `/mcp`.

```python
from askback.identity import ResourceServer

identity = ResourceServer(issuer="https://login.example.com", audience="https://askback.example.com/mcp")
app = Askback("deploy", extensions=[identity])
```

The public surface is this module; names are imported on first use. The parts:

- `_settings`: `IdentitySettings`, read from `ASKBACK_AUTH_*`.
- `_discovery`: the issuer's metadata (OpenID Connect discovery, else RFC 8414).
- `_keys`: the issuer's signing keys, cached, refetched at most once per interval.
- `_jwt`: checking JWT access tokens (RFC 9068) and ID tokens (OpenID Connect) with joserfc.
- `_introspection`: opaque tokens through RFC 7662 introspection, with a short cache.
- `_resource`: `ResourceServer`, the bearer check and the extension serving the protected resource metadata
  (RFC 9728).
- `_signin`, `_session`, `_sessions`: `PeopleSignIn`, people signed in on the pages askback hosts (OpenID Connect,
  authorization code with PKCE), the signed cookie holding their session's id, and the sessions in the shared store
  (`_models`, and `schema`: their migration history), which sign-out ends on every instance.
- `_signin_settings`: `SignInSettings`, the people's sign-in settings (`ASKBACK_SIGNIN_*`, `ASKBACK_SESSION_SECRET`,
  `ASKBACK_PUBLIC_URL`), read and validated one way for the hosted pages and the web inbox.
- `_signin_issuer`: the issuer people sign in at, as the sign-in reaches it (metadata, keys, token endpoint).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from askback._face import resolve

if TYPE_CHECKING:
    from askback.identity._resource import ResourceServer
    from askback.identity._settings import IdentitySettings, load_identity_settings
    from askback.identity._signin import PeopleSignIn
    from askback.identity._signin_settings import SignInSettings

_WHERE = {
    "PeopleSignIn": "askback.identity._signin",
    "SignInSettings": "askback.identity._signin_settings",
    "IdentitySettings": "askback.identity._settings",
    "load_identity_settings": "askback.identity._settings",
    "ResourceServer": "askback.identity._resource",
}

__all__ = ["IdentitySettings", "PeopleSignIn", "ResourceServer", "SignInSettings", "load_identity_settings"]


def __getattr__(name: str) -> Any:
    return resolve(__name__, _WHERE, name, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
