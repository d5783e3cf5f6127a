"""What the rules look for: the names, verbs and keys of the push model, and the pure helpers over `ast` nodes
that recognise them (names of calls, writes that would rerun every round for ABK105, form fields for ABK107).
The analysis is by name, not by type: `ctx.elicit` is recognised by the receiver's name, a write by its verb."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from askback.core.secret_words import looks_secret

_CTX_NAMES = frozenset({"ctx", "context"})
_PUSH_METHODS = frozenset({"elicit", "elicit_url", "elicit_form"})
COMPLETE_METHOD = "notifications/elicitation/complete"  # noqa: ABK102
COMPLETE_CALLS = frozenset({"send_elicit_complete", "send_elicitation_complete"})
COMPLETE_TYPES = frozenset({"ElicitCompleteNotification", "ElicitCompleteNotificationParams"})
ELICITATION_IDS = frozenset({"elicitationId", "elicitation_id"})  # noqa: ABK103
URL_REQUIRED_NAMES = frozenset({"UrlElicitationRequiredError", "URL_ELICITATION_REQUIRED"})
URL_REQUIRED_CODE = 32042
_FLOW_ASKS = frozenset({"ask", "ask_all", "link", "outcome"})
_INPUT_REQUIRED = frozenset({"InputRequiredError", "InputRequiredResult"})
FORM_CALLS = frozenset({"Elicit", "Form"})
STATE_KEYS = frozenset({"request_state", "requestState"})
SCHEMA_KEYS = frozenset({"requested_schema", "requestedSchema"})

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


Located = ast.expr | ast.stmt | ast.arg | ast.keyword | ast.alias


# --- names -----------------------------------------------------------------------------------------------------


def words(name: str) -> list[str]:
    """`getAPIToken` -> [get, api, token]; `access_token` -> [access, token]."""
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", name)
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", spaced)
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


def name_of(node: ast.expr) -> str | None:
    """The last name in an expression: `f` for `f`, `delete` for `a.b.delete`; `get_context()` counts as
    `context`."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call) and name_of(node.func) == "get_context":
        return "context"
    return None


def show(node: ast.expr, limit: int = 60) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_push(call: ast.Call) -> bool:
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    receiver = name_of(func.value)
    if receiver == "session":  # `session.elicit*`, `ctx.session.elicit*`, `ctx.request_context.session.elicit*`
        return func.attr.startswith("elicit")
    return receiver in _CTX_NAMES and func.attr in _PUSH_METHODS


def secret_for_state(text: str) -> bool:
    return any(w in _STATE_SECRET_WORDS for w in words(text)) or looks_secret(text)


def literal_str(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def mentions_flow_type(annotation: ast.expr | None) -> bool:
    """`flow: Flow`, `f: askback.Flow`, `f: "Flow"`: a parameter that is a flow, whatever it is called."""
    if annotation is None:
        return False
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name | ast.Attribute) and name_of(node) == "Flow":
            return True
        text = literal_str(node) if isinstance(node, ast.expr) else None
        if text is not None and re.search(r"\bFlow\b", text):
            return True
    return False


def _root_name(annotation: ast.expr | None) -> str | None:
    """`dict` for `dict[str, int]`, `defaultdict` for `collections.defaultdict[...]`."""
    while isinstance(annotation, ast.Subscript):
        annotation = annotation.value
    return name_of(annotation) if annotation is not None else None


@dataclass(frozen=True)
class SchemaField:
    node: Located
    name: str
    texts: tuple[str, ...]


# --- ABK105 helpers --------------------------------------------------------------------------------------------


def own_nodes(func: ast.FunctionDef | ast.AsyncFunctionDef, flows: AbstractSet[str]) -> Iterator[ast.AST]:
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
        and name_of(node.func.value) in flows
    )


def call_asks(node: ast.Call | ast.Raise, flows: AbstractSet[str]) -> bool:
    if isinstance(node, ast.Call):
        func = node.func
        if is_push(node) or name_of(func) in _INPUT_REQUIRED:
            return True
        return isinstance(func, ast.Attribute) and func.attr in _FLOW_ASKS and name_of(func.value) in flows
    if isinstance(node, ast.Raise) and node.exc is not None:
        return name_of(node.exc) in _INPUT_REQUIRED
    return False


def in_memory_names(params: Sequence[ast.arg], nodes: Sequence[ast.AST]) -> set[str]:
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
        name = name_of(value.func)
        if name in _IN_MEMORY:
            return True
        # hashlib.new(...) / hmac.new(...)
        func = value.func
        return isinstance(func, ast.Attribute) and func.attr == "new" and name_of(func.value) in {"hashlib", "hmac"}
    return False


def write_verb(said: Sequence[str]) -> bool:
    """Whether a name's words (`words(name)`) start with a write verb."""
    return bool(said) and (said[0] in _WRITE_VERBS or list(said[:2]) in (["run", "migration"], ["run", "migrations"]))


def is_write(call: ast.Call, in_memory: AbstractSet[str]) -> bool:
    name = name_of(call.func)
    if name is None:
        return False
    said = words(name)
    if not said or said[0] in _READ_VERBS or not write_verb(said):
        return False
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in in_memory:
        return False
    if said[0] == "execute" and call.args:
        sql = literal_str(call.args[0])
        if sql is not None and sql.lstrip().split(None, 1)[:1] in (["SELECT"], ["select"]):
            return False
    return True


# --- ABK107 helpers --------------------------------------------------------------------------------------------


def pydantic_models(tree: ast.Module) -> dict[str, ast.ClassDef]:
    """Classes of this file that derive from `BaseModel`, directly or through another model of this file."""
    classes = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    models: dict[str, ast.ClassDef] = {}
    changed = True
    while changed:
        changed = False
        for name, node in classes.items():
            if name in models:
                continue
            bases = {name_of(b) for b in node.bases}
            if "BaseModel" in bases or bases & models.keys():
                models[name] = node
                changed = True
    return models


def model_fields(
    name: str, models: Mapping[str, ast.ClassDef], seen: frozenset[str] = frozenset()
) -> list[SchemaField]:
    node = models[name]
    fields: list[SchemaField] = []
    for base in node.bases:
        base_name = name_of(base)
        if base_name in models and base_name not in seen:
            assert base_name is not None
            fields.extend(model_fields(base_name, models, seen | {name}))
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
                if isinstance(call, ast.Call) and name_of(call.func) == "Field":
                    texts.extend(
                        text
                        for kw in call.keywords
                        if kw.arg in ("title", "description") and (text := literal_str(kw.value))
                    )
        fields.append(SchemaField(stmt.target, field, tuple(texts)))
    return fields


def schema_fields(schema: ast.Dict) -> list[SchemaField]:
    fields: list[SchemaField] = []
    for key, value in zip(schema.keys, schema.values, strict=True):
        if literal_str(key) != "properties" or not isinstance(value, ast.Dict):
            continue
        for prop_key, prop in zip(value.keys, value.values, strict=True):
            name = literal_str(prop_key)
            if name is None or prop_key is None:
                continue
            texts = [name]
            if isinstance(prop, ast.Dict):
                texts.extend(
                    text
                    for k, v in zip(prop.keys, prop.values, strict=True)
                    if literal_str(k) in ("title", "description") and (text := literal_str(v))
                )
            fields.append(SchemaField(prop_key, name, tuple(texts)))
    return fields
