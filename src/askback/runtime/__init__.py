"""The agent runtime: the client side of questions to people (see docs/runtime.md).

Calls a tool, prompt or resource on any MCP server; when the server asks (2026-07-28 `input_required`), the call
is parked in the store and resumed, in any process, once people have answered through the renderers (a terminal
prompt, a web inbox, your own callback) or the deadline has passed.

The public surface is this module: the runtime, what a call comes back as, the questions and answers, the
renderers, and what resumes a call once the account it waits on is connected or its approval decided (`webhook_receiver`, a Standard Webhooks
receiver, and `resume_on_account_events`, in process). Names are imported on first use. The runtime's schema history
(`askback.runtime.parked_calls.MIGRATIONS`) and its records stay in their modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from askback._face import resolve

if TYPE_CHECKING:
    from askback.runtime.calls import AccountActive, ApprovalDecided, Claimed, Completed, Parked, Pending, Runtime
    from askback.runtime.questions import Answer, ParkedQuestion, safe_link
    from askback.runtime.renderers import Callback, Interactive, Renderer, WebInbox, declared_modes
    from askback.runtime.webhooks import resume_on_account_events, webhook_receiver

_WHERE = {
    "AccountActive": "askback.runtime.calls",
    "ApprovalDecided": "askback.runtime.calls",
    "Claimed": "askback.runtime.calls",
    "Completed": "askback.runtime.calls",
    "Parked": "askback.runtime.calls",
    "Pending": "askback.runtime.calls",
    "Runtime": "askback.runtime.calls",
    "Answer": "askback.runtime.questions",
    "ParkedQuestion": "askback.runtime.questions",
    "safe_link": "askback.runtime.questions",
    "Callback": "askback.runtime.renderers",
    "Interactive": "askback.runtime.renderers",
    "Renderer": "askback.runtime.renderers",
    "WebInbox": "askback.runtime.renderers",
    "declared_modes": "askback.runtime.renderers",
    "resume_on_account_events": "askback.runtime.webhooks",
    "webhook_receiver": "askback.runtime.webhooks",
}

__all__ = [
    "AccountActive",
    "Answer",
    "ApprovalDecided",
    "Callback",
    "Claimed",
    "Completed",
    "Interactive",
    "Parked",
    "ParkedQuestion",
    "Pending",
    "Renderer",
    "Runtime",
    "WebInbox",
    "declared_modes",
    "resume_on_account_events",
    "safe_link",
    "webhook_receiver",
]


# Old names, working until askback 0.3.0 with a DeprecationWarning (CHANGELOG.md).
_RENAMED = {"Question": "ParkedQuestion"}


def __getattr__(name: str) -> Any:
    return resolve(__name__, _WHERE, name, globals(), _RENAMED)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
