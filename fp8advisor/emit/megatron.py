"""Megatron-Core with Transformer Engine: the advice in Megatron's module names, as the per-module precision
config file of core_v0.16 and later, and as the positional flags every version has.

What Megatron does (read in NVIDIA/Megatron-LM at tag core_v0.16.0; the matcher code is unchanged through
core_v0.19.0):

- `--te-precision-config-file FILE` (megatron/training/arguments.py) is YAML read with `yaml.SafeLoader`
  (megatron/core/quantization/quant_config.py, `RecipeConfig.from_yaml_file`): `configs` (name -> a
  `TEQuantizationParams` dict whose `training_recipe` holds `fp8_quantization_recipe` and `fp8_format`, or is
  `{}` for bf16) and `matchers` (name -> `type: glob`, `pattern`, `config`, `enabled`). Matchers are tried in
  file order; a disabled one is skipped; the first whose pattern matches the module path with
  `fnmatch.fnmatch` chooses the config (`*` matches any characters, dots included).
- The module path is the name in `GPTModel.named_modules()` (megatron/core/models/gpt/gpt_model.py, which
  calls `finish_init` on every module that has it). Only Transformer Engine's linear modules have it
  (megatron/core/extensions/transformer_engine.py: TELinear and its column/row-parallel subclasses,
  TELayerNormColumnParallelLinear, the grouped linears): in a Llama-style decoder `linear_qkv`,
  `linear_proj`, `linear_fc1`, `linear_fc2` of each `decoder.layers.N`. `output_layer` is Megatron's own
  `ColumnParallelLinear`, never float8.
- A config with a recipe overrides a layer that runs quantized (`override_quantized_autocast`, default
  true); a bf16 config (`training_recipe: {}`) forces bf16 there. A config does not turn float8 on in a layer
  that runs unquantized (`override_nonquantized_autocast`, default false): `--fp8-format` must be given.
  `delayed` is refused in a per-module config.
- `decoder.layers.N` counts the layers of one pipeline stage (transformer_block.py builds `self.layers` from
  the stage's own layer specs), while `--first-last-layers-bf16 --num-layers-at-start-in-bf16 N
  --num-layers-at-end-in-bf16 M` (megatron/core/fp8_utils.py `is_first_last_bf16_layer`) counts global
  layers and keeps whole layers in bf16; it refuses the delayed recipe and more than num_layers / pipeline
  stages at either end (transformer_config.py).

The advice is per Linear of the model fp8advisor traced; Megatron fuses q, k, v into `linear_qkv` and the
SwiGLU gate and up projections into `linear_fc1`, one GEMM each, so those are decided again as one GEMM
(`fused_rule`).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fp8advisor.advice.linears import Predictor, decide_layers
from fp8advisor.advice.records import Advice, LayerAdvice
from fp8advisor.errors import ConfigError
from fp8advisor.inspect.folding import fold_repeated
from fp8advisor.inspect.records import GemmLayer, LayerStatus
from fp8advisor.recipes import Recipe, dims_supported

#: Where the facts above were read.
MEGATRON_SOURCE = "NVIDIA/Megatron-LM core_v0.16.0"

QKV = "self_attention.linear_qkv"
PROJ = "self_attention.linear_proj"
FC1 = "mlp.linear_fc1"
FC2 = "mlp.linear_fc2"
#: The Transformer Engine linear modules of one GPT decoder layer, in the order Megatron registers them.
BLOCK_MODULES = (PROJ, QKV, FC1, FC2)
HEAD = "output_layer"

#: A Linear's name inside a decoder layer -> (its Megatron module, the part of that module it is).
_PARTS = {
    # torchtitan 0.2 Llama
    "attention.wq": (QKV, "q"),
    "attention.wk": (QKV, "k"),
    "attention.wv": (QKV, "v"),
    "attention.wo": (PROJ, "o"),
    "feed_forward.w1": (FC1, "gate"),
    "feed_forward.w3": (FC1, "up"),
    "feed_forward.w2": (FC2, "down"),
    # torchtitan 0.3 Llama 3: fused qkv
    "attention.qkv_linear.wqkv": (QKV, "qkv"),
    # Hugging Face Llama-style decoders (Llama, Mistral, Qwen2/3, ...); Phi-3 fuses qkv and gate_up
    "self_attn.q_proj": (QKV, "q"),
    "self_attn.k_proj": (QKV, "k"),
    "self_attn.v_proj": (QKV, "v"),
    "self_attn.qkv_proj": (QKV, "qkv"),
    "self_attn.o_proj": (PROJ, "o"),
    "mlp.gate_proj": (FC1, "gate"),
    "mlp.up_proj": (FC1, "up"),
    "mlp.gate_up_proj": (FC1, "gate_up"),
    "mlp.down_proj": (FC2, "down"),
}
#: The part sets that make up each Megatron module (separate projections, or the model's own fused one).
_COMPLETE = {
    QKV: ({"q", "k", "v"}, {"qkv"}),
    PROJ: ({"o"},),
    FC1: ({"gate", "up"}, {"gate_up"}),
    FC2: ({"down"},),
}
#: The order in which a fused module's parts are listed (and their N summed).
_PART_ORDER = ("q", "k", "v", "qkv", "o", "gate", "up", "gate_up", "down")
_HEADS = ("output", "lm_head")
_LAYER_NAME = re.compile(r"^(?P<prefix>(?:\w+\.)*?)layers\.(?P<index>\d+)\.(?P<inner>.+)$")

#: The fused-module rules, as the file states them.
RULE_PREDICTED = (
    "its own prediction as one GEMM at (K, sum of the parts' N), with the advice's profile and recipe"
)
RULE_SUM = "the sum of its parts' predicted times (bf16 over float8) against the min speedup"


@dataclass(frozen=True)
class MegatronModule:
    """One Transformer Engine linear module (or the head) of Megatron's GPTModel and its float8 decision."""

    name: str  # decoder.layers.3.mlp.linear_fc1, output_layer
    layer: int | None  # None for the head
    parts: tuple[LayerAdvice, ...]  # the model's layers it is made of
    K: int
    N: int
    float8: bool  # the advice for this module as Megatron runs it (fused modules: one decision)
    speedup: float | None
    bf16_time_s: float
    float8_time_s: float

    @property
    def fqn(self) -> str:  # for `inspect.folding.fold_repeated`
        return self.name

    @property
    def fused(self) -> bool:
        return len(self.parts) > 1


