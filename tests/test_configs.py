"""fp8advisor.frameworks.reader: each framework's config file read as the framework reads it, with its exact
rule."""

from __future__ import annotations

import itertools
import json
import textwrap

import pytest
import torch
from torch import nn

from fp8advisor.errors import ConfigError
from fp8advisor.frameworks.formats import ConfigFormat
from fp8advisor.frameworks.module_rules import AUTO_FILTER_FLAG
from fp8advisor.frameworks.reader import read_config
from fp8advisor.recipes import Recipe


def linear(in_features: int, out_features: int) -> nn.Linear:
    return nn.Linear(in_features, out_features, bias=False, device="meta")


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


TOML_ROWWISE = textwrap.dedent("""
    [model]
    converters = ["quantize.linear.float8"]

    [quantize.linear.float8]
    recipe_name = "rowwise"
    filter_fqns = ["output", "attention.wk"]

    [compile]
    enable = true
""")


# --- torchtitan 0.2.x TOML ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fqn", "module", "converts"),
    [
        ("layers.0.attention.wq", linear(4096, 4096), True),  # no entry is a substring
        ("layers.0.attention.wk", linear(4096, 1024), False),  # "attention.wk" is a substring
        ("layers.10.attention.wk", linear(4096, 1024), False),  # substring, whatever the block number
        ("output", linear(4096, 128256), False),  # "output" equals it
        ("layers.0.feed_forward.w2", linear(14336, 4096), True),
        ("layers.0.feed_forward.w9", linear(4096, 4100), False),  # N % 16 != 0: torchtitan skips it
        ("layers.0.feed_forward.w8", linear(4104, 4096), False),  # K % 16 != 0
        ("layers.0.norm", nn.LayerNorm(64, device="meta"), False),  # not an nn.Linear
    ],
)
def test_torchtitan_toml_substring_and_divisibility(tmp_path, fqn, module, converts):
    config = read_config(write(tmp_path, "job.toml", TOML_ROWWISE))
    assert config.framework is ConfigFormat.TORCHTITAN_TOML
    assert config.recipe is Recipe.ROWWISE
    assert config.enabled and config.compile_enabled
    assert config.filter_fqns == ("output", "attention.wk")
    assert config.decides(module, fqn) is converts


def test_torchtitan_toml_without_recipe_is_tensorwise(tmp_path):
    text = TOML_ROWWISE.replace('recipe_name = "rowwise"\n', "")
    assert read_config(write(tmp_path, "job.toml", text)).recipe is Recipe.TENSORWISE


def test_torchtitan_toml_without_converter_is_off(tmp_path):
    config = read_config(
        write(tmp_path, "job.toml", TOML_ROWWISE.replace('"quantize.linear.float8"', '"float8"'))
    )
    assert not config.enabled
    assert not config.decides(linear(4096, 4096), "layers.0.attention.wq")
    assert any("FP8 is off" in note and "pre-0.2" in note for note in config.notes)


def test_torchtitan_toml_auto_filter_uses_torchaos_rule(tmp_path):
    text = TOML_ROWWISE.replace('["output", "attention.wk"]', f'["{AUTO_FILTER_FLAG}", "output"]')
    config = read_config(write(tmp_path, "job.toml", text))
    assert config.rule.startswith("torchao _auto_filter_for_recipe('rowwise')")
    # torchao rowwise: keep bf16 when N <= 2048, K <= 1024, or N <= 4096 and K <= 2048
    assert config.decides(linear(4096, 14336), "layers.0.feed_forward.w1")
    assert not config.decides(linear(4096, 1024), "layers.0.attention.wk")  # N <= 2048
    assert not config.decides(linear(4096, 14336), "output")  # the remaining substring entry
    assert not config.decides(linear(1024, 8192), "layers.0.x")  # K <= 1024


@pytest.mark.parametrize(
    "value",
    [
        '"output,attention.wk"',  # torchtitan's command-line form, written into the TOML
        '" output , attention.wk ,"',  # spaces and a trailing comma
    ],
)
def test_torchtitan_toml_comma_separated_filter_fqns_are_refused(tmp_path, value):
    """ "a,b" is torchtitan's command-line form only: a TOML string stays a string there, whose characters its
    filter iterates (issue 25): refused, naming the key, never read as a list."""
    text = TOML_ROWWISE.replace('["output", "attention.wk"]', value)
    with pytest.raises(ConfigError, match=r"\[quantize.linear.float8\] filter_fqns must be a list of str"):
        read_config(write(tmp_path, "job.toml", text))


