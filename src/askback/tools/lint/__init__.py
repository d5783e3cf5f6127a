"""Static checks for MCP servers written against the push model of elicitation, before MCP 2026-07-28.

Under 2025-11-25 a tool handler pushed `elicitation/create` down an open connection and waited for the answer. Under
2026-07-28 it answers `input_required` and the client comes back with the answers in a new request, on which the
handler reruns from the top (multi round-trip requests). `askback lint` points at the code that has to change:
pushed questions (ABK101), the removed completion notification, id and error code (ABK102 to ABK104), writes that
would rerun every round (ABK105), secrets in `requestState` (ABK106) and secrets asked in a form (ABK107).

`lint_source` is a pure function of a file's text and name: it parses with the stdlib `ast` module, runs every rule
over the tree, then applies `# noqa` comments and `select`/`ignore`. `lint_paths` is the only part that touches the
file system. The analysis is per file and by name, not by type: `ctx.elicit` is recognised by the receiver's name,
a write by its verb, a pydantic model by a `BaseModel` base in the same file. It aims at the patterns the migration
guide names; `# noqa: ABK1xx` is the escape hatch for the rest.
"""

from __future__ import annotations

import ast
import errno
import io
import json
import os
import re
import tokenize
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass
from pathlib import Path
from types import MappingProxyType

from askback.core.secret_words import looks_secret

__all__ = ["RULES", "Finding", "Rule", "lint_paths", "lint_source", "parse_codes", "render_json", "render_text"]


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

_SYNTAX = "ABK100"

# --- what the rules look for -------------------------------------------------------------------------------------

_CTX_NAMES = frozenset({"ctx", "context"})
_PUSH_METHODS = frozenset({"elicit", "elicit_url", "elicit_form"})
_COMPLETE_METHOD = "notifications/elicitation/complete"  # noqa: ABK102
_COMPLETE_CALLS = frozenset({"send_elicit_complete", "send_elicitation_complete"})
_COMPLETE_TYPES = frozenset({"ElicitCompleteNotification", "ElicitCompleteNotificationParams"})
_ELICITATION_IDS = frozenset({"elicitationId", "elicitation_id"})  # noqa: ABK103
_URL_REQUIRED_NAMES = frozenset({"UrlElicitationRequiredError", "URL_ELICITATION_REQUIRED"})
_URL_REQUIRED_CODE = 32042
_FLOW_ASKS = frozenset({"ask", "ask_all", "link", "outcome"})
_INPUT_REQUIRED = frozenset({"InputRequiredError", "InputRequiredResult"})
_FORM_CALLS = frozenset({"Elicit", "Form"})
_STATE_KEYS = frozenset({"request_state", "requestState"})
_SCHEMA_KEYS = frozenset({"requested_schema", "requestedSchema"})

# fmt: off
# The first word of a call's name decides (`delete_project`, `createUser`, `session.commit`); `run_migration` is
# matched as two words.
_WRITE_VERBS = frozenset({
    "create", "insert", "update", "delete", "remove", "drop", "send", "post", "put", "patch", "charge", "pay",
    "refund", "deploy", "publish", "write", "save", "commit", "transfer", "execute", "destroy", "purge", "email",
    "notify",
})
_READ_VERBS = frozenset({"get", "fetch", "list", "read", "load", "find", "select", "query", "count"})
# `d.update(...)`, `parts.insert(...)`, `digest.update(...)` on something built in the function change nothing
# outside it: these constructors (and literals, and parameters annotated with them) make a name in-memory.
_IN_MEMORY = frozenset({
    "dict", "list", "set", "bytearray", "defaultdict", "OrderedDict", "Counter", "deque", "Dict", "List", "Set",
    "DefaultDict", "Deque", "MutableMapping", "MutableSequence", "MutableSet",
    "md5", "sha1", "sha224", "sha256", "sha384", "sha512", "blake2b", "blake2s",
})
_STATE_SECRET_WORDS = frozenset({
    "token", "tokens", "secret", "secrets", "password", "passwords", "passwd", "apikey", "key", "credential",
    "credentials", "auth",
})
# fmt: on