@dataclass(frozen=True)
class PositionalFlags:
    """`--first-last-layers-bf16` at its best for this advice: whole layers at each end kept in bf16."""

    n_layers: int
    start: int  # --num-layers-at-start-in-bf16
    end: int  # --num-layers-at-end-in-bf16
    converts_against_advice: tuple[MegatronModule, ...]  # advised bf16, run in float8
    gives_up: tuple[MegatronModule, ...]  # advised float8, kept in bf16
    predicted_speedup: float | None

    @property
    def fp8_enabled(self) -> bool:
        return self.start + self.end < self.n_layers

    def arguments(self, recipe: Recipe) -> str:
        if not self.fp8_enabled:
            return "(no --fp8-format: every layer in bf16)"
        words = f"--fp8-format {te_format(recipe)} --fp8-recipe {te_recipe(recipe)}"
        if self.start or self.end:
            words += (
                f" --first-last-layers-bf16 --num-layers-at-start-in-bf16 {self.start}"
                f" --num-layers-at-end-in-bf16 {self.end}"
            )
        return words


@dataclass(frozen=True)
class MegatronPlan:
    """The advice mapped onto Megatron's GPTModel: its block modules, its head and the fused-module rule."""

    n_layers: int
    modules: tuple[MegatronModule, ...]  # every TE linear module of the decoder, by layer then BLOCK_MODULES
    head: MegatronModule | None
    fused_rule: str

    @property
    def float8_names(self) -> tuple[str, ...]:
        return tuple(module.name for module in self.modules if module.float8)

    def predicted_speedup(self, float8: Iterable[str]) -> float | None:
        """All-bf16 Linear time / Linear time with exactly `float8` in float8 (the head always bf16)."""
        chosen = set(float8)
        timed = [*self.modules, *([self.head] if self.head else [])]
        bf16 = sum(module.bf16_time_s for module in timed)
        mixed = sum(module.float8_time_s if module.name in chosen else module.bf16_time_s for module in timed)
        return bf16 / mixed if bf16 > 0 and mixed > 0 else None


#: torchao recipe -> (Megatron's --fp8-recipe / fp8_quantization_recipe, TE's fp8_format). tensorwise is TE's
#: Float8CurrentScaling (e4m3 forward, e5m2 gradients: "hybrid"); mxfp8_rceil is TE's MXFP8BlockScaling
#: (megatron/core/extensions/transformer_engine.py `_get_fp8_autocast_for_quant_recipe`, core_v0.16), 1x32
#: E8M0 block scales with e4m3 elements for every operand, gradients included, as torchao's MXFP8 Linear casts
#: them (torchao/prototype/moe_training/mxfp8_linear.py:61-63): "e4m3".
TE_RECIPES = {Recipe.TENSORWISE: ("tensorwise", "hybrid"), Recipe.MXFP8_RCEIL: ("mxfp8", "e4m3")}