@pytest.mark.parametrize(
    ("compile_section", "compiled"),
    [
        ("enable = true", True),  # components default to ["model", "loss"]
        ('enable = true\ncomponents = ["model"]', True),
        ('enable = true\ncomponents = ["loss"]', False),  # the loss alone: the float8 Linears run eager
        ('enable = false\ncomponents = ["model"]', False),
    ],
)
def test_torchtitan_toml_compile_must_cover_the_model(tmp_path, compile_section, compiled):
    text = TOML_ROWWISE.replace("[compile]\nenable = true", f"[compile]\n{compile_section}")
    config = read_config(write(tmp_path, "job.toml", text))
    assert config.compile_enabled is compiled
    slower = [note for note in config.notes if "slower than bf16" in note]
    assert bool(slower) is not compiled


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            TOML_ROWWISE.replace("[compile]", "[quantize.linear.float8.extra]\nx = 1\n[compile]"),
            "rejects: extra",
        ),
        (TOML_ROWWISE.replace("recipe_name", "recipe"), "rejects: recipe"),
        (
            TOML_ROWWISE.replace(
                'recipe_name = "rowwise"', 'recipe_name = "rowwise"\nenable_fsdp_float8_all_gather = true'
            ),
            "together with enable_fsdp_float8_all_gather",
        ),
        (TOML_ROWWISE.replace('"rowwise"', '"columnwise"'), "unknown recipe_name 'columnwise'"),
        ("[model\nconverters = 1", "not valid TOML"),
        ("model = 3\n", r"\[model\] must be a table, not int"),  # a value where torchtitan wants a table
        ('[quantize]\nlinear = "float8"\n', r"\[quantize.linear\] must be a table, not str"),
        ("compile = true\n", r"\[compile\] must be a table, not bool"),
    ],
)
def test_torchtitan_toml_rejections(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message) as caught:
        read_config(write(tmp_path, "job.toml", text))
    assert caught.value.exit_code == 2


# --- torchtitan 0.3 Python ----------------------------------------------------------------------------------

TITAN_PY = textwrap.dedent("""
    from torchtitan.components.quantization import Float8LinearConverter


    def float8_advised():
        config = base_recipe()
        config.model_spec = model_registry(
            "8B",
            converters=[
                Float8LinearConverter.Config(
                    recipe_name="rowwise_with_gw_hp",
                    filter_fqns=["lm_head", "attention.wk"],
                    model_compile_enabled=True,
                ),
            ],
        )
        return config
""")


def test_torchtitan_py_reads_the_literals_without_running(tmp_path):
    config = read_config(write(tmp_path, "recipe.py", TITAN_PY))  # base_recipe is undefined: never run
    assert config.framework is ConfigFormat.TORCHTITAN_PY
    assert config.recipe is Recipe.ROWWISE_WITH_GW_HP
    assert config.filter_fqns == ("lm_head", "attention.wk")
    assert config.compile_enabled is True
    assert not config.decides(linear(4096, 128256), "lm_head")
    assert config.decides(linear(4096, 4096), "layers.0.attention.wq")


def test_torchtitan_py_default_recipe_is_rowwise(tmp_path):
    text = TITAN_PY.replace('recipe_name="rowwise_with_gw_hp",\n', "")
    assert read_config(write(tmp_path, "recipe.py", text)).recipe is Recipe.ROWWISE


def test_torchtitan_py_auto_filter_converts_nothing(tmp_path):
    text = TITAN_PY.replace('"lm_head", "attention.wk"', f'"{AUTO_FILTER_FLAG}"').replace("_with_gw_hp", "")
    config = read_config(write(tmp_path, "recipe.py", text))
    assert not config.decides(linear(8192, 28672), "layers.0.feed_forward.w1")
    assert any("Linear.Config" in note for note in config.notes)


def test_torchtitan_py_non_literal_is_an_error(tmp_path):
    text = TITAN_PY.replace('["lm_head", "attention.wk"]', "SKIP")
    with pytest.raises(ConfigError, match="not a literal"):
        read_config(write(tmp_path, "recipe.py", text))


# --- NeMo AutoModel YAML ------------------------------------------------------------------------------------