_NOQA = re.compile(r"#\s*noqa(?:\s*:\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?", re.IGNORECASE)
_SKIP_DIRS = frozenset({".venv", ".git", "__pycache__", "node_modules"})

_Located = ast.expr | ast.stmt | ast.arg | ast.keyword | ast.alias


# --- public functions ----------------------------------------------------------------------------------------------


def parse_codes(text: str) -> set[str]:
    """Codes from a comma- or space-separated list, upper-cased. A prefix such as `ABK10` stands for every code it
    starts. Raises `ValueError` naming an entry that matches no rule."""
    codes = {part.upper() for part in re.split(r"[\s,]+", text) if part}
    _check_codes(codes)
    return codes


def lint_source(
    source: str,
    filename: str,
    *,
    select: AbstractSet[str] | None = None,
    ignore: AbstractSet[str] | None = None,
) -> list[Finding]:
    """The findings for one file's text, sorted by position.

    `select` keeps only codes starting with one of its entries, `ignore` drops them (ignore wins). A file that does
    not parse gives a single ABK100, whatever `select` says, because none of the selected rules could run; only
    `ignore` drops it. Raises `ValueError` for a `select`/`ignore` entry that matches no rule.
    """
    chosen = _normalise(select)
    dropped = _normalise(ignore)
    try:
        with warnings.catch_warnings():
            # Invalid escape sequences and the like are the interpreter's business, not the linter's.
            warnings.simplefilter("ignore")
            tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        found = [_unparsed(filename, exc.lineno, exc.offset, f"could not parse the file: {exc.msg}")]
        return [f for f in found if not _matches(f.code, dropped)]
    except ValueError as exc:  # source with NUL bytes
        found = [_unparsed(filename, 1, 1, f"could not parse the file: {exc}")]
        return [f for f in found if not _matches(f.code, dropped)]
    raw = _Checker(tree, _split_lines(source), filename).run()
    noqa = _noqa_lines(source)
    kept: dict[tuple[int, str], Finding] = {}
    for finding in sorted(raw):
        if chosen is not None and not _matches(finding.code, chosen):
            continue
        if _matches(finding.code, dropped) or _silenced(finding, noqa):
            continue
        # One finding per rule per line: `f(elicitation_id=elicitation_id)` is one thing to fix, not two.
        kept.setdefault((finding.line, finding.code), finding)
    return list(kept.values())


def lint_paths(
    paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
    select: AbstractSet[str] | None = None,
    ignore: AbstractSet[str] | None = None,
) -> list[Finding]:
    """Lint files and directories (directories recursively: `*.py`, skipping .venv, .git, __pycache__ and
    node_modules). A file that cannot be read or parsed gives an ABK100 finding. Raises `FileNotFoundError` for a
    path that does not exist (before linting anything) and `ValueError` for an unknown code."""
    _normalise(select)
    _normalise(ignore)
    if isinstance(paths, str | os.PathLike):
        paths = [paths]  # one path, not the characters of one path
    roots = [Path(p) for p in paths]
    for root in roots:
        if not root.exists():
            raise FileNotFoundError(errno.ENOENT, "no such file or directory", str(root))
    findings: list[Finding] = []
    seen: set[str] = set()
    for root in roots:
        for file in _python_files(root):
            key = os.path.normcase(os.path.abspath(file))
            if key in seen:
                continue
            seen.add(key)
            findings.extend(_lint_file(file, select, ignore))
    return findings


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


# --- selection and noqa ----------------------------------------------------------------------------------------


def _check_codes(codes: Iterable[str]) -> None:
    for code in codes:
        if not any(known.startswith(code) for known in RULES):
            raise ValueError(f"unknown rule code {code!r}: the codes are {', '.join(RULES)} (or a prefix, like ABK10)")


def _normalise(codes: AbstractSet[str] | None) -> frozenset[str] | None:
    if codes is None:
        return None
    upper = frozenset(c.strip().upper() for c in codes)
    _check_codes(upper)
    return upper


