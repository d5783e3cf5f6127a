"""Connected accounts in the shared store: create an account and its authorization link, use a link once, change an
account's status through the status table (recording the change as a lifecycle row, and in the shared event log
as the catalogue's event, `askback.accounts.events`), and read an account without its credential.

Every change runs in one transaction that takes SQLite's write lock at BEGIN (a PostgreSQL row is updated under a
condition on its current status), so two instances changing one account at once cannot both win.
"""

from __future__ import annotations

import secrets
import warnings
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Connection, Table, bindparam, delete, func, insert, select, update

from askback.accounts._models import AccountEventRow, AccountRow, LinkRow
from askback.accounts.events import event_data, event_type
from askback.accounts.links import Admitted, AuthorizationLink, Refused, admit_opener, digest, new_token
from askback.accounts.status import Event, Status, transition
from askback.accounts.vault import Vault
from askback.errors import AccountStateError, LimitReachedError
from askback.store import Database, Store, append_event, hold_lock

__all__ = ["LIVE_LINKS_PER_ACCOUNT", "Account", "Accounts"]

# How many links to one account may be open at once (issued, unused, unexpired): making one more retires the oldest.
LIVE_LINKS_PER_ACCOUNT = 5

_ACCOUNTS = cast(Table, AccountRow.__table__)
_LINKS = cast(Table, LinkRow.__table__)
_EVENTS = cast(Table, AccountEventRow.__table__)
_a, _l = _ACCOUNTS.c, _LINKS.c

_FIND = select(_a.id, _a.status, _a.reason, _a.expires_at, _a.updated_at).where(
    _a.principal == bindparam("principal"), _a.connection == bindparam("connection"), _a.label == bindparam("label")
)
# The accounts of one principal whose link was issued and never connected (any connection).
_PENDING = (
    select(func.count())
    .select_from(_ACCOUNTS)
    .where(_a.principal == bindparam("principal"), _a.status == Status.PENDING.value)
)
_BY_ID = select(_a.id, _a.principal, _a.connection, _a.label, _a.status, _a.reason, _a.expires_at).where(
    _a.id == bindparam("id")
)
_WHOSE = select(_a.principal, _a.connection, _a.label).where(_a.id == bindparam("id"))
_CREDENTIAL = select(_a.credential).where(_a.id == bindparam("id"))
_ONE_SEALED = select(_a.id, _a.credential).where(_a.credential.is_not(None)).order_by(_a.updated_at.desc()).limit(1)
_SEALED = select(_a.id, _a.credential).where(_a.credential.is_not(None)).order_by(_a.id)
_RESEAL = (
    update(_ACCOUNTS)
    .where(_a.id == bindparam("b_id"), _a.credential == bindparam("b_old"))
    .values(credential=bindparam("b_new"))
)
_CREATE = insert(_ACCOUNTS)
_SET_STATUS = (
    update(_ACCOUNTS)
    .where(_a.id == bindparam("b_id"), _a.status == bindparam("b_before"))
    .values(status=bindparam("b_after"), reason=bindparam("b_reason"), updated_at=bindparam("b_at"))
)
# The same, only when the credential is still the one the caller read (a change made under the refresh lock must not
# overwrite a reconnect made meanwhile by another instance, which takes no such lock).
_SET_STATUS_AS_READ = (
    update(_ACCOUNTS)
    .where(
        _a.id == bindparam("b_id"),
        _a.status == bindparam("b_before"),
        _a.credential.is_not_distinct_from(bindparam("b_was")),
    )
    .values(status=bindparam("b_after"), reason=bindparam("b_reason"), updated_at=bindparam("b_at"))
)
_SET_CREDENTIAL = (
    update(_ACCOUNTS)
    .where(_a.id == bindparam("b_id"))
    .values(credential=bindparam("b_credential"), expires_at=bindparam("b_expires_at"))
)
_ADD_EVENT = insert(_EVENTS)
_ADD_LINK = insert(_LINKS)
# An account's links that can never be used again: expired (a used link's `expires_at` is the end of the provider
# visit), or used and finished (the callback took the verifier; one that has not yet been given a state is kept).
_PRUNE_LINKS = delete(_LINKS).where(
    _l.account_id == bindparam("account_id"),
    (_l.expires_at <= bindparam("now"))
    | (_l.used_at.is_not(None) & _l.state_digest.is_not(None) & _l.verifier.is_(None)),
)
_LIVE_LINKS = (
    select(_l.token_digest)
    .where(_l.account_id == bindparam("account_id"), _l.used_at.is_(None))
    .order_by(_l.created_at.desc(), _l.token_digest)
)
_RETIRE_LINK = delete(_LINKS).where(_l.token_digest == bindparam("b_digest"), _l.used_at.is_(None))
_READ_LINK = select(
    _l.token_digest, _l.account_id, _l.principal, _l.connection, _l.flow_id, _l.created_at, _l.expires_at, _l.used_at
).where(_l.token_digest == bindparam("digest"))
_USE_LINK = (
    update(_LINKS)
    .where(_l.token_digest == bindparam("b_digest"), _l.used_at.is_(None))
    .values(used_at=bindparam("b_at"))
)

