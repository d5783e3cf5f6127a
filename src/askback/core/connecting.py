"""`flow.connect`: a connected account, read for real every round, or a link to connect it.

The accounts product provides the port (`AccountsPort`); the core decides what the round does with what it finds:
hand over an ACTIVE account, ask which one when there are several, try an account in ERROR again, or send a link.

In the `report` mode (the META exposure's `execute_tool`) no link is asked for: an account that is not ready ends
the run with `NotReady`, naming the connection and whether it needs connecting or connecting again, which the call
answers as an ordinary result. `readiness` is the same status model for an agent that asks before it calls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, Protocol

from mcp_types import ClientCapabilities, ElicitResult

from askback.core._flow_record import FlowEnded, FlowEvent, NeedInput, RunRecord
from askback.core.capabilities import declares
from askback.core.questions import Choice, Link, connect_key
from askback.core.text import name_problem
from askback.errors import DefinitionError, MissingCapabilityError, ToolError

__all__ = [
    "MAX_LABEL_LENGTH",
    "AccountLike",
    "AccountsPort",
    "ConnectMode",
    "NotReady",
    "Readiness",
    "checked_label",
    "connect",
    "readiness",
]

# An account's label is shown in tables and pages, and stored in a column of this many characters.
MAX_LABEL_LENGTH = 128

ConnectMode = Literal["ask", "report"]
"""How `flow.connect` treats an account that is not ready: ask with a link (`ask`), or end the run saying so
(`report`)."""

Readiness = Literal["ready", "needs_connection", "needs_reauth"]


def checked_label(label: str) -> str:
    """`label` when it may name an account (empty: the default account); `ToolError` saying what is wrong when it is
    longer than `MAX_LABEL_LENGTH` or holds a control, line break or bidirectional character. `flow.connect`, the
    META exposure's `connect_account` and the accounts' own link all check through it."""
    if not label:
        return label
    problem = name_problem(label, what="the account label", limit=MAX_LABEL_LENGTH)
    if problem is not None:
        raise ToolError(f"{problem}: name the account with a short label on one line, such as 'work'.")
    return label


class AccountLike(Protocol):
    """What the flow needs to know of a connected account: which one it is and its real status."""

    @property
    def label(self) -> str: ...
    @property
    def status(self) -> str: ...


class AccountsPort(Protocol):
    """Connected accounts, as seen by one caller (the principal is the port's): provided by the accounts product."""

    async def accounts(self, connection: str) -> Sequence[AccountLike]:
        """The caller's accounts on `connection`, with their real status."""
        ...

    async def link(self, connection: str, label: str, flow_id: str) -> str:
        """A fresh single-use authorization link for the caller's account `label` on `connection`."""
        ...

    async def recover(self, account: AccountLike) -> AccountLike:
        """An account in ERROR tried again (its credential refreshed): the account as it then is (ACTIVE when that
        worked, EXPIRED when the provider refused the grant, unchanged when there is nothing to try with). Raises
        the provider's error while it cannot be reached: an outage is not a reason to ask the person again."""
        ...

    def handle(self, account: AccountLike) -> Any:
        """What the handler receives for an ACTIVE account (it uses the account without seeing its credential)."""
        ...

    async def aclose(self) -> None:
        """Release what the handles of this round hold (their HTTP clients); called when the round ends."""
        ...


_ACTIVE = "ACTIVE"
_ERROR = "ERROR"
_PENDING = "PENDING"


def readiness(statuses: Iterable[str]) -> Readiness:
    """A connection's readiness for a caller whose accounts on it have these statuses: `ready` with an ACTIVE one,
    `needs_connection` with none (or only a link issued, PENDING), `needs_reauth` when accounts exist but none is
    ACTIVE (EXPIRED, ERROR, REVOKED)."""
    found = set(statuses)
    if _ACTIVE in found:
        return "ready"
    if found - {_PENDING}:
        return "needs_reauth"
    return "needs_connection"


class NotReady(FlowEnded):
    """`flow.connect` in the `report` mode found the account not ready: the run ends, and the call answers
    `{"status": status, "connection": connection}` (and the account's `label` when the handler named one) instead
    of asking for it."""

    def __init__(self, connection: str, status: Literal["not_connected", "reauth_needed"], label: str = "") -> None:
        again = "connected again" if status == "reauth_needed" else "connected"
        named = f", label={label!r}" if label else ""
        super().__init__(
            f"Not connected: this tool needs your {connection} account, which needs to be {again}. Get a link with "
            f"connect_account(connection={connection!r}{named}), have the person open it, then call the tool again.",
            status,
        )
        self.connection = connection
        self.status: Literal["not_connected", "reauth_needed"] = status
        self.label = label

    def report(self) -> dict[str, str]:
        """What the call answers, as structured content."""
        found = {"status": self.status, "connection": self.connection}
        return {**found, "label": self.label} if self.label else found


async def connect(
    record: RunRecord,
    accounts: AccountsPort | None,
    capabilities: ClientCapabilities | None,
    ask: Callable[[Choice], Any],
    connection: str,
    *,
    label: str | None,
    message: str | None,
    mode: ConnectMode = "ask",
) -> Any:
    """What `Flow.connect` does (its docstring says what the handler sees); `ask` is the flow's own `ask`."""
    if accounts is None:
        raise DefinitionError(
            "flow.connect needs connected accounts on this server: enable them with "
            "askback.accounts.enable_accounts(app, ...)"
        )
    if label is not None:
        checked_label(label)
    key = connect_key(connection)
    found = list(await accounts.accounts(connection))
    active = [a for a in found if a.status == _ACTIVE]
    if label is None and len(active) > 1:
        labels = sorted(a.label or "default" for a in active)
        chosen = ask(
            Choice(
                key=f"{key}.which",
                message=message or f"Which {connection} account should be used?",
                options=labels,
                field="account",
                title="Account",
            )
        )
        label = "" if chosen == "default" and "default" not in {a.label for a in active} else chosen
    wanted = next(
        (a for a in found if a.label == (label or "")),
        active[0] if label is None and active else None,
    )
    if wanted is not None and wanted.status == _ERROR:
        # A provider that could not be reached is tried again, not the person: only the provider's refusal of
        # the grant (the account then EXPIRED) or nothing to refresh with leads to a new link.
        wanted = await accounts.recover(wanted)
    # The link's key names the account (connection and label): an agent resumes on exactly that account's event.
    linked = connect_key(connection, label or "")
    response = record.responses.get(linked)
    answered_here = response is not None and (record.state is None or linked in record.state.asked)
    if wanted is not None and wanted.status == _ACTIVE:
        if answered_here and isinstance(response, ElicitResult):
            record.events.append(FlowEvent("answered", linked, "url", action=response.action))
        return accounts.handle(wanted)
    status = wanted.status if wanted is not None else None
    if mode == "report":
        raise NotReady(connection, "not_connected" if status in (None, _PENDING) else "reauth_needed", label or "")
    if answered_here and isinstance(response, ElicitResult):
        record.events.append(FlowEvent("answered", linked, "url", action=response.action))
        if response.action == "decline":
            raise FlowEnded(f"Cancelled: you did not connect your {connection} account.", "declined")
        if response.action == "cancel":
            raise FlowEnded(f"Cancelled: connecting your {connection} account was dismissed.", "cancelled")
        raise FlowEnded(
            f"Not connected: your {connection} account is still not connected"
            + (f" (it is {status})" if status else "")
            + ", so nothing was done. Call the tool again for a new link.",
            "not_connected",
        )
    if not declares(capabilities, "url"):
        raise MissingCapabilityError(
            {"elicitation": {"url": {}}},
            f"This tool needs your {connection} account, which is connected through a link: declare the "
            "elicitation.url capability (2026-07-28: in the request's _meta "
            "io.modelcontextprotocol/clientCapabilities), or connect the account elsewhere first.",
        )
    url = await accounts.link(connection, label or "", record.link_flow_id())
    again = status in ("EXPIRED", "REVOKED", "ERROR")
    text = message or (
        f"Your {connection} account needs to be connected again: open the link, sign in, then come back."
        if again
        else f"Connect your {connection} account to continue: open the link, sign in, then come back."
    )
    question = Link(key=linked, message=text)
    record.schedule(question, question.render(message=text, url=url))
    raise NeedInput