def te_recipe(recipe: Recipe) -> str:
    """Megatron's name of the Transformer Engine recipe for torchao's `recipe` (`TE_RECIPES`)."""
    return TE_RECIPES[recipe][0]


def te_format(recipe: Recipe) -> str:
    """Transformer Engine's fp8_format for torchao's `recipe` (`TE_RECIPES`)."""
    return TE_RECIPES[recipe][1]


def check_recipe(recipe: Recipe | str) -> Recipe:
    """The recipe, when Transformer Engine has its equivalent (`TE_RECIPES`); a ConfigError otherwise."""
    recipe = Recipe(recipe)
    if recipe not in TE_RECIPES:
        raise ConfigError(
            f"Transformer Engine has no {recipe.value} recipe: its float8 recipes are tensorwise (per-tensor "
            "current scaling), delayed, blockwise (1x128 and 128x128 blocks) and mxfp8 (1x32 blocks, "
            f"grad_weight in MXFP8), and torchao's {recipe.value} figures predict none of them",
            hint="use --recipe tensorwise (or auto), or mxfp8 on Blackwell, with --format megatron: torchao "
            "tensorwise maps to Megatron's --fp8-recipe tensorwise, mxfp8_rceil to --fp8-recipe mxfp8",
        )
    return recipe


def _unmappable(names: Sequence[str], why: str, recipe: Recipe) -> ConfigError:
    shown = ", ".join(row.pattern for row in fold_repeated(_Named(name) for name in names)[:6])
    # accelerate has no MXFP8 recipe (config_file.check_format_recipe refuses it)
    others = "--format torchao" if recipe.is_mx else "--format torchao or accelerate"
    return ConfigError(
        f"--format megatron cannot name {len(names)} Linear layer(s) in Megatron's GPTModel ({why}): {shown}",
        hint="the format needs a Llama/GPT-style decoder (q/k/v, o, gate/up, down projections in "
        f"layers.N, a head named output or lm_head); use {others} for this model",
    )


@dataclass(frozen=True)
class _Named:
    fqn: str


def _locate(advice: Advice) -> tuple[dict[tuple[int, str], dict[str, LayerAdvice]], LayerAdvice | None]:
    """The advice's Linear layers by (layer index, Megatron module) -> {part: LayerAdvice}, and the head."""
    blocks: dict[tuple[int, str], dict[str, LayerAdvice]] = {}
    head = None
    prefixes = set()
    unknown = []
    for layer in advice.layers:
        if not layer.is_linear or layer.status is LayerStatus.NOT_CALLED:
            continue  # float8 never swaps it, or it never runs: nothing to name
        if layer.fqn in _HEADS:
            head = layer
            continue
        match = _LAYER_NAME.match(layer.fqn)
        mapped = _PARTS.get(match["inner"]) if match else None
        if match is None or mapped is None:
            unknown.append(layer.fqn)
            continue
        prefixes.add(match["prefix"])
        module, part = mapped
        blocks.setdefault((int(match["index"]), module), {})[part] = layer
    if unknown:
        raise _unmappable(unknown, "no Megatron module of a GPT decoder layer or head", advice.recipe)
    if len(prefixes) > 1:
        parents = ", ".join(sorted(prefix or "(top)" for prefix in prefixes))
        names = sorted(layer.fqn for parts in blocks.values() for layer in parts.values())
        raise _unmappable(names, f"layers under {len(prefixes)} different parents ({parents})", advice.recipe)
    return blocks, head


def _check_complete(blocks: dict[tuple[int, str], dict[str, LayerAdvice]], recipe: Recipe) -> int:
    """The number of layers, once every layer 0..L-1 has each module with a complete set of parts."""
    indices = sorted({index for index, _ in blocks})
    if indices != list(range(len(indices))):
        raise _unmappable(
            [f"layers.{index}" for index in indices],
            "layer indices must run 0, 1, 2, ... as Megatron's do",
            recipe,
        )
    incomplete = []
    for index in indices:
        for module in BLOCK_MODULES:
            parts = set(blocks.get((index, module), {}))
            if parts not in [set(complete) for complete in _COMPLETE[module]]:
                names = sorted(layer.fqn for layer in blocks.get((index, module), {}).values())
                incomplete += names or [f"layers.{index} (no {module.split('.')[-1]})"]
    if incomplete:
        raise _unmappable(
            incomplete, "a decoder layer without exactly q/k/v, o, gate/up and down projections", recipe
        )
    return len(indices)