_SET_STATE = (
    update(_LINKS)
    .where(_l.token_digest == bindparam("b_digest"))
    .values(state_digest=bindparam("b_state"), verifier=bindparam("b_verifier"), expires_at=bindparam("b_until"))
)
_BY_STATE = select(
    _l.token_digest,
    _l.account_id,
    _l.principal,
    _l.connection,
    _l.flow_id,
    _l.created_at,
    _l.expires_at,
    _l.used_at,
    _l.verifier,
).where(_l.state_digest == bindparam("state"))
_TAKE_VERIFIER = (
    update(_LINKS)
    .where(_l.token_digest == bindparam("b_digest"), _l.verifier == bindparam("b_verifier"))
    .values(verifier=None)
)
_FIND_BY_PRINCIPAL = (
    select(_a.id, _a.principal, _a.connection, _a.label, _a.status, _a.reason, _a.expires_at)
    .where(_a.principal == bindparam("principal"), _a.connection == bindparam("connection"))
    .order_by(_a.label)
)

# What `change` does to the stored credential: keep it, replace it, or delete it (revocation).
KEEP: Any = object()
# `apply_change` with no condition on the stored credential.
ANY: Any = object()


@dataclass(frozen=True)
class Account:
    """A connected account as the rest of askback sees it: never its credential."""

    id: str
    principal: str
    connection: str
    label: str
    status: Status
    reason: str | None
    expires_at: float | None


