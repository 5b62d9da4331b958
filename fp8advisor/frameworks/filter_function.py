"""A Python config's module filter (`module_filter_fn` / `module_filter_func`, or a `quantize_` filter_fn), as
its framework would call it.

The filter function decides exactly which layers the framework converts. By default none of the file's code
runs: `fp8advisor.frameworks.filter_eval.FilterEvaluator` evaluates the function from its syntax tree (names,
literal sets, fqn tests, `isinstance(module, nn.Linear)`, in_features/out_features arithmetic, the file's
literal constants) and refuses anything else with a ConfigError naming the construct and its line. With
`trust_config=True` (`verify --trust-config`) we compile ONLY that function's definition (or lambda), with the
literal module-level constants it names plus `torch` and `nn`, under a short list of builtins, and run it as
the framework will. Either way nothing else in the file runs: no imports of the user's packages, no model, no
training. A filter that needs more (other functions of the file, imported helpers) is reported as a
ConfigError naming what is missing, never guessed. torchao's `_auto_filter_for_recipe(...)` passed as the
filter is torchao's real function (`module_rules.torchao_auto_filter`), when the name it is called by is
torchao's (`framework_calls.check_framework_name`).

Either way, what is read is what the framework calls: the name passed is followed to the one module-level
`def` or `name = lambda ...` that binds it, and each constant the function reads to its one assignment
(`module_scope.ModuleScope`, `filter_eval.module_constant`); a name bound twice (a later def, lambda, import,
del, a binding in an if / try / for / with block or in a function declaring it global), a constant changed in
place, or a file reaching its names through `globals()` is refused with the construct and its line.
"""

from __future__ import annotations

import ast
import builtins
from typing import Any

from torch import nn

from fp8advisor.errors import ConfigError, describe_error, quote
from fp8advisor.frameworks.config_record import recipe_named, string_list
from fp8advisor.frameworks.filter_eval import FilterEvaluator, module_constant
from fp8advisor.frameworks.filter_language import Refused, Unsettled, refusal_error
from fp8advisor.frameworks.framework_calls import call_argument, check_arguments, check_framework_name
from fp8advisor.frameworks.module_rules import Predicate, torchao_auto_filter
from fp8advisor.frameworks.module_scope import ModuleScope, import_origin, scope_name
from fp8advisor.frameworks.python_file import (
    call_name,
    frozen,
    literal_value,
    required_literal,
    resolve_name,
)

#: The builtins a filter function may use: enough for name and shape tests, nothing that reaches outside.
_FILTER_BUILTINS = {
    name: getattr(builtins, name)
    for name in (
        "isinstance",
        "issubclass",
        "any",
        "all",
        "len",
        "set",
        "frozenset",
        "tuple",
        "list",
        "dict",
        "str",
        "int",
        "bool",
        "getattr",
        "hasattr",
        "min",
        "max",
        "sorted",
        "range",
        "enumerate",
        "zip",
        "reversed",
        "abs",
        "ValueError",
        "TypeError",
        "KeyError",
        "AttributeError",
    )
}