NEMO = textwrap.dedent("""
    compile:
      enabled: true
    fp8:
      enabled: true
      recipe_name: tensorwise
      filter_fqns:
        - lm_head
        - self_attn.k_proj
      fancy_new_option: 3
""")


def test_nemo_yaml(tmp_path):
    config = read_config(write(tmp_path, "recipe.yaml", NEMO))
    assert config.framework is ConfigFormat.NEMO_AUTOMODEL
    assert config.recipe is Recipe.TENSORWISE and config.enabled and config.compile_enabled
    assert not config.decides(linear(4096, 1024), "model.layers.3.self_attn.k_proj")
    assert config.decides(linear(4096, 4096), "model.layers.3.self_attn.q_proj")
    assert any("fancy_new_option" in note for note in config.notes)  # ignored, as NeMo ignores it


@pytest.mark.parametrize("enabled_line", ["enabled: false", ""])
def test_nemo_fp8_must_be_enabled(tmp_path, enabled_line):
    config = read_config(
        write(
            tmp_path, "recipe.yaml", NEMO.replace("  enabled: true\n  recipe", f"  {enabled_line}\n  recipe")
        )
    )
    assert not config.enabled
    assert not config.decides(linear(4096, 4096), "model.layers.3.self_attn.q_proj")


def test_nemo_fp8_enabled_that_is_not_a_boolean_is_refused(tmp_path):
    """NeMo AutoModel tests `fp8.enabled` for truth: "yes-please" (and "false") would turn FP8 on there."""
    with pytest.raises(ConfigError, match="fp8.enabled must be true or false, not a string 'yes-please'"):
        text = NEMO.replace("  enabled: true\n  recipe", "  enabled: yes-please\n  recipe")
        read_config(write(tmp_path, "recipe.yaml", text))


def test_nemo_string_filter_fqns_is_read_character_by_character_as_nemo_does(tmp_path):
    """NeMo AutoModel 0.7's `_module_filter_fn` loops `for fqn in filter_fqns`: a string is its characters."""
    text = (
        'fp8:\n  enabled: true\n  recipe_name: rowwise\n  filter_fqns: "lm_head"\ncompile:\n  enabled: true\n'
    )
    config = read_config(write(tmp_path, "recipe.yaml", text))
    assert config.filter_fqns == ("l", "m", "_", "h", "e", "a", "d")
    assert not config.decides(linear(4096, 4096), "model.layers.3.self_attn.q_proj")  # "l" is in "layers"
    assert config.decides(linear(4096, 4096), "x.wqkv")  # none of the characters
    assert any("is a string" in note and "write a YAML list" in note for note in config.notes)


def test_a_huge_value_is_quoted_short_and_fast(tmp_path):
    """A large value made of YAML aliases (9**5 strings: larger ones are refused as the YAML is read,
    `reading.parse_yaml`): the message quotes a few hundred characters, built without expanding the value."""
    lines = ["a: &a [" + ", ".join(['"lol"'] * 9) + "]"]
    for previous, name in zip("abcd", "bcde", strict=True):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{previous}"] * 9) + "]")
    lines.append("fp8:\n  enabled: true\n  recipe_name: rowwise\n  filter_fqns: [*e]")
    with pytest.raises(ConfigError, match="must be a list of strings") as error:
        read_config(write(tmp_path, "recipe.yaml", "\n".join(lines) + "\n"))
    assert len(str(error.value)) < 1000


def test_nemo_null_recipe_is_tensorwise(tmp_path):
    config = read_config(
        write(tmp_path, "recipe.yaml", NEMO.replace("recipe_name: tensorwise", "recipe_name: null"))
    )
    assert config.recipe is Recipe.TENSORWISE


# --- accelerate and torchao Python --------------------------------------------------------------------------

ACCELERATE = textwrap.dedent("""
    from accelerate import Accelerator
    from accelerate.utils import AORecipeKwargs
    from torchao.float8 import Float8LinearConfig

    FLOAT8_LAYERS = frozenset(
        {
            "model.layers.0.mlp.up_proj",
            "model.layers.0.mlp.down_proj",
        }
    )


    def module_filter_func(module, fqn):
        return fqn in FLOAT8_LAYERS


    accelerator = Accelerator(
        mixed_precision="fp8",
        kwargs_handlers=[
            AORecipeKwargs(
                config=Float8LinearConfig.from_recipe_name("rowwise"),
                module_filter_func=module_filter_func,
            )
        ],
    )
""")


