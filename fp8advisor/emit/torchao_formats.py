"""The configs of the frameworks that convert through torchao's Float8Linear, and the bare filter list.

  nemo-automodel    YAML with `compile:` (enabled: true) and `fp8:` (enabled: true, explicit recipe_name,
                    enable_fsdp_float8_all_gather as requested, filter_fqns).
  accelerate        Python: `Accelerator(mixed_precision="fp8", kwargs_handlers=[AORecipeKwargs(config=
                    FLOAT8_CONFIG, module_filter_func=module_filter_func)])`.
  torchao           Python: `convert_to_float8_training(model, config=FLOAT8_CONFIG, module_filter_fn=
                    module_filter_fn)`, and for grouped MoE experts `quantize_` with torchao's
                    Float8TrainingOpConfig.
  filter            the filter_fqns list: YAML (default), or a JSON object with the header when the output
                    file ends in .json.

The substring formats (nemo-automodel, filter) carry `Advice.filter_fqns`, proven by simulation to convert the
advised set (or the safe subset when no list can be exact). The two Python formats carry an exact filter: a
top-level function testing `fqn in FLOAT8_LAYERS`, a sorted literal frozenset of the advised FQNs, so they
convert exactly the advice. `verify` runs NeMo AutoModel's, accelerate's and torchao's own conversion on each
where installed (`fp8advisor.verification.native_torchao`). The Python formats' `FLOAT8_CONFIG` is
`dataclasses.replace(Float8LinearConfig.from_recipe_name(...), enable_fsdp_float8_all_gather=...,
pad_inner_dim=...)`, both settings written out (`_float8_config`): accelerate hands a `config=` to torchao as
it is, without its own defaults (accelerate 1.15 `AORecipeKwargs.__post_init__` sets pad_inner_dim and
all-gather true only when config is None), so the file says each. FSDP float8 all-gather is the request's
`--float8-all-gather` (the step was predicted with it; NeMo AutoModel writes it as
`fp8.enable_fsdp_float8_all_gather`). pad_inner_dim is false, as the profiles' figures were measured
(torchao's default: no padding), with the loud note that token counts must be multiples of 16 (`TOKENS_NOTE`,
as the NeMo file says), unless the advice converts a layer whose token count is not (`pads_tokens`: routed
expert Linears, or an odd batch x seq), which only runs padded.

When the advice converts nothing, the `*_off` files leave float8 off (NeMo
AutoModel `fp8: enabled: false`, accelerate `mixed_precision="bf16"`, torchao without
`convert_to_float8_training`); the filter list has no switch.
"""

from __future__ import annotations

import textwrap

import yaml

from fp8advisor.advice.records import Advice
from fp8advisor.emit.experts import converted_expert_modules, pads_inner_dim
from fp8advisor.emit.header import FP8_OFF_NOTE
from fp8advisor.emit.syntax import comment, exact_set_literal, quoted
from fp8advisor.errors import ConfigError
from fp8advisor.frameworks.formats import ConfigFormat
from fp8advisor.json_output import dumps
from fp8advisor.recipes import Recipe
from fp8advisor.request import SuggestRequest

#: What the NeMo AutoModel file says about token counts (its fp8: keys have no padding switch; the torchao and
#: accelerate files say it beside their pad_inner_dim=False).
TOKENS_NOTE = (
    "FP8 GEMMs need token counts divisible by 16: pad as NeMo AutoModel's fp8 examples do",
    "(dataloader: collate_fn: pad_seq_len_divisible: 16).",
)


def nemo_automodel(advice: Advice, header: list[str], request: SuggestRequest | None = None) -> str:
    """NeMo AutoModel's `compile:` and `fp8:` sections, with filter_fqns and the request's FSDP float8
    all-gather (NeMo 0.7 `apply_fp8_to_model` applies it with tensorwise, the recipe it needs; the scale
    precompute with it, which NeMo runs only then)."""
    all_gather = _all_gather(advice, request)
    document = {
        "compile": {"enabled": True, "mode": "default", "fullgraph": False, "dynamic": False},
        "fp8": {
            "enabled": True,
            "recipe_name": advice.recipe.value,
            "enable_fsdp_float8_all_gather": all_gather,
            "precompute_float8_dynamic_scale_for_fsdp": all_gather,
            "force_recompute_fp8_weight_in_bwd": False,
            "filter_fqns": list(advice.filter_fqns),
            "emulate": False,
        },
    }
    notes = [
        "NeMo AutoModel: merge the compile: and fp8: sections into your recipe YAML.",
        "fp8.filter_fqns keeps in bf16 every nn.Linear whose FQN contains an entry (substring match).",
        *TOKENS_NOTE,
    ]
    if all_gather:
        notes += [
            "fp8.enable_fsdp_float8_all_gather: FSDP2 all-gathers the converted weights in float8, as the",
            "step was predicted (--float8-all-gather); with the scale precompute torchao recommends for it.",
        ]
    body = yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=1000)
    return comment(header) + comment(notes) + body


