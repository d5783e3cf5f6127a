"""The audit log, a repository on the `Database`: a round's events linked onto its process's hash chain in the
round's own transaction, read back by filter, and verified in one snapshot."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from askback.audit import AuditEvent, AuditFilter
from askback.audit.chain import GENESIS, ChainHead, Verdict, Verifier, link
from askback.audit.emit import chain_id
from askback.db.database import Database
from askback.store import audit_rows as audit_query

__all__ = ["AuditLog", "PendingAudit"]

logger = logging.getLogger("askback")


class PendingAudit:
    """Audit rows to append inside another transaction (`write`, from within it), and `committed` once that
    transaction has: the writes of a round's or a task's end carry its events with them."""

    def __init__(self, log: AuditLog, events: Sequence[AuditEvent]) -> None:
        self.log = log
        self.events = tuple(events)
        self.rows = audit_query.to_rows(events)
        self.chain = log.chain
        self._heads: list[tuple[int, str]] = []

    def write(self, conn: Any) -> None:
        """Append the rows in `conn`'s transaction (again from scratch when the transaction is run again)."""
        self._heads.clear()
        if self.rows:
            self._heads.append(self.log.append_rows(conn, self.rows, self.chain))

    def committed(self) -> None:
        self.log.appended(self.chain, self._heads)


class AuditLog:
    """Writing, reading and verifying the audit trail of `database`. `chain` names the audit chain this log appends
    to; by default the process's own (`askback.audit.emit.chain_id`)."""

    def __init__(self, database: Database, *, chain: str | None = None) -> None:
        self.database = database
        self._chain = chain
        # The last committed (seq, hash) of each chain this log appended to: the head it expects to move on from.
        self._heads: dict[str, tuple[int, str]] = {}

    @property
    def chain(self) -> str:
        """The chain this log appends to."""
        return self._chain or chain_id()

    async def add_many(self, events: Sequence[AuditEvent]) -> None:
        """Write several events in one transaction (one round's events are written together)."""
        if not events:
            return
        pending = self.pending(events)
        await self.database.transaction(pending.write, doing=f"write {len(pending.rows)} audit event(s)")
        pending.committed()

    def pending(self, events: Sequence[AuditEvent]) -> PendingAudit:
        """`events` as rows to append inside another transaction (`PendingAudit`)."""
        return PendingAudit(self, events)

    def append_rows(self, conn: Any, rows: list[dict[str, Any]], chain: str) -> tuple[int, str]:
        """Link `rows` onto `chain` and insert them, moving the chain's head, inside the caller's transaction; the
        new head (seq, hash), for `appended` once the transaction has committed.

        The hot path is one UPDATE of the head, from the head this store last committed, and one INSERT of the rows.
        When that head is not the one recorded (the first write of the chain, or another task of this process
        appended meanwhile), the head row is read under its lock and the rows linked again. Each statement on the
        chain writes before it reads, so that SQLite's write lock is held before the head is read."""
        known = self._heads.get(chain)
        if known is None:
            values = {"chain": chain, "seq": 0, "head": GENESIS, "started_at": rows[0]["at"]}
            conn.execute(audit_query.CHAIN_START[conn.dialect.name], values)
        else:
            linked, seq, head = link(rows, chain, *known)
            params = {"b_chain": chain, "b_from": known[0], "b_seq": seq, "b_head": head}
            if conn.execute(audit_query.CHAIN_ADVANCE, params).rowcount == 1:
                conn.execute(audit_query.INSERT, linked)
                return seq, head
        found = conn.execute(audit_query.CHAIN_HEAD, {"b_chain": chain}).first()
        recorded: tuple[int, str] = (found.seq, found.head)
        start = recorded
        if known is not None and known[0] > recorded[0]:
            # Only someone editing the table by hand moves a head back: carry on after the rows this store wrote,
            # so that the gap shows rather than being written over.
            logger.warning(
                "askback audit chain %s: its head went back from seq %d to seq %d; continuing after seq %d",
                chain,
                known[0],
                recorded[0],
                known[0],
            )
            start = known
        linked, seq, head = link(rows, chain, *start)
        params = {"b_chain": chain, "b_from": recorded[0], "b_seq": seq, "b_head": head}
        conn.execute(audit_query.CHAIN_ADVANCE, params)
        conn.execute(audit_query.INSERT, linked)
        return seq, head

    def appended(self, chain: str, heads: Sequence[tuple[int, str]]) -> None:
        """Remember the head a committed transaction left `chain` at. Tasks may commit in one order and get here in
        another, so only a later head replaces an earlier one."""
        for head in heads:
            known = self._heads.get(chain)
            if known is None or known[0] < head[0]:
                self._heads[chain] = head

    async def verify(self) -> Verdict:
        """Walk every audit chain and find the first broken link of each (`askback.audit.chain.Verifier`), reading
        the heads and the rows in one snapshot, so that rounds written meanwhile do not look like tampering."""
        with self.database.reachable("verify the audit trail"):
            async with self.database.engine.connect() as conn:
                if conn.dialect.name == "postgresql":
                    conn = await conn.execution_options(isolation_level="REPEATABLE READ")
                async with conn.begin():
                    heads = [
                        ChainHead(r.chain, r.seq, r.head, r.started_at)
                        for r in (await conn.execute(audit_query.CHAIN_HEADS)).all()
                    ]
                    verifier = Verifier(heads)
                    for statement in (audit_query.CHAINED_ROWS, audit_query.UNCHAINED_ROWS):
                        rows = await conn.stream(statement.execution_options(yield_per=1000))
                        async for row in rows:
                            verifier.add(row._asdict())
        return verifier.finish()

    async def query(self, flt: AuditFilter = AuditFilter()) -> list[AuditEvent]:
        """The audit events that match `flt`, oldest first."""
        with self.database.reachable("read the audit log"):
            async with self.database.engine.connect() as conn:
                rows = (await conn.execute(audit_query.selecting(flt))).all()
        return [audit_query.from_row(row._mapping) for row in reversed(rows)]
