"""Selection and `# noqa`: which codes `select`/`ignore` name (a prefix stands for every code it starts), and
which lines a `# noqa` comment silences (comments only, never strings)."""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet

from askback.tools.lint._rules import RULES, Finding

_NOQA = re.compile(r"#\s*noqa(?:\s*:\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?", re.IGNORECASE)


def check_codes(codes: Iterable[str]) -> None:
    for code in codes:
        if not any(known.startswith(code) for known in RULES):
            raise ValueError(f"unknown rule code {code!r}: the codes are {', '.join(RULES)} (or a prefix, like ABK10)")


def normalise(codes: AbstractSet[str] | None) -> frozenset[str] | None:
    if codes is None:
        return None
    upper = frozenset(c.strip().upper() for c in codes)
    check_codes(upper)
    return upper


def code_selected(code: str, selectors: frozenset[str] | None) -> bool:
    return selectors is not None and any(code.startswith(s) for s in selectors)


def noqa_lines(source: str) -> dict[int, frozenset[str] | None]:
    """Line -> codes a `# noqa` comment silences there (None: every code). Comments only, never strings."""
    found: dict[int, frozenset[str] | None] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type != tokenize.COMMENT:
                continue
            match = _NOQA.search(tok.string)
            if match is None:
                continue
            codes = match.group("codes")
            found[tok.start[0]] = None if codes is None else frozenset(re.findall(r"[A-Z]+[0-9]+", codes.upper()))
    except (tokenize.TokenError, SyntaxError):
        # The source parsed, so this does not happen in practice; without comments nothing is silenced.
        return found
    return found


def is_silenced(finding: Finding, noqa: Mapping[int, frozenset[str] | None]) -> bool:
    if finding.line not in noqa:
        return False
    codes = noqa[finding.line]
    return codes is None or finding.code in codes
