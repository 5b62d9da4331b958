"""Issue 25, the Python config readers: what `verify` evaluates of a torchao / accelerate filter is what the
framework calls (never a stale binding, never a constant the file changes), and so is every framework name
and call the readers read (`convert_model`, `convert_to_float8_training`, `quantize_`, `Accelerator`, the
`accelerator` the user imports, torchtitan's converter and its keywords); every evaluation and parse is
bounded, odd literals and bytes are clear ConfigErrors.

Each test tries several members of one class of defect; the guard each depends on is named in its docstring.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest
from torch import nn
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from _verify_helpers import predictor, write_tiny_model  # noqa: E402

from fp8advisor.cli import app  # noqa: E402
from fp8advisor.errors import ConfigError  # noqa: E402
from fp8advisor.frameworks import filter_language  # noqa: E402
from fp8advisor.frameworks.python_file import MAX_SYNTAX_DEPTH, parse_python  # noqa: E402
from fp8advisor.frameworks.reader import read_config  # noqa: E402
from fp8advisor.verification import verifier as verify_module  # noqa: E402

HEAD = (
    "import torch\n"
    "from torch import nn\n"
    "from torchao.float8 import Float8LinearConfig, convert_to_float8_training\n\n"
)
CALL = (
    '\nconvert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name("rowwise"), '
    "module_filter_fn=module_filter_fn)\n"
)


def torchao(tmp_path: Path, body: str, call: str = CALL, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(HEAD + textwrap.dedent(body).strip() + "\n" + call)
    return path


def linear(k: int = 64, n: int = 64) -> nn.Linear:
    return nn.Linear(k, n, bias=False, device="meta")


def refused(path: Path, *, trust_config: bool = False) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        config = read_config(path, trust_config=trust_config)
        config.decides(linear(), "blocks.0.up")  # a refusal may come on the first layer
    return caught.value


# --- class 3: the binding in force when the framework calls the filter --------------------------------------

FALSE_DEF = "def module_filter_fn(module, fqn):\n    return False\n"

#: Module-level code after (or around) `def module_filter_fn` that makes the framework call another function,
#: and what the refusal must quote of it.
REBINDINGS = [
    (FALSE_DEF + "module_filter_fn = lambda module, fqn: True", "an assignment `module_filter_fn = lambda"),
    (FALSE_DEF + "def module_filter_fn(module, fqn):\n    return True", "a def `def module_filter_fn"),
    (FALSE_DEF + "from mylib import module_filter_fn", "an import `from mylib import module_filter_fn`"),
    (FALSE_DEF + "import module_filter_fn", "an import `import module_filter_fn`"),
    (FALSE_DEF + "if True:\n    def module_filter_fn(m, f):\n        return True", "inside the if statement"),
    (
        FALSE_DEF + "try:\n    from mylib import module_filter_fn\nexcept ImportError:\n    pass",
        "try statement",
    ),
    (FALSE_DEF + "for module_filter_fn in [lambda m, f: True]:\n    pass", "a for loop"),
    (FALSE_DEF + "with make() as module_filter_fn:\n    pass", "a with statement"),
    (FALSE_DEF + "module_filter_fn, other = (lambda m, f: True), 1", "`module_filter_fn, other ="),
    (FALSE_DEF + "del module_filter_fn\nmodule_filter_fn = lambda m, f: True", "a del statement"),
    (FALSE_DEF + "module_filter_fn += 0", "an augmented assignment"),
    (FALSE_DEF + "[(module_filter_fn := lambda m, f: True) for _ in 'a']", "an assignment expression"),
    (
        FALSE_DEF + "def setup():\n    global module_filter_fn\n    module_filter_fn = lambda m, f: True",
        "in setup(), which declares it global",
    ),
    ("from mylib import *\n" + FALSE_DEF, "a star import"),
    (FALSE_DEF + "globals()['module_filter_fn'] = lambda m, f: True", "reaches names by a string"),
    (FALSE_DEF + "import sys\nsetattr(sys.modules[__name__], 'module_filter_fn', 0)", "`sys.modules`"),
    (FALSE_DEF + "vars().update(module_filter_fn=lambda m, f: True)", "`vars`"),
    (
        FALSE_DEF + "import sys as s\ngetattr(s, 'mod' + 'ules')[__name__].module_filter_fn = 0",
        "`getattr(s, 'mod",
    ),
    (FALSE_DEF + "exec('module_filter_fn = lambda m, f: True')", "`exec`"),
    (FALSE_DEF + "module_filter_fn.__code__ = (lambda m, f: True).__code__", "`module_filter_fn.__code__`"),
    (FALSE_DEF + "patch(module_filter_fn)", "`patch(module_filter_fn)`"),
]


@pytest.mark.parametrize(("source", "quoted"), REBINDINGS)
def test_a_filter_function_bound_again_is_refused_never_read_stale(tmp_path, source, quoted):
    """Guard: `ModuleScope.settled_binding` (one binding, top-level; no namespace reached by a string) and
    `check_reads_only` on the function's name. The stale `def` here says False for every layer, what the
    framework calls (the later binding) something else: reading the `def` would be a false PASS. Refused,
    in the evaluator AND with --trust-config (which runs only the def), naming the other construct, line."""
    path = torchao(tmp_path, source)
    for trust_config in (False, True):
        error = refused(path, trust_config=trust_config)
        assert quoted in error.message, error.message
        assert "cannot evaluate" in error.message and "whole file" in error.message
        assert error.location and error.location.startswith(f"{path}:")
        assert error.location != f"{path}:?"


def test_the_same_holds_for_accelerate_and_for_a_function_read_in_a_local_scope(tmp_path):
    """Guard: the same `settled_binding` for accelerate's `module_filter_func`; `ModuleScope.home` for a
    filter passed inside a function that binds a local of the same name (it is that local, not the module's
    def), and for a lambda reading a local of the enclosing function."""
    accelerate = tmp_path / "accel.py"
    accelerate.write_text(
        "from accelerate import Accelerator\nfrom accelerate.utils import AORecipeKwargs\n\n"
        "def module_filter_func(module, fqn):\n    return False\n\n"
        "accelerator = Accelerator(mixed_precision='fp8', kwargs_handlers=[AORecipeKwargs("
        "module_filter_func=module_filter_func)])\n"
        "module_filter_func = lambda module, fqn: True\n"
    )
    assert "bound 2 times at module level" in refused(accelerate).message
    local = torchao(
        tmp_path,
        FALSE_DEF + "def main():\n    module_filter_fn = lambda m, f: True\n    " + CALL.strip(),
        call="",
    )
    assert "is a local name of main()" in refused(local).message
    closure = torchao(
        tmp_path,
        "skip = ('up',)\ndef main():\n    skip = ('head',)\n"
        "    convert_to_float8_training(model, module_filter_fn=lambda m, f: f not in skip)\n",
        call="",
    )
    assert "the name `skip` (a variable of main()" in refused(closure).message
    before = torchao(
        tmp_path,
        "convert_to_float8_training(model, module_filter_fn=module_filter_fn)\n" + FALSE_DEF,
        call="",
    )
    assert "used at line 5 before a def" in refused(before, trust_config=False).message


def test_one_binding_is_still_read_and_evaluated(tmp_path):
    """What must keep working: one def (or one lambda), constants read only by `in` and for loops, a call in
    a function after the def, the config's own `C = ...` in the function that uses it."""
    path = torchao(
        tmp_path,
        "import sys\nSKIP = ['head']\nNAMES = ('a',)\nprint(NAMES, 'x' in SKIP, vars(sys.argv))\n"
        "for entry in SKIP:\n    pass\n"
        "def module_filter_fn(module, fqn):\n    return fqn not in SKIP\n\n"
        "def main():\n    C = Float8LinearConfig.from_recipe_name('tensorwise')\n"
        "    convert_to_float8_training(model, config=C, module_filter_fn=module_filter_fn)\n",
        call="",
    )
    for trust_config in (False, True):
        config = read_config(path, trust_config=trust_config)
        assert config.recipe.value == "tensorwise"
        assert [config.decides(linear(), fqn) for fqn in ("head", "up")] == [False, True]


