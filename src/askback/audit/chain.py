"""The audit chain: what makes the audit trail tamper-evident. Plain data, no I/O.

Every serving process start writes its own chain (`chain_id()` in `emit`: `host:pid:<random>`), so instances never
wait on each other. Row `seq` of a chain holds `prev`, the hash of row `seq - 1` (`GENESIS` for the first), and
`hash`, the SHA-256 of the canonical encoding of its content, its chain, its seq and that prev. A row with token
scopes is encoded as "askback.audit/2", which hashes them too; a row without (NULL) as "askback.audit/1", exactly
as every row was before scopes were recorded, so that those rows still verify. The chain's head
(its last seq and hash) is kept in `askback_audit_chains` and moved in the same transaction as the rows, so that a
rollback leaves no gap and a tail cut off no longer matches the head.

`link` computes the chain fields of a batch of rows (the store inserts them); `Verifier` walks every chain and
finds the first broken link of each. It is fed rows one at a time, as the store streams them: the chained rows
grouped by chain in seq order, then the unchained ones.

What this proves and what it does not is in docs/audit.md: someone who can write the database can still rewrite a
whole chain consistently, head included, unless the heads were exported somewhere they cannot write.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "GENESIS",
    "Break",
    "BreakKind",
    "ChainHead",
    "ChainReport",
    "Verdict",
    "Verifier",
    "canonical",
    "link",
    "row_hash",
]

# The `prev` of a chain's first row.
GENESIS = "0" * 64
# First in every encoding, so that a later change of the encoding can be told apart from tampering.
_ENCODING = "askback.audit/1"
_ENCODING_SCOPED = "askback.audit/2"
# The content columns of "askback.audit/1", in hashing order; "askback.audit/2" hashes `scopes` after them all.
_V1_FIELDS = (
    "at",
    "event",
    "tool",
    "flow_id",
    "principal",
    "round",
    "keys",
    "mode",
    "action",
    "content",
    "outcome",
    "detail",
    "instance",
)
# Every content column a row's hash covers: what the verifier must be given of each row.
CONTENT_FIELDS = (*_V1_FIELDS, "scopes")
_AFTER_AT = (*_V1_FIELDS[1:], "chain", "seq", "prev")
# Built once: `json.dumps` with options builds an encoder per call, which costs as much as the encoding of a row.
# default=repr: a value edited by hand into something JSON has no type for still hashes (and mismatches).
_CANONICAL = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), default=repr)


def canonical(row: Mapping[str, Any]) -> bytes:
    """The bytes a row's hash is taken over: a JSON array of the encoding's name and the hashed fields in a fixed
    order, ASCII only, no spaces. Values are as stored (`keys` and `content` are the JSON text of their columns);
    `at` is written as a float whatever number type the driver hands back, so that 1 and 1.0 hash alike. A row
    whose `scopes` is NULL (or absent) is "askback.audit/1"; one with scopes is "askback.audit/2", with `scopes`
    last."""
    at = row["at"]
    if isinstance(at, int) and not isinstance(at, bool):
        at = float(at)
    fields = [row[name] for name in _AFTER_AT]
    scopes = row.get("scopes")
    values = [_ENCODING, at, *fields] if scopes is None else [_ENCODING_SCOPED, at, *fields, scopes]
    return _CANONICAL.encode(values).encode("ascii")


def row_hash(row: Mapping[str, Any]) -> str:
    """SHA-256 of `canonical(row)`, as hex."""
    return hashlib.sha256(canonical(row)).hexdigest()


def link(rows: Sequence[Mapping[str, Any]], chain: str, seq: int, prev: str) -> tuple[list[dict[str, Any]], int, str]:
    """`rows` placed after row `seq` (whose hash is `prev`) of `chain`: the rows with their chain fields, and the
    chain's new head (its last seq and hash)."""
    linked: list[dict[str, Any]] = []
    for row in rows:
        seq += 1
        placed = {**row, "chain": chain, "seq": seq, "prev": prev}
        prev = placed["hash"] = row_hash(placed)
        linked.append(placed)
    return linked, seq, prev


# Verifying ---------------------------------------------------------------------------------------------------------

BreakKind = Literal["edited", "missing", "reordered", "inserted", "truncated"]


