"""A Python config file read from its syntax tree, never run: its calls, their keywords, the values it binds.

`parse_python` is the one door for a Python config's text: a leading byte-order mark is dropped (Python
accepts it), a NUL byte is refused at its line, and syntax nested more than `MAX_SYNTAX_DEPTH` deep (or too
deep for Python's own parser) is refused, so that every reader's and the filter evaluator's recursion over
the tree is bounded.

The readers of the Python formats (`torchtitan_reader`, `torchao_reader`, `filter_function`) find the
framework's calls here (`calls_named`, `single_call`, `keyword_value`) and read their arguments as literals
(`required_literal`: any literal Python refuses, an unhashable set member or dict key included, is a
ConfigError), following a name such as `config=config` to the one statement that binds it (`resolve_name`,
through `module_scope.ModuleScope`: a name bound twice, or changed, is refused, never read stale). The filter
evaluator (`filter_eval`) asks what an import stands for (`import_origin`), a constant's value
(`literal_value`, with `set(...)`/`frozenset(...)` of a literal) and whether it can change at all
(`frozen`). Nothing here imports or runs the file.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from fp8advisor.errors import ConfigError
from fp8advisor.frameworks.filter_language import Unsettled, refusal_error
from fp8advisor.frameworks.module_scope import ModuleScope

#: How deep the syntax tree of a Python config may nest (a real config: under 30).
MAX_SYNTAX_DEPTH = 100

_BOM = "\ufeff"


def parse_python(path: Path, text: str) -> ast.Module:
    """The syntax tree of a Python config; ConfigError for text Python would not run (see the module
    docstring)."""
    if text.startswith(_BOM):
        text = text[len(_BOM) :]
    if "\0" in text:
        at = text.index("\0")
        line, column = text.count("\n", 0, at) + 1, at - (text.rfind("\n", 0, at) + 1) + 1
        raise ConfigError(
            f"a NUL byte at line {line}, column {column}: this is not Python source text",
            location=f"{path}:{line}",
            hint="remove the NUL byte; a file with many is binary, or saved as UTF-16: save it as UTF-8",
        )
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as error:
        raise ConfigError(
            f"syntax error: {error.msg}",
            location=f"{path}:{error.lineno}" if error.lineno else str(path),
            hint="fix the file so that Python can parse it",
        ) from None
    except (RecursionError, MemoryError, ValueError) as error:
        raise ConfigError(
            f"Python cannot parse this file: {type(error).__name__} (an expression nested thousands deep?)",
            location=str(path),
            hint=f"a config nests a few levels deep; this tool reads at most {MAX_SYNTAX_DEPTH}",
        ) from None
    deepest = _deepest(tree)
    if deepest is not None:
        raise ConfigError(
            f"the code is nested more than {MAX_SYNTAX_DEPTH} levels deep here: too deep to read safely",
            location=f"{path}:{getattr(deepest, 'lineno', '?')}",
            hint=f"a config nests a few levels deep; this tool reads at most {MAX_SYNTAX_DEPTH}: simplify "
            "the expression",
        )
    return tree


def _deepest(tree: ast.AST) -> ast.AST | None:
    """A node deeper than MAX_SYNTAX_DEPTH below `tree` (counted without recursion; the nearest one with a
    line), or None."""
    pending: list[tuple[ast.AST, int, ast.AST]] = [(tree, 0, tree)]
    while pending:
        node, depth, located = pending.pop()
        located = node if hasattr(node, "lineno") else located
        if depth > MAX_SYNTAX_DEPTH:
            return located
        pending.extend((child, depth + 1, located) for child in ast.iter_child_nodes(node))
    return None


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
    """The literal `node` holds; ConfigError naming `what` and its line when it is none."""
    value = literal_value(node)
    if value is NOT_LITERAL:
        raise literal_error(node, path, what)
    return value


def literal_error(node: ast.expr, path: Path, what: str) -> ConfigError:
    """The ConfigError for `node`: not a literal, or one Python refuses (an unhashable set member)."""
    inner = node.args[0] if isinstance(node, ast.Call) and len(node.args) == 1 else node  # frozenset({...})
    try:
        ast.literal_eval(inner)
        reason = "not a literal constant"
    except TypeError as error:  # {["a"]}, {("a", ["b"])}, {["k"]: 1}
        reason = f"not a valid literal ({error}: a list, set or dict inside a set or as a dict key)"
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        reason = "not a literal constant"
    shown = " ".join(_source(node).split())
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return ConfigError(
        f"{what} is {reason}: {shown}",
        location=f"{path}:{getattr(node, 'lineno', '?')}",
        hint="the file is read without running it: write the value as a literal (a string, a list, tuple "
        "or set of strings)",
    )


def _source(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except (RecursionError, MemoryError, ValueError):
        return f"<{type(node).__name__}>"


def resolve_name(node: ast.expr | None, scope: ModuleScope, what: str = "the config") -> ast.expr | None:
    """Follow a name (`config=config`) to the value of the one assignment that binds it where the name is
    read (the module, or the function it is read in); the node itself when it is no name or nothing binds
    it. ConfigError when the name is bound more than once or otherwise than by `name = value`."""
    if not isinstance(node, ast.Name):
        return node
    home = scope.home(node)
    try:
        binding = scope.settled_binding(
            node.id, f"{what} `{node.id}`", read=node, scope=None if home is scope.tree else home
        )
        if binding is None:
            return node
        statement = binding.statement
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and statement.value:
            if isinstance(statement.targets[0], ast.Name):
                return statement.value
        if isinstance(statement, ast.AnnAssign) and statement.value is not None:
            return statement.value
        raise Unsettled(binding.node, f"{what} `{node.id}`, bound by {binding.describe()}")
    except Unsettled as unsettled:
        raise refusal_error(unsettled, scope.path, node.lineno) from None


#: What `literal_value` answers for an expression that is not a literal.
NOT_LITERAL = object()


def literal_value(node: ast.expr) -> Any:
    """A literal, or set()/frozenset()/tuple()/list() of a literal; `NOT_LITERAL` otherwise (also for a
    literal Python refuses, such as an unhashable set member)."""
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
            return {"set": set, "frozenset": frozenset, "tuple": tuple, "list": list}[node.func.id](inner)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return NOT_LITERAL
    return NOT_LITERAL


def frozen(value: Any) -> bool:
    """Whether nothing can change `value` in place: a string, a number, a tuple or frozenset of such."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, (tuple, frozenset)):
            pending.extend(item)
        elif not isinstance(item, (str, bytes, int, float, complex, bool, type(None))) and item is not ...:
            return False
    return True


__all__ = [
    "MAX_SYNTAX_DEPTH",
    "NOT_LITERAL",
    "call_name",
    "calls_named",
    "frozen",
    "keyword_value",
    "literal_error",
    "literal_value",
    "parse_python",
    "required_literal",
    "resolve_name",
    "single_call",
]
