"""ABK105's other effects, besides a call named like a write: changes to the module's own state, which outlives the
round (`FILED.append(...)`, `SEEN[key] = True`, `del CACHE[key]`, `COUNT += 1` under `global COUNT`), and awaited
calls that are not known reads (`await record(...)`): an awaited call does I/O, and unless its name says it reads
(`READ_VERBS`) or it is a method called with no arguments (an accessor: `await response.json()`), it may write.

A name is the module's when it is bound by an assignment at the module's top level (not an import, a function or a
class) and the function does not bind it itself (a parameter, an assignment, a loop variable), unless it declares it
`global`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet

from askback.tools.lint._patterns import name_of, words, write_verb

__all__ = ["MUTATORS", "READ_VERBS", "awaited_unknown", "changes_shared", "module_names", "shared_names"]

# fmt: off
# Methods that change a list, dict, set or deque in place.
MUTATORS = frozenset({
    "append", "extend", "insert", "add", "update", "setdefault", "pop", "popitem", "remove", "clear", "discard",
    "appendleft", "extendleft", "popleft",
})
# The first word of an awaited call that reads: it may rerun every round.
READ_VERBS = frozenset({
    "get", "fetch", "list", "read", "load", "find", "select", "query", "count", "lookup", "exists", "search", "is",
    "has", "check", "verify", "validate", "resolve", "scalar", "scalars", "sleep", "wait",
})
# fmt: on
# Receivers whose awaited calls are not the handler's effects: askback's flow, and the SDK's context (its log and
# progress notifications; its pushes are ABK101).
_QUIET_RECEIVERS = frozenset({"ctx", "context"})


def module_names(tree: ast.Module) -> set[str]:
    """Names bound by an assignment at the top level of the module (inside its `if`, `try`, `with` and `for` too)."""
    found: set[str] = set()
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, ast.Assign):
            targets: Sequence[ast.expr] = stmt.targets
        elif isinstance(stmt, ast.AnnAssign | ast.AugAssign):
            targets = [stmt.target]
        else:
            if isinstance(stmt, ast.If | ast.For | ast.AsyncFor | ast.While | ast.With | ast.AsyncWith | ast.Try):
                for field in ("body", "orelse", "finalbody", "handlers"):
                    for child in getattr(stmt, field, []):
                        stack.extend(child.body if isinstance(child, ast.ExceptHandler) else [child])
            continue
        for target in targets:
            found.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return found


def shared_names(
    func: ast.FunctionDef | ast.AsyncFunctionDef, nodes: Sequence[ast.AST], module: AbstractSet[str]
) -> tuple[set[str], set[str]]:
    """The module's names as `func` sees them (those it does not bind itself), and those it declares `global`."""
    declared = {name for node in nodes if isinstance(node, ast.Global) for name in node.names}
    params = [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs, func.args.vararg, func.args.kwarg]
    bound = {a.arg for a in params if a is not None}
    bound.update(n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store | ast.Del))
    return (set(module) - bound) | (set(module) & declared), declared


def changes_shared(node: ast.AST, shared: AbstractSet[str], declared: AbstractSet[str]) -> str | None:
    """What `node` changes of the module's state, shown (`FILED.append(...)`, `SEEN[...] = ...`), or None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
        root = _root(node.func.value)
        if root in shared:
            return f"{ast.unparse(node.func)}(...) changes the module-level {root}"
    if isinstance(node, ast.Subscript | ast.Attribute) and isinstance(node.ctx, ast.Store | ast.Del):
        root = _root(node.value)
        if root in shared:
            shown = f"{ast.unparse(node.value)}[...]" if isinstance(node, ast.Subscript) else ast.unparse(node)
            verb = "del " if isinstance(node.ctx, ast.Del) else ""
            return f"{verb}{shown} changes the module-level {root}"
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del) and node.id in declared:
        return f"assigning {node.id} (global {node.id}) changes the module-level {node.id}"
    return None


def awaited_unknown(node: ast.AST, flows: AbstractSet[str], in_memory: AbstractSet[str]) -> ast.Call | None:
    """The call awaited by `node` when it is not a known read (nor a write by its verb, which the write rule judges),
    nor an accessor, nor a call on askback's flow, the SDK's context or something built in the function."""
    if not (isinstance(node, ast.Await) and isinstance(node.value, ast.Call)):
        return None
    call = node.value
    name = name_of(call.func)
    said = words(name) if name is not None else []
    if said and (said[0] in READ_VERBS or write_verb(said)):
        return None
    func = call.func
    if isinstance(func, ast.Attribute):
        if not call.args and not call.keywords:
            return None  # an accessor: `await response.json()`, `await app.store()`
        receiver = _root(func.value)
        if receiver in flows or receiver in in_memory or name_of(func.value) in _QUIET_RECEIVERS:
            return None
    return call


def _root(node: ast.expr) -> str | None:
    """`FILED` for `FILED`, `FILED.items`, `FILED[key].items`, `FILED.get(k)`."""
    for part in _chain(node):
        node = part
    return node.id if isinstance(node, ast.Name) else None


def _chain(node: ast.expr) -> Iterator[ast.expr]:
    while True:
        yield node
        if isinstance(node, ast.Attribute | ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            return
