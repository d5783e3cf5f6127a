"""Approvals as an extension of an `Askback` server (`askback.extension`).

```python
from askback.approvals.setup import ApprovalsSetup

approvals = ApprovalsSetup(
    sign_in=people_sign_in,                # who opens an approver's page: the deployment's own sign-in
    base_url="https://tools.example.com",  # where people reach the pages
    directory={"ops": ["bob", "carol"]},   # groups the sign-in does not carry, when there are any
)
app = Askback("deploys", settings=settings, extensions=[approvals])
```

The server kit knows nothing of approvals: the extension says, as data, that the app's store needs the approvals'
schema history, that `flow.approve` reaches them through its port (`Ports.approvals`, one per caller: the requester
is the caller's principal, and the actors of its token are never its approvers), and that the pages (an ASGI app
that checks who opens it itself, so it is mounted `Open()`) are served under `prefix`. A request's status page is
`{base_url}{prefix}/requests/{id}/status`. The pages are built on their first request, once the store is open, and
only when this installation has them (`askback.approvals.pages`): without them the service and the port still work.
"""

from __future__ import annotations

import importlib
import importlib.util
import secrets
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
from starlette.types import Receive, Scope, Send

from askback.approvals.events import ApprovalEvent, ApprovalEvents
from askback.approvals.schema import MIGRATIONS
from askback.approvals.service import ApprovalService
from askback.core.approving import ApprovalAsk, ApprovalGate, ApprovalState
from askback.core.caller import home_spelled
from askback.errors import ConfigurationError, DefinitionError, InvalidParamsError
from askback.extension import ExtensionContext, Mounted, Open, Ports

if TYPE_CHECKING:
    from askback.clock import Clock
    from askback.core.caller import Caller

__all__ = ["ApprovalsSetup"]

_PAGES = "askback.approvals.pages"


class ApprovalsSetup:
    """Approvals for one app: an extension (`Askback(..., extensions=[ApprovalsSetup(...)])`) whose start builds the
    approvals service on the app's store, with the app's clock and its setting `pending_approvals_per_principal`.

    `sign_in` tells who opens a page (the pages' own contract); a sign-in that names the sites it may serve
    (`check_site(base_url)`, as the development sign-in does, which refuses anything off loopback) is asked at once.
    `directory` gives groups their members (`{"ops": ["bob", "carol"]}`) where the sign-in carries no group claim.
    `gates` gate tools behind an approval without code in their handlers (`askback.ApprovalGate`: named tools, or
    every tool annotated `destructiveHint: true`). `home_issuer` is the issuer whose people `sign_in` names bare, for
    a sign-in of one's own (`askback.identity.PeopleSignIn` says its own): a requester or actor a token verifier
    names `<home_issuer>#alice` is then the `alice` who signs in. Without one, a bare name at the pages is refused
    for any issuer's requester or actor of that name."""

    name = "approvals"
    migrations = (MIGRATIONS,)

    def __init__(
        self,
        *,
        sign_in: Any,
        base_url: str,
        prefix: str = "/approvals",
        directory: Mapping[str, Iterable[str]] | None = None,
        gates: Iterable[ApprovalGate] = (),
        home_issuer: str | None = None,
    ) -> None:
        check_site = getattr(sign_in, "check_site", None)
        if callable(check_site):
            check_site(base_url)
        self.sign_in = sign_in
        # The issuer whose people the sign-in names bare: given, or the sign-in's own (PeopleSignIn's).
        self.home_issuer = home_issuer if home_issuer is not None else getattr(sign_in, "home_issuer", None)
        self.base_url = base_url.rstrip("/")
        self.prefix = "/" + prefix.strip("/")
        self.directory = _frozen(directory)
        self.gates = tuple(gates)
        for gate in self.gates:
            if not isinstance(gate, ApprovalGate):
                raise DefinitionError(f"ApprovalsSetup's gates are askback.ApprovalGate, not {type(gate).__name__}")
        self.ports = Ports(approvals=lambda caller: _CallerApprovals(self, caller), approval_gates=self.gates or None)
        self.mounts: tuple[Mounted, ...] = ()
        if importlib.util.find_spec(_PAGES) is not None:
            self.mounts = (Mounted(self.prefix, _LazyPages(self), auth=Open(), public_url=base_url),)
        self._service: ApprovalService | None = None
        self._events: ApprovalEvents | None = None
        # The app's clock and the extra hosts it answers (ASKBACK_ALLOWED_HOSTS), for the pages: set at start.
        self._clock: Clock | None = None
        self._hosts: tuple[str, ...] = ()
        self._keys: tuple[str, ...] = ()

    def status_url(self, approval_id: str) -> str:
        """The requester's status page of a request."""
        return f"{self.base_url}{self.prefix}/requests/{approval_id}/status"

    async def start(self, context: ExtensionContext) -> None:
        # Without state keys (one process, as the app itself then is), a key of this process: requests are reused and
        # forms taken until it stops.
        keys = tuple(context.settings.key_ring()) or (secrets.token_urlsafe(32),)
        self._service = ApprovalService(
            context.store.database,
            clock=context.clock,
            audit_log=context.store.audit_log,
            status_url=self.status_url,
            pending_per_requester=context.settings.pending_approvals_per_principal,
            keys=keys,
            home_issuer=self.home_issuer,
        )
        self._events = ApprovalEvents(context.store.events)
        self._clock = context.clock
        self._hosts = tuple(context.settings.allowed_hosts)
        self._keys = keys

    async def close(self) -> None:
        self._service = None
        self._events = None

    async def service(self) -> ApprovalService:
        """The approvals service, once the app has started (its store opened)."""
        if self._service is None:
            raise ConfigurationError(
                "Approvals are used before their app started: open it first (`async with app.running()`, or serve "
                "it with `build_app` / `askback serve`, which open it before taking requests)."
            )
        return self._service

    def events(
        self, *, types: Sequence[str] = ("approval.*",), requester: str | None = None, since: int | None = None
    ) -> AsyncIterator[ApprovalEvent]:
        """The approval events as they happen on any instance, once the app has started
        (`ApprovalEvents.events`). `requester` is a principal as the caller's token names it
        (`flow.caller.principal`): it is compared in the home spelling the requests are kept in."""
        if self._events is None:
            raise ConfigurationError(
                "Approval events are subscribed to before their app started: open it first (`async with "
                "app.running()`, or serve it with `build_app` / `askback serve`), then call `events()`."
            )
        if requester is not None:
            requester = home_spelled(requester, self.home_issuer)
        return self._events.events(types=types, requester=requester, since=since)


