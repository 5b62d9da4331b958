"""The framework's own calls in a Python config, checked to be what runs when the file runs, read from the
syntax tree, never run.

A reader finds the calls it reads by their names (`python_file.calls_named`: `convert_to_float8_training`,
`quantize_`, `Float8LinearConfig.from_recipe_name`, `Accelerator`, `AORecipeKwargs`,
`Float8LinearConverter.Config`, ...), but Python calls whatever each name is bound to when the line runs, and
the user calls whatever `convert_model` is bound to when the file has been run. So every call a reader reads
goes through `check_framework_call`, which refuses (a ConfigError naming the bindings and their lines):

- a callee that is not the framework's: its first name must be bound once (`ModuleScope.settled_binding`: at
  module level, or in the function that calls it), by an import from the framework's package whose dotted path
  ends in the name read (`from torchao.float8 import convert_to_float8_training`, `import torchao.float8 as
  f8`); a name rebound after its import (a lambda, a def, another import), defined in the file, imported from
  elsewhere, never imported, or a package the file patches (`torchao.float8.convert_to_float8_training =
  ...`, `ModuleScope.check_not_patched`) is refused;
- a call that may not run as written: each function around it (the `convert_model` the user calls, a method
  and its class) must be bound once, not decorated and not changed (`convert_model.__code__ = ...`), and the
  call must not follow a `return`, `raise`, `break` or `continue` of its block nor sit in the branch an `if`
  with a constant test skips, nor in a nested function its outer function never names (the call's own
  condition, `if args.fp8:`, is the user's: it is read as if true);
- arguments that cannot be told: `*args`, `**kwargs`, or more positional arguments than the framework takes
  (`check_arguments`; `call_argument` reads one by position or keyword, as Python binds it);
- the framework object the file keeps in a name (`accelerator = Accelerator(...)`, `handler =
  AORecipeKwargs(...)`, with `keeps_result`): that name bound once, so that it is this object the user
  imports.
"""

from __future__ import annotations

import ast

from fp8advisor.errors import ConfigError
from fp8advisor.frameworks.filter_language import Unsettled, snippet
from fp8advisor.frameworks.module_scope import ModuleScope, import_origin, scope_name

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)

#: The statements after which nothing in the same block runs.
_ENDS_BLOCK = (ast.Return, ast.Raise, ast.Break, ast.Continue)

_HINT = (
    "import each framework name once from its package, keep the float8 set-up in one place, and bind "
    "nothing else to these names: what verify reads must be what runs"
)


def check_framework_call(
    call: ast.Call,
    scope: ModuleScope,
    package: str,
    name: str,
    *,
    positional: int = 0,
    keeps_result: bool = False,
) -> None:
    """ConfigError unless `call` runs `package`'s `name` (a dotted tail such as
    "Float8LinearConfig.from_recipe_name") as written where it is: see the module docstring. `positional`:
    how many positional arguments the framework's function takes; `keeps_result`: the call's value is the
    framework's object (its name, if it is assigned to one, must be bound once)."""
    check_framework_name(call.func, scope, package, name)
    check_runs_as_written(call, scope, f"{name}(...)")
    check_arguments(call, scope.path, name, positional)
    if keeps_result:
        _check_result_binding(call, scope, name)


def check_framework_name(node: ast.expr, scope: ModuleScope, package: str, name: str) -> None:
    """ConfigError unless the name or dotted name `node` stands for `package`'s `name` (a dotted tail) when
    it is read: see the module docstring."""
    path, line = scope.path, getattr(node, "lineno", None)
    parts: list[str] = []
    base = node
    while isinstance(base, ast.Attribute):
        parts.append(base.attr)
        base = base.value
    shown = snippet(node)
    if not isinstance(base, ast.Name):
        raise ConfigError(
            f"`{shown}` is read as {package}'s {name}, but what it is cannot be told without running the "
            "file",
            location=f"{path}:{line}",
            hint=f"call {name} by the name it is imported under from {package}",
        )
    parts.reverse()
    home = scope.home(base)
    try:
        binding = scope.settled_binding(
            base.id,
            f"the name `{base.id}` at line {line}, read as {package}'s {name}",
            read=base,
            scope=None if home is scope.tree else home,
        )
        if binding is None:
            raise ConfigError(
                f"`{shown}` is read as {package}'s {name}, but the file never imports or binds "
                f"`{base.id}`: running it would raise NameError",
                location=f"{path}:{line}",
                hint=f"import {name.split('.')[0]} from {package} in the file",
            )
        origin = _origin(binding.statement, base.id)
        dotted = ".".join([origin, *parts]) if origin else ""
        if not (dotted.startswith(package + ".") and (dotted == name or dotted.endswith("." + name))):
            imported = f" (it stands for {dotted})" if dotted else ""
            raise ConfigError(
                f"`{shown}` at line {line} is read as {package}'s {name}, but `{base.id}` is bound by "
                f"{binding.describe()}{imported}: the file would call that instead",
                location=f"{path}:{binding.line}",
                hint=_HINT,
            )
        scope.check_not_patched(package, f"{package}'s {name}")
    except Unsettled as unsettled:
        raise unsettled_error(unsettled, path, line) from None


