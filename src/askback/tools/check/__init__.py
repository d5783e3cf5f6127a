"""`askback check`: a black-box probe of any MCP server's elicitation behaviour under 2026-07-28.

It speaks raw JSON-RPC over Streamable HTTP (stateless POSTs), not through the SDK client, so that it sees what
is on the wire: HTTP statuses, exact field names, error codes. Three parts, in the manner of h11 and httpx's
`auth_flow`, each a private module behind this face:

- `probe(tool, arguments)` is the plan: a generator that yields each `Request` to send, is sent back the
  `Response`, decides the next request from what came back, and finally returns everything as a `Recorded` (`_plan`;
  the records are in `_wire`). It does no I/O and never loops: every request it can make is written out, at most
  once each.
- `evaluate(recorded)` is the verdict: pure functions from recorded exchanges to `Check`s, one per rule-backed
  question (the rule ids are those of the project's digest of the 2026-07-28 specification; `_verdicts`).
- `run_check(url, ...)` is the driver: it sends each request with httpx (bounded by a timeout), reads a JSON or
  SSE response, and feeds the plan (`_driver`).

The probe is careful with the tool it calls: a call that asks is never answered `accept` except with deliberately
invalid content (to see it asked again), and a tampered state is sent with declines only, so a server that
wrongly accepts it still has nothing to act on. Each branch of answers starts from a round one of its own: a
state is never echoed twice (R9), and a server that records a finished flow is not confused by a replay.
"""

from __future__ import annotations

from askback.tools.check._driver import run_check
from askback.tools.check._plan import invalid_content, probe, tamper
from askback.tools.check._verdicts import CHECKS, Check, Evidence, Report, evaluate
from askback.tools.check._wire import Branch, Exchange, Recorded, Request, Response, describe

__all__ = [
    "CHECKS",
    "Branch",
    "Check",
    "Evidence",
    "Exchange",
    "Recorded",
    "Report",
    "Request",
    "Response",
    "describe",
    "evaluate",
    "invalid_content",
    "probe",
    "run_check",
    "tamper",
]