def test_names_read_beside_the_filter_follow_the_same_rule(tmp_path):
    """Framework calls may take the filter by keyword more than once (`module_filter_fn=f`, `filter_fn=f`);
    accelerate's `mixed_precision=PRECISION` and torchao's `from_recipe_name(RECIPE)` are read through the
    one binding of the name (`python_file.resolve_name`), and refused when bound twice."""
    accelerate = (
        "from accelerate import Accelerator\nfrom accelerate.utils import AORecipeKwargs\n"
        "from torchao.float8 import Float8LinearConfig\n\nPRECISION = 'bf16'\nRECIPE = 'rowwise'\n"
        "def module_filter_func(module, fqn):\n    return True\n\n"
        "accelerator = Accelerator(mixed_precision=PRECISION, kwargs_handlers=[AORecipeKwargs("
        "config=Float8LinearConfig.from_recipe_name(RECIPE), module_filter_func=module_filter_func)])\n"
        "convert_to_float8_training(model, module_filter_fn=module_filter_func)\n"
    )
    path = tmp_path / "accel.py"
    path.write_text(accelerate)
    config = read_config(path)
    assert not config.enabled and config.recipe.value == "rowwise"
    path.write_text(accelerate + "PRECISION = 'fp8'\n")
    assert "the mixed_precision `PRECISION`, bound 2 times" in refused(path).message
    path.write_text(accelerate + "if True:\n    RECIPE = 'tensorwise'\n")
    assert "the recipe name `RECIPE`, bound 2 times" in refused(path).message


FALSE_SUCCESS = (
    "from torch import nn\nfrom torchao.float8 import Float8LinearConfig, convert_to_float8_training\n\n"
    "def module_filter_fn(module, fqn):\n    return False\n\n"
    "def convert(model):\n    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name("
    '"rowwise"), module_filter_fn=module_filter_fn)\n\n'
    "module_filter_fn = lambda module, fqn: isinstance(module, nn.Linear)\n"
)


def test_verify_never_passes_a_config_whose_filter_is_bound_again(tmp_path, monkeypatch):
    """The issue's instance through the CLI: the advice converts nothing, the stale `def` converts nothing,
    torchao (calling the lambda) converts every Linear. Before: PASS, exit 0. Now: exit 2 naming line 10."""
    real_verify = verify_module.verify

    def verify_with_predictor(request, config, **kwargs):
        kwargs["predictor"] = lambda recipe, M, K, N: predictor(recipe, 1, 1, 1)  # 0.5x: advise nothing
        return real_verify(replace(request, profile=None), config, **kwargs)

    monkeypatch.setattr(verify_module, "verify", verify_with_predictor)
    model = write_tiny_model(tmp_path)
    path = tmp_path / "train.py"
    path.write_text(FALSE_SUCCESS)
    result = CliRunner().invoke(app, ["verify", model, "--config", str(path), "--seq", "256"])
    output = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert "PASS" not in output and "Traceback" not in output
    assert "train.py:10: cannot evaluate the filter function `module_filter_fn`, bound 2 times" in output
    path.write_text(FALSE_SUCCESS.replace("module_filter_fn = lambda", "other = lambda"))
    assert not read_config(path).decides(linear(), "blocks.0.up")  # one binding: evaluated


# --- a module-level name the filter reads: trusted only when nothing but reads can reach it -----------------

