"""The Python a filter function may be written in for `filter_eval.FilterEvaluator` to evaluate it without
running it: the constructs, names, attributes and builtins it evaluates, and the words for those it refuses.

What is evaluated:

- names: the function's arguments (the module and its FQN), its locals (`name = ...`, `for name in ...`),
  and module-level constants of the same file that are literals (strings, numbers, lists, tuples and sets of
  them, `frozenset({...})`), assigned once and never changed;
- statements: `return`, `if`/`elif`/`else`, `for NAME in ...` with `break`/`continue`, `name = ...`, `pass`,
  a docstring;
- expressions: literals; `and`, `or`, `not`, `x if c else y`; comparisons (`==`, `<`, `in`, `not in`,
  `is None`, ...); `+ - * / // %` on numbers and `+` on strings; subscripts and slices of strings and tuples;
  list, tuple and set displays and comprehensions; the builtins `any`, `all`, `len`, `min`, `max`, `sorted`,
  `bool`, `set`, `frozenset`, `tuple`, `list`; `isinstance(module, nn.Linear)` (or `torch.nn.Linear`, as the
  file imports it); `module.in_features`, `module.out_features`, `module.bias`, `module.weight.shape`; the
  string methods `startswith`, `endswith`, `split`, `rsplit`, `lower`, `upper`, `strip`.

Anything else is `Refused`: the evaluator turns it into the ConfigError that names the construct (`describe`),
its line, and `--trust-config`.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

#: The classes a filter may test with isinstance, by the dotted name the file's imports give them.
ISINSTANCE_CLASSES: dict[str, type] = {
    "torch.nn.Linear": nn.Linear,
    "torch.nn.modules.linear.Linear": nn.Linear,
    "torch.nn.Module": nn.Module,
}


#: Attributes read on the module (an nn.Module) and on its weight (a tensor).
MODULE_ATTRIBUTES = frozenset({"in_features", "out_features", "weight", "bias"})
TENSOR_ATTRIBUTES = frozenset({"shape"})


#: Methods called on a string value (never on anything else).
STRING_METHODS = frozenset({"startswith", "endswith", "split", "rsplit", "lower", "upper", "strip"})


#: The builtins a filter may call; each is given plain values only.
BUILTIN_FUNCTIONS: dict[str, Callable] = {
    "any": any,
    "all": all,
    "len": len,
    "min": min,
    "max": max,
    "sorted": sorted,
    "bool": bool,
    "set": set,
    "frozenset": frozenset,
    "tuple": tuple,
    "list": list,
}


#: Types of the values the evaluator computes with (torch.Size: `module.weight.shape`).
PLAIN_TYPES = (str, int, float, bool, type(None), tuple, list, set, frozenset, torch.Size)
NUMBER_TYPES = (int, float)  # bool is an int, as in Python

#: The comparisons and the arithmetic the evaluator computes, by operator node type.
COMPARISONS: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
}
ARITHMETIC: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


#: Words for the constructs the evaluator refuses, by syntax node type.
CONSTRUCT_WORDS: dict[type, str] = {
    ast.While: "a while loop",
    ast.Try: "a try statement",
    ast.With: "a with statement",
    ast.Raise: "a raise statement",
    ast.Assert: "an assert statement",
    ast.Import: "an import",
    ast.ImportFrom: "an import",
    ast.Global: "a global statement",
    ast.Nonlocal: "a nonlocal statement",
    ast.Delete: "a del statement",
    ast.AugAssign: "an augmented assignment",
    ast.FunctionDef: "a nested function",
    ast.AsyncFunctionDef: "a nested function",
    ast.ClassDef: "a class definition",
    ast.Lambda: "a lambda inside the filter",
    ast.JoinedStr: "an f-string",
    ast.Dict: "a dict",
    ast.DictComp: "a dict comprehension",
    ast.NamedExpr: "an assignment expression",
    ast.Starred: "a starred expression",
    ast.Await: "an await",
    ast.Yield: "a yield",
    ast.YieldFrom: "a yield",
    ast.Expr: "an expression statement",
}

#: A filter function: a `def` or a `lambda`.
Function = ast.FunctionDef | ast.Lambda


class Refused(Exception):
    """A construct the evaluator does not evaluate (becomes the ConfigError that names --trust-config)."""

    def __init__(self, node: ast.AST, what: str):
        super().__init__(what)
        self.node = node
        self.what = what


def snippet(node: ast.AST) -> str:
    """The source of `node` on one line, cut to 60 characters: how a message quotes a construct."""
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= 60 else text[:57] + "..."


def describe(node: ast.AST) -> str:
    """A refused construct in words, with its source: "a while loop `while True: ...`"."""
    if isinstance(node, ast.Call):
        return f"the call `{snippet(node)}`"
    words = CONSTRUCT_WORDS.get(type(node), type(node).__name__)
    return f"{words} `{snippet(node)}`"


__all__ = [
    "ARITHMETIC",
    "BUILTIN_FUNCTIONS",
    "COMPARISONS",
    "CONSTRUCT_WORDS",
    "ISINSTANCE_CLASSES",
    "MODULE_ATTRIBUTES",
    "NUMBER_TYPES",
    "PLAIN_TYPES",
    "STRING_METHODS",
    "TENSOR_ATTRIBUTES",
    "Function",
    "Refused",
    "describe",
    "snippet",
]
