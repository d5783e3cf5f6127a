"""How the demo's person answers: from the script (`SCRIPT`, and the scripted visit of a link, `askback.demo.person`),
or at the terminal with `--interactive` (a form field by field, a link opened in the person's own browser). Input
that ends (Ctrl-D) cancels. `console` is the demo's one output, shared by every part of it."""

from __future__ import annotations

from typing import Any

from mcp_types import ElicitResult
from rich.console import Console
from rich.markup import escape

from askback.demo.person import connect_account
from askback.demo.provider import NAME

__all__ = ["answer_question", "ask", "console", "open_link"]

# soft_wrap: a command line the demo prints must stay whole, to be copied.
console = Console(soft_wrap=True)

_SCRIPT: dict[str, dict[str, Any]] = {
    "confirm_project": {"project_name": "billing-legacy"},
    "pick_env": {"environment": "production"},
    "confirm_prod": {"confirm": True},
}


def ask(prompt: str) -> str | None:
    """One line typed at the terminal; `None` when input has ended (Ctrl-D, or the end of piped input)."""
    try:
        return console.input(prompt)
    except EOFError:
        console.print()
        return None


def _answer_form(schema: dict[str, Any]) -> ElicitResult:
    content: dict[str, Any] = {}
    choices: dict[str, Any]
    for name, prop in schema.get("properties", {}).items():
        title = escape(str(prop.get("title", name)))
        if prop.get("description"):
            console.print(f"    [dim]{escape(str(prop['description']))}[/]")
        if prop.get("type") == "boolean":
            prompt = f"    {title} [bold]\\[y/n][/] (empty to decline): "
            choices = {"y": True, "yes": True, "n": False, "no": False}
        elif "enum" in prop:
            options = [str(v) for v in prop["enum"]]
            prompt = f"    {title} [bold]\\[{escape('/'.join(options))}][/] (empty to decline): "
            choices = {v: v for v in options}
        else:
            prompt = f"    {title} (empty to decline): "
            choices = {}
        while True:
            typed = ask(prompt)
            if typed is None:
                return ElicitResult(action="cancel")
            typed = typed.strip()
            if typed == "":
                return ElicitResult(action="decline")
            if not choices:
                content[name] = typed
                break
            if typed.lower() in choices:
                content[name] = choices[typed.lower()]
                break
            console.print(f"    [red]type one of {escape(', '.join(choices))}, or nothing to decline[/]")
    return ElicitResult(action="accept", content=content)


def open_link(url: str, user: str, interactive: bool) -> ElicitResult:
    """A URL question: the link opened by the scripted person, or by the person at the terminal in their browser."""
    console.print(f"    link {escape(url)}")
    if not interactive:
        connected = connect_account(url, user=user, say=lambda step: console.print(f"    [dim]{escape(step)}[/]"))
        # A person who could not finish closes the page: the retry then says what happened.
        return ElicitResult(action="accept" if connected else "cancel")
    console.print(
        f"    [dim]Open it in your browser: sign in as {escape(user)} when the demo server asks, then sign in at "
        f"{NAME} (any name) and allow access.[/]"
    )
    typed = ask("    Press Enter once the page says Connected (n to decline): ")
    if typed is None:
        return ElicitResult(action="cancel")
    return ElicitResult(action="decline" if typed.strip().lower() in ("n", "no") else "accept")


def answer_question(key: str, params: dict[str, Any], user: str, interactive: bool) -> ElicitResult:
    if params.get("mode") == "url":
        return open_link(str(params["url"]), user, interactive)
    if not interactive:
        return ElicitResult(action="accept", content=_SCRIPT[key])
    return _answer_form(params.get("requestedSchema", {}))
