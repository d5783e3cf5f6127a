"""The agent runtime: the client side of questions to people (see docs/runtime.md).

Calls a tool, prompt or resource on any MCP server; when the server asks (2026-07-28 `input_required`), the call
is parked in the store and resumed, in any process, once people have answered through the renderers (a terminal
prompt, a web inbox, your own callback) or the deadline has passed.
"""

from __future__ import annotations

from askback.runtime.calls import AccountActive, Claimed, Completed, Held, Parked, Pending, Runtime
from askback.runtime.questions import Answer, Question, safe_link
from askback.runtime.renderers import Callback, Interactive, Renderer, WebInbox, declared_modes
from askback.runtime.store import MIGRATIONS, CallRecord

__all__ = [
    "MIGRATIONS",
    "AccountActive",
    "Answer",
    "CallRecord",
    "Callback",
    "Claimed",
    "Completed",
    "Held",
    "Interactive",
    "Parked",
    "Pending",
    "Question",
    "Renderer",
    "Runtime",
    "WebInbox",
    "declared_modes",
    "safe_link",
]