def _all_gather(advice: Advice, request: SuggestRequest | None) -> bool:
    """FSDP float8 all-gather as the request asks (`suggest` chose tensorwise for it, the one recipe that has
    it; `advice.step.StepConfig.check` refused any other)."""
    if request is None or not request.float8_all_gather:
        return False
    if advice.recipe is not Recipe.TENSORWISE:  # a request `suggest` never advises with
        raise ConfigError(
            f"--float8-all-gather needs the tensorwise recipe, not {advice.recipe.value}",
            hint="drop --float8-all-gather, or use --recipe tensorwise",
        )
    return True


def pads_tokens(advice: Advice) -> bool:
    """Whether a layer the advice converts multiplies a token count that is not a multiple of 16, which
    float8's grad_weight GEMM (torch._scaled_mm) refuses unless torchao pads it: routed expert Linears
    (`emit.experts.pads_inner_dim`), or an advised layer whose M at this batch x seq is odd."""
    return pads_inner_dim(advice) or any(layer.convert and layer.M % 16 for layer in advice.layers)


def _float8_config(advice: Advice, request: SuggestRequest | None, framework: str) -> str:
    """`FLOAT8_CONFIG = ...` of the torchao and accelerate files: the recipe, then FSDP float8 all-gather and
    pad_inner_dim written out, each with why (`framework`: whose defaults they replace)."""
    all_gather = _all_gather(advice, request)
    pad = pads_tokens(advice)
    lead = (
        "torchao's Float8LinearConfig for the advised recipe, both settings below written out: accelerate "
        "hands a config=... to torchao as it is, and its own defaults (pad_inner_dim=True, "
        "enable_fsdp_float8_all_gather=True) apply only when no config is given."
        if framework == "accelerate"
        else "torchao's Float8LinearConfig for the advised recipe, both settings below written out."
    )
    precompute = (
        "accelerate precomputes their scales after each optimizer step (Accelerator._prepare_ao)."
        if framework == "accelerate"
        else "after each optimizer.step(), call "
        "torchao.float8.precompute_float8_dynamic_scale_for_fsdp(model)."
    )
    gather_why = (
        "FSDP2 all-gathers the converted weights in float8, as the step was predicted (--float8-all-gather); "
        + precompute
        if all_gather
        else "FSDP all-gathers the weights in bf16, as the step was predicted (no --float8-all-gather)."
    )
    pad_why = (
        "pad: some layer advised here multiplies a token count that is not a multiple of 16, which float8's "
        "grad_weight GEMM needs; torchao pads it (the prediction does not count the padding)."
        if pad
        else "no padding, as the advice was predicted: every step's token count per GPU (batch x seq) MUST "
        "be a multiple of 16, or float8's grad_weight GEMM fails: pad sequences to a multiple of 16 (as "
        "NeMo AutoModel's pad_seq_len_divisible: 16 does)."
    )
    return (
        _comment_block(lead, "")
        + "FLOAT8_CONFIG = dataclasses.replace(\n"
        + f"    Float8LinearConfig.from_recipe_name({quoted(advice.recipe.value)}),\n"
        + _comment_block(gather_why, "    ")
        + f"    enable_fsdp_float8_all_gather={all_gather},\n"
        + _comment_block(pad_why, "    ")
        + f"    pad_inner_dim={pad},\n"
        + ")\n"
    )


def _comment_block(text: str, indent: str) -> str:
    """`text` as `# ` comment lines at `indent`, within 110 columns."""
    width = 110 - len(indent) - 2
    return "".join(f"{indent}# {line}\n" for line in textwrap.wrap(text, width, break_on_hyphens=False))


def accelerate(advice: Advice, header: list[str], request: SuggestRequest | None = None) -> str:
    """An `Accelerator` with torchao float8 on exactly the advised Linear layers, its `FLOAT8_CONFIG` written
    out (`_float8_config`)."""
    return (
        comment(header)
        + '"""accelerate with torchao float8 on exactly the Linear layers fp8advisor advised.\n'
        + "\n"
        + "Build your model and call accelerator.prepare(model, ...) with this `accelerator`. The FQNs\n"
        + "are those of the module you prepare (its named_modules() names).\n"
        + '"""\n'
        + "\n"
        + "import dataclasses\n"
        + "\n"
        + "from accelerate import Accelerator\n"
        + "from accelerate.utils import AORecipeKwargs\n"
        + "from torchao.float8 import Float8LinearConfig\n"
        + "\n"
        + _float8_config(advice, request, "accelerate")
        + "\n"
        + f"FLOAT8_LAYERS = {exact_set_literal(advice.module_filter_fqns)}\n"
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
        + "            config=FLOAT8_CONFIG,\n"
        + "            module_filter_func=module_filter_func,\n"
        + "        )\n"
        + "    ],\n"
        + ")\n"
    )


