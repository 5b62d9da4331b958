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
its line, and `--trust-config`. A name whose value when the filter runs cannot be told from the file (bound
twice, changed in place, reached through `globals()`: `module_scope`) is `Unsettled`, refused with or without
`--trust-config`.

Every evaluation is bounded (`Budget`, `Overrun` when a bound is passed). One evaluation (a call of the
filter on one layer, or its default arguments) takes at most `MAX_STEPS` steps: one per syntax node evaluated
and one per item a call or a comparison walks (`set(s)` over a million characters is a million steps); all
evaluations on one model take at most `MAX_SECONDS` of wall time. No string or collection it builds holds
more than `MAX_LENGTH` items (checked before building where the length is known: `+`, slices, a call's inputs;
after a string method, which may triple it), no int more than `MAX_INT_BITS` bits. Every value an expression
builds, kept or not, is charged its `sys.getsizeof` as it is built (with its items' when a call made them new:
`split`'s pieces), and all those of one evaluation take at most `MAX_BUILT` bytes (64 MiB) together
(`Budget.built`); the one value that passes that bound is built before it is charged, and being bounded by
`MAX_LENGTH` it takes at most about 90 MB (a list of a million new one-character strings): an evaluation
allocates at most about 160 MB. Real filters build a few hundred bytes per layer. The syntax itself is at
most `python_file.MAX_SYNTAX_DEPTH` deep, so the evaluator's recursion is bounded too.
"""

from __future__ import annotations

import ast
import operator
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from fp8advisor.errors import ConfigError

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


class Unsettled(Refused):
    """A name whose value when the framework calls the filter is not the one written at one place: bound
    more than once, changed in place, or reached by a string. Running the function alone (--trust-config)
    cannot tell either."""


class Overrun(Refused):
    """An evaluation that passed one of the bounds of `Budget`."""


#: The values whose length `Budget` bounds (torch.Size is a tuple).
SIZED_TYPES = (str, tuple, list, set, frozenset)

#: The bounds of an evaluation (see the module docstring).
MAX_STEPS = 1_000_000
MAX_SECONDS = 120.0
MAX_LENGTH = 1_000_000
MAX_INT_BITS = 4096
MAX_BUILT = 64 * 2**20  # bytes built by one evaluation in all; real filters build a few KB per layer


class Budget:
    """The steps, time and sizes one filter's evaluations may take: `step` once per syntax node evaluated,
    `length` and `bits` before a string or an int is built, `built` on each value built. `start` begins one
    evaluation (a call, or the default arguments): its steps and bytes built count from 0; the time is
    counted over all evaluations."""

    def __init__(self, seconds: float | None = None):
        self.seconds_left = MAX_SECONDS if seconds is None else seconds
        self.steps = 0
        self.bytes_built = 0
        self._clock_at = 0  # the step count at which the clock is read next
        self._deadline = 0.0
        self._started = 0.0

    def start(self) -> None:
        self.steps = 0
        self.bytes_built = 0
        self._clock_at = 1024
        self._started = time.monotonic()
        self._deadline = self._started + self.seconds_left

    def stop(self) -> None:
        self.seconds_left -= time.monotonic() - self._started

    def step(self, node: ast.AST) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise Overrun(node, f"it takes more than {MAX_STEPS:,} steps on one layer (at `{snippet(node)}`)")
        if self.steps >= self._clock_at:  # every 1024 steps (or more, after a `scan`)
            self._clock_at = self.steps + 1024
            if time.monotonic() > self._deadline:
                raise Overrun(node, f"it takes more than {MAX_SECONDS:.0f} s in all (at `{snippet(node)}`)")

    def length(self, length: int, node: ast.AST) -> None:
        """Refuse building a string or collection of `length` items."""
        if length > MAX_LENGTH:
            raise Overrun(node, f"it builds a value of {length:,} items or characters (at `{snippet(node)}`)")

    def inputs(self, values: list[Any], node: ast.AST) -> None:
        """Refuse the call `node` on a string or collection of more than `MAX_LENGTH` items (a constant of the
        file may be longer): what it returns is built from them, at most 3 times as long (`upper`). Its
        work is counted (`scan`)."""
        for value in values:
            if isinstance(value, SIZED_TYPES):
                self.length(len(value), node)
        self.scan(values, node)

    def scan(self, values: list[Any], node: ast.AST) -> None:
        """Count the work of `node` walking the strings and collections `values` (a call, a comparison) as a
        step per item: a node over a million items is a million steps."""
        items = sum(len(value) for value in values if isinstance(value, SIZED_TYPES))
        if items > 1:
            self.steps += items - 1
            self.step(node)

    def built(self, value: Any, node: ast.AST, *, new_items: bool = False) -> None:
        """Charge the new `value` (its `sys.getsizeof`, and its items' too when they are `new_items`: the
        pieces of `split`, the characters of `list(s)`) to this evaluation's total; refuse past
        `MAX_BUILT`."""
        size = sys.getsizeof(value)
        if isinstance(value, SIZED_TYPES):  # `s.upper()` may be 3 times as long as `s`
            self.length(len(value), node)
        if new_items and isinstance(value, (tuple, list, set, frozenset)):
            size += sum(map(sys.getsizeof, value))
        self.bytes_built += size
        if self.bytes_built > MAX_BUILT:
            raise Overrun(
                node,
                f"the values it builds take more than {MAX_BUILT / 2**20:.0f} MB in all on one layer "
                f"(at `{snippet(node)}`)",
            )

    def bits(self, bits: int, node: ast.AST) -> None:
        """Refuse computing an int of about `bits` bits."""
        if bits > MAX_INT_BITS:
            raise Overrun(node, f"it computes a number of about {bits:,} bits (at `{snippet(node)}`)")


def refusal_error(refused: Refused, path: object, line: int | None, fqn: str | None = None) -> ConfigError:
    """The ConfigError for a refusal: where (`path`, the refused node's line, else `line`), what, and what
    to do, which depends on the kind (see `Refused`, `Unsettled`, `Overrun`)."""
    on = f" (on {fqn!r})" if fqn is not None else ""
    location = f"{path}:{getattr(refused.node, 'lineno', None) or line or '?'}"
    if isinstance(refused, Unsettled):
        return ConfigError(
            f"cannot evaluate {refused.what}{on}: its value when the framework reads it cannot be "
            "told without running the whole file (--trust-config runs only the filter function: it cannot "
            "tell either)",
            location=location,
            hint="bind the filter function, each module-level name it reads and the config once, with one "
            "top-level def or assignment, and change none of them afterwards: a constant is safest as a "
            "tuple or a frozenset (a list, set or dict may be used elsewhere only by `in` and for loops)",
        )
    if isinstance(refused, Overrun):
        return ConfigError(
            f"cannot evaluate the filter function{on}: {refused.what}, more than verify evaluates",
            location=location,
            hint=f"verify evaluates at most {MAX_STEPS:,} steps per layer, {MAX_BUILT / 2**20:.0f} MB of "
            f"values built per layer and {MAX_SECONDS:.0f} s in all, values of at most {MAX_LENGTH:,} items "
            f"and numbers of {MAX_INT_BITS} bits; a real filter needs far less: simplify it, or pass "
            "--trust-config to run it",
        )
    return ConfigError(
        f"cannot evaluate {refused.what} in the filter function{on} without running the file's code: "
        "pass --trust-config to run it",
        location=location,
        hint="verify decides a Python filter without running it; it evaluates literal names and sets, "
        "fqn tests (in, ==, startswith, endswith), isinstance(module, nn.Linear) and "
        "in_features/out_features arithmetic. --trust-config runs the function as your framework "
        "will: use it only for a file you trust",
    )


def snippet(node: ast.AST) -> str:
    """The source of `node` on one line, cut to 60 characters: how a message quotes a construct."""
    try:
        text = " ".join(ast.unparse(node).split())
    except (RecursionError, MemoryError, ValueError):  # too deep to unparse: its kind only
        return f"<{type(node).__name__}, nested too deep to show>"
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
    "MAX_BUILT",
    "MAX_INT_BITS",
    "MAX_LENGTH",
    "MAX_SECONDS",
    "MAX_STEPS",
    "COMPARISONS",
    "CONSTRUCT_WORDS",
    "ISINSTANCE_CLASSES",
    "MODULE_ATTRIBUTES",
    "NUMBER_TYPES",
    "PLAIN_TYPES",
    "SIZED_TYPES",
    "STRING_METHODS",
    "TENSOR_ATTRIBUTES",
    "Budget",
    "Function",
    "Overrun",
    "Refused",
    "Unsettled",
    "describe",
    "refusal_error",
    "snippet",
]
