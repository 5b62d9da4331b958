"""A Python config file read from its syntax tree, never run: its calls, their keywords, and what it binds at
module level.

The readers of the Python formats (`torchtitan_reader`, `torchao_reader`, `filter_function`) find the
framework's calls here (`calls_named`, `single_call`, `keyword_value`) and read their arguments as literals
(`required_literal`), following a module-level `config = ...` once (`resolve_name`). The filter evaluator
(`filter_eval`) asks which statements bind a name (`module_bindings`), what an import stands for
(`import_origin`), whether a constant is changed in place anywhere (`changed_at`), and a constant's value
(`literal_value`, with `set(...)`/`frozenset(...)` of a literal). Nothing here imports or runs the file.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from fp8advisor.errors import ConfigError


def parse_python(path: Path, text: str) -> ast.Module:
    try:
        return ast.parse(text, filename=str(path))
    except SyntaxError as error:
        raise ConfigError(
            f"syntax error: {error.msg}",
            location=f"{path}:{error.lineno}",
            hint="fix the file so that Python can parse it",
        ) from None


def call_name(node: ast.Call) -> str:
    """`Float8LinearConverter.Config` for `x.Float8LinearConverter.Config(...)`: the last two dotted parts."""
    parts: list[str] = []
    func: ast.AST = node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    parts.reverse()
    if len(parts) >= 2 and parts[-1] == "Config":
        return ".".join(parts[-2:])
    return parts[-1] if parts else ""


def calls_named(tree: ast.Module, name: str) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call) and call_name(node) == name]


def single_call(tree: ast.Module, name: str, path: Path) -> ast.Call:
    calls = calls_named(tree, name)
    if not calls:
        raise ConfigError(f"no {name}(...) call", location=str(path))
    if len(calls) > 1:
        lines = ", ".join(str(call.lineno) for call in calls)
        raise ConfigError(
            f"{len(calls)} {name}(...) calls (lines {lines}): which one trains is unclear",
            location=f"{path}:{calls[0].lineno}",
            hint="keep one float8 setup per config file",
        )
    return calls[0]


def keyword_value(call: ast.Call, name: str) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    return None


def required_literal(node: ast.expr, path: Path, what: str) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ConfigError(
            f"{what} is not a literal: {ast.unparse(node)}",
            location=f"{path}:{node.lineno}",
            hint="the file is read without running it: write the value as a literal (a string, a list of "
            "strings)",
        ) from None


def module_assignments(tree: ast.Module) -> dict[str, ast.expr]:
    found: dict[str, ast.expr] = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign):
            for target in statement.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = statement.value
        elif (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and statement.value
        ):
            found[statement.target.id] = statement.value
    return found


def resolve_name(node: ast.expr | None, tree: ast.Module) -> ast.expr | None:
    """Follow `config = ...` at module level once, so `config=config` reads the assignment."""
    if isinstance(node, ast.Name):
        assigned = module_assignments(tree).get(node.id)
        if assigned is not None:
            return assigned
    return node


#: What `literal_value` answers for an expression that is not a literal.
NOT_LITERAL = object()


def literal_value(node: ast.expr) -> Any:
    """A literal, or set()/frozenset()/tuple()/list() of a literal; `NOT_LITERAL` otherwise."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("set", "frozenset", "tuple", "list")
        and len(node.args) <= 1
        and not node.keywords
    ):
        try:
            inner = ast.literal_eval(node.args[0]) if node.args else ()
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return NOT_LITERAL
        return {"set": set, "frozenset": frozenset, "tuple": tuple, "list": list}[node.func.id](inner)
    return NOT_LITERAL


def module_bindings(tree: ast.Module) -> dict[str, list[ast.stmt]]:
    """Each name bound by a module-level statement, with the statements that bind it (in file order)."""
    found: dict[str, list[ast.stmt]] = {}

    def bind(name: str, statement: ast.stmt) -> None:
        found.setdefault(name, []).append(statement)

    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bind(statement.name, statement)
        elif isinstance(statement, (ast.Import, ast.ImportFrom)):
            for alias in statement.names:
                bind((alias.asname or alias.name).split(".")[0], statement)
        else:
            targets: list[ast.AST] = []
            if isinstance(statement, ast.Assign):
                targets = list(statement.targets)
            elif isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
                targets = [statement.target]
            elif isinstance(statement, (ast.For, ast.AsyncFor)):
                targets = [statement.target]
            elif isinstance(statement, (ast.With, ast.AsyncWith)):
                targets = [item.optional_vars for item in statement.items if item.optional_vars]
            for target in targets:
                for node in ast.walk(target):
                    if isinstance(node, ast.Name):
                        bind(node.id, statement)
            # Names bound inside module-level if / try / while blocks: bound, but not as a plain constant.
            if not isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for node in ast.walk(statement):
                    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                        bind(node.id, statement)
                    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        bind(node.name, statement)
                    elif isinstance(node, (ast.Import, ast.ImportFrom)):
                        for alias in node.names:
                            bind((alias.asname or alias.name).split(".")[0], statement)
    for names in found.values():  # a statement that binds a name twice (a, a = ...) counts once
        names[:] = list(dict.fromkeys(names))
    return found


def import_origin(statement: ast.stmt, name: str) -> str | None:
    """The dotted module path `name` stands for when `statement` imports it ("torch.nn" for `from torch
    import nn`), None when the statement is no plain import of it."""
    if isinstance(statement, ast.Import):
        for alias in statement.names:
            if alias.asname == name:
                return alias.name
            if alias.asname is None and alias.name.split(".")[0] == name:
                return name
    elif isinstance(statement, ast.ImportFrom) and statement.level == 0 and statement.module:
        for alias in statement.names:
            if (alias.asname or alias.name) == name:
                return f"{statement.module}.{alias.name}"
    return None


#: Methods that change a list or set in place: a constant they are called on is not a constant.
_MUTATING_METHODS = frozenset(
    {"append", "extend", "insert", "remove", "pop", "clear", "add", "discard", "update", "sort", "reverse"}
)


def changed_at(tree: ast.Module, name: str) -> ast.AST | None:
    """A statement anywhere in the file that changes the list or set `name` in place, or makes it global."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _MUTATING_METHODS
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == name
        ):
            return node
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)):
            if isinstance(node.value, ast.Name) and node.value.id == name:
                return node
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return node
        if isinstance(node, ast.Global) and name in node.names:
            return node
    return None


__all__ = [
    "NOT_LITERAL",
    "call_name",
    "calls_named",
    "changed_at",
    "import_origin",
    "keyword_value",
    "literal_value",
    "module_assignments",
    "module_bindings",
    "parse_python",
    "required_literal",
    "resolve_name",
    "single_call",
]
