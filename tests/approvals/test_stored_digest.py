"""The digest a request is stored under is keyed: whoever reads the database (or `askback approvals show`) cannot
check a guess of a hidden argument against it, and a rotation of the state keys keeps the requests made before it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from _approvals import ask
from askback.approvals.service import ApprovalService
from askback.clock import FrozenClock
from askback.core.approving import Approval, approval_digest
from askback.db.migrate import all_components
from askback.store import Store

pytestmark = pytest.mark.anyio

PAY = Approval(key="pay", title="Pay an invoice", principals=frozenset({"bob"}), hidden=frozenset({"iban"}))
OLD, NEW = "o" * 43, "n" * 43


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = await Store.open(f"sqlite:///{tmp_path / 'askback.db'}", migrate=True, components=all_components())
    try:
        yield opened
    finally:
        await opened.close()


def service(store: Store, keys: tuple[str, ...]) -> ApprovalService:
    return ApprovalService(
        store.database,
        clock=FrozenClock(at=1_800_000_000.0),
        audit_log=store.audit_log,
        status_url=lambda approval_id: f"https://tools.example.com/approvals/requests/{approval_id}/status",
        pending_per_requester=20,
        keys=keys,
    )


def paying(iban: str, flow: str = "flow-1") -> object:
    return ask(PAY, arguments={"amount": 120, "iban": iban}, flow=flow)


async def test_the_stored_digest_matches_no_guess_of_a_hidden_argument(store: Store) -> None:
    made = await service(store, (OLD,)).request("alice", (), paying("DE89370400440532013000"))  # type: ignore[arg-type]
    assert made.arguments == {"amount": 120, "iban": None}
    guesses = ["DE00000000000000000000", "DE89370400440532013000"]
    digests = {
        approval_digest(
            tool="deploy",
            arguments={"amount": 120, "iban": iban},
            answers={},
            requester="alice",
            policy=PAY.policy(),
        )
        for iban in guesses
    }
    assert made.digest not in digests


async def test_the_same_call_reuses_its_request_across_a_rotation_and_another_call_does_not(store: Store) -> None:
    first = await service(store, (OLD,)).request("alice", (), paying("DE89370400440532013000"))  # type: ignore[arg-type]
    rotated = service(store, (NEW, OLD))
    again = await rotated.request("alice", (), paying("DE89370400440532013000", flow="flow-2"))  # type: ignore[arg-type]
    other = await rotated.request("alice", (), paying("GB29NWBK60161331926819", flow="flow-3"))  # type: ignore[arg-type]
    assert again.id == first.id and other.id != first.id
    # Once the old key is gone, the request made under it is no longer this call's: a new one is made.
    dropped = await service(store, (NEW,)).request("alice", (), paying("DE89370400440532013000", flow="flow-4"))  # type: ignore[arg-type]
    assert dropped.id not in (first.id, other.id)