def _matches(code: str, selectors: frozenset[str] | None) -> bool:
    return selectors is not None and any(code.startswith(s) for s in selectors)


def _noqa_lines(source: str) -> dict[int, frozenset[str] | None]:
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


def _silenced(finding: Finding, noqa: Mapping[int, frozenset[str] | None]) -> bool:
    if finding.line not in noqa:
        return False
    codes = noqa[finding.line]
    return codes is None or finding.code in codes


# --- reading files ---------------------------------------------------------------------------------------------


def _python_files(root: Path) -> Iterator[Path]:
    if not root.is_dir():
        yield root  # named explicitly: checked whatever its suffix
        return
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        for name in sorted(files):
            if name.endswith(".py"):
                yield Path(folder, name)


def _lint_file(file: Path, select: AbstractSet[str] | None, ignore: AbstractSet[str] | None) -> list[Finding]:
    try:
        with tokenize.open(file) as fh:  # honours a PEP 263 coding line and a UTF-8 BOM
            source = fh.read()
    except (SyntaxError, UnicodeDecodeError, OSError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        found = [_unparsed(str(file), 1, 1, f"could not read the file: {reason}")]
        return [f for f in found if not _matches(f.code, _normalise(ignore))]
    return lint_source(source, str(file), select=select, ignore=ignore)


def _unparsed(path: str, line: int | None, col: int | None, message: str) -> Finding:
    return Finding(path, line or 1, max(col or 1, 1), _SYNTAX, message, RULES[_SYNTAX].hint)


def _split_lines(source: str) -> list[str]:
    # The lines as `ast` counts them (not str.splitlines, which also splits on form feeds and U+2028).
    return re.split(r"\r\n|\r|\n", source)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# --- names -----------------------------------------------------------------------------------------------------


def _words(name: str) -> list[str]:
    """`getAPIToken` -> [get, api, token]; `access_token` -> [access, token]."""
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", name)
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", spaced)
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


def _name_of(node: ast.expr) -> str | None:
    """The last name in an expression: `f` for `f`, `delete` for `a.b.delete`; `get_context()` counts as
    `context`."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call) and _name_of(node.func) == "get_context":
        return "context"
    return None


def _show(node: ast.expr, limit: int = 60) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_push(call: ast.Call) -> bool:
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    receiver = _name_of(func.value)
    if receiver == "session":  # `session.elicit*`, `ctx.session.elicit*`, `ctx.request_context.session.elicit*`
        return func.attr.startswith("elicit")
    return receiver in _CTX_NAMES and func.attr in _PUSH_METHODS


def _secret_for_state(text: str) -> bool:
    words = _words(text)
    return any(w in _STATE_SECRET_WORDS for w in words) or looks_secret(text)


def _str(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _mentions_flow_type(annotation: ast.expr | None) -> bool:
    """`flow: Flow`, `f: askback.Flow`, `f: "Flow"`: a parameter that is a flow, whatever it is called."""
    if annotation is None:
        return False
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name | ast.Attribute) and _name_of(node) == "Flow":
            return True
        text = _str(node) if isinstance(node, ast.expr) else None
        if text is not None and re.search(r"\bFlow\b", text):
            return True
    return False


def _root_name(annotation: ast.expr | None) -> str | None:
    """`dict` for `dict[str, int]`, `defaultdict` for `collections.defaultdict[...]`."""
    while isinstance(annotation, ast.Subscript):
        annotation = annotation.value
    return _name_of(annotation) if annotation is not None else None


# --- the rules -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Field:
    node: _Located
    name: str
    texts: tuple[str, ...]


class _Checker:
    """Runs every rule over one parsed module and collects raw findings (noqa and selection come later)."""

    def __init__(self, tree: ast.Module, lines: Sequence[str], path: str) -> None:
        self.tree = tree
        self.lines = lines
        self.path = path
        self.findings: list[Finding] = []
        # Bare string statements (docstrings) do nothing at run time: prose about the old protocol is fine.
        self.prose = {
            id(node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        }
        self.models = _pydantic_models(tree)

    def run(self) -> list[Finding]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call):
                self._call(node)
            elif isinstance(node, ast.Constant):
                self._constant(node)
            elif isinstance(node, ast.Name):
                self._name(node.id, node)
            elif isinstance(node, ast.Attribute):
                self._name(node.attr, node)
            elif isinstance(node, ast.arg):
                self._name(node.arg, node)
            elif isinstance(node, ast.alias):
                self._name(node.name.rpartition(".")[2], node)
            elif isinstance(node, ast.keyword):
                self._keyword(node)
            elif isinstance(node, ast.Dict):
                self._dict(node)
            elif isinstance(node, ast.UnaryOp):
                self._unary(node)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                self._writes_before_asking(node)
        return self.findings

    def _add(self, node: _Located, code: str, message: str) -> None:
        line, col = self._position(node)
        self.findings.append(Finding(self.path, line, col, code, message, RULES[code].hint))

    def _position(self, node: _Located) -> tuple[int, int]:
        if isinstance(node, ast.Attribute) and node.end_lineno is not None and node.end_col_offset is not None:
            # Point at the attribute itself, not at the start of `a.b.c`.
            line, offset = node.end_lineno, node.end_col_offset - len(node.attr.encode())
        else:
            line, offset = node.lineno, node.col_offset
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        # `ast` offsets count UTF-8 bytes; people count characters.
        return line, len(text.encode()[:offset].decode("utf-8", errors="replace")) + 1

    # ABK101, ABK102 (calls), ABK107 (forms asked through a call)
    def _call(self, call: ast.Call) -> None:
        name = _name_of(call.func)
        push = _is_push(call)
        if push:
            self._add(
                call,
                "ABK101",
                f"{_show(call.func)}(...) pushes elicitation/create to the client and waits; a 2026-07-28 server "
                "cannot send requests (R8)",
            )
        if name in _COMPLETE_CALLS:
            self._add(
                call,
                "ABK102",
                f"{_show(call.func)}(...) sends {_COMPLETE_METHOD}, removed in 2026-07-28 (R22)",
            )
        if push or name in _FORM_CALLS:
            for value in [*call.args, *(kw.value for kw in call.keywords)]:
                if isinstance(value, ast.Name) and value.id in self.models:
                    self._model_form(value.id)
                elif isinstance(value, ast.Dict):
                    self._schema_form(value)

    # ABK102 (the method string), ABK103 (the id as a string)
    def _constant(self, node: ast.Constant) -> None:
        if not isinstance(node.value, str) or id(node) in self.prose:
            return
        if _COMPLETE_METHOD in node.value:
            self._add(node, "ABK102", f"{_COMPLETE_METHOD} was removed in 2026-07-28; it will never arrive (R22)")
        if node.value in _ELICITATION_IDS:
            self._add(
                node, "ABK103", f"{node.value!r} belongs to 2025-11-25 URL elicitation, removed in 2026-07-28 (R22)"
            )

    # ABK102 (notification types), ABK103 (the id as a name), ABK104 (the error by name)
    def _name(self, name: str, node: _Located) -> None:
        if name in _COMPLETE_TYPES:
            self._add(node, "ABK102", f"{name} is {_COMPLETE_METHOD}, removed in 2026-07-28 (R22)")
        if name in _ELICITATION_IDS:
            self._add(node, "ABK103", f"{name} belongs to 2025-11-25 URL elicitation, removed in 2026-07-28 (R22)")
        if name in _URL_REQUIRED_NAMES:
            self._add(
                node,
                "ABK104",
                f"{name} is error -32042 (URL elicitation required), retired in 2026-07-28; a server must not emit "
                "it (R4, R22)",
            )

    # ABK103 (the id as a keyword), ABK106 (request_state=), ABK107 (requested_schema=)
    def _keyword(self, kw: ast.keyword) -> None:
        if kw.arg in _ELICITATION_IDS:
            self._add(kw, "ABK103", f"{kw.arg}= belongs to 2025-11-25 URL elicitation, removed in 2026-07-28 (R22)")
        if kw.arg in _STATE_KEYS:
            self._state_value(kw.arg, kw.value)
        if kw.arg in _SCHEMA_KEYS and isinstance(kw.value, ast.Dict):
            self._schema_form(kw.value)

    # ABK106 ("requestState": ...), ABK107 ("requestedSchema": {...})
    def _dict(self, node: ast.Dict) -> None:
        for key, value in zip(node.keys, node.values, strict=True):
            text = _str(key)
            if text in _STATE_KEYS:
                self._state_value(text, value)
            if text in _SCHEMA_KEYS and isinstance(value, ast.Dict):
                self._schema_form(value)

    # ABK104 (-32042)
    def _unary(self, node: ast.UnaryOp) -> None:
        operand = node.operand
        if (
            isinstance(node.op, ast.USub)
            and isinstance(operand, ast.Constant)
            and type(operand.value) is int
            and operand.value == _URL_REQUIRED_CODE
        ):
            self._add(
                node,
                "ABK104",
                "error -32042 (URL elicitation required) was retired in 2026-07-28; a server must not emit it "
                "(R4, R22)",
            )

    # ABK106
    def _state_value(self, key: str, value: ast.expr) -> None:
        mentions: list[tuple[tuple[int, int], ast.expr, str]] = []
        for node in ast.walk(value):
            if isinstance(node, ast.Name):
                text = node.id
            elif isinstance(node, ast.Attribute):
                text = node.attr
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            else:
                continue
            if _secret_for_state(text):
                mentions.append((self._position(node), node, text))
        if mentions:
            _, node, text = min(mentions, key=lambda m: m[0])
            self._add(
                node,
                "ABK106",
                f"{key} carries {_show_text(text)}: requestState travels to the client and back on every round, "
                "so secrets never go in it (R10)",
            )

    # ABK107
    def _model_form(self, model: str) -> None:
        for field in _model_fields(model, self.models):
            self._secret_field(field, f"of {model}")

    def _schema_form(self, schema: ast.Dict) -> None:
        for field in _schema_fields(schema):
            self._secret_field(field, "of the requested schema")

    def _secret_field(self, field: _Field, where: str) -> None:
        for text in field.texts:
            if looks_secret(text):
                because = "" if text == field.name else f" ({text!r})"
                self._add(
                    field.node,
                    "ABK107",
                    f"form field {field.name!r} {where} asks for a secret{because}; form mode must never carry "
                    "passwords, keys, tokens or payment details (R17)",
                )
                return

    # ABK105
    def _writes_before_asking(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        params = [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]
        flows = {"flow"} | {a.arg for a in params if _mentions_flow_type(a.annotation)}
        nodes = list(_own_nodes(func, flows))
        asked = [node.lineno for node in nodes if isinstance(node, ast.Call | ast.Raise) and _asks(node, flows)]
        if not asked:
            return
        first = min(asked)
        in_memory = _in_memory_names(params, nodes)
        for node in nodes:
            if isinstance(node, ast.Call) and node.lineno < first and _is_write(node, in_memory):
                self._add(
                    node,
                    "ABK105",
                    f"{_show(node.func)}(...) looks like a write and runs before the first question (line {first}); "
                    "the handler reruns from the top every round, so it would run again",
                )


def _show_text(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:37] + "...")


# --- ABK105 helpers --------------------------------------------------------------------------------------------


def _own_nodes(func: ast.FunctionDef | ast.AsyncFunctionDef, flows: AbstractSet[str]) -> Iterator[ast.AST]:
    """The nodes of the function's body that run when it runs: not nested functions, lambdas or classes (they run
    when called, and are checked on their own), and not the arguments of `flow.once(...)`."""
    stack: list[ast.AST] = list(reversed(func.body))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        yield node
        if _is_once(node, flows):
            assert isinstance(node, ast.Call)
            stack.append(node.func)
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _is_once(node: ast.AST, flows: AbstractSet[str]) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "once"
        and _name_of(node.func.value) in flows
    )


def _asks(node: ast.Call | ast.Raise, flows: AbstractSet[str]) -> bool:
    if isinstance(node, ast.Call):
        func = node.func
        if _is_push(node) or _name_of(func) in _INPUT_REQUIRED:
            return True
        return isinstance(func, ast.Attribute) and func.attr in _FLOW_ASKS and _name_of(func.value) in flows
    if isinstance(node, ast.Raise) and node.exc is not None:
        return _name_of(node.exc) in _INPUT_REQUIRED
    return False


def _in_memory_names(params: Sequence[ast.arg], nodes: Sequence[ast.AST]) -> set[str]:
    names = {a.arg for a in params if _root_name(a.annotation) in _IN_MEMORY}
    for node in nodes:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if _builds_in_memory(value):
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _builds_in_memory(value: ast.expr) -> bool:
    if isinstance(value, ast.Dict | ast.List | ast.Set | ast.DictComp | ast.ListComp | ast.SetComp):
        return True
    if isinstance(value, ast.Call):
        name = _name_of(value.func)
        if name in _IN_MEMORY:
            return True
        # hashlib.new(...) / hmac.new(...)
        func = value.func
        return isinstance(func, ast.Attribute) and func.attr == "new" and _name_of(func.value) in {"hashlib", "hmac"}
    return False


def _is_write(call: ast.Call, in_memory: AbstractSet[str]) -> bool:
    name = _name_of(call.func)
    if name is None:
        return False
    words = _words(name)
    if not words or words[0] in _READ_VERBS:
        return False
    if not (words[0] in _WRITE_VERBS or words[:2] in (["run", "migration"], ["run", "migrations"])):
        return False
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in in_memory:
        return False
    if words[0] == "execute" and call.args:
        sql = _str(call.args[0])
        if sql is not None and sql.lstrip().split(None, 1)[:1] in (["SELECT"], ["select"]):
            return False
    return True


# --- ABK107 helpers --------------------------------------------------------------------------------------------


def _pydantic_models(tree: ast.Module) -> dict[str, ast.ClassDef]:
    """Classes of this file that derive from `BaseModel`, directly or through another model of this file."""
    classes = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    models: dict[str, ast.ClassDef] = {}
    changed = True
    while changed:
        changed = False
        for name, node in classes.items():
            if name in models:
                continue
            bases = {_name_of(b) for b in node.bases}
            if "BaseModel" in bases or bases & models.keys():
                models[name] = node
                changed = True
    return models


def _model_fields(name: str, models: Mapping[str, ast.ClassDef], seen: frozenset[str] = frozenset()) -> list[_Field]:
    node = models[name]
    fields: list[_Field] = []
    for base in node.bases:
        base_name = _name_of(base)
        if base_name in models and base_name not in seen:
            assert base_name is not None
            fields.extend(_model_fields(base_name, models, seen | {name}))
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        field = stmt.target.id
        if field.startswith("_") or field == "model_config" or _root_name(stmt.annotation) == "ClassVar":
            continue
        texts = [field]
        for part in (stmt.annotation, stmt.value):
            if part is None:
                continue
            for call in ast.walk(part):
                if isinstance(call, ast.Call) and _name_of(call.func) == "Field":
                    texts.extend(
                        text for kw in call.keywords if kw.arg in ("title", "description") and (text := _str(kw.value))
                    )
        fields.append(_Field(stmt.target, field, tuple(texts)))
    return fields


def _schema_fields(schema: ast.Dict) -> list[_Field]:
    fields: list[_Field] = []
    for key, value in zip(schema.keys, schema.values, strict=True):
        if _str(key) != "properties" or not isinstance(value, ast.Dict):
            continue
        for prop_key, prop in zip(value.keys, value.values, strict=True):
            name = _str(prop_key)
            if name is None or prop_key is None:
                continue
            texts = [name]
            if isinstance(prop, ast.Dict):
                texts.extend(
                    text
                    for k, v in zip(prop.keys, prop.values, strict=True)
                    if _str(k) in ("title", "description") and (text := _str(v))
                )
            fields.append(_Field(prop_key, name, tuple(texts)))
    return fields