class Accounts:
    """Connected accounts kept in `database` (opened with the accounts component among its migrations): a store's
    `database` part."""

    def __init__(self, database: Database | Store) -> None:
        if isinstance(database, Store):
            warnings.warn(
                "Accounts(store) is deprecated: give it the store's database, Accounts(store.database)",
                DeprecationWarning,
                stacklevel=2,
            )
            database = database.database
        self.database = database

    async def begin_connect(
        self,
        principal: str,
        connection: str,
        *,
        label: str = "",
        flow_id: str | None,
        now: float,
        ttl: float,
        most_pending: int | None = None,
    ) -> tuple[str, str]:
        """The account `(principal, connection, label)` (created PENDING when new; an existing one keeps its status
        until it is connected again) and a fresh single-use link for it: `(account_id, token)`. Only the token's
        digest is stored; the token goes into the link the person opens. At most `LIVE_LINKS_PER_ACCOUNT` links to
        one account are open at once (a new one retires the oldest), and its expired or finished links are deleted.
        With `most_pending`, a new account is not created while `principal` already holds that many PENDING ones
        (`LimitReachedError`, a tool error; nothing is written). All of it runs under a lock of the principal, so
        that two instances cannot both pass the cap, nor both create the same new account."""
        token = new_token()

        def write(conn: Connection) -> str:
            # Under the principal's lock, so that two instances making the same new account, or counting toward the
            # cap, take turns: the second finds the account the first made.
            hold_lock(conn, f"accounts of {principal!r}")
            found = conn.execute(_FIND, {"principal": principal, "connection": connection, "label": label}).first()
            if (
                found is None
                and most_pending is not None
                and conn.execute(_PENDING, {"principal": principal}).scalar_one() >= most_pending
            ):
                raise _too_many_pending(most_pending)
            if found is None:
                account_id = "acc_" + secrets.token_urlsafe(16)
                status = transition(None, Event.START)
                conn.execute(
                    _CREATE,
                    {
                        "id": account_id,
                        "principal": principal,
                        "connection": connection,
                        "label": label,
                        "status": status.value,
                        "created_at": now,
                        "updated_at": now,
                    },
                )
                _record(conn, account_id, now, Event.START, None, status, f"link issued for flow {flow_id}")
            else:
                account_id = found.id
                _retire_links(conn, account_id, now)
            conn.execute(
                _ADD_LINK,
                {
                    "token_digest": digest(token),
                    "account_id": account_id,
                    "principal": principal,
                    "connection": connection,
                    "flow_id": flow_id,
                    "created_at": now,
                    "expires_at": now + ttl,
                },
            )
            return account_id

        account_id = await self.database.transaction(write, doing="issue an authorization link", immediate=True)
        return account_id, token

    async def use_link(self, token: str, *, opener: str | None, now: float) -> Admitted | Refused:
        """Check the link the way the hosted page must (who opens it first), and if it may be used, mark it used:
        of two people (or two tabs) using one link at once, exactly one is admitted."""

        def use(conn: Connection) -> Admitted | Refused:
            row = conn.execute(_READ_LINK, {"digest": digest(token)}).first()
            link = (
                None
                if row is None
                else AuthorizationLink(**{k: getattr(row, k) for k in AuthorizationLink.__dataclass_fields__})
            )
            decision = admit_opener(link, opener=opener, now=now)
            used = {"b_digest": digest(token), "b_at": now}
            if isinstance(decision, Admitted) and conn.execute(_USE_LINK, used).rowcount != 1:
                return Refused("used")  # another use of the same link committed first
            return decision

        return await self.database.transaction(use, doing="use an authorization link", immediate=True)

    async def remember_state(self, token: str, *, state: str, sealed_verifier: str, until: float) -> None:
        """Keep, on the link just used, the OAuth `state` (its digest) the callback must bring back, the sealed PKCE
        verifier it will need, and `until`, when the time to come back from the provider runs out (the link's
        `expires_at` from now on)."""
        params = {
            "b_digest": digest(token),
            "b_state": digest(state),
            "b_verifier": sealed_verifier,
            "b_until": until,
        }
        await self.database.transaction(lambda conn: conn.execute(_SET_STATE, params), doing="start an authorization")

    async def take_state(
        self, state: str, *, opener: str | None, now: float
    ) -> tuple[AuthorizationLink, str] | Refused | None:
        """The link a callback's `state` belongs to and its sealed PKCE verifier, taken so that no second callback
        can use them. Who brings the state back is checked first (another person is refused and takes nothing),
        then the time to come back from the provider. `None` when the state is unknown (forged, or brought by another
        browser) or was already used."""

        def take(conn: Connection) -> tuple[AuthorizationLink, str] | Refused | None:
            row = conn.execute(_BY_STATE, {"state": digest(state)}).first()
            if row is None or row.verifier is None:
                return None
            if opener is None:
                return Refused("not_signed_in")
            if opener != row.principal:
                return Refused("other_user")
            if now >= row.expires_at:
                return Refused("visit_expired")
            if conn.execute(_TAKE_VERIFIER, {"b_digest": row.token_digest, "b_verifier": row.verifier}).rowcount != 1:
                return None
            link = AuthorizationLink(**{k: getattr(row, k) for k in AuthorizationLink.__dataclass_fields__})
            return link, row.verifier

        return await self.database.transaction(take, doing="finish an authorization", immediate=True)

    async def of(self, principal: str, connection: str) -> list[Account]:
        """Every account of `principal` for `connection`, by label."""

        def read(conn: Connection) -> list[Account]:
            rows = conn.execute(_FIND_BY_PRINCIPAL, {"principal": principal, "connection": connection}).all()
            return [_account(row) for row in rows]

        return await self.database.transaction(read, doing="read connected accounts")

    async def listing(self, *, principal: str | None = None, connection: str | None = None) -> list[Account]:
        """Accounts, optionally of one principal and/or one connection (for `askback accounts list`)."""
        query = select(_a.id, _a.principal, _a.connection, _a.label, _a.status, _a.reason, _a.expires_at)
        if principal is not None:
            query = query.where(_a.principal == principal)
        if connection is not None:
            query = query.where(_a.connection == connection)
        query = query.order_by(_a.principal, _a.connection, _a.label)
        async with self.database.engine.connect() as conn:
            return [_account(row) for row in (await conn.execute(query)).all()]

    async def history(self, account_id: str, *, limit: int = 50) -> list[dict[str, Any]]:
        """The account's newest lifecycle events, oldest first."""
        e = _EVENTS.c
        query = (
            select(e.at, e.event, e.before, e.after, e.detail)
            .where(e.account_id == account_id)
            .order_by(e.id.desc())
            .limit(limit)
        )
        async with self.database.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [dict(row._mapping) for row in reversed(rows)]

    async def change(
        self,
        account_id: str,
        event: Event,
        *,
        now: float,
        reason: str | None = None,
        credential: Any = KEEP,
        expires_at: float | None = None,
    ) -> Status:
        """Move the account on `event` through the status table (`AccountStateError` when the table has no such
        change), storing `credential` (the vault's ciphertext) when given; a revocation deletes the credential.
        Records the change as a lifecycle event. Returns the new status."""

        def write(conn: Connection) -> Status:
            row = conn.execute(_BY_ID, {"id": account_id}).first()
            if row is None:
                raise AccountStateError(f"there is no connected account {account_id!r}")
            return apply_change(
                conn,
                account_id,
                Status(row.status),
                event,
                now=now,
                reason=reason,
                credential=credential,
                expires_at=expires_at,
            )

        return await self.database.transaction(write, doing=f"change account {account_id!r}", immediate=True)

    async def get(self, account_id: str) -> Account | None:
        def read(conn: Connection) -> Account | None:
            row = conn.execute(_BY_ID, {"id": account_id}).first()
            return None if row is None else _account(row)

        return await self.database.transaction(read, doing=f"read account {account_id!r}")

    async def rotate(self, vault: Vault) -> tuple[int, int]:
        """Re-encrypt every stored credential not sealed with the vault's sealing key, in one transaction:
        `(re-encrypted, credentials in all)`. Every credential is opened first, so a ring that cannot read the vault
        (a missing or wrong key) stops the rotation with an error and nothing is changed. Afterwards the old keys can
        leave ASKBACK_VAULT_KEYS."""

        def write(conn: Connection) -> tuple[int, int]:
            rows = [(row.id, row.credential) for row in conn.execute(_SEALED).all()]
            rotated = 0
            for account_id, sealed in rows:
                vault.open(account_id, sealed)  # every credential must open with this ring, or nothing changes
                if vault.needs_rotation(sealed):
                    new = vault.reseal(account_id, sealed)
                    conn.execute(_RESEAL, {"b_id": account_id, "b_old": sealed, "b_new": new})
                    rotated += 1
            return rotated, len(rows)

        return await self.database.transaction(write, doing="re-encrypt the vault", immediate=True)

    async def one_sealed(self) -> tuple[str, str] | None:
        """The most recently changed stored credential, `(account_id, sealed)`: what a start-up check opens to see
        that the vault's key ring can read the store."""

        def read(conn: Connection) -> tuple[str, str] | None:
            row = conn.execute(_ONE_SEALED).first()
            return None if row is None else (row.id, row.credential)

        return await self.database.transaction(read, doing="read a stored credential")

    async def sealed_credential(self, account_id: str) -> str | None:
        """The vault's ciphertext of the account's credential, for the vault to open; `None` when there is none."""
        return await self.database.transaction(
            lambda conn: conn.execute(_CREDENTIAL, {"id": account_id}).scalar(), doing="read a credential"
        )


