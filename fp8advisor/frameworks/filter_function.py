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
filter is torchao's real function (`module_rules.torchao_auto_filter`).
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path
from typing import Any

from torch import nn

from fp8advisor.errors import ConfigError
from fp8advisor.frameworks.config_record import recipe_named, string_list
from fp8advisor.frameworks.filter_eval import FilterEvaluator
from fp8advisor.frameworks.module_rules import Predicate, torchao_auto_filter
from fp8advisor.frameworks.python_file import (
    NOT_LITERAL,
    call_name,
    keyword_value,
    literal_value,
    module_assignments,
    required_literal,
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
    node: ast.expr, tree: ast.Module, path: Path, *, trust_config: bool
) -> tuple[Predicate, str, tuple[str, ...] | None]:
    """The filter the framework would call: evaluated from its syntax, or (`trust_config`) compiled alone and
    run; see the module docstring."""
    if isinstance(node, ast.Call) and call_name(node) == "_auto_filter_for_recipe":
        recipe_node = node.args[0] if node.args else keyword_value(node, "recipe")
        fqns_node = node.args[1] if len(node.args) > 1 else keyword_value(node, "filter_fqns")
        recipe = recipe_named(
            required_literal(recipe_node, path, "the recipe"), path, "_auto_filter_for_recipe"
        )
        entries = string_list(
            required_literal(fqns_node, path, "filter_fqns") if fqns_node else [], path, "filter_fqns"
        )
        return (
            torchao_auto_filter(recipe, entries),
            f"torchao _auto_filter_for_recipe({recipe.value!r}) + substring {list(entries)}",
            entries,
        )
    if isinstance(node, ast.Lambda):
        target = ast.copy_location(ast.Name(id="_fp8advisor_filter", ctx=ast.Store()), node)
        definition: ast.stmt = ast.copy_location(ast.Assign(targets=[target], value=node), node)
        name = "_fp8advisor_filter"
        function_node: ast.FunctionDef | ast.Lambda = node
    elif isinstance(node, ast.Name):
        name = node.id
        definitions = [s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == name]
        if not definitions:
            assigned = module_assignments(tree).get(name)
            if isinstance(assigned, ast.Lambda):
                return read_filter_function(assigned, tree, path, trust_config=trust_config)
            raise ConfigError(
                f"the filter function {name} is not defined at module level in {path.name}",
                location=str(path),
                hint="define the filter as a top-level `def` in the same file so that it can be checked "
                "alone",
            )
        definition = definitions[-1]
        function_node = definition
    else:
        raise ConfigError(
            f"cannot read the module filter {ast.unparse(node)}",
            location=f"{path}:{node.lineno}",
            hint="pass a top-level function or a lambda as module_filter_fn / module_filter_func",
        )
    entries = _literal_entries(function_node, tree)
    shown = name if name != "_fp8advisor_filter" else "lambda"
    if not trust_config:
        evaluated = FilterEvaluator(function_node, tree, path)
        return evaluated, f"Python filter {shown}() (line {function_node.lineno})", entries
    namespace = _filter_namespace(function_node, tree, path)
    module = ast.fix_missing_locations(ast.Module(body=[definition], type_ignores=[]))
    exec(
        compile(module, str(path), "exec"), namespace
    )  # only the filter definition, and only with --trust-config: see the module docstring
    function = namespace[name]

    def decides(module: nn.Module, fqn: str) -> bool:
        try:
            return bool(function(module, fqn))
        except Exception as error:
            raise ConfigError(
                f"the filter function raised on {fqn!r}: {type(error).__name__}: {error}",
                location=f"{path}:{function_node.lineno}",
                hint="the filter may use only its arguments, literal module-level constants, torch and nn",
            ) from error

    return decides, f"Python filter {shown}() (line {function_node.lineno}), run (--trust-config)", entries


def _filter_namespace(function_node: ast.AST, tree: ast.Module, path: Path) -> dict[str, Any]:
    """Builtins, torch and nn, and the literal module-level constants the function names."""
    import torch

    namespace: dict[str, Any] = {"__builtins__": dict(_FILTER_BUILTINS), "torch": torch, "nn": nn}
    assignments = module_assignments(tree)
    local_names = _bound_names(function_node)
    wanted = {
        n.id for n in ast.walk(function_node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    }
    missing = []
    for name in sorted(wanted - local_names - set(namespace) - set(_FILTER_BUILTINS)):
        value = assignments.get(name)
        if value is None:
            missing.append(name)
            continue
        constant = literal_value(value)
        if constant is NOT_LITERAL:
            raise ConfigError(
                f"the filter uses {name}, which is not a literal constant: {ast.unparse(value)[:80]}",
                location=f"{path}:{value.lineno}",
                hint="write the constant as a literal (a set, list or tuple of strings) so it can be "
                "read alone",
            )
        namespace[name] = constant
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


def _literal_entries(function_node: ast.AST, tree: ast.Module) -> tuple[str, ...] | None:
    """The strings a filter tests names against, when they are one literal (to name unused entries)."""
    assignments = module_assignments(tree)
    collections: list[Any] = []
    for node in ast.walk(function_node):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in assignments:
            value = literal_value(assignments[node.id])
            if (
                isinstance(value, (set, frozenset, list, tuple))
                and value
                and all(isinstance(v, str) for v in value)
            ):
                collections.append(value)
        elif isinstance(node, (ast.Set, ast.List, ast.Tuple)):
            try:
                value = ast.literal_eval(node)
            except ValueError:
                continue
            if value and all(isinstance(v, str) for v in value):
                collections.append(value)
    if len(collections) == 1:
        return tuple(sorted(collections[0]))
    return None


__all__ = ["read_filter_function"]