#: Module-level code that changes `SKIP = ['head']` (or may: it hands the list to code that could), and what
#: the refusal quotes.
ESCAPES = [
    ("SKIP.__setitem__(0, 'up')", "`SKIP.__setitem__(0, 'up')`"),
    ("ALIAS = SKIP\nALIAS.append('up')", "`ALIAS = SKIP`"),
    ("print(SKIP)", "`print(SKIP)`"),
    ("getattr(SKIP, 'append')('up')", "`getattr(SKIP, 'append')`"),
    ("import operator\noperator.ior(SKIP, ['up'])", "`operator.ior(SKIP, ['up'])`"),
    ("SKIP += ['up']", "an augmented assignment `SKIP += ['up']`"),
    ("SKIP[0] = 'up'", "a change of the constant `SKIP` (`SKIP[0]`)"),
    ("del SKIP[0]", "a change of the constant `SKIP` (`SKIP[0]`)"),
    ("SKIP.extend(['up'])", "a change of the constant `SKIP` (`SKIP.extend(['up'])`)"),
    ("def prepare():\n    SKIP.append('up')\nprepare()", "`SKIP.append('up')`"),
    ("def prepare(into=SKIP):\n    into.append('up')\nprepare()", "`into=SKIP`"),
    ("class Setup:\n    SKIP = SKIP\n    SKIP.append('up')", "`SKIP = SKIP`"),
    ("OTHERS = [SKIP]\nOTHERS[0].append('up')", "`[SKIP]`"),
    ("SKIP = ['head']", "bound 2 times"),
]


@pytest.mark.parametrize(("change", "quoted"), ESCAPES)
def test_a_constant_the_file_may_change_is_refused(tmp_path, change, quoted):
    """Guard: `filter_eval.module_constant` (`if not frozen(value): scope.check_reads_only(...)`), used by the
    evaluator and by --trust-config: the filter reads `SKIP` at call time, so any use outside it that could
    change the list is refused, and each exec of the file shows the list did change (or could)."""
    source = f"SKIP = ['head']\n{change}\ndef module_filter_fn(module, fqn):\n    return fqn not in SKIP\n"
    path = torchao(tmp_path, source)
    for trust_config in (False, True):
        error = refused(path, trust_config=trust_config)
        assert quoted in error.message, error.message
        assert "whole file" in error.message


def test_a_constant_nothing_can_change_may_be_used_anywhere(tmp_path):
    """The other side of the guard: a tuple, a frozenset, a string can be handed to any code (`frozen`), and
    a list read only by `in` and for loops is trusted."""
    for constant, uses in [
        ("('head',)", "ALIAS = SKIP\nprint(SKIP)\nf(SKIP)\nOTHERS = [SKIP]"),
        ("frozenset({'head'})", "getattr(SKIP, 'union')\nclass Setup:\n    KEPT = SKIP"),
        ("'head'", "print(SKIP.upper())"),
        ("['head']", "print('x' in SKIP, [s for s in SKIP])\nfor entry in SKIP:\n    pass"),
    ]:
        source = (
            f"SKIP = {constant}\n{uses}\ndef module_filter_fn(module, fqn):\n    return fqn not in SKIP\n"
        )
        path = torchao(tmp_path, source)
        for trust_config in (False, True):
            config = read_config(path, trust_config=trust_config)
            assert [config.decides(linear(), fqn) for fqn in ("head", "up")] == [False, True], constant


def test_names_the_isinstance_test_and_builtins_rely_on_are_checked_too(tmp_path):
    """Guard: `check_not_patched("torch")` and `settled_binding` for builtins: `nn.Linear = ...` makes the
    isinstance test another class; `len` rebound in a function declaring it global; `import builtins`."""
    cases = [
        (
            "def module_filter_fn(module, fqn):\n    return isinstance(module, nn.Linear)\n"
            "nn.Linear = nn.Conv2d",
            "the file changes torch (`nn.Linear = nn.Conv2d`)",
        ),
        (
            "def module_filter_fn(module, fqn):\n    return isinstance(module, torch.nn.Linear)\n"
            "setattr(torch.nn, 'Linear', None)",
            "the file changes torch",
        ),
        (
            "def setup():\n    global len\n    len = lambda x: 0\n"
            "def module_filter_fn(module, fqn):\n    return len(fqn) > 2",
            "the name `len`, bound only by an assignment",
        ),
        (
            "import builtins\nbuiltins.len = lambda x: 0\n"
            "def module_filter_fn(module, fqn):\n    return len(fqn) > 2",
            "`import builtins`",
        ),
    ]
    for source, quoted in cases:
        path = torchao(tmp_path, source)
        assert quoted in refused(path).message, source
        assert quoted in refused(path, trust_config=True).message, source


# --- the comparison loop names the operand it refuses ---------------------------------------------------


@pytest.mark.parametrize(
    ("comparison", "quoted"),
    [
        ("fqn is not module == 'x'", "`module`, a Linear"),
        ("None is not module < 3", "`module`, a Linear"),
        ("fqn is fqn is not module.weight > 0", "`module.weight`, a Parameter"),
    ],
)
def test_a_chained_comparison_names_its_later_operand(tmp_path, comparison, quoted):
    """Guard: `FilterEvaluator._compare` keeps the node of the operand it carries (`left_node`); it named
    the chain's first operand (`fqn`, "a Linear") before."""
    path = torchao(tmp_path, f"def module_filter_fn(module, fqn):\n    return {comparison}\n")
    error = refused(path)
    assert quoted in error.message, error.message


# --- class 6: every evaluation and parse ends, quickly and small -----------------------------------------


def _filter(*lines: str) -> str:
    return "def module_filter_fn(module, fqn):\n" + "".join(f"    {line}\n" for line in lines)


