"""The approvals' pages in process for a test: `pages_app` mounted at `/approvals` over a real `ApprovalService` on a
SQLite file (every component migrated), a frozen clock, and the accounts' development sign-in (carol in the group
`finance`); requests made as a round makes them (`Site.request`), pages opened as a signed-in person
(`Site.get`, `Site.post`)."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.routing import Mount

from askback.accounts.pages import DevelopmentSignIn
from askback.approvals.pages import CSRF_COOKIE, pages_app
from askback.approvals.service import ApprovalRecord, ApprovalService
from askback.clock import FrozenClock
from askback.core.approving import Approval, ApprovalAsk, approval_digest
from askback.db.migrate import all_components
from askback.store import Store

BASE = "http://127.0.0.1:8000"
PREFIX = "/approvals"
PUBLIC = "https://approvals.example.com"

# Two of bob, dave and the group finance; the IBAN is masked on the approvers' pages.
PAY = Approval(
    key="pay",
    title="Pay an invoice",
    principals=frozenset({"bob", "dave"}),
    groups=frozenset({"finance"}),
    required=2,
    hidden=frozenset({"iban"}),
)
ARGUMENTS: Mapping[str, Any] = {"amount": 120, "iban": "DE89370400440532013000", "payee": "<b>ACME</b>"}


@dataclass
class Site:
    service: ApprovalService
    sign_in: DevelopmentSignIn
    http: httpx.AsyncClient
    clock: FrozenClock
    app: Starlette  # the pages, mounted at PREFIX
    store: Store
    token: str  # this browser's form token, sent as its cookie with every request

    async def request(
        self, requester: str, approval: Approval, arguments: Mapping[str, Any], *, summary: str | None = None
    ) -> ApprovalRecord:
        """The request a round of `pay_invoice` makes for `requester`, as the approvals port makes it."""
        answers = {"confirm": {"ok": True}}
        digest = approval_digest(
            tool="pay_invoice", arguments=arguments, answers=answers, requester=requester, policy=approval.policy()
        )
        flow = f"flow-{secrets.token_hex(4)}"
        return await self.service.request(
            requester, (), ApprovalAsk(approval, "pay_invoice", arguments, answers, digest, flow, summary)
        )

    def cookies(self, user: str | None) -> dict[str, str]:
        signed = {DevelopmentSignIn.COOKIE: self.sign_in.cookie_value(user)} if user is not None else {}
        return {CSRF_COOKIE: self.token, **signed}

    async def get(self, user: str | None, path: str, **kwargs: Any) -> httpx.Response:
        self.http.cookies = httpx.Cookies(self.cookies(user))
        return await self.http.get(f"{PREFIX}{path}", **kwargs)

    async def post(self, user: str | None, path: str, form: Mapping[str, str], **kwargs: Any) -> httpx.Response:
        self.http.cookies = httpx.Cookies(self.cookies(user))
        return await self.http.post(f"{PREFIX}{path}", data=dict(form), **kwargs)


@contextlib.asynccontextmanager
async def open_site(folder: Path, *, base: str = BASE, keys: Sequence[str] | None = None) -> AsyncIterator[Site]:
    """The site at `base`, its database in `folder`, its forms' tokens and stored digests keyed from the state key
    ring `keys` (a new key by default, as `ApprovalsSetup` makes without state keys)."""
    keys = (secrets.token_urlsafe(32),) if keys is None else keys
    clock = FrozenClock(at=1_800_000_000.0)
    store = await Store.open(f"sqlite:///{folder / 'askback.db'}", migrate=True, components=all_components())
    try:
        service = ApprovalService(
            store.database,
            clock=clock,
            audit_log=store.audit_log,
            status_url=lambda approval_id: f"{base}{PREFIX}/requests/{approval_id}/status",
            pending_per_requester=20,
            keys=keys,
        )
        sign_in = DevelopmentSignIn(secrets.token_bytes(32), groups={"carol": ["finance"]})
        app = pages_app(service, sign_in, base_url=base, prefix=PREFIX, clock=clock, hosts=[PUBLIC], keys=keys)
        served = Starlette(routes=[Mount(PREFIX, app=app)])
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=served), base_url=base) as http:
            yield Site(service, sign_in, http, clock, served, store, secrets.token_urlsafe(32))
    finally:
        await store.close()
