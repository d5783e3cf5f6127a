"""The terminal prompt: a call's questions asked and answered at the terminal while the call waits.

`TerminalRenderer` is the interactive renderer of `askback call` and `askback inbox answer`. A form is asked field
by field (`forms.fields`), shown back in a table for review, then checked with `forms.validate` (a yes/no question,
one boolean field, is sent as soon as y or n is typed: there is nothing to review); a URL question
shows the full host its link goes to and the link as plain text, and waits until the person says they have
finished there. The link is never opened or fetched from here. `:d` declines and `:c` cancels at any prompt.

The dialog is a generator with no I/O (`_dialog`, the shape of httpx's `auth_flow`): it yields what to show and
what to read, and receives the lines typed. `ask` drives it, reading each line in a worker thread so that the
event loop goes on meanwhile. Everything a server wrote (message, titles, choices, its own name, link) is shown as
plain text: never as rich markup, and through `askback.core.terminal_text.for_terminal`, since its control, bidirectional
and invisible characters could otherwise rewrite what the terminal shows next to them (the host above all). Each
question says which server asks (the host the runtime reached, the name the server gives itself) and for which
call. The end of input leaves the question unanswered (`UnansweredError`): the call stays parked, never cancelled.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import anyio.from_thread
import anyio.lowlevel
from rich.console import Console, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from askback.core.terminal_text import for_terminal, shorten
from askback.errors import InvalidAnswerError, UnansweredError, UnsafeLinkError
from askback.runtime.forms import Field, check_field, fields, parse, validate
from askback.runtime.questions import Answer, Mode, ParkedQuestion, checked_link

__all__ = ["TerminalRenderer"]

_BOTH: frozenset[Mode] = frozenset({"form", "url"})
_HINT = "type :d to decline, :c to cancel"
# How much of a call's arguments the panel shows (`askback inbox show` has them all).
_CALL_SHOWN = 160


@dataclass(frozen=True)
class _Show:
    """Print this; `soft_wrap` leaves long lines to the terminal (a link stays one line, whole to copy)."""

    renderable: RenderableType
    soft_wrap: bool = False


@dataclass(frozen=True)
class _Read:
    """Read one line after this prompt; the dialog receives it (without its line break)."""

    prompt: str


_Step = _Show | _Read
_Dialog = Generator[_Step, str | None, Answer]


class _Stop(Exception):
    """The person typed :d or :c (or chose decline or cancel from a menu): the question ends here."""

    def __init__(self, word: str) -> None:
        super().__init__(word)
        self.action: Literal["decline", "cancel"] = "decline" if word == "decline" else "cancel"


class TerminalRenderer:
    """Ask questions at the terminal: `Runtime(store, renderers=[TerminalRenderer()])`.

    `console` is where questions are shown (default: standard error, so that standard output keeps the call's
    result); `read_line(prompt)` reads what the person types (default: the console's `input`). `modes` are the
    modes it declares; `development` shows plain-http loopback links (as `checked_link` allows in development).
    `asking` is the question asked last (the one at the prompt, while one is).
    """

    def __init__(
        self,
        *,
        console: Console | None = None,
        read_line: Callable[[str], str] | None = None,
        modes: frozenset[Mode] = _BOTH,
        development: bool = False,
    ) -> None:
        self.console = console or Console(stderr=True)
        self.read_line = read_line or self._input
        self.modes = frozenset(modes)
        self.development = development
        # What a Ctrl-C at the prompt leaves parked.
        self.asking: ParkedQuestion | None = None

    def _input(self, prompt: str) -> str:
        return self.console.input(Text(prompt, style="bold"))

    async def ask(self, question: ParkedQuestion) -> Answer:
        """Ask `question` until the person sends an answer, declines or cancels. At the end of input it raises
        `UnansweredError`: the question stays unanswered (its call parked), nothing is sent for it."""
        self.asking = question
        dialog = _dialog(question, modes=self.modes, development=self.development)
        reply: str | None = None
        while True:
            try:
                step = dialog.send(reply)
            except StopIteration as done:
                answer: Answer = done.value
                return answer
            reply = None
            if isinstance(step, _Show):
                self.console.print(step.renderable, soft_wrap=step.soft_wrap)
                continue
            try:
                reply = await self._read(step.prompt)
            except EOFError:
                self.console.line()  # the prompt's line was never ended by an Enter
                self.console.print(Text("(end of input: the question is left unanswered)", style="dim"))
                raise UnansweredError(f"no answer to {question.ref}: the input ended") from None
            except BaseException:
                # Ctrl-C or a cancelled call at the prompt: whatever is printed next starts on a line of its own.
                self.console.line()
                raise

    async def _read(self, prompt: str) -> str:
        """One line from `read_line`, read in a worker thread while the event loop goes on.

        The thread is a daemon of its own, not one of `anyio.to_thread`'s: those are joined at exit, so after a
        Ctrl-C at a prompt the process would wait, silent, until someone pressed Enter."""
        done = anyio.Event()
        got: list[str | BaseException] = []
        token = anyio.lowlevel.current_token()

        def read() -> None:
            try:
                got.append(self.read_line(prompt))
            except BaseException as exc:  # handed to the waiting task, which raises it
                got.append(exc)
            with contextlib.suppress(RuntimeError):  # the event loop has ended: nobody waits for this line
                anyio.from_thread.run_sync(done.set, token=token)

        threading.Thread(target=read, name="askback-terminal-input", daemon=True).start()
        await done.wait()
        if isinstance(got[0], BaseException):
            raise got[0]
        return got[0]


# The dialog: no I/O below this line. ---------------------------------------------------------------------------


def _dialog(question: ParkedQuestion, *, modes: frozenset[Mode], development: bool) -> _Dialog:
    yield _Show(_panel(question))
    if question.mode is None or question.mode not in modes:
        what = question.method if question.mode is None else f"a {question.mode} question"
        yield _Show(Text(f"This question ({_plain(what)}) cannot be answered at the terminal: it is cancelled."))
        return Answer("cancel")
    try:
        if question.problem is not None:
            return (yield from _unshowable(question.problem))
        if question.mode == "url":
            return (yield from _link(question, development=development))
        return (yield from _form(question))
    except _Stop as stop:
        yield _Show(Text("Declined." if stop.action == "decline" else "Cancelled.", style="yellow"))
        return Answer(stop.action)


def _panel(question: ParkedQuestion) -> Panel:
    title = f"call {question.call_id} · round {question.round} · {question.key}"
    body = Text(_plain(question.message, lines=True) or "(no message)")
    origin = question.origin
    if origin is not None:
        body.append("\n")
        body.append(_asker(question), style="dim")
    return Panel(body, title=Text(_plain(title)), title_align="left", expand=False)


def _asker(question: ParkedQuestion) -> str:
    """Who asks, on one line: the host the runtime reached, the name the server gives itself, and the call."""
    origin = question.origin
    assert origin is not None
    name = f' (it calls itself "{_plain(shorten(origin.server_name, 80))}")' if origin.server_name else ""
    return f"asked by the server at {_plain(origin.host)}{name}, for the {_plain(origin.call(_CALL_SHOWN))}"


def _unshowable(problem: str) -> _Dialog:
    """A question that cannot be shown as the server asked it: said why, it can only be declined or cancelled."""
    yield _Show(Text(f"This question cannot be shown as the server asked it: {_plain(problem)}.", style="red"))
    yield _Show(Text("It can only be declined or cancelled here."))
    raise _Stop((yield from _menu("[d]ecline, [c]ancel: ", {"d": "decline", "c": "cancel"})))


def _link(question: ParkedQuestion, *, development: bool) -> _Dialog:
    try:
        link = checked_link(question.url or "", development=development)
    except UnsafeLinkError as exc:
        yield _Show(Text(f"{_plain(str(exc))}.", style="red"))
        yield _Show(Text("This question can only be declined or cancelled here."))
        raise _Stop((yield from _menu("[d]ecline, [c]ancel: ", {"d": "decline", "c": "cancel"}))) from None
    shown = Text("This link goes to: ")
    shown.append(_plain(link.shown), style="bold")
    yield _Show(shown, soft_wrap=True)
    yield _Show(Text("Open it yourself, finish there, then come back here:", style="dim"))
    # The address as a browser reads it (ASCII: percent-escapes, punycode), so what is copied is what was checked.
    yield _Show(Text(_plain(link.href)), soft_wrap=True)
    choice = yield from _menu(
        "[a] I have finished, [d]ecline, [c]ancel: ", {"a": "finished", "d": "decline", "c": "cancel"}
    )
    if choice != "finished":
        raise _Stop(choice)
    return Answer("accept")


def _form(question: ParkedQuestion) -> _Dialog:
    schema = question.schema or {}
    known = fields(schema)
    # A yes/no question (one boolean field, as a plain Confirm asks) is answered by the y or n typed: nothing is left
    # to review. Enter taking a default still goes to the review, so that a stray Enter sends nothing.
    yes_or_no = len(known) == 1 and known[0].kind == "boolean"
    values: dict[str, Any] = {}
    yield _Show(Text(_HINT, style="dim"))
    while True:
        typed = False
        for field in known:
            values[field.name], typed = yield from _ask_field(field, values.get(field.name, field.default), schema)
        if yes_or_no and typed:
            try:
                return Answer("accept", validate(schema, values))
            except InvalidAnswerError as exc:
                yield _Show(Text(f"{_plain(str(exc))}; the question is asked again.", style="red"))
                continue
        yield _Show(_review(known, values))
        choice = yield from _menu(
            "[s]end, [e]dit, [d]ecline, [c]ancel: ", {"s": "send", "e": "edit", "d": "decline", "c": "cancel"}
        )
        if choice == "edit":
            continue
        if choice != "send":
            raise _Stop(choice)
        try:
            return Answer("accept", validate(schema, values))
        except InvalidAnswerError as exc:
            yield _Show(Text(f"{_plain(str(exc))}; the form is asked again.", style="red"))


def _ask_field(field: Field, current: Any, schema: Mapping[str, Any]) -> Generator[_Step, str | None, tuple[Any, bool]]:
    """One field's value: typed, a choice's number, or Enter for `current`; asked again until it fits. With it,
    whether it was typed (not Enter)."""
    yield _Show(_field_header(field))
    while True:
        text = ((yield _Read(_prompt(field, current))) or "").strip()
        _stop_if_asked(text)
        if text == "":
            if current is not None or not field.required:
                return current, False
            yield _Show(Text(f"{_plain(field.title)}: a value is required ({_HINT}).", style="red"))
            continue
        try:
            return _value(field, text, schema), True
        except InvalidAnswerError as exc:
            yield _Show(Text(_plain(str(exc)), style="red"))


def _menu(prompt: str, options: Mapping[str, str]) -> Generator[_Step, str | None, str]:
    """The word of the option chosen by its letter or its word (:d and :c end the question here too)."""
    while True:
        text = ((yield _Read(prompt)) or "").strip().casefold()
        _stop_if_asked(text)
        for letter, word in options.items():
            if text in (letter, word):
                return word
        *others, last = options
        yield _Show(Text(f"Type {', '.join(others)} or {last}.", style="red"))


def _stop_if_asked(text: str) -> None:
    if text.casefold() in (":d", ":decline"):
        raise _Stop("decline")
    if text.casefold() in (":c", ":cancel"):
        raise _Stop("cancel")


def _value(field: Field, text: str, schema: Mapping[str, Any]) -> Any:
    """What `text` means for `field`, checked against the field's own schema (bounds, lengths, formats)."""
    if field.kind == "multi":
        value: Any = list(dict.fromkeys(_pick(field, part) for part in parse(field, text)))
    else:
        value = parse(field, _pick(field, text))
    wrong = check_field(field, value)
    if wrong:
        raise InvalidAnswerError(f"{field.title}: {'; '.join(wrong)}")
    return value


def _pick(field: Field, text: str) -> str:
    """A choice typed as its value, its number in the list, or its value or title in any case."""
    if not field.choices or text in field.choices:
        return text
    if text.isdigit() and 1 <= int(text) <= len(field.choices):
        return field.choices[int(text) - 1]
    folded = {
        c
        for c, t in zip(field.choices, field.choice_titles, strict=False)
        if text.casefold() in (c.casefold(), t.casefold())
    }
    if len(folded) == 1:
        return folded.pop()
    raise InvalidAnswerError(
        f"{field.title}: {text!r} is not a choice: type a number from 1 to {len(field.choices)} or one of "
        f"{', '.join(field.choices)}"
    )


def _field_header(field: Field) -> Text:
    header = Text()
    header.append(_plain(field.title), style="bold")
    if field.required:
        header.append(" (required)", style="yellow")
    header.append(f"  {_plain(field.hint)}", style="dim")
    if field.description:
        header.append(f"\n  {_plain(field.description, lines=True)}")
    for number, (value, title) in enumerate(zip(field.choices, field.choice_titles, strict=False), start=1):
        label = value if title == value else f"{title} ({value})"
        header.append(f"\n  {number}. {_plain(label)}")
    return header


def _prompt(field: Field, current: Any) -> str:
    prompt = _plain(field.title)
    if field.kind == "boolean":
        prompt += " (y/n)"
    elif field.kind == "multi":
        prompt += " (numbers or values, comma-separated)"
    if current is not None:
        prompt += f" [{_plain(_typed(current))}]"
    return prompt + ": "


def _typed(value: Any) -> str:
    """`value` as the person would type it (a default in brackets)."""
    if isinstance(value, bool):
        return "y" if value else "n"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def _review(known: tuple[Field, ...], values: Mapping[str, Any]) -> RenderableType:
    if not known:
        return Text("This form asks for nothing: send it as it is?")
    table = Table("Field", "Value", title="Your answer", title_justify="left")
    for field in known:
        value = values.get(field.name)
        table.add_row(Text(_plain(field.title)), Text(_plain(_shown(field, value))))
    return table


def _shown(field: Field, value: Any) -> str:
    """`value` as the review shows it: yes/no, choices by their titles, '-' for nothing."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    titles = dict(zip(field.choices, field.choice_titles, strict=False))
    items = value if isinstance(value, list) else [value]
    return ", ".join(f"{titles[str(v)]} ({v})" if titles.get(str(v), str(v)) != str(v) else str(v) for v in items)


def _plain(text: str, *, lines: bool = False) -> str:
    """`text` safe to print (`for_terminal`): controls, bidirectional and invisible characters made visible as
    escapes; line breaks kept only where `lines`."""
    return for_terminal(text, lines=lines)