def unsettled_error(unsettled: Unsettled, path: object, line: int | None, hint: str = _HINT) -> ConfigError:
    """The ConfigError for a framework name (or the function around a framework call) whose value when the
    file runs cannot be told from one statement."""
    return ConfigError(
        f"cannot tell what the framework runs: {unsettled.what}",
        location=f"{path}:{getattr(unsettled.node, 'lineno', None) or line or '?'}",
        hint=hint,
    )


def _origin(statement: ast.AST, name: str) -> str | None:
    """The dotted path `name` stands for when `statement` imports it (a star import from a module: that
    module's `name`); None when the statement is no import of it."""
    if isinstance(statement, ast.ImportFrom) and any(alias.name == "*" for alias in statement.names):
        return f"{statement.module}.{name}" if statement.level == 0 and statement.module else None
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return import_origin(statement, name)
    return None


def check_runs_as_written(node: ast.AST, scope: ModuleScope, what: str) -> None:
    """ConfigError unless `node` runs whenever the code around it runs, and that code is what its names
    say: each function and class around it bound once, undecorated, unchanged, and a nested one named by its
    outer function; `node` (and each def around it) after no `return`, `raise`, `break` or `continue` of its
    block, and not in a branch a constant `if` test skips."""
    path = scope.path
    statement = scope.statement(node)
    _check_reached(statement, scope, what)
    holder = scope.enclosing_function(node)
    while holder is not None:
        if isinstance(holder, _SCOPES):
            shown = scope_name(holder)
            if holder.decorator_list:
                decorator = holder.decorator_list[0]
                raise ConfigError(
                    f"{what} is inside {shown}, decorated by `@{snippet(decorator)}`: what calling "
                    f"{shown} runs cannot be told without running the decorator",
                    location=f"{path}:{decorator.lineno}",
                    hint="remove the decorator from the function that holds the float8 set-up",
                )
            home = scope.home(holder, holder.name)
            try:
                scope.settled_binding(
                    holder.name,
                    f"{shown}, which holds {what} at line {getattr(node, 'lineno', '?')}",
                    scope=None if home is scope.tree else home,
                )
                if home is scope.tree:
                    _check_not_changed(holder.name, scope, shown)
            except Unsettled as unsettled:
                hint = (
                    f"define {shown} once, with one unconditional def, and bind nothing else to its name: "
                    "the caller runs the last binding, verify must read that one"
                )
                raise unsettled_error(unsettled, path, holder.lineno, hint) from None
            _check_reached(holder, scope, what)
            if isinstance(home, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _called_in(
                holder, home, scope
            ):
                raise _never_runs(holder, scope, what, f"{shown} is never called in {scope_name(home)}")
        holder = scope.enclosing_function(holder)


def _called_in(function: ast.AST, outer: ast.AST, scope: ModuleScope) -> bool:
    """Whether `outer` calls (or passes on) its nested function `function` by its name anywhere in its body:
    a nested def nothing refers to never runs."""
    name = getattr(function, "name", None)
    return any(
        isinstance(node, ast.Name)
        and node.id == name
        and isinstance(node.ctx, ast.Load)
        and scope.home(node) is outer
        for node in ast.walk(outer)
    )


def _check_not_changed(name: str, scope: ModuleScope, shown: str) -> None:
    """`Unsettled` when the file sets or deletes an attribute of the module-level function `name`
    (`convert_model.__code__ = ...`, `setattr(convert_model, ...)`): calling it would run other code. Any
    other use (a call, passing it to `mp.spawn`) leaves the function as written."""
    for use in scope.uses(name):
        parent = scope.parent(use)
        changed = isinstance(parent, ast.Attribute) and isinstance(parent.ctx, (ast.Store, ast.Del))
        changed = changed or (
            isinstance(parent, ast.Call)
            and isinstance(parent.func, ast.Name)
            and parent.func.id in ("setattr", "delattr")
            and parent.args[:1] == [use]
        )
        if changed:
            statement = scope.statement(use)
            raise Unsettled(use, f"{shown}, which the file changes (`{snippet(statement)}`)")


def _check_reached(statement: ast.AST, scope: ModuleScope, what: str) -> None:
    """ConfigError when `statement` is skipped in every run of the function (or module) around it: after a
    statement that ends its block, or in the branch of a constant `if` test that never runs."""
    node = statement
    while True:
        parent = scope.parent(node)
        if parent is None:
            return
        for field, value in ast.iter_fields(parent):
            if not (isinstance(value, list) and any(item is node for item in value)):
                continue
            before = value[: next(i for i, item in enumerate(value) if item is node)]
            ending = next((item for item in before if isinstance(item, _ENDS_BLOCK)), None)
            if ending is not None:
                why = f"it follows `{snippet(ending)}` at line {ending.lineno}"
                raise _never_runs(statement, scope, what, why)
            if isinstance(parent, ast.If) and isinstance(parent.test, ast.Constant):
                if bool(parent.test.value) != (field == "body"):
                    why = f"the test `if {snippet(parent.test)}` at line {parent.lineno} skips it"
                    raise _never_runs(statement, scope, what, why)
            break
        if isinstance(parent, (*_SCOPES, ast.Lambda)):
            return  # the body of a function or class: the caller checks the def itself
        node = parent


def _never_runs(statement: ast.AST, scope: ModuleScope, what: str, why: str) -> ConfigError:
    return ConfigError(
        f"{what} never runs: {why}",
        location=f"{scope.path}:{getattr(statement, 'lineno', '?')}",
        hint="keep the float8 set-up where it runs: verify reads the call as if it ran",
    )


def check_arguments(call: ast.Call, path: object, name: str, positional: int) -> None:
    """ConfigError when the arguments of `call` cannot be told from the syntax (`*args`, `**kwargs`), or it
    passes more positional arguments than `name` takes (`positional`)."""
    hidden = next((arg for arg in call.args if isinstance(arg, ast.Starred)), None)
    if hidden is None:
        hidden = next((kw.value for kw in call.keywords if kw.arg is None), None)
    if hidden is not None:
        raise ConfigError(
            f"{name}(...) at line {call.lineno} passes `{snippet(hidden)}` unpacked: which arguments it gets "
            "cannot be told without running the file",
            location=f"{path}:{call.lineno}",
            hint=f"write each argument of {name}(...) out, as a keyword",
        )
    if len(call.args) > positional:
        raise ConfigError(
            f"{name}(...) at line {call.lineno} takes {positional or 'no'} positional argument"
            f"{'s' if positional != 1 else ''}, not {len(call.args)}",
            location=f"{path}:{call.lineno}",
            hint=f"pass the arguments of {name}(...) by keyword",
        )


def call_argument(call: ast.Call, position: int, keyword: str) -> ast.expr | None:
    """The argument Python binds to the parameter `keyword` at `position` (0-based): positional or keyword;
    None when the call passes none."""
    if position < len(call.args):
        return call.args[position]
    return next((kw.value for kw in call.keywords if kw.arg == keyword), None)


def _check_result_binding(call: ast.Call, scope: ModuleScope, name: str) -> None:
    """ConfigError unless each name `call`'s value is assigned to is bound once where it is bound."""
    parent = scope.parent(call)
    targets: list[ast.expr] = []
    if isinstance(parent, ast.Assign) and parent.value is call:
        targets = list(parent.targets)
    elif isinstance(parent, (ast.AnnAssign, ast.NamedExpr)) and parent.value is call:
        targets = [parent.target]
    for target in targets:
        if not isinstance(target, ast.Name):
            continue
        home = scope.home(target)
        try:
            scope.settled_binding(
                target.id,
                f"`{target.id}`, which holds the {name}(...) of line {call.lineno}",
                scope=None if home is scope.tree else home,
            )
        except Unsettled as unsettled:
            hint = f"assign the {name}(...) to `{target.id}` once, and bind nothing else to that name"
            raise unsettled_error(unsettled, scope.path, call.lineno, hint) from None


__all__ = [
    "call_argument",
    "check_arguments",
    "check_framework_call",
    "check_framework_name",
    "check_runs_as_written",
    "unsettled_error",
]
