"""A Python module filter's answers, worked out from its source without running it.

`fp8advisor verify --config train.py` must know which layers the `module_filter_fn` (torchao) or
`module_filter_func` (accelerate) of a config converts. Running that function runs the config's code: its
body, its default arguments, a lambda. So by default nothing of the file runs: `FilterEvaluator` reads the
function's syntax tree and evaluates it itself, on the few constructs real filter functions are made of, and
refuses any other construct with a ConfigError naming it and its line. `verify --trust-config` runs the
function instead (`fp8advisor.frameworks.filter_function`).

What is evaluated, and the words for what is refused, are in `fp8advisor.frameworks.filter_language`.

Values stay plain (strings, numbers, tuples, sets, `torch.Size`, None); the module and its weight are read
only through the attributes listed there. Each module-level name the function reads is what it is when the
framework calls the filter: the one statement that binds it, never changed in place
(`module_scope.ModuleScope`); a name the file binds twice, changes, or reaches by a string is refused.
Nothing the file defines is called, and an evaluation always ends, small (`filter_language.Budget`): each
call of the filter takes at most `MAX_STEPS` steps (syntax nodes, and the items a call or comparison walks),
all calls together at most `MAX_SECONDS`, no string or collection it builds exceeds `MAX_LENGTH` items and no
int `MAX_INT_BITS` bits, the values one call builds take at most `MAX_BUILT` bytes together (64 MiB; each is
charged as it is built, in `FilterEvaluator._evaluate`, so at most one value, itself bounded, passes it), and
the syntax is at most `python_file.MAX_SYNTAX_DEPTH` deep; past a bound, a ConfigError says which.
"""

from __future__ import annotations

import ast
from typing import Any

import torch
from torch import nn

from fp8advisor.errors import ConfigError
from fp8advisor.frameworks.filter_language import (
    ARITHMETIC,
    BUILTIN_FUNCTIONS,
    COMPARISONS,
    ISINSTANCE_CLASSES,
    MODULE_ATTRIBUTES,
    NUMBER_TYPES,
    PLAIN_TYPES,
    STRING_METHODS,
    TENSOR_ATTRIBUTES,
    Budget,
    Function,
    Refused,
    Unsettled,
    describe,
    refusal_error,
    snippet,
)
from fp8advisor.frameworks.module_scope import ModuleScope, import_origin, scope_name
from fp8advisor.frameworks.python_file import NOT_LITERAL, frozen, literal_error, literal_value


class _Return(Exception):
    """A `return` on its way out of the statements being run."""

    def __init__(self, value: Any):
        self.value = value


class _Break(Exception):
    """A `break` on its way out of the loop body."""


class _Continue(Exception):
    """A `continue` on its way out of the loop body."""


