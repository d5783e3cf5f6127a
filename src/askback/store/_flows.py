"""The flows' ledgers, a repository on the `Database`: effects and rounds claimed once across every instance, the end
of a round written in one transaction (`finish_flow` with a `RoundRecord`, its audit events included), and the answers
held on the server between rounds. Only the server kit uses it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
from sqlalchemy import Connection

from askback.audit import AuditEvent
from askback.audit.emit import instance_id
from askback.db.database import Database
from askback.store import audit_rows as audit_query
from askback.store._audit_log import AuditLog
from askback.store.held import HELD_FORGET_FLOW, HELD_PRUNE, HELD_READ, HELD_SET
from askback.store.ledger import (
    EFFECTS,
    READ_COMPLETION,
    RECORD_EFFECT,
    RECORD_FLOW,
    ROUND_COMPLETED,
    ROUNDS,
    Completion,
    EffectClaim,
    Ledger,
    RoundClaim,
    flow_effects,
    round_claim,
)

__all__ = ["Flows", "HeldAnswers", "RoundRecord"]

_C = TypeVar("_C")

# How often a claim retries when the row it collided with vanished (released) before it could be read.
_RACE_ATTEMPTS = 5


@dataclass(frozen=True)
class HeldAnswers:
    """Answers a flow holds on the server (`ASKBACK_ANSWERS=server`) for `round`, sealed, kept until `until`."""

    flow_id: str
    round: int
    sealed: str
    until: float


@dataclass(frozen=True)
class RoundRecord:
    """What the end of a round writes, in one transaction (`Store.finish_flow`).

    `effects`: outcomes of effects this round won through their own claim; `new_effects`: effects it ran under its
    round's claim, recorded done now. `result`: the flow's result (first writer wins; `None` when the flow did not
    complete), recorded under `tool` and `principal`. `round`: the round this caller claimed, ended as done (with
    the result, or else `round_outcome`) or released when it has neither, so that another copy may run it. `held`:
    the answers to keep on the server; `forget_held`: whether the flow may hold answers on the server, deleted when it
    completes (a round knows when its flow never held any). `events`: the round's audit events. `at`: when."""

    flow_id: str | None
    at: float
    effects: Sequence[tuple[str, Any]] = ()
    new_effects: Sequence[tuple[str, Any]] = ()
    tool: str | None = None
    principal: str | None = None
    result: Any = None
    events: Sequence[AuditEvent] = ()
    round: int | None = None
    round_outcome: Any = None
    held: HeldAnswers | None = None
    forget_held: bool = True


