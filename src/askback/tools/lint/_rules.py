"""The rules `askback lint` knows (`RULES`, by code) and the `Finding` each one reports."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class Rule:
    """One check: its code, a short name, what it finds, and the one-line fix."""

    code: str
    name: str
    summary: str
    hint: str


@dataclass(frozen=True, order=True)
class Finding:
    """One problem at one place. `line` and `col` are 1-based; `col` counts characters, not bytes."""

    path: str
    line: int
    col: int
    code: str
    message: str
    hint: str


RULES: Mapping[str, Rule] = MappingProxyType(
    {
        rule.code: rule
        for rule in (
            Rule(
                "ABK100",
                "syntax-error",
                "the file could not be parsed",
                "fix the syntax error (or the encoding): nothing else in this file was checked",
            ),
            Rule(
                "ABK101",
                "push-elicitation",
                "the server pushes elicitation/create and waits for the answer",
                "ask by returning: define a Form/Confirm/Choice/Link question and call flow.ask(question) "
                "(askback answers input_required and reruns the handler with the answer)",
            ),
            Rule(
                "ABK102",
                "elicitation-complete",
                "notifications/elicitation/complete, removed in 2026-07-28",  # noqa: ABK102
                "delete it: the client's retry is the completion signal; check real state on the retry with "
                "flow.link(question, url=..., done=...)",
            ),
            Rule(
                "ABK103",
                "elicitation-id",
                "elicitationId, removed in 2026-07-28",
                "drop it: the client's retry is the completion signal; to match a browser flow to the retry, put an "
                "opaque id of your own in the link URL and check real state on the retry",
            ),
            Rule(
                "ABK104",
                "url-elicitation-required",
                "error -32042 (URL elicitation required), retired in 2026-07-28",
                "ask with a Link question and flow.link(...); a client without URL mode gets -32021 with "
                "requiredCapabilities from askback",
            ),
            Rule(
                "ABK105",
                "write-before-input",
                "a write runs before the first question, so it runs again every round",
                "reads before the input point, writes after: move it below the last question, inside "
                "await flow.once(name, fn)",
            ),
            Rule(
                "ABK106",
                "secret-in-request-state",
                "requestState carries something that looks like a secret",
                "keep secrets server-side: put only a step marker or an opaque handle in request_state and look the "
                "secret up on the retry (with askback, flow.ask keeps a sealed state without secrets for you)",
            ),
            Rule(
                "ABK107",
                "secret-in-form",
                "a form asks for a password, token, key or payment credential",
                "ask for secrets with a Link (URL mode) to a page you host: a form answer passes through the "
                "client and the model",
            ),
        )
    }
)

SYNTAX = "ABK100"