def read_filter_function(
    node: ast.expr, scope: ModuleScope, *, trust_config: bool
) -> tuple[Predicate, str, tuple[str, ...] | None]:
    """The filter the framework would call: evaluated from its syntax, or (`trust_config`) compiled alone and
    run; see the module docstring."""
    path = scope.path
    if isinstance(node, ast.Call) and call_name(node) == "_auto_filter_for_recipe":
        check_arguments(node, path, "_auto_filter_for_recipe", 2)
        recipe_node = call_argument(node, 0, "recipe")
        fqns_node = call_argument(node, 1, "filter_fqns")
        recipe = recipe_named(_argument(recipe_node, scope, "the recipe"), path, "_auto_filter_for_recipe")
        entries = string_list(
            _argument(fqns_node, scope, "filter_fqns") if fqns_node else [], path, "filter_fqns"
        )
        check_framework_name(node.func, scope, "torchao", "_auto_filter_for_recipe")
        return (
            torchao_auto_filter(recipe, entries),
            f"torchao _auto_filter_for_recipe({recipe.value!r}) + substring {list(entries)}",
            entries,
        )
    if isinstance(node, ast.Name):
        node = _defined_function(node, scope)
    if isinstance(node, ast.Lambda):
        name = "_fp8advisor_filter"
        target = ast.copy_location(ast.Name(id=name, ctx=ast.Store()), node)
        definition: ast.stmt = ast.copy_location(ast.Assign(targets=[target], value=node), node)
        function_node: ast.FunctionDef | ast.Lambda = node
    elif isinstance(node, ast.FunctionDef):
        name, definition, function_node = node.name, node, node
    else:
        raise ConfigError(
            f"cannot read the module filter {ast.unparse(node)}",
            location=f"{path}:{node.lineno}",
            hint="pass a top-level function or a lambda as module_filter_fn / module_filter_func",
        )
    entries = _literal_entries(function_node, scope)
    shown = name if name != "_fp8advisor_filter" else "lambda"
    if not trust_config:
        evaluated = FilterEvaluator(function_node, scope)
        return evaluated, f"Python filter {shown}() (line {function_node.lineno})", entries
    namespace = _filter_namespace(function_node, scope)
    module = ast.fix_missing_locations(ast.Module(body=[definition], type_ignores=[]))
    try:
        code = compile(module, str(path), "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        raise ConfigError(
            f"cannot compile the filter function: {describe_error(error)}",
            location=f"{path}:{function_node.lineno}",
        ) from None
    try:
        exec(
            code, namespace
        )  # only the filter definition, only with --trust-config: see the module docstring
    except Exception as error:  # a default argument that raises: {("a", ["b"])}
        raise ConfigError(
            f"the filter function's definition raised {describe_error(error)}",
            location=f"{path}:{function_node.lineno}",
            hint="the filter may use only its arguments, literal module-level constants, torch and nn",
        ) from None
    function = namespace[name]

    def decides(module: nn.Module, fqn: str) -> bool:
        try:
            return bool(function(module, fqn))
        except Exception as error:
            raise ConfigError(
                f"the filter function raised on {quote(fqn)}: {describe_error(error)}",
                location=f"{path}:{function_node.lineno}",
                hint="the filter may use only its arguments, literal module-level constants, torch and nn",
            ) from error

    return decides, f"Python filter {shown}() (line {function_node.lineno}), run (--trust-config)", entries


def _defined_function(node: ast.Name, scope: ModuleScope) -> ast.FunctionDef | ast.Lambda:
    """The `def` or lambda the name passed as the filter stands for when the framework calls it: its one
    module-level binding, which nothing else in the file uses except by calling it."""
    name, path = node.id, scope.path
    home = scope.home(node)
    if home is not scope.tree:
        raise ConfigError(
            f"the filter function {name} is a local name of {scope_name(home)}: verify reads module-level "
            "filter functions only",
            location=f"{path}:{node.lineno}",
            hint="define the filter as a top-level `def` in the same file so that it can be checked alone",
        )
    try:
        binding = scope.settled_binding(name, f"the filter function `{name}`", read=node, dynamic=False)
        if binding is None:
            raise ConfigError(
                f"the filter function {name} is not defined at module level in {path.name}",
                location=f"{path}:{node.lineno}",
                hint="define the filter as a top-level `def` in the same file so that it can be checked "
                "alone",
            )
        statement = binding.statement
        if isinstance(statement, ast.FunctionDef):
            function: ast.FunctionDef | ast.Lambda = statement
        elif (
            isinstance(statement, (ast.Assign, ast.AnnAssign))
            and isinstance(statement.value, ast.Lambda)
            and all(isinstance(t, ast.Name) for t in _targets(statement))
        ):
            function = statement.value
        else:
            raise ConfigError(
                f"the filter function {name} is bound by {binding.describe()}: not a def or a lambda "
                "this tool can read",
                location=f"{path}:{binding.line}",
                hint="define the filter as a top-level `def` in the same file so that it can be checked "
                "alone",
            )
        scope.check_no_dynamic(f"the filter function `{name}`", function)
        scope.check_reads_only(name, function, exempt=node)  # `f.__code__ = ...` would change it
    except Unsettled as unsettled:
        raise refusal_error(unsettled, path, node.lineno) from None
    return function