def _frozen(directory: Mapping[str, Iterable[str]] | None) -> Mapping[str, frozenset[str]]:
    if directory is None:
        return {}
    frozen: dict[str, frozenset[str]] = {}
    for group, members in directory.items():
        if not isinstance(group, str) or isinstance(members, str):
            raise ConfigurationError(
                f"the approvals' directory maps a group's name to a collection of principals, not {group!r} to "
                f"{type(members).__name__}"
            )
        frozen[group] = frozenset(members)
    return frozen


class _CallerApprovals:
    """`flow.approve`'s view of approvals for one caller: the requester is its principal (`None` unauthenticated),
    and the actors its token names may not approve what it asks."""

    def __init__(self, setup: ApprovalsSetup, caller: Caller | None) -> None:
        self.setup = setup
        self.requester = None if caller is None else caller.principal
        self.actors: tuple[str, ...] = tuple(getattr(caller, "actors", ()) or ())

    async def request(self, ask: ApprovalAsk) -> ApprovalState:
        service = await self.setup.service()
        return service.state(await service.request(self.requester, self.actors, ask))

    async def withdraw(self, approval_id: str) -> ApprovalState:
        service = await self.setup.service()
        record = await service.withdraw(self.requester, approval_id)
        if record is None:
            raise InvalidParamsError(f"there is no approval request {approval_id[:64]!r} of this caller")
        return service.state(record)

    async def read(self, approval_id: str) -> ApprovalState | None:
        service = await self.setup.service()
        record = await service.of_requester(self.requester, approval_id)
        return None if record is None else service.state(record)


class _LazyPages:
    """The pages, built on their first request (once the store is open)."""

    def __init__(self, setup: ApprovalsSetup) -> None:
        self.setup = setup
        self._app: Any = None
        self._lock = anyio.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._app is None:
            async with self._lock:
                if self._app is None:
                    pages = importlib.import_module(_PAGES)
                    setup = self.setup
                    self._app = pages.pages_app(
                        await setup.service(),
                        setup.sign_in,
                        base_url=setup.base_url,
                        prefix=setup.prefix,
                        directory=setup.directory,
                        clock=setup._clock,
                        hosts=setup._hosts,
                        keys=setup._keys,
                    )
        await self._app(scope, receive, send)