@dataclass(frozen=True)
class ChainHead:
    """One row of `askback_audit_chains`: a chain, its last seq and hash, and the time of its first event."""

    chain: str
    seq: int
    head: str
    started_at: float


@dataclass(frozen=True)
class Break:
    """The first broken link found in a chain (or a row that is in no chain it should be). `seq` and `row_id` name
    where: the place in the chain and the row's `id` in `askback_audit`."""

    kind: BreakKind
    message: str
    chain: str | None = None
    seq: int | None = None
    row_id: int | None = None


@dataclass(frozen=True)
class ChainReport:
    """One chain as verified: its recorded head, how many rows it has, and its first broken link if any."""

    head: ChainHead
    rows: int
    broken: Break | None


@dataclass(frozen=True)
class Verdict:
    """Every chain, the rows that belong to none (`problems`), and how many rows were written before chaining
    existed (`unchained`: reported, not judged)."""

    chains: tuple[ChainReport, ...]
    problems: tuple[Break, ...]
    unchained: int

    @property
    def ok(self) -> bool:
        return not self.problems and all(c.broken is None for c in self.chains)


class _Walk:
    """Where the walk of one chain has got to."""

    def __init__(self, chain: str, head: ChainHead | None) -> None:
        self.chain = chain
        self.head = head
        self.rows = 0
        self.seq = 0
        self.hash = GENESIS
        self.last_id: int | None = None
        self.broken: Break | None = None
        self.first_id: int | None = None


class Verifier:
    """Finds the first broken link of every chain. Feed it every row with `add`, then call `finish`.

    Rows must come grouped by chain, each chain in seq order (then id), and the unchained rows (no chain) after all
    the chained ones: each row is judged with the next one in sight, which is what tells a swapped pair from an
    edited row."""

    def __init__(self, heads: Iterable[ChainHead]) -> None:
        self._heads = {h.chain: h for h in heads}
        self._reports: list[ChainReport] = []
        self._problems: list[Break] = []
        self._walk: _Walk | None = None
        self._pending: Mapping[str, Any] | None = None
        self._seen: set[str] = set()
        # The first row of any known chain: an unchained row before it predates the chain, one after it does not.
        self._boundary: int | None = None
        self._unchained = 0
        # Unchained rows after the boundary: how many, and the first.
        self._late = 0
        self._late_first: int | None = None

    def add(self, row: Mapping[str, Any]) -> None:
        chain = row["chain"]
        if chain is None:
            self._end_chain()
            if self._boundary is None or row["id"] < self._boundary:
                self._unchained += 1
            else:
                self._late += 1
                if self._late_first is None:
                    self._late_first = row["id"]
            return
        if self._walk is None or self._walk.chain != chain:
            self._end_chain()
            self._walk = _Walk(chain, self._heads.get(chain))
            self._seen.add(chain)
        walk = self._walk
        walk.rows += 1
        if walk.head is not None and (self._boundary is None or row["id"] < self._boundary):
            self._boundary = row["id"]
        if self._pending is not None:
            self._check(walk, self._pending, row)
        self._pending = row

    def finish(self) -> Verdict:
        self._end_chain()
        for chain, head in self._heads.items():
            if chain not in self._seen:
                broken = None
                if head.seq > 0:
                    broken = Break(
                        "truncated",
                        f"its head is seq {head.seq} but none of its rows is left: seq 1 to {head.seq} were deleted",
                        chain,
                        1,
                    )
                self._reports.append(ChainReport(head, 0, broken))
        if self._late:
            self._problems.append(
                Break(
                    "inserted",
                    f"{self._late} row(s) without a chain were written after chaining began (the first is row "
                    f"{self._late_first}): inserted by hand, or by an askback older than revision 0003 still running",
                    row_id=self._late_first,
                )
            )
        reports = sorted(self._reports, key=lambda r: (r.head.started_at, r.head.chain))
        return Verdict(tuple(reports), tuple(self._problems), self._unchained)

    def _end_chain(self) -> None:
        walk = self._walk
        if walk is None:
            return
        if self._pending is not None:
            self._check(walk, self._pending, None)
            self._pending = None
        self._walk = None
        if walk.head is None:
            self._problems.append(
                Break(
                    "inserted",
                    f"{walk.rows} row(s) claim chain {walk.chain!r}, which has no head: no askback process started "
                    f"it, so they were inserted by hand (the first is row {walk.first_id})",
                    walk.chain,
                    row_id=walk.first_id,
                )
            )
            return
        if walk.broken is None:
            walk.broken = _judge_tail(walk, walk.head)
        self._reports.append(ChainReport(walk.head, walk.rows, walk.broken))

    def _check(self, walk: _Walk, row: Mapping[str, Any], after: Mapping[str, Any] | None) -> None:
        if walk.first_id is None:
            walk.first_id = row["id"]
        if walk.broken is None:
            walk.broken = _judge(walk, row, after)
        walk.last_id = row["id"]