def test_accelerate_exact_set(tmp_path):
    config = read_config(write(tmp_path, "train.py", ACCELERATE))
    assert config.framework is ConfigFormat.ACCELERATE
    assert config.recipe is Recipe.ROWWISE and config.enabled
    assert config.decides(linear(4096, 14336), "model.layers.0.mlp.up_proj")
    assert not config.decides(linear(4096, 14336), "model.layers.1.mlp.up_proj")  # exact, not substring
    assert config.filter_fqns == ("model.layers.0.mlp.down_proj", "model.layers.0.mlp.up_proj")


def test_accelerate_default_keeps_first_and_last_linear(tmp_path):
    text = ACCELERATE.replace("module_filter_func=module_filter_func,", "").replace(
        '"rowwise"', '"tensorwise"'
    )
    config = read_config(write(tmp_path, "train.py", text))
    model = nn.Sequential(
        nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.Linear(64, 48), nn.Linear(64, 64)
    )
    decide = config.filter_for(model)
    assert [decide(model[i], str(i)) for i in (0, 2, 3, 4)] == [False, True, True, False]


def test_accelerate_without_fp8_mixed_precision_is_off(tmp_path):
    config = read_config(write(tmp_path, "train.py", ACCELERATE.replace('"fp8"', '"bf16"')))
    assert not config.enabled


TORCHAO = textwrap.dedent("""
    import torch
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    SKIP = ["output", "wk"]
    MIN_DIM = 1024

    def keep(fqn):
        return True

    def module_filter_fn(module, fqn):
        if any(name in fqn for name in SKIP):
            return False
        return isinstance(module, torch.nn.Linear) and min(module.weight.shape) >= MIN_DIM

    def convert_model(model):
        config = Float8LinearConfig.from_recipe_name("rowwise_with_gw_hp")
        convert_to_float8_training(model, config=CONFIG, module_filter_fn=module_filter_fn)

    CONFIG = Float8LinearConfig()
""")


def test_torchao_filter_function_runs_alone(tmp_path):
    config = read_config(write(tmp_path, "train.py", TORCHAO))
    assert config.framework is ConfigFormat.TORCHAO
    assert config.recipe is Recipe.TENSORWISE  # CONFIG = Float8LinearConfig(): the module-level assignment
    assert config.decides(linear(4096, 4096), "layers.0.wq")
    assert config.decides(linear(4096, 1024), "layers.0.wv")  # min dim 1024 >= MIN_DIM
    assert not config.decides(linear(4096, 512), "layers.0.wv")  # min dim 512 < MIN_DIM
    assert not config.decides(linear(4096, 4096), "layers.0.wk")
    assert not config.decides(linear(512, 4096), "layers.0.w1")


@pytest.mark.parametrize(
    ("replace", "by", "message"),
    [
        ("return True", "return helper(fqn)", None),  # an unused function may use anything
        (
            "min(module.weight.shape) >= MIN_DIM",
            "helper(module)",
            r"train.py:13: cannot evaluate the call `helper\(module\)`.*--trust-config",
        ),
        ("MIN_DIM = 1024", "MIN_DIM = compute()", "not a literal constant"),
        (
            "CONFIG = Float8LinearConfig()",
            "CONFIG = Float8LinearConfig(cast_config_input=x)",
            "sets its own scaling",
        ),
        ("convert_to_float8_training(model", "print(model", "sets up no float8 training"),
        ("SKIP = [", "SKIP = [[", "syntax error"),
    ],
)
def test_torchao_errors(tmp_path, replace, by, message):
    path = write(tmp_path, "train.py", TORCHAO.replace(replace, by))
    if message is None:
        read_config(path)
        return
    with pytest.raises(ConfigError, match=message):
        read_config(path)


def test_torchao_lambda_and_no_filter(tmp_path):
    lam = TORCHAO.replace(
        "module_filter_fn=module_filter_fn", 'module_filter_fn=lambda m, fqn: fqn != "output"'
    )
    config = read_config(write(tmp_path, "a.py", lam))
    assert config.decides(linear(64, 64), "x") and not config.decides(linear(64, 64), "output")
    bare = TORCHAO.replace(", module_filter_fn=module_filter_fn", "")
    config = read_config(write(tmp_path, "b.py", bare))
    assert config.decides(linear(64, 40), "anything")  # torchao without a filter converts every nn.Linear