class Flows:
    """The effects and rounds ledgers, flow completions and held answers of `database`; the end of a round appends
    its events to `audit_log` in the same transaction."""

    def __init__(self, database: Database, audit_log: AuditLog) -> None:
        self.database = database
        self.audit_log = audit_log
        self._waiters: set[anyio.Event] = set()

    # Waiting for another attempt ---------------------------------------------------------------------------

    @contextmanager
    def watching(self) -> Iterator[anyio.Event]:
        """An event set the next time this process settles a claim (an outcome recorded, a claim released), so
        that a wait for another attempt in the same process wakes at once instead of at its next poll."""
        event = anyio.Event()
        self._waiters.add(event)
        try:
            yield event
        finally:
            self._waiters.discard(event)

    def _settled(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for event in waiters:
            event.set()

    # Effects ----------------------------------------------------------------------------------------------

    async def claim_effect(
        self, flow_id: str, name: str, *, instance: str, at: float, lease: float | None = None
    ) -> EffectClaim:
        """Try to become the one attempt that runs effect `name` of flow `flow_id`.

        'won' means this caller must run it and then `finish_effect` (or `release_effect` if it raised);
        otherwise the claim says what the attempt that did win has got to. With `lease`, a claim still running
        `lease` seconds after it was taken is presumed dead (its process stopped mid-effect) and is taken over.
        """
        return await self._claim(EFFECTS, flow_id, name, instance=instance, at=at, lease=lease)

    async def finish_effect(self, flow_id: str, name: str, outcome: Any, *, at: float) -> None:
        """Record the outcome of an effect this caller won; every later claim reads it back."""
        stored = audit_query.to_json(outcome, what=f"the outcome of effect {name!r}")
        params = {"b_flow_id": flow_id, "b_key": name, "b_outcome": stored, "b_at": at}
        updated = await self.database.transaction(
            lambda conn: conn.execute(EFFECTS.finish, params).rowcount, doing=f"record the outcome of effect {name!r}"
        )
        self._settled()
        if updated != 1:
            raise RuntimeError(
                f"Effect {name!r} of flow {flow_id!r} has no running claim to finish: claim_effect must return "
                "'won' first, and an outcome, once recorded, is never replaced."
            )

    async def record_effect(self, flow_id: str, name: str, outcome: Any, *, at: float) -> None:
        """Record the outcome of an effect that ran under its round's claim, as soon as it ran: should the round's
        end never be written (its process stopped, the database failed at that moment), the attempt that takes the
        round over reuses the outcome instead of running the effect again. The round's end writes the same row again,
        which changes nothing (the first row stays)."""
        row = _done_effect(flow_id, name, outcome, at)
        await self.database.transaction(
            lambda conn: conn.execute(RECORD_EFFECT[conn.dialect.name], [row]),
            doing=f"record the outcome of effect {name!r}",
        )

    async def release_effect(self, flow_id: str, name: str) -> None:
        """Give up a claim whose effect raised, so that a retry may run it; a finished effect stays."""
        params = {"b_flow_id": flow_id, "b_key": name}
        await self.database.transaction(
            lambda conn: conn.execute(EFFECTS.release, params), doing=f"release effect {name!r}"
        )
        self._settled()

    async def effect(self, flow_id: str, name: str) -> EffectClaim | None:
        """Where effect `name` of flow `flow_id` stands ('running' or 'done'), or `None` if never claimed."""
        return await self.database.transaction(
            lambda conn: EFFECTS.look(conn, flow_id, name), doing=f"read effect {name!r}"
        )

    # Rounds -----------------------------------------------------------------------------------------------

    async def claim_round(
        self, flow_id: str, round_: int, *, instance: str, at: float, lease: float | None = None
    ) -> RoundClaim:
        """Try to become the one attempt that answers round `round_` of flow `flow_id` (the round whose questions
        the request answers). A finished flow answers 'completed' with its result, whatever the round; a round
        another attempt answered already is 'done' with what it answered; 'running' means another attempt holds
        it (taken over after `lease` seconds, as for effects); 'won' means this caller runs the handler and then
        ends the round through `finish_flow` (a `RoundRecord` with its `round`), or releases it there on failure."""

        def claim(conn: Connection) -> RoundClaim | None:
            found = ROUNDS.contend(conn, flow_id, round_, instance=instance, at=at, lease=lease)
            if found is None:
                return None
            if isinstance(found, EffectClaim):  # won
                # One read for both: the flow's effects, and its result when it completed before rounds were recorded
                # (or their rows were cleaned up): such a flow is still done.
                completed, effects = flow_effects(conn, flow_id)
                if completed is not None:
                    params = {"b_flow_id": flow_id, "b_key": round_, "b_outcome": ROUND_COMPLETED, "b_at": at}
                    conn.execute(ROUNDS.finish, params)
                    return RoundClaim("completed", json.loads(completed))
                return RoundClaim("won", effects=effects)
            return round_claim(found)

        return await self._retrying_claim(claim, f"claim round {round_} of a flow", busy=RoundClaim("running"))

    async def round_outcome(self, flow_id: str, round_: int) -> RoundClaim | None:
        """Where round `round_` of flow `flow_id` stands: 'completed' (it completed the flow), 'done', 'running',
        or `None` when nobody holds it (its attempt failed and released it)."""

        def read(conn: Connection) -> RoundClaim | None:
            found = conn.execute(ROUNDS.read, {"flow_id": flow_id, "key": round_}).first()
            return None if found is None else round_claim(found)

        return await self.database.transaction(read, doing=f"read round {round_} of a flow")

    async def _claim(
        self, ledger: Ledger, flow_id: str, key: Any, *, instance: str, at: float, lease: float | None
    ) -> EffectClaim:
        def claim(conn: Connection) -> EffectClaim | None:
            return ledger.try_claim(conn, flow_id, key, instance=instance, at=at, lease=lease)

        return await self._retrying_claim(claim, f"claim {ledger.key} {key!r}", busy=EffectClaim("running"))

    async def _retrying_claim(self, claim: Callable[[Any], _C | None], doing: str, *, busy: _C) -> _C:
        for _ in range(_RACE_ATTEMPTS):
            # A claim may read before it writes (a round reads the flow's completion first).
            outcome = await self.database.transaction(claim, doing=doing, immediate=True)
            if outcome is not None:
                return outcome
        # Each time, the winner released between our INSERT and our read; someone is evidently at it.
        return busy

    # The end of a round -----------------------------------------------------------------------------------

    async def finish_flow(self, record: RoundRecord) -> Completion | None:
        """The end of a round in one transaction: record the outcomes of the effects this round ran (claims it won),
        the flow's result (first writer wins: a later one gets the recorded result back, `first=False`; skipped
        when `result` is None), the end of the round this caller claimed (done, with the flow's result or else the
        round's outcome; released when it has neither, so that another copy may run it), the answers it holds on
        the server (expired ones are pruned then, and a completed flow's are deleted), and the round's audit events.
        One commit instead of one per row is most of what askback costs per round."""
        flow_id, at, result, round_, held = record.flow_id, record.at, record.result, record.round, record.held
        effects, new_effects, round_outcome = record.effects, record.new_effects, record.round_outcome
        to_json = audit_query.to_json
        finished = [(name, to_json(outcome, what=f"the outcome of effect {name!r}")) for name, outcome in effects]
        ran = [_done_effect(flow_id, name, outcome, at) for name, outcome in new_effects]
        stored = None if result is None else to_json(result, what=f"the result of tool {record.tool!r}")
        if result is not None:
            answered: str | None = ROUND_COMPLETED
        else:
            answered = None if round_outcome is None else to_json(round_outcome, what="the outcome of the round")
        audit = self.audit_log.pending(record.events)
        rows = audit.rows

        def write(conn: Connection) -> Completion | None:
            completion: Completion | None = None
            for name, outcome in finished:
                params = {"b_flow_id": flow_id, "b_key": name, "b_outcome": outcome, "b_at": at}
                conn.execute(EFFECTS.finish, params)
            if ran:
                conn.execute(RECORD_EFFECT[conn.dialect.name], ran)
            if round_ is not None and flow_id is not None:
                if answered is None:
                    conn.execute(ROUNDS.release, {"b_flow_id": flow_id, "b_key": round_})
                else:
                    params = {"b_flow_id": flow_id, "b_key": round_, "b_outcome": answered, "b_at": at}
                    conn.execute(ROUNDS.finish, params)
            if stored is not None and flow_id is not None:
                values = {
                    "flow_id": flow_id,
                    "tool": record.tool,
                    "principal": record.principal,
                    "result": stored,
                    "completed_at": at,
                }
                if conn.execute(RECORD_FLOW[conn.dialect.name], values).rowcount == 1:
                    completion = Completion(json.loads(stored), first=True)
                    if record.forget_held:
                        conn.execute(HELD_FORGET_FLOW, {"flow_id": flow_id})
                else:
                    existing: str = conn.execute(READ_COMPLETION, {"flow_id": flow_id}).scalar_one()
                    completion = Completion(json.loads(existing), first=False)
                    for i, row in enumerate(rows):
                        if row["event"] == "completed" and row["flow_id"] == flow_id:
                            rows[i] = {**row, "event": "replayed", "outcome": "completed"}
            if held is not None:
                conn.execute(HELD_PRUNE, {"now": at})
                values = {"flow_id": held.flow_id, "round": held.round, "sealed": held.sealed, "expires_at": held.until}
                conn.execute(HELD_SET[conn.dialect.name], values)
            audit.write(conn)
            return completion

        completion = await self.database.transaction(write, doing="record the end of the round")
        audit.committed()
        if finished or ran or round_ is not None:
            self._settled()
        return completion

    async def held_answers(self, flow_id: str, round_: int) -> str | None:
        """The sealed answers a flow holds on the server for `round_`, or None (completed, expired, never held)."""
        found: str | None = await self.database.read(
            lambda conn: conn.execute(HELD_READ, {"flow_id": flow_id, "round": round_}).scalar(),
            doing="read a flow's answers",
        )
        return found

    async def prune_held(self, *, now: float) -> int:
        """Delete the held answers of flows past their deadline (also done on every round that holds answers);
        how many rows went."""
        pruned: int = await self.database.transaction(
            lambda conn: conn.execute(HELD_PRUNE, {"now": now}).rowcount, doing="prune expired answers"
        )
        return pruned


def _done_effect(flow_id: str | None, name: str, outcome: Any, at: float) -> dict[str, Any]:
    """The ledger row of an effect that ran under its round's claim, done with `outcome`."""
    return {
        "flow_id": flow_id,
        "name": name,
        "status": "done",
        "outcome": audit_query.to_json(outcome, what=f"the outcome of effect {name!r}"),
        "instance": instance_id(),
        "started_at": at,
        "finished_at": at,
    }