def apply_change(
    conn: Connection,
    account_id: str,
    before: Status,
    event: Event,
    *,
    now: float,
    reason: str | None = None,
    credential: Any = KEEP,
    expires_at: float | None = None,
    was: Any = ANY,
) -> Status:
    """One status change inside the caller's transaction: through the table, only if the account is still `before`
    (and, with `was`, still holds that sealed credential); the credential stored, kept or (revocation) deleted; the
    change recorded as a lifecycle row and, when it is one, as the catalogue's event in the shared event log
    (`askback.accounts.events`), so that it exists exactly when the change does. Returns the new status."""
    after = transition(before, event)
    params = {"b_id": account_id, "b_before": before.value, "b_after": after.value, "b_reason": reason, "b_at": now}
    if was is ANY:
        changed = conn.execute(_SET_STATUS, params).rowcount
    else:
        changed = conn.execute(_SET_STATUS_AS_READ, {**params, "b_was": was}).rowcount
    if changed != 1:
        raise AccountStateError(
            f"Connected account {account_id!r} was changed elsewhere (connected again, or by another instance) while "
            "this change was being made; nothing was written. Read it and try again."
        )
    if event is Event.REVOKED:
        conn.execute(_SET_CREDENTIAL, {"b_id": account_id, "b_credential": None, "b_expires_at": None})
    elif credential is not KEEP:
        conn.execute(_SET_CREDENTIAL, {"b_id": account_id, "b_credential": credential, "b_expires_at": expires_at})
    _record(conn, account_id, now, event, before, after, reason)
    return after


