"""askback: let an MCP tool ask the human mid-call, under MCP 2026-07-28 multi round-trip requests, and get the
answer back on whichever instance the retry lands.

The public surface is this module; everything else may change.
"""

from askback.errors import (
    AskbackError,
    ConfigurationError,
    DefinitionError,
    EffectInProgressError,
    MissingCapabilityError,
    ProbeError,
    StoreUnavailableError,
)
from askback.flow import Accepted, Cancelled, Declined, Flow, Outcome
from askback.questions import Argument, Choice, Confirm, Default, Form, Link, Question
from askback.server import Askback, current_principal
from askback.settings import Settings, load_settings

__all__ = [
    "Accepted",
    "Argument",
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
    "Link",
    "MissingCapabilityError",
    "Outcome",
    "ProbeError",
    "Question",
    "Settings",
    "StoreUnavailableError",
    "current_principal",
    "load_settings",
]
