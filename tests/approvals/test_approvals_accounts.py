"""An approval never carries a connected account's credential: the effect it gates uses the account as it is when the
effect runs, read again that round, not as it was when the request was made.

One server under uvicorn has both connected accounts (the demo's Demo Mail connection, `mail_accounts`, with the
development OAuth provider on loopback in this process) and approvals (`ApprovalsSetup`), on one SQLite file. alice
connects through the hosted pages and the provider's consent page with plain HTTP (`askback.demo.person`, on a
thread); `send_reply` connects her account, waits for bob's approval, then sends once with the account's credential;
bob decides through the approvals service as the pages do; alice's account is revoked, or its token refreshed, with
the accounts service's own operations, between the request and the approval.
"""

from __future__ import annotations

import contextlib
import functools
import secrets
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult
from pydantic import SecretStr

from askback import Approval, Askback, Flow, load_settings
from askback.accounts.setup import AccountsSetup
from askback.accounts.status import Status
from askback.accounts.vault import new_key
from askback.approvals.service import ApprovalService, Approver
from askback.approvals.setup import ApprovalsSetup
from askback.audit import AuditFilter
from askback.core.approving import approval_key
from askback.demo.mail import DemoMail, callback_url, mail_accounts
from askback.demo.person import connect_account
from askback.demo.provider import DevProvider, serving_provider
from askback.server import DemoTokenVerifier, build_app
from askback.testing import Round, call_round, text
from infra import serving_asgi

pytestmark = [pytest.mark.anyio, pytest.mark.http]

CONNECTION = "demo-mail"
CONNECT_KEY = f"connect.{CONNECTION}"
SEND = Approval(key="send", title="Send a reply", principals=frozenset({"bob"}))
APPROVAL_KEY = approval_key(SEND.key)
BOB = Approver("bob", method="development")


@dataclass
class Served:
    mcp: str
    app: Askback
    accounts: AccountsSetup
    approvals: ApprovalsSetup
    # (caller, the access token the effect sent with, the provider's answer to it), one per run of the effect.
    sent: list[tuple[str, str, int]]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@contextlib.asynccontextmanager
async def serve(provider: DevProvider, secret: str, folder: Path, listener: socket.socket) -> AsyncIterator[Served]:
    base = f"http://127.0.0.1:{listener.getsockname()[1]}"
    settings = load_settings(
        database_url=f"sqlite:///{folder / 'askback.db'}",
        state_keys=secrets.token_urlsafe(32),
        vault_keys=new_key(),
    )
    mail = DemoMail(
        issuer=provider.issuer,
        client_secret=SecretStr(secret),
        public_url=base,
        sign_in_secret=SecretStr(secrets.token_urlsafe(32)),
    )
    accounts = mail_accounts(mail, settings)
    approvals = ApprovalsSetup(sign_in=nobody, base_url=base)
    app = Askback("mail-approvals", settings=settings, extensions=[accounts, approvals])
    sent: list[tuple[str, str, int]] = []
    messages_url = provider.messages_url

    @app.tool(connections=[CONNECTION])
    async def send_reply(subject: str, flow: Flow) -> str:
        """Reply at Demo Mail, once bob approves, with the caller's connected account."""
        account = await flow.connect(CONNECTION)
        approved = await flow.approve(SEND, summary=f"Reply {subject!r}")

        async def send() -> str:
            # The credential as the account supplies it now, and the provider's answer to a request carrying it.
            token = await account.token()
            reply = await account.http.get(messages_url)
            user = str(reply.json()["user"]) if reply.status_code == 200 else "?"
            sent.append((user, token, reply.status_code))
            return user

        to = await flow.once("send", send)
        return f"Sent Re: {subject} as {to}, approved by {', '.join(approved.approvers)}."

    async with serving_asgi(build_app(app, token_verifier=DemoTokenVerifier()), listener) as url:
        yield Served(f"{url}/mcp", app, accounts, approvals, sent)


async def nobody(request: Any) -> None:
    return None


