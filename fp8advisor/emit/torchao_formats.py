"""The configs of the frameworks that convert through torchao's Float8Linear, and the bare filter list.

  nemo-automodel    YAML with `compile:` (enabled: true) and `fp8:` (enabled: true, explicit recipe_name,
                    filter_fqns).
  accelerate        Python: `Accelerator(mixed_precision="fp8", kwargs_handlers=[AORecipeKwargs(config=
                    Float8LinearConfig.from_recipe_name(...), module_filter_func=module_filter_func)])`.
  torchao           Python: `convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(
                    ...), module_filter_fn=module_filter_fn)`, and for grouped MoE experts `quantize_` with
                    torchao's Float8TrainingOpConfig.
  filter            the filter_fqns list: YAML (default), or a JSON object with the header when the output
                    file ends in .json.

The substring formats (nemo-automodel, filter) carry `Advice.filter_fqns`, proven by simulation to convert the
advised set (or the safe subset when no list can be exact). The two Python formats carry an exact filter: a
top-level function testing `fqn in FLOAT8_LAYERS`, a sorted literal frozenset of the advised FQNs, so they
convert exactly the advice. When the advice converts nothing, the `*_off` files leave float8 off (NeMo
AutoModel `fp8: enabled: false`, accelerate `mixed_precision="bf16"`, torchao without
`convert_to_float8_training`); the filter list has no switch.
"""

from __future__ import annotations

import yaml

from fp8advisor.advice.records import Advice
from fp8advisor.emit.experts import converted_expert_modules, pads_inner_dim
from fp8advisor.emit.header import FP8_OFF_NOTE
from fp8advisor.emit.syntax import comment, quoted, string_list_lines
from fp8advisor.frameworks.formats import ConfigFormat
from fp8advisor.json_output import dumps
from fp8advisor.request import SuggestRequest


def nemo_automodel(advice: Advice, header: list[str]) -> str:
    """NeMo AutoModel's `compile:` and `fp8:` sections, with filter_fqns."""
    document = {
        "compile": {"enabled": True, "mode": "default", "fullgraph": False, "dynamic": False},
        "fp8": {
            "enabled": True,
            "recipe_name": advice.recipe.value,
            "enable_fsdp_float8_all_gather": False,
            "precompute_float8_dynamic_scale_for_fsdp": False,
            "force_recompute_fp8_weight_in_bwd": False,
            "filter_fqns": list(advice.filter_fqns),
            "emulate": False,
        },
    }
    notes = [
        "NeMo AutoModel: merge the compile: and fp8: sections into your recipe YAML.",
        "fp8.filter_fqns keeps in bf16 every nn.Linear whose FQN contains an entry (substring match).",
        "FP8 GEMMs need token counts divisible by 16: pad as NeMo AutoModel's fp8 examples do",
        "(dataloader: collate_fn: pad_seq_len_divisible: 16).",
    ]
    body = yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=1000)
    return comment(header) + comment(notes) + body


def _exact_set_literal(fqns: tuple[str, ...]) -> str:
    """The frozenset literal of `fqns`, one per line in their order, as Python source."""
    if not fqns:
        return "frozenset()"
    return "frozenset(\n    {\n" + string_list_lines(fqns, " " * 8) + "    }\n)"


def _linear_config(advice: Advice) -> str:
    """The torchao Float8LinearConfig expression of the torchao and accelerate files."""
    config = f"Float8LinearConfig.from_recipe_name({quoted(advice.recipe.value)})"
    if pads_inner_dim(advice):  # routed expert Linears: per-expert M not a multiple of 16 (`pads_inner_dim`)
        return f"dataclasses.replace({config}, pad_inner_dim=True)"
    return config


def accelerate(advice: Advice, header: list[str]) -> str:
    """An `Accelerator` with torchao float8 on exactly the advised Linear layers."""
    return (
        comment(header)
        + '"""accelerate with torchao float8 on exactly the Linear layers fp8advisor advised.\n'
        + "\n"
        + "Build your model and call accelerator.prepare(model, ...) with this `accelerator`. The FQNs\n"
        + "are those of the module you prepare (its named_modules() names).\n"
        + '"""\n'
        + "\n"
        + "from accelerate import Accelerator\n"
        + "from accelerate.utils import AORecipeKwargs\n"
        + "from torchao.float8 import Float8LinearConfig\n"
        + ("import dataclasses\n" if pads_inner_dim(advice) else "")
        + "\n"
        + f"FLOAT8_LAYERS = {_exact_set_literal(advice.module_filter_fqns)}\n"
        + "\n"
        + "\n"
        + "def module_filter_func(module, fqn):\n"
        + '    """True: convert this nn.Linear to float8. An exact FQN match, no substring rule."""\n'
        + "    return fqn in FLOAT8_LAYERS\n"
        + "\n"
        + "\n"
        + "accelerator = Accelerator(\n"
        + '    mixed_precision="fp8",\n'
        + '    dynamo_backend="inductor",  # float8 without torch.compile is slower than bf16\n'
        + "    kwargs_handlers=[\n"
        + "        AORecipeKwargs(\n"
        + f"            config={_linear_config(advice)},\n"
        + "            module_filter_func=module_filter_func,\n"
        + "        )\n"
        + "    ],\n"
        + ")\n"
    )


