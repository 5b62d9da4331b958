"""Which constructs of a Python file bind each name, and where the file uses it: what a filter function (and
each module-level name it reads) is when the framework calls it, told from the syntax tree, never run.

Python looks a module-level name up when the code that reads it runs: the framework calls the function bound
to `module_filter_fn` THEN, which may not be the `def` written first (a later lambda, an import, a `def` in an
`if`, a binding in a function that declares the name global all replace it), and a constant it reads holds
whatever the file did to it by then (`SKIP.append(...)`, `ALIAS = SKIP; ALIAS.append(...)`, `f(SKIP)`). So
`ModuleScope` answers, for the whole file and every scope in it:

- `bindings(name)`: every construct that binds `name` at module level, in file order: def, class, an
  assignment (plain, chained, of a tuple, augmented, annotated), an import (a star import binds every name),
  `del`, the target of for / with / except ... as / match, an assignment expression (also one in a
  comprehension at module level), and any of these inside a function or class that declares the name
  `global`; at any depth of if / try / for / while / with / match blocks.
- `home(node)`: the scope a name means there, resolved as Python resolves it (a parameter, a local, a name
  a comprehension binds; class bodies are skipped by the functions inside them; `global` and `nonlocal`
  respected): the module (`tree`) or a function, class or comprehension node.
- `uses(name)`: every use of the module-level `name` (a load in a class body of a name the class also
  binds may read the module's, and counts).
- `check_no_dynamic()`: refuses the first construct that reaches a namespace by a string or an object the
  syntax does not name (`globals()`, `vars()`, `exec`, `eval`, `__import__`, `__dict__`, `__globals__`,
  frames, `sys.modules`, imports of `builtins`, `__main__`, `importlib`, `inspect` or `ctypes`): after one,
  no binding in the file can be trusted. These are the ways known to us, not a proof (a file importing
  itself under its own name is not caught: its name is also a package's, as for `accelerate.py`).
- `check_not_patched(package)`: refuses a file that sets or deletes an attribute of a module it imports from
  a package (`nn.Linear = MyLinear`: `isinstance(module, nn.Linear)` would test another class;
  `torchao.float8.convert_to_float8_training = ...`: the framework call would call another function).

The policy (a name read only when bound once, by a top-level statement, before an import-time use; a
mutable constant, or the filter function itself, only when every use outside the filter is a read that cannot
change it) is applied by `settled_binding` and `check_reads_only`, to the filter function and what it reads
(`filter_function`) and to every framework name and call a reader reads (`framework_calls`); they raise
`filter_language.Unsettled`, which the readers turn into a ConfigError (`filter_language.refusal_error`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from fp8advisor.frameworks.filter_language import Unsettled, snippet

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)

#: Names that reach a namespace by a string.
_DYNAMIC_NAMES = frozenset(
    {"globals", "vars", "locals", "exec", "eval", "__import__", "__builtins__", "breakpoint"}
)
#: Attributes that reach a namespace, a frame or every object.
_DYNAMIC_ATTRIBUTES = frozenset(
    {
        "__dict__",
        "__globals__",
        "__builtins__",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_back",
        "_getframe",
        "currentframe",
        "get_referrers",
        "get_referents",
        "get_objects",
    }
)
#: Modules whose import reaches the file's own namespace or the builtins.
_DYNAMIC_MODULES = frozenset({"builtins", "__main__", "importlib", "inspect", "ctypes"})

#: Methods that change a list, a set or a dict in place (for the words of a refusal).
_MUTATING_METHODS = frozenset(
    {
        "append",
        "extend",
        "insert",
        "remove",
        "pop",
        "popitem",
        "clear",
        "add",
        "discard",
        "update",
        "sort",
        "reverse",
        "setdefault",
        "__setitem__",
        "__delitem__",
        "__iadd__",
        "__ior__",
    }
)

#: The keywords the frameworks take a filter function by, and their calls: passing it there changes nothing.
_FILTER_KEYWORDS = frozenset({"module_filter_fn", "filter_fn", "module_filter_func"})
_FRAMEWORK_CALLS = frozenset({"convert_to_float8_training", "quantize_", "AORecipeKwargs"})

#: The words for a statement that binds a name, by its type.
_BINDING_WORDS: dict[type, str] = {
    ast.FunctionDef: "a def",
    ast.AsyncFunctionDef: "a def",
    ast.ClassDef: "a class",
    ast.Import: "an import",
    ast.ImportFrom: "an import",
    ast.Assign: "an assignment",
    ast.AugAssign: "an augmented assignment",
    ast.AnnAssign: "an assignment",
    ast.For: "a for loop",
    ast.AsyncFor: "a for loop",
    ast.With: "a with statement",
    ast.AsyncWith: "a with statement",
    ast.Delete: "a del statement",
    ast.ExceptHandler: "an except ... as",
    ast.Match: "a match statement",
}


@dataclass(frozen=True)
class Binding:
    """One construct binding a module-level name: `node` (the def, import, or the name bound), `statement`
    (the statement it is, or is in), and whether that statement is one of the module's own, unconditional."""

    name: str
    node: ast.AST
    statement: ast.AST
    top: bool
    words: str
    where: str  # "" or " (inside the if statement at line 4)" / " (in setup(), declared global)"

    @property
    def line(self) -> int:
        return getattr(self.node, "lineno", 0) or getattr(self.statement, "lineno", 0)

    def describe(self) -> str:
        return f"{self.words} `{snippet(self.statement)}` at line {self.line}{self.where}"


