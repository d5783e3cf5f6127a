"""Text from elsewhere, made safe to print on a terminal: the one function every such text goes through.

A terminal obeys what it is sent. An MCP server's message, a field's title, a tool's result or the name a server
gives itself can carry escape sequences that write the person's clipboard (OSC 52), draw a link that goes
somewhere else than it says (OSC 8), clear the screen (`ESC[2J`), set the window title (OSC 0), reach the
terminal's own device controls (DCS), overwrite what is already on the line (`\\r`, backspace), or characters that
reorder or hide the text around them (bidirectional overrides and isolates, zero-width characters: Trojan Source,
CVE-2021-42574). `for_terminal` writes every such character as its escape (`\\x1b`, `\\r`, `\\u202e`), so the
person sees that it is there and the terminal never acts on it. It touches nothing else, so ordinary text in any
script prints as it is. Rich markup is not this function's business: print the result as plain text (`typer.echo`,
`rich.text.Text`, or `rich.markup.escape` before a markup string), never as markup.

This module imports nothing heavy: every command's error line goes through it.
"""

from __future__ import annotations

import unicodedata

__all__ = ["for_terminal", "shorten"]


def _shown_as_is(char: str, lines: bool) -> bool:
    if char.isprintable():
        return True
    if lines and char in "\n\t":
        return True
    # Spaces other than U+0020 (no-break, ideographic, ...) are not printable to Python, but move nothing.
    return unicodedata.category(char) == "Zs"


def for_terminal(text: str, *, lines: bool = False) -> str:
    """`text` with every control, format (bidirectional, zero-width, tag), separator-other-than-space, private-use,
    surrogate or unassigned character written as its escape; with `lines`, line breaks and tabs are kept (a
    `\\r\\n` is a line break; a `\\r` alone is never kept: it would overwrite the line)."""
    if text.isprintable():
        return text
    if lines:
        text = text.replace("\r\n", "\n")
    return "".join(
        char if _shown_as_is(char, lines) else char.encode("unicode_escape", "backslashreplace").decode("ascii")
        for char in text
    )


def shorten(text: str, limit: int, *, one_line: bool = True) -> str:
    """`text` cut to at most `limit` characters, ending with '…' when cut; with `one_line`, a line break becomes a
    space (prose), else it stays for `for_terminal` to show as its escape (a key, which must not read as another
    key). Shorten before `for_terminal`, so that an escape is never cut in half."""
    head = text[: limit + 1]
    if one_line:
        head = head.replace("\r\n", " ").replace("\n", " ")
    if len(head) <= limit and len(text) <= limit:
        return head
    return head[: max(limit - 1, 0)] + "…"