#: Filters that would build without end, the bounds they are run under (small, so that with a guard broken
#: each finishes at once and the test fails, instead of filling the memory), and what the refusal says.
UNBOUNDED = [
    (_filter("s = 'ab'", "for c in DIGITS[:16]:", "    s = s + s", "return fqn in s"), {}, "(at `s + s`)"),
    (_filter("n = 3", "for c in DIGITS[:12]:", "    n = n * n", "return n > 0"), {}, "bits (at `n * n`)"),
    (_filter("n = 1", "for c in S + S:", "    n = n + n", "return n > 0"), {}, "bits (at `n + n`)"),
    (_filter("n = 0", "for a in S:", "    for b in S:", "        n = 1", "return n > 0"), {}, "steps"),
    (_filter("return any([1 for a in S for b in S if a == 'y'])"), {}, "steps on one layer"),
    (_filter("return len([a for a in S for b in S]) > 0"), {"MAX_STEPS": 10**6}, "a value of 10,001 items"),
    (_filter("x = [set(S) for a in S]", "return len(x) > 0"), {}, "steps on one layer (at `set(S)`)"),
    (
        _filter("return any([fqn in S for a in S])"),
        {},
        "steps on one layer (at `fqn in S`)",
    ),  # a call's, an `in`'s work
    (_filter("return fqn in LONG[1:]"), {}, "a value of 19,999 items or characters (at `LONG[1:]`)"),
    (
        _filter("return len(sorted(LONG)) > 0"),
        {},
        "a value of 20,000 items or characters (at `sorted(LONG)`)",
    ),
    (_filter("return fqn in FFI.upper()"), {}, "a value of 12,000 items or characters (at `FFI.upper()`)"),
    (_filter("return 'x' * 10 ** 9 == fqn"), {}, "the operator in `10 ** 9`"),  # no construct for them:
    (_filter("return 'x' * 1000000000 == fqn"), {}, "arithmetic on `'x'`"),  # refused, never built
]


@pytest.mark.parametrize(("source", "bounds", "quoted"), UNBOUNDED)
def test_an_evaluation_that_would_not_end_or_would_fill_memory_is_stopped(
    tmp_path, monkeypatch, source, bounds, quoted
):
    """Guard: `filter_language.Budget` (`length`, `bits`, `step`; `scan`: the items a call or a comparison
    walks are steps) called from `FilterEvaluator._arithmetic`, `_comprehension`, `_evaluate`, `_call`,
    `_compare` and `_run`, here under small bounds."""
    limits = {"MAX_STEPS": 20_000, "MAX_LENGTH": 10_000, "MAX_INT_BITS": 256, **bounds}
    for name, value in limits.items():
        monkeypatch.setattr(filter_language, name, value)
    constants = (
        f"DIGITS = '0123456789abcdefghijklmnopqrstuvwxyz'\nS = '{'x' * 200}'\nLONG = '{'x' * 20_000}'\n"
    )
    constants += "FFI = '" + "\N{LATIN SMALL LIGATURE FFI}" * 4000 + "'\n"  # its upper case: 'FFI'
    path = torchao(tmp_path, constants + source)
    error = refused(path)
    assert quoted in error.message, error.message
    assert error.location.startswith(f"{path}:")


def test_the_issues_instances_end_at_once_under_the_real_bounds(tmp_path):
    """String doubling (4.4 GB before), `n = n * n` (never ended): stopped at the default bounds in well under
    a second each, with the bound in the message and its hint."""
    for lines, quoted in [
        (
            ("s = 'ab'", "for c in DIGITS:", "    s = s + s", "return fqn in s"),
            "1,048,576 items or characters",
        ),
        (("n = 3", "for c in DIGITS:", "    n = n * n", "return n > 0"), "bits"),
    ]:
        path = torchao(tmp_path, "DIGITS = '0123456789abcdefghijklmnopqrstuvwxyz'\n" + _filter(*lines))
        started = time.monotonic()
        error = refused(path)
        assert quoted in error.message and "more than verify evaluates" in error.message
        assert f"{filter_language.MAX_STEPS:,} steps per layer" in error.hint
        assert time.monotonic() - started < 2


def test_the_time_of_all_evaluations_is_bounded(tmp_path, monkeypatch):
    """Guard: `Budget.step` checks the clock every 1024 steps against what is left of `MAX_SECONDS`, over
    every call on one model (each call alone well under the step bound)."""
    monkeypatch.setattr(filter_language, "MAX_SECONDS", 0.05)
    path = torchao(tmp_path, f"S = '{'x' * 1000}'\n" + _filter("return any(c == 'y' for c in S)"))
    config = read_config(path)
    with pytest.raises(ConfigError, match=r"it takes more than 0 s in all"):
        for index in range(200):
            config.decides(linear(), f"blocks.{index}")


#: Constants for the filters below: 200 characters, 30 items, and 'a.' a hundred times.
BUILT_CONSTANTS = (
    f"S = '{'x' * 200}'\nT = ({', '.join(map(str, range(30)))})\nDOTS = '{'a.' * 100}'\n"
    "EIGHT = (1, 2, 3, 4, 5, 6, 7)\n"
)
DOUBLED = ("s = S", "d = DOTS", "for i in EIGHT:", "    s = s + s", "    d = d + d")  # 25,600 characters each

#: Filters whose every value stays within the bounds of one value (`MAX_LENGTH`) and that build many of them,
#: kept or not, and the construct the refusal must quote (on its line). With the cumulative bound broken, each
#: completes (at most about 30 MB) and the test fails.
BUILT_IN_ALL = [
    (_filter(*DOUBLED, "x = [s[1:] + 'x' for a in T for b in T]", "return fqn in x"), "(at `s[1:]"),
    (
        _filter(*DOUBLED, "for a in T:", "    for b in T:", "        u = s.upper()", "return True"),
        "`s.upper()`",
    ),
    (_filter(*DOUBLED, "x = [list(s[:5000]) for a in T]", "return len(x) > 0"), "(at `list(s[:5000])`)"),
    (_filter(*DOUBLED, "x = [tuple(s[:5000]) for a in T]", "return len(x) > 0"), "(at `tuple(s[:5000])`)"),
    (_filter(*DOUBLED, "x = [d.split('.') for a in T]", "return len(x) > 0"), "(at `d.split('.')`)"),
    (_filter(*DOUBLED, "x = [(s + 'a', s + 'b') for a in T]", "return len(x) > 0"), "(at `s + '"),
    (_filter(*DOUBLED, "x = {s[a:] for a in T for b in T}", "return fqn in x"), "(at `s[a:]`)"),
    (
        "def module_filter_fn(module, fqn, x=[S[1:] + S for a in T for b in T for c in T]):\n"
        "    return True\n",
        "(at `S[1:]",
    ),
]