def _retire_links(conn: Connection, account_id: str, now: float) -> None:
    """Before one more link to `account_id` is added: delete its links that can never be used again, and its oldest
    unused ones past `LIVE_LINKS_PER_ACCOUNT - 1`, so that asking again and again cannot grow the table."""
    conn.execute(_PRUNE_LINKS, {"account_id": account_id, "now": now})
    live = [row.token_digest for row in conn.execute(_LIVE_LINKS, {"account_id": account_id}).all()]
    for token_digest in live[LIVE_LINKS_PER_ACCOUNT - 1 :]:
        conn.execute(_RETIRE_LINK, {"b_digest": token_digest})


def _too_many_pending(most: int) -> LimitReachedError:
    return LimitReachedError(
        f"Too many accounts waiting to be connected: you already hold {most} whose link was never used to connect, "
        "the most one person may hold. Open one of the links you were given and finish connecting that account (or "
        "ask for a link to an account you already have), or ask an operator to revoke the ones you do not need "
        "(askback accounts revoke), then try again.",
        limit=most,
        tool_error=True,
    )


def _account(row: Any) -> Account:
    return Account(row.id, row.principal, row.connection, row.label, Status(row.status), row.reason, row.expires_at)


def _record(
    conn: Connection, account_id: str, at: float, event: Event, before: Status | None, after: Status, detail: str | None
) -> None:
    """The change as a lifecycle row, and as the catalogue's event in the shared event log when it is one."""
    conn.execute(
        _ADD_EVENT,
        {
            "account_id": account_id,
            "at": at,
            "event": event.value,
            "before": None if before is None else before.value,
            "after": after.value,
            "detail": detail,
        },
    )
    kind = event_type(event, before, after)
    if kind is not None:
        whose: Any = conn.execute(_WHOSE, {"id": account_id}).first()
        data = event_data(
            account_id=account_id,
            principal=whose.principal,
            connection=whose.connection,
            label=whose.label,
            before=before,
            after=after,
            reason=detail,
        )
        append_event(conn, type=kind, at=at, data=data)