def test_filter_function_sees_no_file_system(tmp_path):
    text = TORCHAO.replace("if any(name in fqn for name in SKIP):", "if open('/etc/passwd'):")
    with pytest.raises(ConfigError, match=r"the call `open\('/etc/passwd'\)`"):
        read_config(write(tmp_path, "train.py", text))
    with pytest.raises(ConfigError, match="cannot supply without running the file: open"):
        read_config(write(tmp_path, "train.py", text), trust_config=True)  # run: without `open`


def test_filter_function_error_is_a_config_error(tmp_path):
    text = TORCHAO.replace("min(module.weight.shape) >= MIN_DIM", "module.weight.shape[7] > 0")
    config = read_config(write(tmp_path, "train.py", text))
    with pytest.raises(ConfigError, match="raised on 'layers.0.wq': IndexError"):
        config.decides(linear(64, 64), "layers.0.wq")


# --- Python filters are evaluated from their syntax, never run (unless --trust-config) ----------------------


def torchao_file(filter_source: str, filter_name: str = "module_filter_fn") -> str:
    """A torchao config whose module filter is `filter_source` (module-level statements, then the call)."""
    return (
        "import torch\n"
        "from torch import nn\n"
        "from torchao.float8 import Float8LinearConfig, convert_to_float8_training\n\n"
        + textwrap.dedent(filter_source).strip()
        + "\n\nconvert_to_float8_training(\n"
        '    model, config=Float8LinearConfig.from_recipe_name("rowwise"),'
        f" module_filter_fn={filter_name}\n)\n"
    )


#: (module, fqn) pairs every filter below is asked about: shapes on both sides of % 16 and of 1024.
PROBES = [
    (linear(4096, 4096), "layers.0.attention.wq"),
    (linear(4096, 1024), "layers.0.attention.wk"),
    (linear(4096, 1000), "layers.0.feed_forward.w9"),  # N % 16 != 0
    (linear(512, 4096), "layers.1.feed_forward.w1"),
    (linear(4096, 128256), "output"),
    (nn.LayerNorm(64, device="meta"), "layers.0.norm"),  # not an nn.Linear
]

EVALUATED_FILTERS = [
    # torchao's README example
    (
        """
        def module_filter_fn(mod: torch.nn.Module, fqn: str):
            # don't convert the last module
            if fqn == "output":
                return False
            # don't convert linear modules with weight dimensions not divisible by 16
            if isinstance(mod, torch.nn.Linear):
                if mod.in_features % 16 != 0 or mod.out_features % 16 != 0:
                    return False
            return True
        """,
        [True, True, False, True, False, True],
    ),
    # what `suggest --format torchao` writes: an exact set, a docstring
    (
        '''
        FLOAT8_LAYERS = frozenset(
            {
                "layers.0.attention.wq",
                "layers.1.feed_forward.w1",
            }
        )


        def module_filter_fn(module, fqn):
            """True: convert this nn.Linear to float8."""
            return fqn in FLOAT8_LAYERS
        ''',
        [True, False, False, True, False, False],
    ),
    # substring entries from a module constant, the three-parameter torchtitan shape with a default
    (
        """
        SKIP = ["output", "attention.wk"]

        def module_filter_fn(module, fqn, filter_fqns=SKIP):
            if not isinstance(module, nn.Linear):
                return False
            if any(entry in fqn for entry in filter_fqns):
                return False
            return module.in_features % 16 == 0 and module.out_features % 16 == 0
        """,
        [True, False, False, True, False, False],
    ),
    # a loop with break, locals, startswith / endswith / split, a shape subscript, min, chained comparison
    (
        """
        MIN_DIM = 1024
        KEEP = ("output",)

        def module_filter_fn(module, fqn):
            keep = False
            for name in KEEP:
                if fqn.endswith(name):
                    keep = True
                    break
            last = fqn.split(".")[-1]
            if keep or last.startswith("w9") or not isinstance(module, (nn.Linear,)):
                return False
            return MIN_DIM <= min(module.weight.shape) <= 8192 and module.weight.shape[0] >= 1024
        """,
        [True, True, False, False, False, False],
    ),
    # a lambda at module level, a conditional expression, `not in` on a literal set
    (
        """
        module_filter_fn = lambda m, fqn: (fqn not in {"output", "layers.0.attention.wk"}) if (
            isinstance(m, nn.Linear)
        ) else False
        """,
        [True, False, True, True, False, False],
    ),
]