def _fused_decision(
    parts: Sequence[LayerAdvice], advice: Advice, predictor: Predictor | None
) -> tuple[bool, float | None, float, float]:
    """(float8, speedup, bf16 s, float8 s) of the GEMM Megatron runs for `parts` (q, k, v or gate, up)."""
    K = parts[0].K
    N = sum(part.N for part in parts)
    if any(part.K != K for part in parts):
        raise _unmappable(
            [part.fqn for part in parts], "fused parts must read the same input (equal K)", advice.recipe
        )
    if not all(part.counts_in_linear_time for part in parts):
        return False, None, 0.0, 0.0
    if predictor is not None:
        fused = GemmLayer(
            fqn=f"fused({', '.join(part.fqn for part in parts)})",
            cls="Linear",
            K=K,
            N=N,
            M_per_call=(parts[0].M,) * parts[0].calls,
            status=LayerStatus.TRACED,
        )
        (decided,) = decide_layers(
            [fused], advice.recipe, predictor, advice.min_speedup, advice.tensor_parallel
        )
        return decided.convert, decided.predicted_speedup, decided.bf16_time_s, decided.float8_time_s
    bf16 = sum(part.bf16_time_s for part in parts)
    float8 = sum(part.float8_time_s for part in parts)
    speedup = bf16 / float8 if float8 > 0 else None
    runs = dims_supported(advice.recipe, K, N)
    convert = speedup is not None and runs and speedup >= advice.min_speedup
    # a GEMM the recipe cannot run (K or N not a multiple of 16; 32 for MXFP8) stays at its bf16 time, as in
    # decide_layers
    return convert, speedup, bf16, float8 if runs else bf16


def _module(
    name: str, layer: int | None, parts: Sequence[LayerAdvice], advice: Advice, predictor: Predictor | None
) -> MegatronModule:
    if len(parts) > 1:
        float8, speedup, bf16_s, float8_s = _fused_decision(parts, advice, predictor)
    else:
        (part,) = parts
        float8, speedup, bf16_s, float8_s = (
            part.convert,
            part.predicted_speedup,
            part.bf16_time_s,
            part.float8_time_s,
        )
    return MegatronModule(
        name=name,
        layer=layer,
        parts=tuple(parts),
        K=parts[0].K,
        N=sum(part.N for part in parts),
        float8=float8,
        speedup=speedup,
        bf16_time_s=bf16_s,
        float8_time_s=float8_s,
    )


def plan(advice: Advice, predictor: Predictor | None = None) -> MegatronPlan:
    """The advice on Megatron's GPTModel. `predictor`: the advice's own (`advice.linears.default_predictor` of
    its profile) to decide each fused module as one GEMM; without it, by the sum of its parts' predicted
    times. Raises ConfigError (exit 2) for a model whose Linear layers do not map, or a recipe TE does not
    have."""
    check_recipe(advice.recipe)
    blocks, head_layer = _locate(advice)
    n_layers = _check_complete(blocks, advice.recipe)
    modules = []
    for index in range(n_layers):
        for module in BLOCK_MODULES:
            named = blocks[(index, module)]
            parts = [named[part] for part in _PART_ORDER if part in named]
            modules.append(_module(f"decoder.layers.{index}.{module}", index, parts, advice, predictor))
    head = _module(HEAD, None, [head_layer], advice, None) if head_layer is not None else None
    return MegatronPlan(n_layers, tuple(modules), head, RULE_PREDICTED if predictor is not None else RULE_SUM)


# --- the precision config file ------------------------------------------------------------------------------


def float8_config_name(recipe: Recipe) -> str:
    return f"float8_{recipe.value}"


def precision_config(plan: MegatronPlan, recipe: Recipe) -> dict:
    """The `--te-precision-config-file` document: a float8 and a bf16 config, and ordered glob matchers that
    put exactly `plan.float8_names` in float8 and every other TE module in bf16."""
    float8 = float8_config_name(recipe)
    matchers: dict[str, dict] = {}

    def add(key: str, pattern: str, config: str) -> None:
        matchers[key] = {"config": config, "type": "glob", "pattern": pattern, "enabled": True}

    for module in BLOCK_MODULES:
        short = module.split(".")[-1]
        members = [m for m in plan.modules if m.name.endswith("." + module)]
        in_float8 = [m for m in members if m.float8]
        if not in_float8:
            continue  # the default matcher keeps them in bf16
        if len(in_float8) * 2 <= len(members) and len(in_float8) < len(members):
            for m in in_float8:
                add(f"{short}_layer_{m.layer}_float8", m.name, float8)
            continue
        for m in members:  # the exceptions first: the first matching matcher wins
            if not m.float8:
                add(f"{short}_layer_{m.layer}_bf16", m.name, "bf16")
        add(f"{short}_float8", f"decoder.layers.*.{module}", float8)
    add("default_bf16", "*", "bf16")
    return {
        "configs": {
            float8: {
                "transformer_engine_config_type": "TEQuantizationParams",
                # TE_RECIPES: tensorwise casts grad_output to e5m2 (TE's "hybrid"), MXFP8 all to e4m3
                "training_recipe": {
                    "fp8_quantization_recipe": te_recipe(recipe),
                    "fp8_format": te_format(recipe),
                },
            },
            "bf16": {"transformer_engine_config_type": "TEQuantizationParams", "training_recipe": {}},
        },
        "matchers": matchers,
    }