class FilterEvaluator:
    """`(module, fqn) -> bool` of a filter function (`def` or `lambda`), evaluated from its syntax tree.

    Construction checks the whole function and evaluates its default arguments: a construct outside the list
    in `filter_language` raises ConfigError there, before any model is built. A call that fails on a
    particular module (an index out of range, a comparison of a module with a string) raises ConfigError
    naming that module's FQN.
    """

    def __init__(self, function: Function, scope: ModuleScope):
        self.function = function
        self.path = scope.path
        self._scope = scope
        self._budget = Budget()
        self._constants: dict[str, Any] = {}
        self._classes: dict[str, type] = {}  # dotted name in the file -> class, for isinstance
        self._locals = _assigned_names(function)
        try:
            self._parameters, defaults = self._check_signature(function)
            for statement in self._body(function):
                self._check(statement, frozenset(self._parameters) | self._locals)
            self._defaults = self._bounded(lambda: [self._plain(self._evaluate(d, {}), d) for d in defaults])
        except Refused as refused:
            raise self._error(refused) from None
        except (_Break, _Continue, ConfigError):
            raise
        except Exception as error:  # a default Python refuses: {("a", ["b"])}, 1 // 0
            raise self._raised(error) from None

    # --- the answer -------------------------------------------------------------------------------------

    def __call__(self, module: nn.Module, fqn: str) -> bool:
        # The framework passes two arguments; the parameters after them take their defaults.
        required = len(self._parameters) - len(self._defaults)
        scope = dict(zip(self._parameters, [module, fqn, *self._defaults[2 - required :]], strict=True))
        try:
            if isinstance(self.function, ast.Lambda):
                body = self.function.body
                result = self._bounded(lambda: self._evaluate(body, scope))
            else:
                result = self._bounded(lambda: self._run_block(self.function.body, scope))
            return self._truth(result, self.function)
        except Refused as refused:
            raise self._error(refused, fqn) from None
        except (_Break, _Continue):  # pragma: no cover - `_check` allows them inside a loop only
            raise self._error(Refused(self.function, "break or continue outside a loop"), fqn) from None
        except Exception as error:
            raise self._raised(error, fqn) from None

    def _bounded(self, evaluation):
        """Run `evaluation` under the budget: its steps counted from 0, its time taken from what is left."""
        self._budget.start()
        try:
            return evaluation()
        finally:
            self._budget.stop()

    def _raised(self, error: Exception, fqn: str | None = None) -> ConfigError:
        """The ConfigError for an exception of the evaluation (on the layer `fqn`, or of a default)."""
        kind = type(error).__name__
        if isinstance(error, (RecursionError, MemoryError)):
            detail = "the filter is too deep or too large to evaluate"
        else:
            try:
                detail = str(error)
            except Exception:  # an exception whose text cannot be made
                detail = "(no message)"
        return ConfigError(
            f"the filter function raised on {fqn!r}: {kind}: {detail}"
            if fqn is not None
            else f"a default argument of the filter function raised {kind}: {detail}",
            location=f"{self.path}:{self.function.lineno}",
            hint="the filter may use only its arguments, literal module-level constants, and "
            "nn.Linear's in_features, out_features and weight.shape",
        )

    def _error(self, refused: Refused, fqn: str | None = None) -> ConfigError:
        return refusal_error(refused, self.path, self.function.lineno, fqn)

    # --- checking, before anything runs -----------------------------------------------------------------

    def _check_signature(self, function: Function) -> tuple[list[str], list[ast.expr]]:
        arguments = function.args
        if isinstance(function, ast.FunctionDef) and function.decorator_list:
            decorator = function.decorator_list[0]
            raise Refused(decorator, f"the decorator `@{snippet(decorator)}`")
        if arguments.vararg or arguments.kwarg or arguments.kwonlyargs:
            raise Refused(function, "a *args, **kwargs or keyword-only parameter")
        parameters = [argument.arg for argument in (*arguments.posonlyargs, *arguments.args)]
        required = len(parameters) - len(arguments.defaults)
        if required > 2 or len(parameters) < 2:
            raise Refused(
                function,
                f"a filter of {len(parameters)} parameters ({required} required): the framework "
                "passes two, the module and its FQN",
            )
        for default in arguments.defaults:
            self._check(default, frozenset())
        return parameters, list(arguments.defaults)

    def _body(self, function: Function) -> list[ast.AST]:
        return [function.body] if isinstance(function, ast.Lambda) else list(function.body)

    def _check(self, node: ast.AST, bound: frozenset[str], in_loop: bool = False) -> None:
        """Refuse `node` unless every construct in it is one the evaluator evaluates."""
        if isinstance(node, ast.stmt):
            self._check_statement(node, bound, in_loop)
        else:
            self._check_expression(node, bound)

    def _check_statement(self, node: ast.stmt, bound: frozenset[str], in_loop: bool) -> None:
        """A statement of the body: `return`, `if`, `for`, `break`/`continue` (in a loop), `pass`, one-name
        assignments, a docstring."""
        check = self._check
        if isinstance(node, ast.Return):
            if node.value is not None:
                check(node.value, bound)
        elif isinstance(node, ast.If):
            check(node.test, bound)
            for statement in (*node.body, *node.orelse):
                check(statement, bound, in_loop)
        elif isinstance(node, ast.For):
            if not isinstance(node.target, ast.Name):
                raise Refused(node, f"the loop target `{snippet(node.target)}` (write a single name)")
            check(node.iter, bound)
            for statement in (*node.body, *node.orelse):
                check(statement, bound, in_loop=True)
        elif isinstance(node, (ast.Break, ast.Continue)):
            if not in_loop:
                raise Refused(node, "break or continue outside a loop")
        elif isinstance(node, ast.Pass):
            pass
        elif isinstance(node, ast.Assign):
            if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
                raise Refused(node, f"the assignment `{snippet(node)}` (assign one name)")
            check(node.value, bound)
        elif isinstance(node, ast.AnnAssign):
            if not isinstance(node.target, ast.Name) or node.value is None:
                raise Refused(node, f"the assignment `{snippet(node)}` (assign one name)")
            check(node.value, bound)
        elif isinstance(node, ast.Expr):
            if not isinstance(node.value, ast.Constant):  # a call for its effect: nothing a filter needs
                raise Refused(node, describe(node.value))
            # a docstring, or a bare literal: nothing to evaluate
        else:
            raise Refused(node, describe(node))

    def _check_expression(self, node: ast.AST, bound: frozenset[str]) -> None:
        """An expression: literals, names, the module's attributes, calls, operators, displays, subscripts
        and comprehensions."""
        check = self._check
        if isinstance(node, ast.Constant):
            if not isinstance(node.value, (str, int, float, bool, type(None))):
                raise Refused(node, f"the literal `{snippet(node)}`")
        elif isinstance(node, ast.Name):
            self._check_name(node, bound)
        elif isinstance(node, ast.Attribute):
            if node.attr not in MODULE_ATTRIBUTES | TENSOR_ATTRIBUTES:
                raise Refused(node, f"the attribute `{snippet(node)}`")
            check(node.value, bound)
        elif isinstance(node, ast.Call):
            self._check_call(node, bound)
        elif isinstance(node, ast.BoolOp):
            for value in node.values:
                check(value, bound)
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, (ast.Not, ast.USub, ast.UAdd)):
                raise Refused(node, f"the operator in `{snippet(node)}`")
            check(node.operand, bound)
        elif isinstance(node, ast.BinOp):
            if type(node.op) not in ARITHMETIC:
                raise Refused(node, f"the operator in `{snippet(node)}`")
            check(node.left, bound)
            check(node.right, bound)
        elif isinstance(node, ast.Compare):
            for part in (node.left, *node.comparators):
                check(part, bound)
        elif isinstance(node, ast.IfExp):
            for part in (node.test, node.body, node.orelse):
                check(part, bound)
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            for element in node.elts:
                check(element, bound)
        elif isinstance(node, ast.Subscript):
            check(node.value, bound)
            check(node.slice, bound)
        elif isinstance(node, ast.Slice):
            for part in (node.lower, node.upper, node.step):
                if part is not None:
                    check(part, bound)
        elif isinstance(node, (ast.GeneratorExp, ast.ListComp, ast.SetComp)):
            self._check_comprehension(node, bound)
        else:
            raise Refused(node, describe(node))

    def _check_comprehension(
        self, node: ast.GeneratorExp | ast.ListComp | ast.SetComp, bound: frozenset[str]
    ) -> None:
        """One name per `for`, bound in the conditions and comprehensions after it and in the element."""
        check = self._check
        inner = bound
        for generator in node.generators:
            if generator.is_async or not isinstance(generator.target, ast.Name):
                target = generator.target
                raise Refused(target, f"the comprehension target `{snippet(target)}`")
            check(generator.iter, inner)
            inner = inner | {generator.target.id}
            for condition in generator.ifs:
                check(condition, inner)
        check(node.elt, inner)

    def _check_name(self, node: ast.Name, bound: frozenset[str]) -> None:
        """A local, or a module-level literal constant (its value is read now, once: `module_constant`)."""
        if node.id not in bound and node.id not in self._constants:
            self._constants[node.id] = module_constant(self._scope, node, self.function)

    def _check_call(self, node: ast.Call, bound: frozenset[str]) -> None:
        if node.keywords or any(isinstance(argument, ast.Starred) for argument in node.args):
            raise Refused(node, describe(node))
        function = node.func
        builtin = (
            function.id if isinstance(function, ast.Name) and self._is_builtin(function, bound) else None
        )
        if builtin == "isinstance" and len(node.args) == 2:
            self._check(node.args[0], bound)
            classes = node.args[1]
            for reference in classes.elts if isinstance(classes, ast.Tuple) else [classes]:
                self._check_class(reference)
            return
        if isinstance(function, ast.Attribute) and function.attr in STRING_METHODS:
            self._check(function.value, bound)
        elif builtin not in BUILTIN_FUNCTIONS:
            if isinstance(function, ast.Name) and function.id in (*BUILTIN_FUNCTIONS, "isinstance"):
                bindings = self._scope.bindings(function.id)
                if function.id not in bound and bindings:
                    raise Refused(
                        node, f"the call `{snippet(node)}` (`{function.id}` is {bindings[0].describe()})"
                    )
            raise Refused(node, describe(node))
        for argument in node.args:
            self._check(argument, bound)

    def _is_builtin(self, name: ast.Name, bound: frozenset[str]) -> bool:
        """True when `name` means Python's builtin here: neither a local nor bound by the file (and the
        file reaches no namespace by a string)."""
        if name.id in bound or self._scope.home(name) is not self._scope.tree:
            return False
        binding = self._scope.settled_binding(
            name.id, f"the name `{name.id}`", read=name, allowed=self.function
        )
        return binding is None

    def _check_class(self, reference: ast.expr) -> None:
        """`nn.Linear`, `torch.nn.Linear` or `Linear`, resolved through the file's own imports, which must
        be its only bindings of that name, and never patched (`nn.Linear = ...`)."""
        parts: list[str] = []
        node: ast.expr = reference
        while isinstance(node, ast.Attribute):
            parts.insert(0, node.attr)
            node = node.value
        origin = None
        if isinstance(node, ast.Name) and self._scope.home(node) is self._scope.tree:
            self._scope.check_no_dynamic(f"the name `{node.id}`", self.function)
            bindings = self._scope.bindings(node.id)
            origins = {import_origin(binding.statement, node.id) for binding in bindings}
            if len(origins) == 1 and all(binding.top for binding in bindings):
                origin = origins.pop()
        dotted = ".".join([origin, *parts]) if origin else None
        if dotted not in ISINSTANCE_CLASSES:
            raise Refused(
                reference,
                f"the class `{snippet(reference)}` (isinstance is evaluated for torch.nn.Linear and "
                "torch.nn.Module, as the file imports them)",
            )
        self._scope.check_not_patched("torch")
        self._classes[ast.unparse(reference)] = ISINSTANCE_CLASSES[dotted]

    # --- evaluating -------------------------------------------------------------------------------------

    def _run_block(self, statements: list[ast.stmt], scope: dict[str, Any]) -> Any:
        """Run statements; the function's return value (None when it falls off the end)."""
        try:
            for statement in statements:
                self._run(statement, scope)
        except _Return as returned:
            return returned.value
        return None

    def _run(self, node: ast.stmt, scope: dict[str, Any]) -> None:
        self._budget.step(node)
        if isinstance(node, ast.Return):
            raise _Return(None if node.value is None else self._evaluate(node.value, scope))
        if isinstance(node, ast.If):
            branch = node.body if self._truth(self._evaluate(node.test, scope), node.test) else node.orelse
            for statement in branch:
                self._run(statement, scope)
        elif isinstance(node, ast.For):
            assert isinstance(node.target, ast.Name)
            for item in self._iterable(self._evaluate(node.iter, scope), node.iter):
                scope[node.target.id] = item
                try:
                    for statement in node.body:
                        self._run(statement, scope)
                except _Continue:
                    continue
                except _Break:
                    break
            else:
                for statement in node.orelse:
                    self._run(statement, scope)
        elif isinstance(node, ast.Break):
            raise _Break
        elif isinstance(node, ast.Continue):
            raise _Continue
        elif isinstance(node, ast.Assign):
            target = node.targets[0]
            assert isinstance(target, ast.Name)
            scope[target.id] = self._evaluate(node.value, scope)
        elif isinstance(node, ast.AnnAssign):
            assert isinstance(node.target, ast.Name) and node.value is not None
            scope[node.target.id] = self._evaluate(node.value, scope)
        elif isinstance(node, (ast.Pass, ast.Expr)):
            pass  # `_check` let through only docstrings and bare literals
        else:  # pragma: no cover - `_check` refused it
            raise Refused(node, describe(node))

    def _evaluate(self, node: ast.expr, scope: dict[str, Any]) -> Any:
        """The value of `node`, charged to the budget's bytes built unless it is one that exists already (a
        literal, a name, the operand `and`/`or`/`if else` give) or a comparison's True/False."""
        value = self._value(node, scope)
        if not isinstance(node, (ast.Constant, ast.Name, ast.BoolOp, ast.IfExp, ast.Compare)):
            self._budget.built(value, node, new_items=isinstance(node, ast.Call))
        return value

    def _value(self, node: ast.expr, scope: dict[str, Any]) -> Any:
        self._budget.step(node)
        evaluate = self._evaluate
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in scope:
                return scope[node.id]
            if node.id in self._locals or node.id in self._parameters:
                raise UnboundLocalError(f"local variable {node.id!r} referenced before assignment")
            return self._constants[node.id]
        if isinstance(node, ast.Attribute):
            receiver = evaluate(node.value, scope)
            if node.attr in MODULE_ATTRIBUTES and isinstance(receiver, nn.Module):
                return getattr(receiver, node.attr)
            if node.attr in TENSOR_ATTRIBUTES and isinstance(receiver, torch.Tensor):
                return getattr(receiver, node.attr)
            raise Refused(node, f"`{snippet(node)}` on a {type(receiver).__name__}")
        if isinstance(node, ast.BoolOp):
            is_and = isinstance(node.op, ast.And)
            value = None
            for part in node.values:
                value = evaluate(part, scope)
                if self._truth(value, part) is not is_and:
                    return value
            return value
        if isinstance(node, ast.UnaryOp):
            operand = evaluate(node.operand, scope)
            if isinstance(node.op, ast.Not):
                return not self._truth(operand, node.operand)
            self._number(operand, node.operand)
            return -operand if isinstance(node.op, ast.USub) else +operand
        if isinstance(node, ast.BinOp):
            return self._arithmetic(node, evaluate(node.left, scope), evaluate(node.right, scope))
        if isinstance(node, ast.Compare):
            return self._compare(node, scope)
        if isinstance(node, ast.IfExp):
            chosen = node.body if self._truth(evaluate(node.test, scope), node.test) else node.orelse
            return evaluate(chosen, scope)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            elements = [self._plain(evaluate(element, scope), element) for element in node.elts]
            return {ast.Tuple: tuple, ast.List: list, ast.Set: set}[type(node)](elements)
        if isinstance(node, ast.Subscript):
            container = evaluate(node.value, scope)
            if not isinstance(container, (str, tuple, list)):
                raise Refused(node, f"`{snippet(node)}` on a {type(container).__name__}")
            index = evaluate(node.slice, scope)
            if not isinstance(index, (int, slice)):
                raise Refused(node.slice, f"the index `{snippet(node.slice)}`")
            if isinstance(index, slice):  # a copy: at most as long as the container (a constant may be long)
                self._budget.length(len(range(*index.indices(len(container)))), node)
            return container[index]
        if isinstance(node, ast.Slice):
            bounds = []
            for part in (node.lower, node.upper, node.step):
                value = None if part is None else evaluate(part, scope)
                if value is not None and not isinstance(value, int):
                    raise Refused(part, f"the slice bound `{snippet(part)}`")
                bounds.append(value)
            return slice(*bounds)
        if isinstance(node, (ast.GeneratorExp, ast.ListComp, ast.SetComp)):
            values: list = []
            self._comprehension(node, node.generators, scope, values)
            if isinstance(node, ast.SetComp):
                self._budget.built(values, node)  # the list the set is made from
            return set(values) if isinstance(node, ast.SetComp) else values
        if isinstance(node, ast.Call):
            return self._call(node, scope)
        raise Refused(node, describe(node))  # pragma: no cover - `_check` refused it

    def _arithmetic(self, node: ast.BinOp, left: Any, right: Any) -> Any:
        """`left <op> right` on numbers, or `+` on strings; a string or an int past the budget's bounds is
        refused before it is built."""
        if isinstance(node.op, ast.Add) and isinstance(left, str) and isinstance(right, str):
            self._budget.length(len(left) + len(right), node)
            return left + right
        self._number(left, node.left)
        self._number(right, node.right)
        if isinstance(left, int) and isinstance(right, int):  # a product has the bits of both, a sum one more
            sizes = (abs(left).bit_length(), abs(right).bit_length())
            self._budget.bits(sum(sizes) if isinstance(node.op, ast.Mult) else max(sizes) + 1, node)
        return ARITHMETIC[type(node.op)](left, right)

    def _compare(self, node: ast.Compare, scope: dict[str, Any]) -> bool:
        """A chained comparison as Python evaluates it: `a < b < c` is `a < b and b < c`, b evaluated once."""
        left, left_node = self._evaluate(node.left, scope), node.left
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = self._evaluate(comparator, scope)
            if not isinstance(op, (ast.Is, ast.IsNot)):
                self._plain(left, left_node)
                self._plain(right, comparator)
                hashed = isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (set, frozenset))
                self._budget.scan([left] if hashed else [left, right], node)
            if not COMPARISONS[type(op)](left, right):
                return False
            left, left_node = right, comparator
        return True

    def _comprehension(
        self, node, generators: list[ast.comprehension], scope: dict[str, Any], values: list
    ) -> None:
        """Append to `values` the elements of the comprehension `node` from `generators` on, within the
        budget's length."""
        if not generators:
            values.append(self._plain(self._evaluate(node.elt, scope), node.elt))
            self._budget.length(len(values), node)
            return
        generator, rest = generators[0], generators[1:]
        assert isinstance(generator.target, ast.Name)
        for item in self._iterable(self._evaluate(generator.iter, scope), generator.iter):
            self._budget.step(generator)
            inner = {**scope, generator.target.id: item}
            if all(self._truth(self._evaluate(condition, inner), condition) for condition in generator.ifs):
                self._comprehension(node, rest, inner, values)

    def _call(self, node: ast.Call, scope: dict[str, Any]) -> Any:
        function = node.func
        if isinstance(function, ast.Attribute):  # a string method
            receiver = self._evaluate(function.value, scope)
            if not isinstance(receiver, str):
                raise Refused(node, f"`.{function.attr}()` on a {type(receiver).__name__}")
            arguments = [self._plain(self._evaluate(a, scope), a) for a in node.args]
            self._budget.inputs([receiver, *arguments], node)
            return getattr(receiver, function.attr)(*arguments)
        assert isinstance(function, ast.Name)
        if function.id == "isinstance":
            value = self._evaluate(node.args[0], scope)
            references = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            return isinstance(value, tuple(self._classes[ast.unparse(r)] for r in references))
        arguments = [self._plain(self._evaluate(a, scope), a) for a in node.args]
        self._budget.inputs(arguments, node)
        return BUILTIN_FUNCTIONS[function.id](*arguments)

    # --- what values may do -----------------------------------------------------------------------------

    def _plain(self, value: Any, node: ast.AST) -> Any:
        if not isinstance(value, PLAIN_TYPES):
            raise Refused(node, f"`{snippet(node)}`, a {type(value).__name__} used as a value")
        return value

    def _number(self, value: Any, node: ast.AST) -> None:
        if not isinstance(value, NUMBER_TYPES):
            raise Refused(node, f"arithmetic on `{snippet(node)}`, a {type(value).__name__}")

    def _truth(self, value: Any, node: ast.AST) -> bool:
        return bool(self._plain(value, node))

    def _iterable(self, value: Any, node: ast.AST) -> Any:
        if not isinstance(value, (str, tuple, list, set, frozenset)):
            raise Refused(node, f"a loop over `{snippet(node)}`, a {type(value).__name__}")
        return value