@pytest.mark.parametrize(("source", "expected"), EVALUATED_FILTERS)
def test_python_filter_is_evaluated_as_python_would_run_it(tmp_path, source, expected):
    path = tmp_path / "train.py"
    path.write_text(torchao_file(source))
    evaluated = read_config(path)
    run = read_config(path, trust_config=True)
    assert "--trust-config" not in evaluated.rule and "--trust-config" in run.rule
    assert [evaluated.decides(module, fqn) for module, fqn in PROBES] == expected
    assert [run.decides(module, fqn) for module, fqn in PROBES] == expected


def _chain(*parts: str) -> tuple[str, str]:
    """A chained comparison from `operand, operator, operand, operator, operand...`, and the misreading that
    compares the first operand with every later one (`a < b < c` as `a < b and a < c`)."""
    operands, operators = parts[::2], parts[1::2]
    misread = " and ".join(
        f"{operands[0]} {op} {right}" for op, right in zip(operators, operands[1:], strict=True)
    )
    return " ".join(parts), misread


def _chained_comparisons() -> list[tuple[str, str]]:
    """Every combination of a few bounds and operators: `lo <= in_features <= hi` both ways round, three-link
    chains through out_features, equality and inequality chains, strings and `in`. The bounds lie on both
    sides of the probe widths, so that in many cases the first comparison holds and a later one decides."""
    bounds = ("16", "32", "1024", "4096")
    down = {"<": ">", "<=": ">="}
    chains = []
    for lo, hi in itertools.product(bounds, repeat=2):
        for first, second in itertools.product(("<", "<="), repeat=2):
            chains.append(_chain(lo, first, "module.in_features", second, hi))
            chains.append(_chain(hi, down[first], "module.in_features", down[second], lo))
            chains.append(_chain(lo, first, "module.in_features", second, "module.out_features", "<", hi))
    for width in bounds:
        chains.append(_chain("module.in_features", "==", "module.out_features", "==", width))
        chains.append(_chain("module.in_features", "!=", width, "!=", "module.out_features"))
        chains.append(
            _chain("0", "<", f"module.in_features % {width}", "==", f"module.out_features % {width}")
        )
    chains.append(_chain("'layers'", "<=", "fqn", "<", "'layers.1'"))
    chains.append(_chain("'attention'", "in", "fqn", "in", "NAMES"))
    return chains


#: What a chained comparison is checked on: widths below, between and above the bounds, under every name.
CHAIN_PROBES = [
    (linear(K, N), fqn)
    for K, N in itertools.product((8, 16, 24, 32, 1024, 4096, 8192), repeat=2)
    for fqn in ("layers.0.attention.wq", "layers.1.feed_forward.w1", "output")
]


def test_chained_comparisons_are_evaluated_as_python_evaluates_them(tmp_path):
    """`a < b < c` is `a < b and b < c`, with b evaluated once: each chain, evaluated from the file, must
    answer as Python's own run of the same function on every probe, including the many cases where the first
    comparison holds and a later one decides (`16 <= module.in_features <= 32` on a 4096-wide layer)."""
    path = tmp_path / "train.py"
    misread_differs = 0
    for chain, misread in _chained_comparisons():
        source = (
            "NAMES = ('layers.0.attention.wq', 'output')\n\n"
            f"def module_filter_fn(module, fqn):\n    return {chain}\n"
        )
        path.write_text(torchao_file(source))
        evaluated = read_config(path)
        python: dict = {"nn": nn}
        exec(source + f"\ndef misread(module, fqn):\n    return {misread}\n", python)
        for module, fqn in CHAIN_PROBES:
            expected = python["module_filter_fn"](module, fqn)
            assert evaluated.decides(module, fqn) is expected, (chain, module, fqn)
            misread_differs += python["misread"](module, fqn) is not expected
    assert misread_differs > 1000  # cases where the later links decide are many, not one


MARKER_FILTERS = [
    # the filter body
    """
    def module_filter_fn(module, fqn):
        torch.os.system("touch {marker}")
        return True
    """,
    # a default argument (Python evaluates it when it runs the `def`)
    """
    def module_filter_fn(module, fqn, _=__import__("os").system("touch {marker}")):
        return True
    """,
    # a lambda
    """
    module_filter_fn = lambda module, fqn: torch.os.system("touch {marker}") == 0
    """,
    # a call reached for one layer only, inside a comparison
    """
    def module_filter_fn(module, fqn):
        return fqn == "output" and __import__("os").system("touch {marker}") == 0
    """,
]