class ModuleScope:
    """The scopes and bindings of one parsed file (see the module docstring)."""

    def __init__(self, tree: ast.Module, path: Path):
        self.tree = tree
        self.path = path
        self._parent: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self._parent[child] = node
        self._scope: dict[ast.AST, ast.AST] = {}  # each node -> the scope it runs in (tree: the module)
        pending: list[tuple[ast.AST, ast.AST]] = [(tree, tree)]
        while pending:
            node, scope = pending.pop()
            self._scope[node] = scope
            pending.extend(_children(node, scope))
        self._bound: dict[ast.AST, dict[str, list[ast.AST]]] = {}
        self._global: dict[ast.AST, set[str]] = {}
        self._nonlocal: dict[ast.AST, set[str]] = {}
        self._stars: list[ast.ImportFrom] = []
        for node, scope in self._scope.items():
            self._collect(node, scope)
        self._dynamic = self._find_dynamic()

    # --- what binds what, where --------------------------------------------------------------------------

    def _bind(self, scope: ast.AST, name: str, node: ast.AST) -> None:
        self._bound.setdefault(scope, {}).setdefault(name, []).append(node)

    def _collect(self, node: ast.AST, scope: ast.AST) -> None:
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            parent = self._parent.get(node)
            if isinstance(parent, ast.AnnAssign) and parent.value is None:
                return  # `x: int` alone binds nothing
            if isinstance(parent, ast.NamedExpr):  # binds in the scope around its comprehensions
                while isinstance(scope, _COMPREHENSIONS):
                    scope = self._scope[scope]
            self._bind(scope, node.id, node)
        elif isinstance(node, ast.arg):
            self._bind(scope, node.arg, node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self._bind(scope, node.name, node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    self._stars.append(node)  # type: ignore[arg-type]
                else:
                    self._bind(scope, (alias.asname or alias.name).split(".")[0], node)
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            self._bind(scope, node.name, node)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            self._bind(scope, node.rest, node)
        elif isinstance(node, ast.Global):
            self._global.setdefault(scope, set()).update(node.names)
        elif isinstance(node, ast.Nonlocal):
            self._nonlocal.setdefault(scope, set()).update(node.names)

    def home(self, node: ast.AST, name: str | None = None) -> ast.AST:
        """The scope `name` (by default `node`'s own name) means where `node` is: `tree` for the module (or a
        builtin), else the function, class or comprehension that binds it."""
        name = name if name is not None else getattr(node, "id", None)
        current, first = self._scope.get(node, self.tree), True
        while current is not self.tree:
            bound = name in self._bound.get(current, {})
            if name in self._global.get(current, ()):
                return self.tree
            if name in self._nonlocal.get(current, ()):
                pass  # an enclosing function's
            elif isinstance(current, ast.ClassDef):
                if first and bound:
                    return current
            elif bound:
                return current
            current, first = self._scope[current], False
        return self.tree

    def bindings(self, name: str, scope: ast.AST | None = None) -> list[Binding]:
        """Every construct that binds `name` in `scope` (by default the module), in file order; at module
        level star imports bind every name, and a function's parameter binds it there."""
        scope = self.tree if scope is None else scope
        if scope is self.tree:
            nodes = [
                node
                for names in self._bound.values()
                for node in names.get(name, [])
                if not isinstance(node, ast.arg) and self.home(node, name) is self.tree
            ]
            nodes.extend(self._stars)
        else:
            nodes = list(self._bound.get(scope, {}).get(name, []))
        nodes.sort(key=lambda node: (node.lineno, node.col_offset))
        return [self._binding(name, node, scope) for node in dict.fromkeys(nodes)]

    def _binding(self, name: str, node: ast.AST, scope: ast.AST) -> Binding:
        statement = self.statement(node)
        if isinstance(node, (ast.ExceptHandler, ast.arg)):
            statement = node
        top = self.top_statement(node) if scope is self.tree else self._body_statement(node, scope)
        if isinstance(node, ast.arg):
            words, where = "a parameter", f" (of {_scope_name(scope)})"
            return Binding(name, node, statement, False, words, where)
        words = _BINDING_WORDS.get(type(statement), "a binding")
        if isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
            words = "a star import (it may bind any name)"
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Del):
            words = "a del statement"
        elif isinstance(self._parent.get(node), ast.NamedExpr):
            words = "an assignment expression"
        where = ""
        function = self.enclosing_function(node) if scope is self.tree else None
        if function is not None:
            where = f" (in {_scope_name(function)}, which declares it global)"
        elif top is not statement:
            where = f" (inside the {_block_words(top)} at line {top.lineno})"
        return Binding(name, node, statement, top is statement and function is None, words, where)

    def uses(self, name: str) -> list[ast.Name]:
        """Every use (load) of the module-level `name`, in file order."""
        found = []
        for node, scope in self._scope.items():
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
                home = self.home(node)
                if home is self.tree or (isinstance(home, ast.ClassDef) and home is scope):
                    found.append(node)
        return sorted(found, key=lambda node: (node.lineno, node.col_offset))

    # --- where a node is --------------------------------------------------------------------------------

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self._parent.get(node)

    def statement(self, node: ast.AST) -> ast.AST:
        """The innermost statement that is, or holds, `node`."""
        while not isinstance(node, ast.stmt) and node in self._parent:
            node = self._parent[node]
        return node

    def top_statement(self, node: ast.AST) -> ast.AST:
        """The statement of the module's own body that is, or holds, `node`."""
        while self._parent.get(node) is not self.tree and node in self._parent:
            node = self._parent[node]
        return node

    def _body_statement(self, node: ast.AST, scope: ast.AST) -> ast.AST:
        """The statement of `scope`'s own body that is, or holds, `node`."""
        body = scope.body if isinstance(getattr(scope, "body", None), list) else []
        while node in self._parent and not any(node is statement for statement in body):
            node = self._parent[node]
        return node

    def enclosing_function(self, node: ast.AST) -> ast.AST | None:
        """The innermost function, lambda or class whose body holds `node`; None at module level."""
        scope = self._scope.get(node, self.tree)
        while isinstance(scope, _COMPREHENSIONS):
            scope = self._scope[scope]
        return None if scope is self.tree else scope

    def runs_at_import(self, node: ast.AST) -> bool:
        """Whether `node` runs when the file is imported: at module level or in a class body, not in a
        function or lambda."""
        scope = self._scope.get(node, self.tree)
        while scope is not self.tree:
            if isinstance(scope, _FUNCTIONS):
                return False
            scope = self._scope[scope]
        return True

    def inside(self, node: ast.AST, outer: ast.AST) -> bool:
        while node is not outer and node in self._parent:
            node = self._parent[node]
        return node is outer

    # --- namespaces reached by a string -------------------------------------------------------------------

    def _find_dynamic(self) -> list[ast.AST]:
        systems = {
            (alias.asname or alias.name)
            for node in self._scope
            if isinstance(node, ast.Import)
            for alias in node.names
            if alias.name == "sys"
        }
        found = []
        for node in self._scope:
            parent = self._parent.get(node)
            if isinstance(node, ast.Name) and node.id in _DYNAMIC_NAMES:
                if node.id != "vars" or not (
                    isinstance(parent, ast.Call) and parent.func is node and parent.args
                ):
                    found.append(node)  # `vars(args)` reads an object's attributes; `vars()` is globals()
            elif (  # getattr(sys, "mod" + "ules")
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "setattr", "delattr", "vars")
                and node.args
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id in systems
            ):
                found.append(node)
            elif isinstance(node, ast.Attribute) and (
                node.attr in _DYNAMIC_ATTRIBUTES
                or (node.attr == "modules" and isinstance(node.value, ast.Name) and node.value.id in systems)
            ):
                found.append(node)
            elif isinstance(node, ast.Import) and any(
                alias.name.split(".")[0] in _DYNAMIC_MODULES for alias in node.names
            ):
                found.append(node)
            elif isinstance(node, ast.ImportFrom) and (
                (node.module or "").split(".")[0] in _DYNAMIC_MODULES
                or (node.module == "sys" and any(a.name in ("modules", "_getframe") for a in node.names))
            ):
                found.append(node)
        return sorted(found, key=lambda node: (node.lineno, node.col_offset))

    def check_no_dynamic(self, what: str, allowed: ast.AST | None = None) -> None:
        """`Unsettled` when the file, outside `allowed` (the filter, whose own constructs the evaluator
        checks), reaches a namespace by a string or an object: no binding can be trusted then."""
        for node in self._dynamic:
            if allowed is None or not self.inside(node, allowed):
                raise Unsettled(
                    node, f"{what}, as the file reaches names by a string or an object (`{snippet(node)}`)"
                )

    # --- the policy -------------------------------------------------------------------------------------

    def settled_binding(
        self,
        name: str,
        what: str,
        read: ast.AST | None = None,
        scope: ast.AST | None = None,
        *,
        allowed: ast.AST | None = None,
        dynamic: bool = True,
    ) -> Binding | None:
        """The one statement binding `name` in `scope` (by default the module; None when nothing does: a
        builtin, or undefined); `Unsettled` when the value the code sees when it runs cannot be told:
        several bindings, one inside a block or a function, one after a use (`read`) that runs before it,
        or, at module level, a namespace reached by a string outside `allowed` (`check_no_dynamic`; not
        checked when `dynamic` is false). `what` names it ("the filter function `f`")."""
        scope = self.tree if scope is None else scope
        where = "at module level" if scope is self.tree else f"in {_scope_name(scope)}"
        if dynamic and scope is self.tree:
            self.check_no_dynamic(what, allowed)
        bindings = self.bindings(name, scope)
        if not bindings:
            return None
        if len(bindings) > 1:
            listed = "; ".join(binding.describe() for binding in bindings[:4])
            raise Unsettled(bindings[-1].node, f"{what}, bound {len(bindings)} times {where} ({listed})")
        binding = bindings[0]
        if not binding.top:
            raise Unsettled(binding.node, f"{what}, bound only by {binding.describe()}")
        runs_first = self.runs_at_import(read) if scope is self.tree else read is not None
        if read is not None and runs_first and binding.line > read.lineno:
            raise Unsettled(read, f"{what}, used at line {read.lineno} before {binding.describe()}")
        return binding

    def check_not_patched(self, package: str, what: str = "the class tested by isinstance") -> None:
        """`Unsettled` when the file sets or deletes an attribute of a module it imports from `package`
        (`nn.Linear = MyLinear`, `del torch.nn.Linear`, `setattr(nn, "Linear", ...)`): an isinstance test
        would test another class than the one named, a framework call would call another function. `what`
        names what is read from the package."""
        for node in self._scope:
            target: ast.AST | None = None
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
                target = node
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("setattr", "delattr")
                and node.args
            ):
                target = node.args[0]
            while isinstance(target, (ast.Attribute, ast.Subscript)):
                target = target.value
            if not isinstance(target, ast.Name):
                continue
            home = self.home(target)
            statements = (
                [binding.statement for binding in self.bindings(target.id)]
                if home is self.tree
                else self._bound.get(home, {}).get(target.id, [])
            )
            origins = [import_origin(statement, target.id) or "" for statement in statements]
            if any(origin == package or origin.startswith(package + ".") for origin in origins):
                shown = self.statement(node)
                raise Unsettled(node, f"{what}: the file changes {package} (`{snippet(shown)}`)")

    def check_reads_only(self, name: str, allowed: ast.AST | None, *, exempt: ast.AST | None = None) -> None:
        """`Unsettled` unless every use of the module-level `name` outside `allowed` (the filter, evaluated
        here, which changes nothing) and other than `exempt` is a read that cannot change its value:
        `x in NAME`, `x not in NAME`, `for x in NAME`, `NAME(...)` (a call of a function), or the filter
        keyword of a framework's call (`module_filter_fn=NAME`, `filter_fn=`, `module_filter_func=`)."""
        for use in self.uses(name):
            if use is exempt or (allowed is not None and self.inside(use, allowed)):
                continue
            parent = self._parent.get(use)
            if (
                isinstance(parent, ast.keyword)
                and _framework_call(self._parent.get(parent))
                and (parent.arg in _FILTER_KEYWORDS)
            ):
                continue
            if isinstance(parent, ast.Compare) and any(
                right is use and isinstance(op, (ast.In, ast.NotIn))
                for op, right in zip(parent.ops, parent.comparators, strict=True)
            ):
                continue
            if isinstance(parent, (ast.For, ast.AsyncFor, ast.comprehension)) and parent.iter is use:
                continue
            if isinstance(parent, ast.Call) and parent.func is use:
                continue
            shown = parent if parent is not None else use
            if isinstance(shown, ast.Attribute) and isinstance(self._parent.get(shown), ast.Call):
                shown = self._parent[shown]
            if _changes(shown, use):
                raise Unsettled(shown, f"a change of the constant `{name}` (`{snippet(shown)}`)")
            raise Unsettled(use, f"a use of `{name}` that may change it (`{snippet(shown)}`)")


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


