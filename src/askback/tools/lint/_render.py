"""Findings for people (`render_text`) and for machines (`render_json`)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict

from askback.tools.lint._rules import Finding


def render_text(findings: Sequence[Finding]) -> str:
    """`path:line:col: CODE message`, the hint indented under it, and a summary line."""
    parts = [f"{f.path}:{f.line}:{f.col}: {f.code} {f.message}\n    hint: {f.hint}\n" for f in findings]
    if not findings:
        parts.append("No findings.\n")
    else:
        counts = Counter(f.code for f in findings)
        by_code = ", ".join(f"{code} x{n}" for code, n in sorted(counts.items()))
        files = len({f.path for f in findings})
        parts.append(
            f"Found {_plural(len(findings), 'finding')} in {_plural(files, 'file')} ({by_code}).\n",
        )
    return "".join(parts)


def render_json(findings: Sequence[Finding]) -> str:
    """`{"findings": [{path, line, col, code, message, hint}, ...], "summary": {findings, files, codes}}`."""
    counts = Counter(f.code for f in findings)
    document = {
        "findings": [asdict(f) for f in findings],
        "summary": {
            "findings": len(findings),
            "files": len({f.path for f in findings}),
            "codes": dict(sorted(counts.items())),
        },
    }
    return json.dumps(document, indent=2)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