# ----------------------------------------------------------------------------------------------------
# The names the function reads


def module_constant(scope: ModuleScope, node: ast.Name, function: ast.AST) -> Any:
    """The value the module-level constant `node` names has when `function` (which reads it) runs: the
    literal of the one statement that binds it, when nothing can change it (a tuple, frozenset, string or
    number; a list, set or dict only when every use outside `function` is a read: `ModuleScope`).
    `Refused` when the name is no constant of the file (then `Unsettled` when its value cannot be told),
    ConfigError when its value is no literal."""
    name = node.id
    home = scope.home(node)
    if home is not scope.tree:
        raise Refused(node, f"the name `{name}` (a variable of {scope_name(home)}, not a module constant)")
    binding = scope.settled_binding(name, f"the name `{name}`", read=node, allowed=function)
    if binding is None:
        raise Refused(node, f"the name `{name}` (not an argument, a local or a constant of the file)")
    statement = binding.statement
    targets = statement.targets if isinstance(statement, ast.Assign) else [getattr(statement, "target", None)]
    value_node = getattr(statement, "value", None)
    if not isinstance(statement, (ast.Assign, ast.AnnAssign)) or value_node is None:
        raise Refused(node, f"the name `{name}` (bound by {binding.describe()}, not a literal constant)")
    if not all(isinstance(target, ast.Name) for target in targets):
        raise Refused(node, f"the name `{name}` (bound by {binding.describe()}, not a literal constant)")
    value = literal_value(value_node)
    if value is NOT_LITERAL:
        raise literal_error(value_node, scope.path, f"the filter uses {name}, which")
    if not frozen(value):
        if len(targets) > 1:  # A = B = [...]: a change through B changes A
            raise Unsettled(statement, f"the name `{name}` (bound with another name: `{snippet(statement)}`)")
        scope.check_reads_only(name, function)
    return value


# ----------------------------------------------------------------------------------------------------
# The function's own names


def _assigned_names(function: Function) -> frozenset[str]:
    """The function's locals: names its statements assign (comprehension variables stay in their own)."""
    if isinstance(function, ast.Lambda):
        return frozenset()
    names: set[str] = set()
    pending: list[ast.stmt] = list(function.body)
    while pending:
        statement = pending.pop()
        if isinstance(statement, ast.Assign):
            names.update(t.id for t in statement.targets if isinstance(t, ast.Name))
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            names.add(statement.target.id)
        elif isinstance(statement, ast.For):
            if isinstance(statement.target, ast.Name):
                names.add(statement.target.id)
            pending.extend((*statement.body, *statement.orelse))
        elif isinstance(statement, ast.If):
            pending.extend((*statement.body, *statement.orelse))
    return frozenset(names)


__all__ = ["FilterEvaluator", "module_constant"]