def _framework_call(node: ast.AST | None) -> bool:
    """Whether `node` is a call of torchao's or accelerate's that takes a filter function."""
    if not isinstance(node, ast.Call):
        return False
    function = node.func
    name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
    return name in _FRAMEWORK_CALLS


def _changes(node: ast.AST, use: ast.Name) -> bool:
    """Whether `node` (around `use`) is one of the usual in-place changes: an item set or deleted, an
    augmented assignment, a mutating method."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.value is use and node.func.attr in _MUTATING_METHODS
    return False


def _children(node: ast.AST, scope: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """`node`'s children with the scope each runs in: a def's decorators, defaults and annotations, a
    class's bases and a comprehension's first iterable run outside; the rest inside."""
    if isinstance(node, _FUNCTIONS):
        arguments = node.args
        parameters = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
        parameters += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
        outer: list[ast.AST] = [*getattr(node, "decorator_list", []), *arguments.defaults]
        outer += [d for d in arguments.kw_defaults if d is not None]
        outer += [p.annotation for p in parameters if p.annotation is not None]
        if getattr(node, "returns", None) is not None:
            outer.append(node.returns)  # type: ignore[union-attr]
        inner: list[ast.AST] = [*parameters, *(node.body if isinstance(node.body, list) else [node.body])]
    elif isinstance(node, ast.ClassDef):
        outer, inner = [*node.decorator_list, *node.bases, *node.keywords], list(node.body)
    elif isinstance(node, _COMPREHENSIONS):
        first = node.generators[0]
        outer = [first.iter]
        inner = [first.target, *first.ifs, *node.generators[1:]]
        inner += [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
    else:
        return [(child, scope) for child in ast.iter_child_nodes(node)]
    return [(child, scope) for child in outer] + [(child, node) for child in inner]


def _scope_name(scope: ast.AST) -> str:
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"{scope.name}()"
    if isinstance(scope, ast.ClassDef):
        return f"class {scope.name}"
    return f"the lambda at line {getattr(scope, 'lineno', '?')}"


def _block_words(statement: ast.AST) -> str:
    words = {
        ast.If: "if statement",
        ast.Try: "try statement",
        getattr(ast, "TryStar", ast.Try): "try statement",  # try/except* (Python 3.11)
        ast.While: "while loop",
        ast.For: "for loop",
        ast.AsyncFor: "for loop",
        ast.With: "with statement",
        ast.AsyncWith: "with statement",
        ast.Match: "match statement",
    }
    return words.get(type(statement), "statement")


def scope_name(scope: ast.AST) -> str:
    """How a message names a function, class or lambda scope: `main()`, `class Setup`."""
    return _scope_name(scope)


__all__ = ["Binding", "ModuleScope", "import_origin", "scope_name"]