def _targets(statement: ast.Assign | ast.AnnAssign) -> list[ast.expr]:
    return statement.targets if isinstance(statement, ast.Assign) else [statement.target]


def _argument(node: ast.expr | None, scope: ModuleScope, what: str) -> Any:
    """A literal argument, written in the call or as a module-level constant (`filter_fqns=SKIP`)."""
    if node is None:
        return None
    if not isinstance(node, ast.Name):
        return required_literal(node, scope.path, what)
    value = required_literal(resolve_name(node, scope, what), scope.path, what)
    if not frozen(value):
        try:
            scope.check_reads_only(node.id, None, exempt=node)
        except Unsettled as unsettled:
            raise refusal_error(unsettled, scope.path, node.lineno) from None
    return value


#: Names `_filter_namespace` supplies itself, and the module each must be in the file for that to be true.
_SUPPLIED_MODULES = {"torch": "torch", "nn": "torch.nn"}


def _filter_namespace(function_node: ast.AST, scope: ModuleScope) -> dict[str, Any]:
    """Builtins, torch and nn, and the literal module-level constants the function names: each what it is
    when the framework calls the function (or a ConfigError)."""
    import torch

    path = scope.path
    namespace: dict[str, Any] = {"__builtins__": dict(_FILTER_BUILTINS), "torch": torch, "nn": nn}
    local_names = _bound_names(function_node)
    wanted: dict[str, ast.Name] = {}
    for node in ast.walk(function_node):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in local_names:
            wanted.setdefault(node.id, node)
    missing = []
    for name, node in sorted(wanted.items()):
        try:
            if name in _SUPPLIED_MODULES or name in _FILTER_BUILTINS:
                binding = scope.settled_binding(name, f"the name `{name}`", read=node, allowed=function_node)
                expected = _SUPPLIED_MODULES.get(name)
                if binding is None and expected is None:
                    continue  # a builtin the file does not rebind
                if binding is None:
                    missing.append(name)  # torch or nn, not imported by the file: the framework's NameError
                    continue
                if expected is not None and import_origin(binding.statement, name) == expected:
                    scope.check_not_patched("torch")
                    continue
                raise Unsettled(binding.node, f"the name `{name}` (the file binds it: {binding.describe()})")
            namespace[name] = module_constant(scope, node, function_node)
        except Unsettled as unsettled:
            raise refusal_error(unsettled, path, node.lineno) from None
        except Refused:
            missing.append(name)
    if missing:
        raise ConfigError(
            "the filter function uses names this tool cannot supply without running the file: "
            f"{', '.join(missing)}",
            location=f"{path}:{getattr(function_node, 'lineno', '?')}",
            hint="a filter checked by verify may use its arguments, literal constants of the same file, "
            "torch and nn",
        )
    return namespace


def _bound_names(function_node: ast.AST) -> set[str]:
    """Parameters and names assigned inside the function (loop variables, comprehension targets, ...)."""
    bound: set[str] = set()
    for node in ast.walk(function_node):
        if isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return bound


def _literal_entries(function_node: ast.AST, scope: ModuleScope) -> tuple[str, ...] | None:
    """The strings a filter tests names against, when they are one literal (to name unused entries): a
    constant of the file (its one binding) or a display in the function. Anything unclear: None."""
    collections: list[Any] = []
    for node in ast.walk(function_node):
        value: Any = None
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            bindings = scope.bindings(node.id) if scope.home(node) is scope.tree else []
            statement = bindings[0].statement if len(bindings) == 1 else None
            if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
                value = literal_value(statement.value)
        elif isinstance(node, (ast.Set, ast.List, ast.Tuple)):
            value = literal_value(node)
        if (
            isinstance(value, (set, frozenset, list, tuple))
            and value
            and all(isinstance(v, str) for v in value)
        ):
            collections.append(value)
    if len(collections) == 1:
        return tuple(sorted(collections[0]))
    return None


__all__ = ["read_filter_function"]