def _judge(walk: _Walk, row: Mapping[str, Any], after: Mapping[str, Any] | None) -> Break | None:
    """The broken link at `row`, the next row of `walk`'s chain (`after` is the one after it, if any), or None
    (and then `walk` has moved past it)."""
    chain, seq, row_id = walk.chain, row["seq"], row["id"]
    expected = walk.seq + 1
    if not isinstance(seq, int) or row["prev"] is None or row["hash"] is None:
        return Break(
            "inserted", f"row {row_id} has no seq, prev or hash in the chain: inserted by hand", chain, None, row_id
        )
    if seq < 1:
        return Break(
            "inserted", f"row {row_id} has seq {seq}, before the chain's first: inserted by hand", chain, seq, row_id
        )
    if seq < expected:
        return Break(
            "inserted",
            f"seq {seq} appears twice (rows {walk.last_id} and {row_id}): one of them was inserted by hand",
            chain,
            seq,
            row_id,
        )
    if seq > expected:
        gone = f"seq {expected}" if seq == expected + 1 else f"seq {expected} to {seq - 1}"
        return Break("missing", f"{gone} missing before row {row_id} (seq {seq}): deleted", chain, expected, row_id)
    if walk.head is not None and seq > walk.head.seq:
        return Break(
            "inserted",
            f"seq {seq} (row {row_id}) is past the chain's head, seq {walk.head.seq}: inserted by hand",
            chain,
            seq,
            row_id,
        )
    if row["prev"] != walk.hash:
        if after is not None and row["prev"] == after["hash"]:
            return Break(
                "reordered",
                f"seq {seq} and {seq + 1} (rows {row_id} and {after['id']}) are in each other's place: reordered",
                chain,
                seq,
                row_id,
            )
        return Break(
            "edited",
            f"seq {seq} (row {row_id}) does not follow seq {seq - 1}: its prev is not that row's hash (a row was "
            "replaced or removed there)",
            chain,
            seq,
            row_id,
        )
    if row_hash(row) != row["hash"]:
        if after is not None and after["seq"] == seq + 1:
            moved = {**row, "seq": after["seq"], "prev": after["prev"]}
            if row_hash(moved) == after["hash"]:
                return Break(
                    "reordered",
                    f"seq {seq} and {seq + 1} (rows {row_id} and {after['id']}) hold each other's events: reordered",
                    chain,
                    seq,
                    row_id,
                )
        return Break(
            "edited", f"seq {seq} (row {row_id}) was edited: it no longer matches its hash", chain, seq, row_id
        )
    if walk.last_id is not None and row_id < walk.last_id:
        return Break(
            "reordered",
            f"seq {seq} (row {row_id}) was stored before seq {seq - 1} (row {walk.last_id}): rows reordered",
            chain,
            seq,
            row_id,
        )
    walk.seq, walk.hash = seq, row["hash"]
    return None


def _judge_tail(walk: _Walk, head: ChainHead) -> Break | None:
    """Whether the chain, intact up to its last row and none past its head, ends where its head says."""
    if walk.seq < head.seq:
        return Break(
            "truncated",
            f"its head is seq {head.seq} but its last row is seq {walk.seq} (row {walk.last_id}): seq {walk.seq + 1} "
            f"to {head.seq} were cut off the end",
            walk.chain,
            walk.seq + 1,
            walk.last_id,
        )
    if walk.hash != head.head:
        return Break(
            "edited",
            f"its last row, seq {walk.seq} (row {walk.last_id}), does not match its head: replaced, or the head was "
            "edited",
            walk.chain,
            walk.seq,
            walk.last_id,
        )
    return None
