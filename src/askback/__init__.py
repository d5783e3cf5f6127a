"""askback: let an MCP tool ask the human mid-call, under MCP 2026-07-28 multi round-trip requests, and get the
answer back on whichever instance the retry lands.

The public surface is this module; everything else may change. Names are imported on first use, so that
`askback lint` and other tools that need a part of askback do not load the server stack (SQLAlchemy, Starlette,
uvicorn, OpenTelemetry).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from askback._face import resolve

if TYPE_CHECKING:
    from askback.core.answers import Accepted, Cancelled, Declined, Outcome
    from askback.core.approving import Approval
    from askback.core.flow import Flow
    from askback.core.questions import Argument, Choice, Confirm, Default, Form, Link, Question
    from askback.errors import (
        ArgumentRequiredError,
        AskbackError,
        ConfigurationError,
        DefinitionError,
        EffectInProgressError,
        InvalidParamsError,
        MissingCapabilityError,
        ProbeError,
        RoundInProgressError,
        StoreUnavailableError,
        ToolError,
    )
    from askback.server.app import Askback, current_principal
    from askback.settings import Settings, load_settings

_WHERE = {
    "AskbackError": "askback.errors",
    "ConfigurationError": "askback.errors",
    "DefinitionError": "askback.errors",
    "EffectInProgressError": "askback.errors",
    "InvalidParamsError": "askback.errors",
    "MissingCapabilityError": "askback.errors",
    "ProbeError": "askback.errors",
    "RoundInProgressError": "askback.errors",
    "StoreUnavailableError": "askback.errors",
    "ToolError": "askback.errors",
    "ArgumentRequiredError": "askback.errors",
    "Accepted": "askback.core.answers",
    "Cancelled": "askback.core.answers",
    "Declined": "askback.core.answers",
    "Outcome": "askback.core.answers",
    "Approval": "askback.core.approving",
    "Flow": "askback.core.flow",
    "Argument": "askback.core.questions",
    "Choice": "askback.core.questions",
    "Confirm": "askback.core.questions",
    "Default": "askback.core.questions",
    "Form": "askback.core.questions",
    "Link": "askback.core.questions",
    "Question": "askback.core.questions",
    "Askback": "askback.server.app",
    "current_principal": "askback.server.app",
    "Settings": "askback.settings",
    "load_settings": "askback.settings",
}

__all__ = [
    "Accepted",
    "Approval",
    "Argument",
    "ArgumentRequiredError",
    "Askback",
    "AskbackError",
    "Cancelled",
    "Choice",
    "ConfigurationError",
    "Confirm",
    "Declined",
    "Default",
    "DefinitionError",
    "EffectInProgressError",
    "Flow",
    "Form",
    "InvalidParamsError",
    "Link",
    "MissingCapabilityError",
    "Outcome",
    "ProbeError",
    "Question",
    "RoundInProgressError",
    "Settings",
    "StoreUnavailableError",
    "ToolError",
    "current_principal",
    "load_settings",
]


def __getattr__(name: str) -> Any:
    return resolve(__name__, _WHERE, name, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