@pytest.mark.parametrize("source", MARKER_FILTERS)
def test_filter_code_never_runs_without_trust_config(tmp_path, source):
    marker = tmp_path / "ran"
    path = tmp_path / "train.py"
    path.write_text(torchao_file(source.format(marker=marker)))
    with pytest.raises(ConfigError, match=r"train.py:\d+: cannot evaluate the call `.*system") as caught:
        config = read_config(path)
        for module, fqn in PROBES:  # not reached: refused when the file is read
            config.decides(module, fqn)
    assert "--trust-config" in caught.value.message
    assert not marker.exists()


#: Module-level code that changes the constant `SKIP = ['a', 'b']` through an item or a slice, and that item.
ITEM_CHANGES = [
    ("SKIP[0] = 'output'", "SKIP[0]"),
    ("del SKIP[0]", "SKIP[0]"),
    ("del SKIP[1:]", "SKIP[1:]"),
    ("for SKIP[0] in ['output']:\n    pass", "SKIP[0]"),
    ("def _prepare():\n    SKIP[0] = 'output'\n\n_prepare()", "SKIP[0]"),
    ("def _prepare():\n    SKIP[:] = ['output']\n\n_prepare()", "SKIP[:]"),
    ("def _prepare():\n    SKIP[-1] += '.wq'\n\n_prepare()", "SKIP[-1]"),
    ("def _prepare():\n    del SKIP[0]\n\n_prepare()", "SKIP[0]"),
    ("def _prepare():\n    if True:\n        del SKIP[-1]\n\n_prepare()", "SKIP[-1]"),
    ("class Setup:\n    SKIP[0] = 'output'", "SKIP[0]"),
]


@pytest.mark.parametrize("change", [change for change, _ in ITEM_CHANGES])
def test_each_item_change_really_changes_the_constant_when_the_file_runs(change):
    # Why these are refused: evaluated from its source, SKIP would be ['a', 'b']; the file runs with another.
    namespace: dict = {}
    exec(f"SKIP = ['a', 'b']\n{change}\n", namespace)
    assert namespace["SKIP"] != ["a", "b"]


def _filter(body: str, before: str = "") -> str:
    return f"{before}\ndef module_filter_fn(module, fqn):\n    {body}\n"


@pytest.mark.parametrize(
    ("source", "construct"),
    [
        (_filter("return getattr(module, 'in_features') > 0"), "the call `getattr"),
        (_filter("return f'{fqn}' == 'output'"), "an f-string"),
        (_filter("while True:\n        pass"), "a while loop"),
        (_filter("import os\n    return True"), "an import"),
        (_filter("return type(module) is nn.Linear"), "the call `type(module)`"),
        (_filter("return module.__class__ is nn.Linear"), "`module.__class__`"),
        (_filter("return fqn in {'a': 1}"), "a dict"),
        (_filter("return any(fqn, default=False)"), "the call `any(fqn, default=False)`"),
        ("@staticmethod" + _filter("return True"), "the decorator `@staticmethod`"),
        ("def module_filter_fn(module, fqn, *rest):\n    return True\n", "*args"),
        ("def module_filter_fn(module):\n    return True\n", "a filter of 1 parameters"),
        # names the file rebinds are not what they seem
        (_filter("return any([fqn])", "def any(x):\n    return True\n"), "the call `any([fqn])`"),
        (_filter("return isinstance(module, nn.Linear)", "nn = None"), "the class `nn.Linear`"),
        (
            _filter("return fqn in SKIP", "SKIP = ['a']\nSKIP.append('output')"),
            "a change of the constant `SKIP`",
        ),
        (_filter("return fqn in SKIP", "SKIP = ['a']\nSKIP = ['b']"), "the name `SKIP`"),
        # a constant changed through an item or a slice, at module level or in a helper run at import
        *[
            (
                _filter("return fqn not in SKIP", f"SKIP = ['a', 'b']\n{change}"),
                f"a change of the constant `SKIP` (`{item}`)",
            )
            for change, item in ITEM_CHANGES
        ],
        (_filter("return helper(fqn)", "from mypackage import helper"), "the call `helper(fqn)`"),
    ],
)
def test_filter_constructs_outside_the_evaluator_are_refused_by_name(tmp_path, source, construct):
    path = tmp_path / "train.py"
    path.write_text(torchao_file(source))
    with pytest.raises(ConfigError, match=r"train.py:\d+: cannot evaluate") as caught:
        read_config(path)
    assert construct in caught.value.message and "--trust-config" in caught.value.message


