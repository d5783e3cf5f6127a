"""What a product adds to an `Askback` app: the extension protocol, and the values it speaks in.

An extension is given to the app when it is made (`Askback(name, extensions=[...])`) and says, as data, everything it
adds; the app does the wiring, so nothing outside the app sets anything on it:

- `migrations`: the schema histories (`askback.db.migrate.Component`) its tables need in the app's store;
- `start(context)` and `close()`: run when the store opens (`app.running()`, the HTTP app's lifespan, or the first
  use) in the order the extensions were given, before the app's own `on_start` hooks, and closed in reverse after the
  app's own `on_close` hooks. A start that fails closes the extensions started before it, and the app does not start;
- `mounts`: the ASGI apps it serves beside `/mcp` (`Mounted`, each with its auth policy), which `build_app` and
  `askback serve` serve with the app's own;
- `ports`: what the core reaches through it (`Ports`: the connected accounts behind `flow.connect`, the bearer check
  of `/mcp`, the approval requests behind `flow.approve`). One port has one provider: two extensions that provide the same port are refused when the app is
  made.

This module belongs to no product, so that every product (the server kit, connected accounts, and the identity,
events, tasks and approvals to come) can build these values without importing another product.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Literal, Protocol

from starlette.datastructures import Headers
from starlette.types import ASGIApp

from askback.errors import ConfigurationError, DefinitionError

if TYPE_CHECKING:
    from askback.clock import Clock
    from askback.core.approving import ApprovalsPort
    from askback.core.caller import Caller
    from askback.core.flow import AccountsPort
    from askback.db.migrate import Component
    from askback.settings import Settings
    from askback.store import Store

__all__ = [
    "AuthPolicy",
    "Bearer",
    "BearerCheck",
    "Extension",
    "ExtensionContext",
    "Mounted",
    "Open",
    "Ports",
    "SignatureCheck",
    "Signed",
    "merge_ports",
]

# The paths the server kit answers itself: no mount may take them.
RESERVED_PATHS = ("/mcp", "/healthz", "/readyz")

SignatureCheck = Callable[[Headers, bytes], bool | Awaitable[bool]]


@dataclass(frozen=True)
class Bearer:
    kind: Literal["bearer"] = "bearer"


@dataclass(frozen=True)
class Open:
    kind: Literal["open"] = "open"


@dataclass(frozen=True)
class Signed:
    verify: SignatureCheck
    kind: Literal["signed"] = "signed"

    async def accepts(self, headers: Headers, body: bytes) -> bool:
        verdict = self.verify(headers, body)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        return bool(verdict)


AuthPolicy = Bearer | Open | Signed


@dataclass(frozen=True)
class Mounted:
    """A further ASGI app served beside `/mcp` under `path`, reached under its own auth policy: `Bearer()` (the
    MCP endpoint's token check), `Open()` or `Signed(verify)`. `public_url` is where people reach it (scheme, host,
    port), when that is not the server's own public URL: its host is then answered too."""

    path: str
    app: ASGIApp
    auth: AuthPolicy = field(default_factory=Bearer)
    # Not part of what the mount is: the same app at the same path, given again without it, is served once.
    public_url: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.path.startswith("/") or self.path.rstrip("/") in ("", *RESERVED_PATHS):
            raise DefinitionError(
                f"a mount's path must start with '/' and not be '/', {', '.join(RESERVED_PATHS)}; got {self.path!r}"
            )


class BearerCheck(Protocol):
    """How the MCP endpoint (and every `Bearer()` mount) checks an `Authorization: Bearer` token: an OAuth 2.1
    resource server (`askback.identity.ResourceServer`) or a deployment's own.

    - `verify(token)`: the `Caller` the token names, its principal spelled by `askback.core.caller.principal_of`
      and its `issuer` set; raises `askback.errors.InvalidTokenError` for a token that is not accepted (401
      `invalid_token`) and `IssuerUnavailableError` when it cannot be checked now (503), never anything else;
    - `resource_metadata_url`: the Protected Resource Metadata document (RFC 9728) every 401 points to, or `None`;
    - `describe()`: one line for the start-up log, naming what is trusted (never a secret)."""

    @property
    def resource_metadata_url(self) -> str | None: ...

    async def verify(self, token: str) -> Caller: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class Ports:
    """What the core reaches through an extension; `None` for a port it does not provide.

    - `accounts`: the connected accounts of one caller (given the principal, `None` when unauthenticated), which
      `flow.connect` asks for;
    - `bearer`: the check of the bearer tokens sent to `/mcp` (`BearerCheck`);
    - `approvals`: the approval requests of one caller (given the `Caller`, `None` when unauthenticated), which
      `flow.approve` asks for."""

    accounts: Callable[[str | None], AccountsPort] | None = None
    bearer: BearerCheck | None = None
    approvals: Callable[[Caller | None], ApprovalsPort] | None = None


@dataclass(frozen=True)
class ExtensionContext:
    """What an extension's start is given: the app's store (open and migrated), its settings and its clock."""

    store: Store
    settings: Settings
    clock: Clock


class Extension(Protocol):
    """What a product adds to an app (see the module's docstring). Plain attributes satisfy the properties."""

    @property
    def name(self) -> str:
        """A short name for messages (`"accounts"`)."""
        ...

    @property
    def migrations(self) -> Sequence[Component]: ...

    @property
    def mounts(self) -> Sequence[Mounted]: ...

    @property
    def ports(self) -> Ports: ...

    async def start(self, context: ExtensionContext) -> None: ...

    async def close(self) -> None: ...


def merge_ports(extensions: Sequence[Extension]) -> Ports:
    """The app's ports: each from the one extension that provides it. Two providers of one port are refused."""
    chosen: dict[str, tuple[str, object]] = {}
    for extension in extensions:
        ports = extension.ports
        for port in fields(Ports):
            value = getattr(ports, port.name)
            if value is None:
                continue
            if port.name in chosen:
                raise ConfigurationError(
                    f"the extensions {chosen[port.name][0]!r} and {extension.name!r} both provide the {port.name!r} "
                    "port, and a port has one provider: give the app only one of them"
                )
            chosen[port.name] = (extension.name, value)
    return Ports(**{name: value for name, (_, value) in chosen.items()})  # type: ignore[arg-type]