@pytest.mark.parametrize(("source", "quoted"), BUILT_IN_ALL, ids=lambda v: v if len(v) < 40 else None)
def test_the_values_an_evaluation_builds_are_bounded_in_all(tmp_path, monkeypatch, source, quoted):
    """Guard: `Budget.built`, charged in `FilterEvaluator._evaluate` with every value an expression builds
    (strings, slices, displays, comprehensions, what a call returns with the strings in it: split, list(s)),
    against one total per evaluation (a call, or the default arguments), here 1 MiB: refused quickly, at the
    construct's line, naming it."""
    monkeypatch.setattr(filter_language, "MAX_BUILT", 2**20)
    path = torchao(tmp_path, BUILT_CONSTANTS + source)
    started = time.monotonic()
    error = refused(path)
    assert time.monotonic() - started < 1
    assert "the values it builds take more than 1 MB in all on one layer" in error.message, error.message
    assert quoted in error.message and "more than verify evaluates" in error.message
    assert error.location == f"{path}:{_line_of(path.read_text(), quoted.split('`')[1])}"
    assert "1 MB of values built per layer" in error.hint


#: What the evaluator never builds, so never counts: dicts, `+=`, `str.join`, `str * n`, `list + list`.
NEVER_BUILT = [
    (_filter("x = {'a': S, 'b': S}", "return fqn in x"), "a dict `{'a': S"),
    (_filter("x = {a: S for a in T}", "return fqn in x"), "a dict comprehension `{a: S for a in T}`"),
    (_filter("x = dict(a=S)", "return fqn in x"), "the call `dict(a=S)`"),
    (
        _filter("x = []", "for a in T:", "    x += [S]", "return fqn in x"),
        "an augmented assignment `x += [S]`",
    ),
    (_filter("x = []", "for a in T:", "    x = x + [S]", "return fqn in x"), "arithmetic on `x`, a list"),
    (_filter("return fqn in ''.join([S for a in T])"), "the call `''.join([S for a in T])`"),
    (_filter("return fqn in S * 5000"), "arithmetic on `S`, a str"),
]


@pytest.mark.parametrize(("source", "quoted"), NEVER_BUILT)
def test_constructs_that_would_build_outside_the_count_are_refused(tmp_path, source, quoted):
    """Guard: `FilterEvaluator._check` and `_arithmetic` (no dict, no augmented assignment, no method but the
    listed string ones, arithmetic on numbers and `+` on strings only): nothing is built the budget does not
    see."""
    path = torchao(tmp_path, BUILT_CONSTANTS + source)
    error = refused(path)
    assert quoted in error.message, error.message
    assert error.location.startswith(f"{path}:") and not error.location.endswith(":?")


#: Run in a child under an address-space limit of what it holds after its imports plus 320 MB: read the
#: config, decide one layer, print the message (or the exception) and the growth of its peak memory in MB.
_CHILD = """
import resource, sys, time
from torch import nn
from fp8advisor.errors import ConfigError
from fp8advisor.frameworks.reader import read_config

def status(field):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field)) * 1024

layer = nn.Linear(64, 64, bias=False, device="meta")
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
for path in sys.argv[1:]:
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # the peak memory (VmHWM) starts again from what is held now
    size, peak = status("VmSize:"), status("VmHWM:")
    limit = size + 320 * 2**20 if soft == resource.RLIM_INFINITY else min(soft, size + 320 * 2**20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    started = time.monotonic()
    try:
        read_config(path).decides(layer, "blocks.0.up")
        message = "DECIDED"
    except ConfigError as error:
        message = error.message
    except BaseException as error:
        message = repr(error)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    grown = max(0, status("VmHWM:") - peak) / 2**20
    print(f"{time.monotonic() - started:.2f}|{grown:.0f}|{message}", flush=True)
"""