def torchao(advice: Advice, header: list[str], request: SuggestRequest | None = None) -> str:
    """`convert_model(model)`: torchao float8 (or MXFP8: `emit.mx.torchao_body`) on exactly the advised Linear
    layers and MoE experts."""
    experts = converted_expert_modules(advice, ConfigFormat.TORCHAO)
    if advice.recipe.is_mx:
        return _torchao_mx(advice, header, experts)
    linear = bool(advice.convert_fqns)
    imports = ("import dataclasses\n\n" if linear else "") + "import torch\n"
    constants = functions = calls = ""
    if linear:
        imports += "from torchao.float8 import Float8LinearConfig, convert_to_float8_training\n"
        constants += _float8_config(advice, request, "torchao") + "\n"
        constants += f"FLOAT8_LAYERS = {exact_set_literal(advice.module_filter_fqns)}\n"
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
            "        config=FLOAT8_CONFIG,\n"
            "        module_filter_fn=module_filter_fn,\n"
            "    )\n"
        )
    if experts:
        imports += (
            "from torchao.prototype.moe_training.config import Float8TrainingOpConfig\n"
            "from torchao.quantization.quant_api import quantize_\n"
        )
        constants += f"FLOAT8_EXPERTS = {exact_set_literal(experts)}\n"
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


def _torchao_mx(advice: Advice, header: list[str], experts: tuple[str, ...]) -> str:
    """The torchao file for an MXFP8 recipe: one `quantize_` with torchao's MXFP8 config, an exact filter."""
    from fp8advisor.emit.mx import torchao_body

    imports, constants, call = torchao_body(advice, advice.module_filter_fqns, experts)
    what = "Linear layers and MoE experts" if experts else "Linear layers"
    return (
        comment(header)
        + f'"""torchao MXFP8 training ({advice.recipe.value}) on exactly the {what} fp8advisor advised.\n'
        + "\n"
        + "Call convert_model(model) on the module whose FQNs these are, before wrapping it for data\n"
        + "parallelism: it converts the advised layers and returns the model compiled (torch.compile).\n"
        + '"""\n'
        + "\n"
        + ("import dataclasses\n\n" if experts else "")
        + "import torch\n"
        + imports
        + "\n"
        + constants
        + "\n"
        + "\n"
        + "def convert_model(model: torch.nn.Module) -> torch.nn.Module:\n"
        + call
        + "    return torch.compile(model)  # MXFP8 without torch.compile is slower than bf16\n"
    )


def filter_list(advice: Advice, header: list[str], request: SuggestRequest, *, as_json: bool) -> str:
    """The filter_fqns list: YAML with the header as comments, or a JSON object (`filter_json`). A list has no
    switch for FSDP float8 all-gather: with --float8-all-gather its header's model line says it is on, and the
    YAML says to turn it on where the list is used."""
    entries = list(advice.filter_fqns)
    if as_json:
        return filter_json(advice, header)
    note = ["filter_fqns: keep in bf16 every nn.Linear whose FQN contains an entry (substring match)."]
    if not advice.convert_fqns:
        note.append("This list keeps every layer in bf16: better leave FP8 off in the config that uses it.")
    elif _all_gather(advice, request):
        note.append(
            "The prediction is for FSDP float8 all-gather (tensorwise): turn it on in the config that uses "
            "this list (torchtitan, NeMo AutoModel: enable_fsdp_float8_all_gather)."
        )
    body = yaml.safe_dump(entries, default_flow_style=False, width=1000) if entries else "[]\n"
    return comment(header) + comment(note) + body


def filter_json(advice: Advice, header: list[str]) -> str:
    """JSON has no comments: the header is the object's first members, `generated_by` (its first line, alone
    on the file's first line, which is how `fp8advisor.files.is_generated_config` knows the file) and
    `header` (the rest, the check command with it), then `recipe` and `filter_fqns`."""
    rest = {"header": header[1:], "recipe": advice.recipe.value, "filter_fqns": list(advice.filter_fqns)}
    members = dumps(rest, indent=2)  # "{\n  ...\n}": the first line is replaced below
    return f'{{"generated_by": {dumps(header[0])},\n{members[2:]}\n'


def nemo_automodel_off(header: list[str], _request: SuggestRequest, _advice: Advice) -> str:
    """NeMo AutoModel's `fp8: enabled: false`."""
    notes = ["NeMo AutoModel: merge the fp8: section into your recipe YAML. " + FP8_OFF_NOTE]
    body = yaml.safe_dump({"fp8": {"enabled": False}}, sort_keys=False, default_flow_style=False)
    return comment(header) + comment(notes) + body


def accelerate_off(header: list[str], _request: SuggestRequest, _advice: Advice) -> str:
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


def torchao_off(header: list[str], _request: SuggestRequest, _advice: Advice) -> str:
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
    "TOKENS_NOTE",
    "exact_set_literal",
    "accelerate",
    "accelerate_off",
    "filter_list",
    "nemo_automodel",
    "nemo_automodel_off",
    "pads_tokens",
    "torchao",
    "torchao_off",
]