@pytest.fixture(scope="module")
async def served(listener: socket.socket, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    secret = secrets.token_urlsafe(32)
    folder = tmp_path_factory.mktemp("approvals-accounts")
    redirect = callback_url(f"http://127.0.0.1:{listener.getsockname()[1]}")
    with serving_provider(client_secret=secret, redirect_uris=[redirect]) as provider:
        async with serve(provider, secret, folder, listener) as done:
            yield done


async def person_connects(link: str, user: str) -> None:
    said: list[str] = []
    done = await anyio.to_thread.run_sync(functools.partial(connect_account, link, user=user, say=said.append))
    assert done, said


async def connected_through_the_pages(served: Served, user: str) -> None:
    """`user` connects their account with the link the accounts service gives, through both sign-ins."""
    service = await served.accounts.service()
    await person_connects(await service.link(user, CONNECTION, flow_id=f"setup-{user}"), user)


async def access_token(served: Served, user: str) -> str | None:
    """The access token `user`'s account holds now in the vault (`None` once it holds none)."""
    service = await served.accounts.service()
    [account] = await service.accounts_of(user, CONNECTION)
    sealed = await service.accounts.sealed_credential(account.id)
    return None if sealed is None else str(service.vault.open(account.id, sealed)["access_token"])


def asked(got: Round) -> tuple[str, str, str]:
    """The (key, url, requestState) of a round that asks one URL question."""
    assert got.error is None and isinstance(got.result, InputRequiredResult), got
    [(key, question)] = (got.result.input_requests or {}).items()
    params = question.params.model_dump()
    assert params["mode"] == "url", params
    assert got.result.request_state is not None
    return key, params["url"], got.result.request_state


async def send(served: Served, user: str, *, answer: str | None = None, state: str | None = None) -> Round:
    responses = {answer: ElicitResult(action="accept")} if answer is not None else None
    return await call_round(
        served.mcp, "send_reply", {"subject": "launch"}, token=f"demo-{user}", responses=responses, request_state=state
    )


async def the_request(approvals: ApprovalService, user: str) -> Any:
    [record] = [r for r in await approvals.listing() if r.requester == user]
    return record


async def consumed_rows(served: Served, approval_id: str) -> list[Any]:
    store = await served.app.store()
    rows = await store.audit_log.query(AuditFilter(event="approval.consumed"))
    return [row for row in rows if (row.content or {}).get("approval") == approval_id]


async def test_an_account_revoked_while_the_approval_waited_is_asked_for_again_and_the_effect_uses_the_new_credential(
    served: Served,
) -> None:
    user = "alice"
    approvals = await served.approvals.service()
    accounts = await served.accounts.service()
    await connected_through_the_pages(served, user)
    old = await access_token(served, user)
    assert old is not None

    # Round 1: the account is connected, so the call waits for the approval, with the request's status link.
    key, url, first = asked(await send(served, user))
    record = await the_request(approvals, user)
    assert key == APPROVAL_KEY and url.endswith(f"/approvals/requests/{record.id}/status")
    assert record.status == "pending" and served.sent == []

    # While it waits, alice's account is revoked (the credential is deleted), then bob approves the exact call.
    [account] = await accounts.accounts_of(user, CONNECTION)
    await accounts.tokens.revoke(account)
    [revoked] = await accounts.accounts_of(user, CONNECTION)
    assert revoked.status is Status.REVOKED and await access_token(served, user) is None
    decided = await approvals.decide(BOB, record.id, "approve", "", digest=record.digest)
    assert decided.counted and decided.record.status == "approved"

    # Round 2: the approval alone does not send: the account is read again and alice is asked to connect it again.
    key, url, second = asked(await send(served, user, answer=APPROVAL_KEY, state=first))
    assert key == CONNECT_KEY and "/accounts/start?t=" in url
    assert served.sent == []
    waiting = await approvals.get(record.id)
    assert waiting is not None and waiting.status == "approved", "nothing may consume the approval before the effect"

    # alice connects again: a new grant, a new token.
    await person_connects(url, user)
    new = await access_token(served, user)
    assert new is not None and new != old

    # Round 3: the approved request is consumed and the effect runs once, with the credential the account holds now.
    done = await send(served, user, answer=CONNECT_KEY, state=second)
    assert isinstance(done.result, CallToolResult) and not done.result.is_error, done
    assert text(done.result) == "Sent Re: launch as alice, approved by bob."
    assert served.sent == [(user, new, 200)]

    # The final round sent again answers the same and sends nothing more.
    replayed = await send(served, user, answer=CONNECT_KEY, state=second)
    assert isinstance(replayed.result, CallToolResult) and text(replayed.result) == text(done.result)
    assert served.sent == [(user, new, 200)]
    consumed = await approvals.get(record.id)
    assert consumed is not None and consumed.status == "consumed"
    assert [r.id for r in await approvals.listing() if r.requester == user] == [record.id]
    assert len(await consumed_rows(served, record.id)) == 1


async def test_a_token_refreshed_while_the_approval_waited_is_the_one_the_effect_uses(served: Served) -> None:
    user = "carol"
    approvals = await served.approvals.service()
    accounts = await served.accounts.service()
    await connected_through_the_pages(served, user)
    at_request = await access_token(served, user)

    key, _, first = asked(await send(served, user))
    record = await the_request(approvals, user)
    assert key == APPROVAL_KEY and record.status == "pending"

    # The provider rotates the token (a refresh) before bob approves.
    [account] = await accounts.accounts_of(user, CONNECTION)
    await accounts.tokens.refresh(account, force=True)
    refreshed = await access_token(served, user)
    assert refreshed is not None and refreshed != at_request
    await approvals.decide(BOB, record.id, "approve", "", digest=record.digest)

    done = await send(served, user, answer=APPROVAL_KEY, state=first)
    assert isinstance(done.result, CallToolResult) and not done.result.is_error, done
    assert [(who, token) for who, token, _ in served.sent if who == user] == [(user, refreshed)]
    consumed = await approvals.get(record.id)
    assert consumed is not None and consumed.status == "consumed"