def test_filter_value_the_evaluator_cannot_use_is_refused_on_that_layer(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(torchao_file(_filter("return module == 'output'")))
    config = read_config(path)  # the syntax is fine; comparing a module with == would run its class's code
    with pytest.raises(ConfigError, match=r"on 'output'.*--trust-config"):
        config.decides(linear(64, 64), "output")


def test_trust_config_runs_what_the_evaluator_refuses(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(torchao_file(_filter("return getattr(module, 'in_features') > 1000")))
    with pytest.raises(ConfigError, match="--trust-config"):
        read_config(path)
    config = read_config(path, trust_config=True)
    assert config.decides(linear(4096, 64), "a") and not config.decides(linear(64, 4096), "b")


# --- bare filter lists --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("filter.json", json.dumps(["output", "attention.wk"])),
        ("filter.yaml", "# generated\n- output\n- attention.wk\n"),
        ("filter.yml", "filter_fqns: [output, attention.wk]\n"),
    ],
)
def test_filter_lists(tmp_path, name, text):
    config = read_config(write(tmp_path, name, text), recipe="rowwise")
    assert config.framework is ConfigFormat.FILTER
    assert config.recipe is Recipe.ROWWISE
    assert not config.decides(linear(4096, 1024), "layers.1.attention.wk")
    assert config.decides(linear(4096, 4096), "layers.1.attention.wq")


def test_filter_list_without_recipe_needs_one(tmp_path):
    config = read_config(write(tmp_path, "filter.json", json.dumps([AUTO_FILTER_FLAG])))
    assert config.recipe is None
    with pytest.raises(ValueError, match="with_recipe"):
        config.decides(linear(4096, 4096), "x")
    tensorwise = config.with_recipe(Recipe.TENSORWISE)
    assert not tensorwise.decides(linear(4096, 1024), "x")  # torchao tensorwise: K <= 4096 and N <= 1024
    assert tensorwise.decides(linear(4096, 2048), "x")


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("missing.toml", None, "no such config file"),
        ("notes.txt", "hello", "unsupported config file type .txt"),
        ("filter.json", "{not json", "not valid JSON"),
        ("filter.yaml", "a: [", "not valid YAML"),
        ("filter.json", json.dumps({"layers": []}), "no filter list"),
        ("filter.json", json.dumps([1, 2]), "list of strings"),
    ],
)
def test_unusable_files(tmp_path, name, text, message):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        read_config(path)


def test_decides_is_torchaos_module_filter(tmp_path):
    """The predicate plugs into convert_to_float8_training as the framework's own filter would."""
    from torchao.float8 import convert_to_float8_training
    from torchao.float8.float8_linear import Float8Linear

    config = read_config(write(tmp_path, "job.toml", TOML_ROWWISE))
    model = nn.ModuleDict(
        {"output": nn.Linear(64, 64), "attention": nn.ModuleDict({"wq": nn.Linear(64, 64)})}
    )
    convert_to_float8_training(model, module_filter_fn=config.decides)
    assert isinstance(model["attention"]["wq"], Float8Linear)
    assert not isinstance(model["output"], Float8Linear)
    assert torch.is_tensor(model["output"].weight)


@pytest.mark.parametrize(
    "text, framework",
    [
        (
            "from torchtitan.trainer import Trainer\n\n"
            "def recipe() -> Trainer.Config:\n    return Trainer.Config()\n",
            "torchtitan-py",
        ),
        (
            'from accelerate import Accelerator\n\naccelerator = Accelerator(mixed_precision="bf16")\n',
            "accelerate",
        ),
    ],
)
def test_hand_written_python_without_float8_reads_as_fp8_off(tmp_path, text, framework):
    """No float8 call and no header: the framework from what the file imports or calls, and FP8 off."""
    path = tmp_path / "train.py"
    path.write_text(text)
    config = read_config(path)
    assert config.framework.value == framework and not config.enabled
    assert any(note.startswith("FP8 is off") for note in config.notes)


def test_python_without_float8_or_framework_is_still_an_error(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("import torch\n\ndef convert_model(model):\n    return torch.compile(model)\n")
    with pytest.raises(ConfigError, match="sets up no float8 training"):
        read_config(path)