def names_layer_by_layer(document: dict) -> bool:
    """True when a matcher names one layer: right only with one pipeline stage (Megatron numbers
    `decoder.layers.N` per stage)."""
    return any("*" not in matcher["pattern"] for matcher in document["matchers"].values())


def first_match_config(document: dict, module_path: str) -> str | None:
    """The config Megatron's `RecipeConfig.match_to_config_key` picks for `module_path`: the first enabled
    glob matcher, in file order, whose pattern `fnmatch.fnmatch`es it; None when none does."""
    for matcher in document.get("matchers", {}).values():
        if matcher.get("enabled", False) and fnmatch.fnmatch(module_path, matcher["pattern"]):
            return matcher["config"]
    return None


def check_selects_exactly(plan: MegatronPlan, document: dict) -> None:
    """The document, matched as Megatron matches it, puts exactly the plan's float8 modules in float8."""
    float8 = document["configs"]
    chosen = {
        module.name
        for module in plan.modules
        if (float8.get(first_match_config(document, module.name) or "", {}).get("training_recipe") or {})
    }
    if chosen != set(plan.float8_names):  # a bug in precision_config, never the user's input
        raise AssertionError(f"precision config selects {sorted(chosen ^ set(plan.float8_names))} wrongly")


# --- positional flags (every Megatron version) ----------------------------------------------------------


def positional_flags(plan: MegatronPlan) -> PositionalFlags:
    """The start/end bf16 layer counts with the lowest predicted Linear time (ties: the fewest modules run
    against the advice, then the fewest layers kept in bf16), and what they lose against the plan."""
    L = plan.n_layers
    # per layer: (bf16 s, float8 s, modules against the advice in bf16, ... in float8)
    per_layer = [[0.0, 0.0, 0, 0] for _ in range(L)]
    for module in plan.modules:
        row = per_layer[module.layer]
        row[0] += module.bf16_time_s
        row[1] += module.float8_time_s
        row[2] += module.float8
        row[3] += not module.float8

    def prefix(column: int) -> list:
        sums = [0]
        for row in per_layer:
            sums.append(sums[-1] + row[column])
        return sums

    bf16, float8, against_bf16, against_float8 = (prefix(column) for column in range(4))

    def cost(span: tuple[int, int]) -> tuple[float, int, int, int]:
        start, end = span
        stop = L - end  # layers start..stop-1 run in float8
        total = bf16[L] - (bf16[stop] - bf16[start]) + (float8[stop] - float8[start])
        against = against_bf16[L] - (against_bf16[stop] - against_bf16[start])
        against += against_float8[stop] - against_float8[start]
        return float(f"{total:.12g}"), against, start + end, start

    start, end = min(((s, e) for s in range(L + 1) for e in range(L + 1 - s)), key=cost)
    in_float8 = {m.name for m in plan.modules if start <= m.layer < L - end}
    return PositionalFlags(
        n_layers=L,
        start=start,
        end=end,
        converts_against_advice=tuple(m for m in plan.modules if m.name in in_float8 and not m.float8),
        gives_up=tuple(m for m in plan.modules if m.float8 and m.name not in in_float8),
        predicted_speedup=plan.predicted_speedup(in_float8),
    )


def folded(modules: Iterable[MegatronModule]) -> str:
    """Module names with their layer indices as ranges: `decoder.layers.{0..31}.self_attention.linear_qkv`."""
    return ", ".join(row.pattern for row in fold_repeated(modules)) or "none"


__all__ = [
    "BLOCK_MODULES",
    "HEAD",
    "MEGATRON_SOURCE",
    "MegatronModule",
    "MegatronPlan",
    "PositionalFlags",
    "TE_RECIPES",
    "check_recipe",
    "te_format",
    "te_recipe",
    "check_selects_exactly",
    "first_match_config",
    "folded",
    "names_layer_by_layer",
    "plan",
    "positional_flags",
    "precision_config",
]
