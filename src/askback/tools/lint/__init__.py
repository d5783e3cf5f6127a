"""Static checks for MCP servers written against the push model of elicitation, before MCP 2026-07-28.

Under 2025-11-25 a tool handler pushed `elicitation/create` down an open connection and waited for the answer. Under
2026-07-28 it answers `input_required` and the client comes back with the answers in a new request, on which the
handler reruns from the top (multi round-trip requests). `askback lint` points at the code that has to change:
pushed questions (ABK101), the removed completion notification, id and error code (ABK102 to ABK104), writes that
would rerun every round (ABK105), secrets in `requestState` (ABK106) and secrets asked in a form (ABK107).

`lint_source` is a pure function of a file's text and name: it parses with the stdlib `ast` module, runs every rule
over the tree (`_checker`, with what the rules look for in `_patterns`), then applies `# noqa` comments and
`select`/`ignore` (`_noqa`). `lint_paths` (`_run`) is the only part that touches the file system; the rules are in
`_rules`, the text and JSON output in `_render`. The analysis is per file and by name, not by type: `ctx.elicit` is recognised by the receiver's name,
a write by its verb, a pydantic model by a `BaseModel` base in the same file. It aims at the patterns the migration
guide names; `# noqa: ABK1xx` is the escape hatch for the rest.
"""

from __future__ import annotations

from askback.tools.lint._render import render_json, render_text
from askback.tools.lint._rules import RULES, Finding, Rule
from askback.tools.lint._run import lint_paths, lint_source, parse_codes

__all__ = ["RULES", "Finding", "Rule", "lint_paths", "lint_source", "parse_codes", "render_json", "render_text"]
