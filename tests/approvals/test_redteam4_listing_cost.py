"""The approvers' listing (`repository.pending_for`) reads every pending request's policy, and rebuilds each one as an
`Approval` with every check a declaration passes (`name_problem` over each principal, group and hidden argument, and
the title), once per pending request, though a tool's requests all store the same policy. A listing's work is then the
number of pending requests times the size of their policy: with a policy of 30 issuer-qualified principals and 2,000
requests pending for other approvers, a page view of an approver who may decide none of them takes over a second
(measured: 1.6 s; 6,400 checks of names for 200 requests), on every view and for every approver. The same policy
need only be checked once."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from _approvals import BOB, NOW, ask, service_on
from askback.approvals.service import ApprovalService
from askback.clock import FrozenClock
from askback.core import text
from askback.core.approving import Approval
from askback.db.migrate import all_components
from askback.store import Store

pytestmark = pytest.mark.anyio

# A tool whose approvers are thirty people of another issuer and the dba group: bob is not among them.
ROTATE = Approval(
    key="rotate",
    title="Rotate the production database credentials",
    principals=frozenset(f"https://login.example.com/tenant/v2.0#00000000-0000-0000-0000-{i:012d}" for i in range(30)),
    groups=frozenset({"dba"}),
)
PER_CALLER = 20
PENDING = 200


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[ApprovalService]:
    store = await Store.open(f"sqlite:///{tmp_path}/askback.db", migrate=True, components=all_components())
    try:
        yield service_on(store, FrozenClock(at=NOW), pending=PER_CALLER)
    finally:
        await store.close()


@contextmanager
def names_checked() -> Iterator[Callable[[], int]]:
    """How many times `name_problem` runs inside the block (a profile hook, observing only)."""
    calls = 0
    code = text.name_problem.__code__

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call" and frame.f_code is code:
            calls += 1

    before = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield lambda: calls
    finally:
        sys.setprofile(before)


async def test_the_listing_checks_a_policy_its_pending_requests_share_once(service: ApprovalService) -> None:
    for n in range(PENDING):
        caller = f"user{n // PER_CALLER}"
        await service.request(
            caller, [], ask(ROTATE, flow=f"f{n}", requester=caller, arguments={"n": n}, tool="rotate")
        )
    with names_checked() as once:
        Approval(**ROTATE.policy())  # what declaring the tool's policy checks
    with names_checked() as listing:
        assert await service.decidable_by(BOB) == []
    # One policy, two hundred requests: checking it once (or a few times) is what the listing needs.
    assert listing() <= 2 * once(), (listing(), once())
