"""The checker: runs every rule over one parsed module and collects raw findings (`# noqa` and selection are
applied afterwards, in `_run`)."""

from __future__ import annotations

import ast
from collections.abc import Sequence

from askback.core.secret_words import looks_secret
from askback.tools.lint._effects import awaited_unknown, changes_shared, module_names, shared_names
from askback.tools.lint._patterns import (
    COMPLETE_CALLS,
    COMPLETE_METHOD,
    COMPLETE_TYPES,
    ELICITATION_IDS,
    FORM_CALLS,
    SCHEMA_KEYS,
    STATE_KEYS,
    URL_REQUIRED_CODE,
    URL_REQUIRED_NAMES,
    Located,
    SchemaField,
    call_asks,
    in_memory_names,
    is_push,
    is_write,
    literal_str,
    mentions_flow_type,
    model_fields,
    name_of,
    own_nodes,
    pydantic_models,
    schema_fields,
    secret_for_state,
    show,
)
from askback.tools.lint._rules import RULES, Finding


class Checker:
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
        self.models = pydantic_models(tree)
        self.module_names = module_names(tree)

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

    def _add(self, node: Located, code: str, message: str) -> None:
        line, col = self._position(node)
        self.findings.append(Finding(self.path, line, col, code, message, RULES[code].hint))

    def _position(self, node: Located) -> tuple[int, int]:
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
        name = name_of(call.func)
        push = is_push(call)
        if push:
            self._add(
                call,
                "ABK101",
                f"{show(call.func)}(...) pushes elicitation/create to the client and waits; a 2026-07-28 server "
                "cannot send requests (R8)",
            )
        if name in COMPLETE_CALLS:
            self._add(
                call,
                "ABK102",
                f"{show(call.func)}(...) sends {COMPLETE_METHOD}, removed in 2026-07-28 (R22)",
            )
        if push or name in FORM_CALLS:
            for value in [*call.args, *(kw.value for kw in call.keywords)]:
                if isinstance(value, ast.Name) and value.id in self.models:
                    self._model_form(value.id)
                elif isinstance(value, ast.Dict):
                    self._schema_form(value)

    # ABK102 (the method string), ABK103 (the id as a string)
    def _constant(self, node: ast.Constant) -> None:
        if not isinstance(node.value, str) or id(node) in self.prose:
            return
        if COMPLETE_METHOD in node.value:
            self._add(node, "ABK102", f"{COMPLETE_METHOD} was removed in 2026-07-28; it will never arrive (R22)")
        if node.value in ELICITATION_IDS:
            self._add(
                node, "ABK103", f"{node.value!r} belongs to 2025-11-25 URL elicitation, removed in 2026-07-28 (R22)"
            )

    # ABK102 (notification types), ABK103 (the id as a name), ABK104 (the error by name)
    def _name(self, name: str, node: Located) -> None:
        if name in COMPLETE_TYPES:
            self._add(node, "ABK102", f"{name} is {COMPLETE_METHOD}, removed in 2026-07-28 (R22)")
        if name in ELICITATION_IDS:
            self._add(node, "ABK103", f"{name} belongs to 2025-11-25 URL elicitation, removed in 2026-07-28 (R22)")
        if name in URL_REQUIRED_NAMES:
            self._add(
                node,
                "ABK104",
                f"{name} is error -32042 (URL elicitation required), retired in 2026-07-28; a server must not emit "
                "it (R4, R22)",
            )

    # ABK103 (the id as a keyword), ABK106 (request_state=), ABK107 (requested_schema=)
    def _keyword(self, kw: ast.keyword) -> None:
        if kw.arg in ELICITATION_IDS:
            self._add(kw, "ABK103", f"{kw.arg}= belongs to 2025-11-25 URL elicitation, removed in 2026-07-28 (R22)")
        if kw.arg in STATE_KEYS:
            self._state_value(kw.arg, kw.value)
        if kw.arg in SCHEMA_KEYS and isinstance(kw.value, ast.Dict):
            self._schema_form(kw.value)

    # ABK106 ("requestState": ...), ABK107 ("requestedSchema": {...})
    def _dict(self, node: ast.Dict) -> None:
        for key, value in zip(node.keys, node.values, strict=True):
            text = literal_str(key)
            if text in STATE_KEYS:
                self._state_value(text, value)
            if text in SCHEMA_KEYS and isinstance(value, ast.Dict):
                self._schema_form(value)

    # ABK104 (-32042)
    def _unary(self, node: ast.UnaryOp) -> None:
        operand = node.operand
        if (
            isinstance(node.op, ast.USub)
            and isinstance(operand, ast.Constant)
            and type(operand.value) is int
            and operand.value == URL_REQUIRED_CODE
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
            if secret_for_state(text):
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
        for field in model_fields(model, self.models):
            self._secret_field(field, f"of {model}")

    def _schema_form(self, schema: ast.Dict) -> None:
        for field in schema_fields(schema):
            self._secret_field(field, "of the requested schema")

    def _secret_field(self, field: SchemaField, where: str) -> None:
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
        flows = {"flow"} | {a.arg for a in params if mentions_flow_type(a.annotation)}
        nodes = list(own_nodes(func, flows))
        asked = [node.lineno for node in nodes if isinstance(node, ast.Call | ast.Raise) and call_asks(node, flows)]
        if not asked:
            return
        first = min(asked)
        in_memory = in_memory_names(params, nodes)
        shared, declared = shared_names(func, nodes, self.module_names)
        rerun = f"runs before the first question (line {first}); the handler reruns from the top every round, so it would run again"
        for node in nodes:
            if getattr(node, "lineno", first) >= first:
                continue
            if isinstance(node, ast.Call) and is_write(node, in_memory):
                self._add(node, "ABK105", f"{show(node.func)}(...) looks like a write and {rerun}")
                continue
            change = changes_shared(node, shared, declared)
            if change is not None:
                assert isinstance(node, ast.expr)
                self._add(node, "ABK105", f"{change}: a write that {rerun}")
                continue
            awaited = awaited_unknown(node, flows, in_memory)
            if awaited is not None:
                self._add(awaited, "ABK105", f"await {show(awaited.func)}(...) is not a known read and {rerun}")


def _show_text(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:37] + "...")