def test_the_issues_instance_is_refused_within_a_few_hundred_mb_under_the_real_bounds(tmp_path):
    """The issue's filter (a 512K-character string, then a 30 x 30 x 30 comprehension of its slices: 14 GB)
    and the same product over a tuple display, `split` and `list(u)` of 4-byte characters, under the real
    bounds, in a child limited to 320 MB more address space than its imports take: each refused by a bound
    (the first two by the bytes built in all; the calls may pass the steps first: they walk their input),
    never a MemoryError, in seconds, its peak memory grown by less than 320 MB."""
    constants = f"T = {tuple(range(30))}\nNINETEEN = {tuple(range(19))}\n"
    grow = (
        "s = 'x'",
        "u = '\\U0001f600'",
        "d = 'a.'",
        "for i in NINETEEN:",
        "    s = s + s",
        "    u = u + u",
    )
    grow += ("for i in NINETEEN[1:]:", "    d = d + d")  # 512K characters each (4 bytes each in u)
    elements = {
        "s[1:] + 'x'": "s[1:]",
        "(s + 'a', s + 'b')": "s + '",
        "d.split('.')": "d.split",
        "list(u)": "list",
    }
    paths = []
    for index, element in enumerate(elements):
        body = _filter(*grow, f"x = [{element} for a in T for b in T for c in T]", "return True")
        paths.append(torchao(tmp_path, constants + body, name=f"train{index}.py"))
    completed = subprocess.run(
        [sys.executable, "-c", _CHILD, *map(str, paths)], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    lines = completed.stdout.strip().splitlines()
    assert len(lines) == len(paths), completed.stdout
    in_all = "the values it builds take more than 64 MB in all on one layer"
    for index, (line, quoted) in enumerate(zip(lines, elements.values(), strict=True)):
        seconds, grown, message = line.split("|", 2)
        bound = in_all if index < 2 else f"({in_all}|it takes more than 1,000,000 steps on one layer)"
        assert re.search(rf"{bound} \(at `{re.escape(quoted)}", message), message
        assert float(seconds) < 10 and int(grown) < 320, line


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        ("x = " + "not " * 990 + "y\n", f"nested more than {MAX_SYNTAX_DEPTH} levels deep"),
        ("x = " + "not " * 5000 + "y\n", "Python cannot parse this file: RecursionError"),
        ("x = " + "-" * 200_000 + "1\n", "Python cannot parse this file"),
        ("SKIP = " + "[" * 150 + "]" * 150 + "\n", f"nested more than {MAX_SYNTAX_DEPTH} levels deep"),
        ("x = " + "+".join(["a"] * 300) + "\n", f"nested more than {MAX_SYNTAX_DEPTH} levels deep"),
    ],
)
def test_syntax_too_deep_for_a_recursive_reader_is_refused_on_parsing(tmp_path, text, quoted):
    """Guard: `python_file.parse_python` (`_deepest`, and RecursionError/MemoryError of ast.parse caught):
    every reader and the evaluator recurse over the tree, so its depth is bounded before any of them runs."""
    path = tmp_path / "train.py"
    with pytest.raises(ConfigError) as caught:
        parse_python(path, text)
    assert quoted in caught.value.message
    assert caught.value.location.startswith(str(path))
    parse_python(path, "x = " + "not " * (MAX_SYNTAX_DEPTH // 2) + "y\n")  # deep, but within the bound


# --- class 8: unhashable and other literals Python refuses -----------------------------------------------

AUTO = (
    "from torchao.float8 import _auto_filter_for_recipe\n"
    "convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name('rowwise'), "
    "module_filter_fn=_auto_filter_for_recipe({recipe}, {fqns}))\n"
)


@pytest.mark.parametrize(
    ("body", "call", "quoted"),
    [
        (
            "SKIP = {('a', ['b'])}\n" + FALSE_DEF.replace("False", "fqn in SKIP"),
            CALL,
            "unhashable type: 'list'",
        ),
        ("SKIP = {['a']: 1}\n" + FALSE_DEF.replace("False", "fqn in SKIP"), CALL, "unhashable type: 'list'"),
        (
            "SKIP = frozenset({('a', ['b'])})\n" + FALSE_DEF.replace("False", "fqn in SKIP"),
            CALL,
            "unhashable",
        ),
        ("def module_filter_fn(m, fqn, skip={('a', ['b'])}):\n    return True", CALL, "unhashable type"),
        ("def module_filter_fn(m, fqn):\n    return fqn in {('a', ['b'])}", CALL, "unhashable type"),
        ("", AUTO.format(recipe="'rowwise'", fqns="{['a']: 1}"), "filter_fqns is not a valid literal"),
        ("", AUTO.format(recipe="{('a', ['b'])}", fqns="[]"), "the recipe is not a valid literal"),
        (
            "SKIP = {['a']}\n",
            AUTO.format(recipe="'rowwise'", fqns="SKIP"),
            "filter_fqns is not a valid literal",
        ),
        (
            "",
            "convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name({['a']: 1}))",
            "the recipe name is not a valid literal",
        ),
    ],
)
def test_unhashable_literals_are_config_errors(tmp_path, body, call, quoted):
    """Guard: `python_file.literal_value` / `required_literal` / `literal_error` catch TypeError (they caught
    only ValueError: a traceback, exit 70), `FilterEvaluator.__init__` turns a default that raises into a
    ConfigError, `__call__` one that raises on a layer."""
    path = torchao(tmp_path, body, call=call)
    for trust_config in (False, True):
        error = refused(path, trust_config=trust_config)
        assert quoted in error.message, error.message
        assert error.location.startswith(f"{path}:")


# --- class 10: NUL bytes and byte-order marks -----------------------------------------------------------


def test_a_nul_byte_is_refused_at_its_line_and_a_byte_order_mark_is_accepted(tmp_path):
    """Guard: `parse_python` drops a leading U+FEFF (Python accepts it; ast.parse of the str did not) and
    finds a NUL byte's line and column itself (ast.parse reported line None)."""
    path = tmp_path / "train.py"
    body = FALSE_DEF + CALL
    for text in ("\ufeff" + HEAD + body, HEAD + body):
        tree = parse_python(path, text)
        assert any(isinstance(node, ast.FunctionDef) for node in tree.body)
    for text, line, column in (
        (HEAD + "x = 1\0\n" + body, 5, 6),
        ("\0" + HEAD, 1, 1),
        (HEAD + body + "# \0", 9, 3),
    ):
        with pytest.raises(ConfigError) as caught:
            parse_python(path, text)
        assert f"a NUL byte at line {line}, column {column}" in caught.value.message
        assert caught.value.location == f"{path}:{line}"
    path.write_bytes(b"\xef\xbb\xbf" + (HEAD + FALSE_DEF.replace("False", "True") + CALL).encode())
    assert read_config(path).decides(linear(), "blocks.0.up")  # through the file reader too


# --- class 3: the framework's own names and calls are the ones that run -------------------------------------


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> dict[str, str]:
    """The torchao, accelerate and torchtitan 0.3 files `suggest` writes for the tiny model (its own emitter),
    and a torchao file converting MoE experts as the emitter writes it (`emit.torchao_formats.torchao`)."""
    from _verify_helpers import advise_with_predictor

    from fp8advisor.emit.config_file import render
    from fp8advisor.frameworks.formats import ConfigFormat
    from fp8advisor.inspect.layers import inspect_model
    from fp8advisor.request import SuggestRequest

    directory = tmp_path_factory.mktemp("generated")
    model = write_tiny_model(directory)
    advice = advise_with_predictor(inspect_model(model, batch=1, seq=64))
    request = SuggestRequest(target=model, batch=1, seq=64, recipe="rowwise")
    texts = {
        fmt.value: render(advice, fmt, request, output=str(directory / "fp8.py"))
        for fmt in (ConfigFormat.TORCHAO, ConfigFormat.ACCELERATE, ConfigFormat.TORCHTITAN_PY)
    }
    texts["experts"] = (
        "import torch\n"
        "from torchao.prototype.moe_training.config import Float8TrainingOpConfig\n"
        "from torchao.quantization.quant_api import quantize_\n\n"
        "FLOAT8_EXPERTS = frozenset({'layers.0.moe.experts'})\n\n\n"
        "def expert_filter_fn(module, fqn):\n    return fqn in FLOAT8_EXPERTS\n\n\n"
        "def convert_model(model: torch.nn.Module) -> torch.nn.Module:\n"
        "    quantize_(model, config=Float8TrainingOpConfig(), filter_fn=expert_filter_fn)\n"
        "    return torch.compile(model)\n"
    )
    return texts


def _line_of(text: str, fragment: str) -> int:
    return text[: text.index(fragment)].count("\n") + 1


#: The torchao call as `suggest` writes it, in `convert_model`.
CALL_BLOCK = (
    "    convert_to_float8_training(\n        model,\n"
    "        config=FLOAT8_CONFIG,\n"
    "        module_filter_fn=module_filter_fn,\n    )\n"
)
INDENTED_CALL = "    " + CALL_BLOCK.replace("\n    ", "\n        ")

#: (the file, an edit of it, what the refusal must say). Each edit leaves the call the reader reads as it was
#: and makes Python run something else: a later binding of a name the reader relies on (the function the user
#: calls, a framework callable, a config class, the `accelerator` the user imports), a callable that is not
#: the framework's, a patched package, a call that never runs, arguments that cannot be told.
FRAMEWORK_REBINDINGS = [
    (
        "torchao",
        "append",
        "\n\ndef convert_model(model):\n    return model\n",
        "convert_model(), which holds",
    ),
    ("torchao", "append", "\nconvert_model = lambda model: model\n", "convert_model(), which holds"),
    ("torchao", "append", "\nfrom mylib import convert_model\n", "convert_model(), which holds"),
    ("torchao", "append", "\nconvert_to_float8_training = lambda model, **kw: model\n", "bound 2 times"),
    ("torchao", "append", "\n\ndef convert_to_float8_training(model, **kw):\n    return model\n", "2 times"),
    ("torchao", "append", "\nfrom mylib import convert_to_float8_training\n", "bound 2 times"),
    ("torchao", "append", "\nFloat8LinearConfig = dict\n", "the name `Float8LinearConfig`"),
    (
        "torchao",
        "append",
        "\nimport torchao.float8\ntorchao.float8.convert_to_float8_training = lambda m, **k: m\n",
        "the file changes torchao",
    ),
    ("torchao", "append", "\nconvert_model.__code__ = (lambda model: model).__code__\n", "the file changes"),
    (
        "torchao",
        ("from torchao.float8 import Float8LinearConfig, convert_to_float8_training", "replace"),
        "from torchao.float8 import Float8LinearConfig\nfrom mylib import convert_to_float8_training",
        "(it stands for mylib.convert_to_float8_training)",
    ),
    (
        "torchao",
        ("from torchao.float8 import Float8LinearConfig, convert_to_float8_training", "replace"),
        "from torchao.float8 import Float8LinearConfig, Float8LinearConfig as convert_to_float8_training",
        "(it stands for torchao.float8.Float8LinearConfig)",
    ),
    (
        "torchao",
        ("from torchao.float8 import Float8LinearConfig, convert_to_float8_training", "replace"),
        "from torchao.float8 import Float8LinearConfig",
        "never imports or binds `convert_to_float8_training`",
    ),
    (
        "torchao",
        ("    convert_to_float8_training(\n", "before"),
        "    return model\n",
        "never runs: it follows",
    ),
    (
        "torchao",
        ("    convert_to_float8_training(\n", "before"),
        "    convert_to_float8_training = print\n",
        "bound by an assignment `convert_to_float8_training = print`",
    ),
    ("torchao", ("def convert_model(", "before"), "@functools.cache\n", "decorated by `@functools.cache`"),
    (
        "torchao",
        ("        module_filter_fn=module_filter_fn,\n", "replace"),
        "        **{'module_filter_fn': lambda m, f: False},\n",
        "unpacked",
    ),
    ("torchao", (CALL_BLOCK, "replace"), "    if 0:\n" + INDENTED_CALL, "if 0"),
    (
        "torchao",
        (CALL_BLOCK, "replace"),
        "    def inner():\n" + INDENTED_CALL,
        "inner() is never called in convert_model()",
    ),
    ("accelerate", "append", '\naccelerator = Accelerator(mixed_precision="bf16")\n', "`accelerator`, which"),
    ("accelerate", "append", "\naccelerator = None\n", "`accelerator`, which holds"),
    ("accelerate", "append", "\nAccelerator = lambda **kwargs: None\n", "the name `Accelerator`"),
    ("accelerate", "append", "\nAORecipeKwargs = dict\n", "the name `AORecipeKwargs`"),
    ("accelerate", "append", "\nfrom mylib import Float8LinearConfig\n", "the name `Float8LinearConfig`"),
    ("experts", "append", "\nquantize_ = lambda *args, **kwargs: None\n", "the name `quantize_`"),
    ("experts", "append", "\nFloat8TrainingOpConfig = dict\n", "the name `Float8TrainingOpConfig`"),
    ("experts", "append", "\n\ndef convert_model(model):\n    return model\n", "convert_model(), which"),
    ("torchtitan-py", "append", "\nFloat8LinearConverter = object\n", "the name `Float8LinearConverter`"),
    ("torchtitan-py", "append", "\n\ndef float8_advised():\n    return None\n", "float8_advised(), which"),
]


@pytest.mark.parametrize(
    ("fmt", "where", "edit", "quoted"), FRAMEWORK_REBINDINGS, ids=lambda v: str(v).strip()[:40]
)
def test_a_framework_name_bound_again_is_refused_never_read_stale(
    generated, tmp_path, fmt, where, edit, quoted
):
    """Guard: `framework_calls.check_framework_call` on every call the torchao, accelerate and torchtitan-py
    readers read (`settled_binding` of the callee's name and its import origin, of each function around the
    call, of the name that keeps the result; `check_not_patched`; reachability; unpacked arguments). Before:
    every edit read as the unedited file (a false PASS). Now one ConfigError naming what binds the name and
    where; the unedited file still reads."""
    text = generated[fmt]
    assert read_config(_write(tmp_path, "fp8.py", text)).enabled or fmt == "experts"
    if where == "append":
        edited = text + edit
    else:
        fragment, how = where
        edited = text.replace(fragment, edit if how == "replace" else edit + fragment, 1)
        assert edited != text
    path = _write(tmp_path, "fp8.py", edited)
    error = refused(path)
    assert quoted in error.message, error.message
    assert error.location and error.location.startswith(f"{path}:") and error.hint
    if "bound 2 times" in error.message:  # both bindings named, with their lines
        lines = [int(n) for n in re.findall(r"at line (\d+)", error.message)]
        assert len(set(lines)) >= 2 and max(lines) > text.count("\n"), error.message


def _write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    return path


def test_framework_calls_written_otherwise_but_meaning_the_same_still_read(generated, tmp_path):
    """What must keep working: torchao through a module alias, a local import in the function, quantize_'s
    positional config and filter_fn (read now: before, a positional config read as no experts at all), a
    use of convert_model that changes nothing."""
    text = generated["torchao"]
    variants = [
        text.replace("import torch\n", "import torch\nimport torchao.float8 as f8\n", 1).replace(
            "    convert_to_float8_training(\n", "    f8.convert_to_float8_training(\n"
        ),
        text.replace(
            "    convert_to_float8_training(\n",
            "    from torchao.float8 import convert_to_float8_training\n\n    convert_to_float8_training(\n",
        ),
        text.replace(
            "    return torch.compile", "    model = convert_model  # a read\n    return torch.compile"
        ),
    ]
    for variant in variants:
        config = read_config(_write(tmp_path, "fp8.py", variant))
        assert config.enabled and config.recipe.value == "rowwise"
        assert config.decides(linear(), "blocks.0.up") and not config.decides(linear(), "head")
    experts = generated["experts"].replace(
        "quantize_(model, config=Float8TrainingOpConfig(), filter_fn=expert_filter_fn)",
        "quantize_(model, Float8TrainingOpConfig(), expert_filter_fn)",
    )
    config = read_config(_write(tmp_path, "fp8.py", experts))
    assert config.converts_experts and config.expert_filter(None, "layers.0.moe.experts")


TITAN_KEYWORDS = [
    ('filter_fqns=["output"]', 'filter_fqns="output,wk"', "filter_fqns=...) must be a list of strings"),
    ("model_compile_enabled=True", 'model_compile_enabled="yes"', "model_compile_enabled=...) must be true"),
    ("model_compile_enabled=True", "model_compile_enabled=True, emulate=1", "emulate=...) must be true"),
    ("model_compile_enabled=True", "model_compile_enabled=True, enable=True", "rejects: enable"),
    ("model_compile_enabled=True", "model_compile_enabled=True, **EXTRA", "`EXTRA` unpacked"),
    ('recipe_name="rowwise", ', '"rowwise", ', "takes no positional argument"),
]


@pytest.mark.parametrize(("old", "new", "quoted"), TITAN_KEYWORDS, ids=lambda v: v[:30])
def test_torchtitan_py_keywords_are_checked_by_name_and_type(tmp_path, old, new, quoted):
    """Guard: `torchtitan_reader._keyword_literals` (the keyword-only dataclass's fields, by name and type).
    Before: a string filter_fqns was read as "a,b" (torchtitan iterates its characters), a "yes" compile
    flag and unknown or unpacked keywords were ignored."""
    base = (
        "from torchtitan.components.quantization import Float8LinearConverter\n\n\n"
        "def float8_advised():\n    return Float8LinearConverter.Config(\n"
        '        recipe_name="rowwise", filter_fqns=["output"], model_compile_enabled=True\n    )\n'
    )
    assert read_config(_write(tmp_path, "titan.py", base)).filter_fqns == ("output",)
    error = refused(_write(tmp_path, "titan.py", base.replace(old, new, 1)))
    assert quoted in error.message, error.message
    assert str(tmp_path) in error.location


def test_verify_refuses_the_issues_instances_of_a_framework_name_bound_again(generated, tmp_path):
    """The fuzz cases `verify-torchao-convert-rebound` and `-converter-rebound` through the CLI: the file
    `suggest --format torchao` wrote, with `convert_model` or `convert_to_float8_training` bound again at its
    end. Before: PASS, exit 0. Now: exit 2, naming both bindings and their lines."""
    model = write_tiny_model(tmp_path)
    text = generated["torchao"]
    for appended, first in (
        ("\n\ndef convert_model(model):\n    return model\n", _line_of(text, "def convert_model")),
        ("\nconvert_to_float8_training = lambda model, **kw: model\n", _line_of(text, "from torchao")),
    ):
        end = text.count("\n") + 1 + appended.index(appended.strip("\n")[:5])  # the appended binding's line
        path = _write(tmp_path, "fp8.py", text + appended)
        result = CliRunner().invoke(app, ["verify", model, "--config", str(path), "--seq", "64"])
        output = " ".join(result.output.split())
        assert result.exit_code == 2, result.output
        assert "PASS" not in output and "Traceback" not in output
        assert f"at line {first}" in output and f"at line {end}" in output, output