def torchao(advice: Advice, header: list[str]) -> str:
    """`convert_model(model)`: torchao float8 on exactly the advised Linear layers and MoE experts."""
    experts = converted_expert_modules(advice, ConfigFormat.TORCHAO)
    linear = bool(advice.convert_fqns)
    imports = ("import dataclasses\n\n" if linear and pads_inner_dim(advice) else "") + "import torch\n"
    constants = functions = calls = ""
    if linear:
        imports += "from torchao.float8 import Float8LinearConfig, convert_to_float8_training\n"
        constants += f"FLOAT8_LAYERS = {_exact_set_literal(advice.module_filter_fqns)}\n"
        functions += (
            "\n"
            "\n"
            "def module_filter_fn(module, fqn):\n"
            '    """True: convert this nn.Linear to float8. An exact FQN match, no substring rule."""\n'
            "    return fqn in FLOAT8_LAYERS\n"
        )
        calls += (
            "    convert_to_float8_training(\n"
            "        model,\n"
            f"        config={_linear_config(advice)},\n"
            "        module_filter_fn=module_filter_fn,\n"
            "    )\n"
        )
    if experts:
        imports += (
            "from torchao.prototype.moe_training.config import Float8TrainingOpConfig\n"
            "from torchao.quantization.quant_api import quantize_\n"
        )
        constants += f"FLOAT8_EXPERTS = {_exact_set_literal(experts)}\n"
        functions += (
            "\n"
            "\n"
            "def expert_filter_fn(module, fqn):\n"
            '    """True: swap its expert weights for float8 grouped GEMMs. An exact FQN match."""\n'
            "    return fqn in FLOAT8_EXPERTS\n"
        )
        calls += (
            "    # float8 rowwise grouped GEMMs (torch._grouped_mm on these weights), any Linear recipe\n"
            "    quantize_(model, config=Float8TrainingOpConfig(), filter_fn=expert_filter_fn)\n"
        )
    what = (
        "torchao float8 training on exactly the Linear layers fp8advisor advised.\n"
        if not experts
        else "torchao float8 training on exactly the Linear layers and MoE experts fp8advisor advised.\n"
    )
    return (
        comment(header)
        + '"""'
        + what
        + "\n"
        + "Call convert_model(model) on the module whose FQNs these are, before wrapping it for data\n"
        + "parallelism: it converts the advised layers and returns the model compiled (torch.compile).\n"
        + '"""\n'
        + "\n"
        + imports
        + "\n"
        + constants
        + functions
        + "\n"
        + "\n"
        + "def convert_model(model: torch.nn.Module) -> torch.nn.Module:\n"
        + calls
        + "    return torch.compile(model)  # float8 without torch.compile is slower than bf16\n"
    )


def filter_list(advice: Advice, header: list[str], *, as_json: bool) -> str:
    """The filter_fqns list: YAML with the header as comments, or a JSON object (`filter_json`)."""
    entries = list(advice.filter_fqns)
    if as_json:
        return filter_json(advice, header)
    note = ["filter_fqns: keep in bf16 every nn.Linear whose FQN contains an entry (substring match)."]
    if not advice.convert_fqns:
        note.append("This list keeps every layer in bf16: better leave FP8 off in the config that uses it.")
    body = yaml.safe_dump(entries, default_flow_style=False, width=1000) if entries else "[]\n"
    return comment(header) + comment(note) + body


def filter_json(advice: Advice, header: list[str]) -> str:
    """JSON has no comments: the header is the object's first members, `generated_by` (its first line, alone
    on the file's first line, which is how `fp8advisor.files.is_generated_config` knows the file) and
    `header` (the rest, the check command with it), then `recipe` and `filter_fqns`."""
    rest = {"header": header[1:], "recipe": advice.recipe.value, "filter_fqns": list(advice.filter_fqns)}
    members = dumps(rest, indent=2)  # "{\n  ...\n}": the first line is replaced below
    return f'{{"generated_by": {dumps(header[0])},\n{members[2:]}\n'


def nemo_automodel_off(header: list[str], _request: SuggestRequest) -> str:
    """NeMo AutoModel's `fp8: enabled: false`."""
    notes = ["NeMo AutoModel: merge the fp8: section into your recipe YAML. " + FP8_OFF_NOTE]
    body = yaml.safe_dump({"fp8": {"enabled": False}}, sort_keys=False, default_flow_style=False)
    return comment(header) + comment(notes) + body


def accelerate_off(header: list[str], _request: SuggestRequest) -> str:
    """An `Accelerator(mixed_precision="bf16")`."""
    return (
        comment(header)
        + '"""accelerate in bf16: fp8advisor advised no layer for float8. '
        + FP8_OFF_NOTE
        + '"""\n'
        + "\n"
        + "from accelerate import Accelerator\n"
        + "\n"
        + 'accelerator = Accelerator(mixed_precision="bf16")\n'
    )


def torchao_off(header: list[str], _request: SuggestRequest) -> str:
    """`convert_model(model)` that only compiles: no convert_to_float8_training."""
    return (
        comment(header)
        + '"""No torchao float8: fp8advisor advised no layer. '
        + FP8_OFF_NOTE
        + "\n"
        + "\n"
        + "convert_model(model) returns the model compiled, in bf16, so that the call site stays the same.\n"
        + '"""\n'
        + "\n"
        + "import torch\n"
        + "\n"
        + "\n"
        + "def convert_model(model: torch.nn.Module) -> torch.nn.Module:\n"
        + "    return torch.compile(model)  # no convert_to_float8_training: bf16\n"
    )


__all__ = [
    "accelerate",
    "accelerate_off",
    "filter_list",
    "nemo_automodel",
    "nemo_automodel_off",
    "torchao",
    "torchao_off",
]
