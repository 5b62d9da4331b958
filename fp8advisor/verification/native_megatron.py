"""Megatron-Core's own reading of a `--te-precision-config-file` (what `suggest --format megatron` writes), on
the module names of a real Megatron `GPTModel`.

What Megatron does with the file (megatron-core 0.16.1, read in its source):

- `megatron/core/quantization/utils.py` `load_quantization_recipe(path)` ->
  `quant_config.RecipeConfig.from_yaml_file` (yaml.SafeLoader; the enabled glob matchers in file order);
- `megatron/core/models/gpt/gpt_model.py` `GPTModel.__init__` ends with: for every `(name, module)` of
  `self.named_modules()` that has `finish_init`, `get_quant_config_or_none(name, config.quant_recipe)` (the
  first matcher whose `fnmatch` pattern matches the name picks a config key) and `module.finish_init(...)`;
- `megatron/core/extensions/transformer_engine.py`: only Transformer Engine's linear modules have
  `finish_init`, and parse the picked config with `TEQuantizationParams.parse_from_config`; a training
  recipe with an fp8 (or fp4) quantization recipe runs that module quantized, `training_recipe: {}` forces
  bf16 (`_get_fp8_autocast_for_quant_recipe`).

The model is built here, on the meta device, as Megatron's unit tests build one: a gloo process group of world
size 1, `parallel_state.initialize_model_parallel(1, 1)`, a tiny `TransformerConfig` with the target's number
of decoder layers (names do not depend on widths), `GPTModel` with the local layer spec
(`get_gpt_layer_local_spec`): Transformer Engine has no CPU build, and its spec cannot be made without it.
The local spec puts Megatron's own `ColumnParallelLinear` / `RowParallelLinear` in exactly the slots where
the Transformer Engine spec (`get_gpt_layer_with_transformer_engine_spec`) puts Transformer Engine's linear
modules (`linear_qkv`, `linear_proj`, `linear_fc1`, `linear_fc2` of each `decoder.layers.N`); `output_layer`
is Megatron's own ColumnParallelLinear in both, without `finish_init`. So the modules matched here are the
parallel linears under `decoder`: those the Transformer Engine model calls `finish_init` on. Megatron's
matcher and its config parser then run as they are; nothing is lifted.

A module whose config is quantized runs float8 only with `--fp8-format` on the command line (the config does
not turn float8 on in an unquantized context, `override_nonquantized_autocast` false): the file's header
says to pass it; this check assumes it. A file Megatron refuses (an assertion in its matcher, a config its
parser rejects) is a ConfigError naming Megatron-Core.
"""

from __future__ import annotations

import contextlib
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

from fp8advisor.errors import ConfigError, describe_error
from fp8advisor.verification.native import NativeConversion, NotRun, installed_version

FRAMEWORK = "Megatron-Core"


@contextlib.contextmanager
def _model_parallel_world_of_one() -> Iterator[None]:
    """A gloo process group of world size 1 and Megatron's model-parallel state (TP 1, PP 1), as Megatron's
    unit tests set them up; torn down on exit unless they were up already."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    started_group = not dist.is_initialized()
    with tempfile.TemporaryDirectory() as folder:
        if started_group:
            dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=0, world_size=1)
        started_state = not parallel_state.model_parallel_is_initialized()
        try:
            if started_state:
                parallel_state.initialize_model_parallel(1, 1)
            yield
        finally:
            if started_state:
                parallel_state.destroy_model_parallel()
            if started_group:
                dist.destroy_process_group()


def gpt_model_te_linear_names(n_layers: int) -> list[str]:
    """The names `GPTModel.named_modules()` gives its Transformer Engine linear modules for `n_layers` decoder
    layers, from a real GPTModel (local spec: see the module docstring), in its order."""
    return [name for name in gpt_model_parallel_linears(n_layers) if name.startswith("decoder.")]


def gpt_model_parallel_linears(n_layers: int) -> dict[str, str]:
    """Every tensor-parallel linear module of a real GPTModel of `n_layers` decoder layers, in its order, with
    the split Megatron builds it with: "colwise" (ColumnParallelLinear) or "rowwise" (RowParallelLinear)."""
    import torch
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer.transformer_config import TransformerConfig

    config = TransformerConfig(
        num_layers=n_layers,
        hidden_size=64,
        num_attention_heads=4,
        ffn_hidden_size=128,
        gated_linear_unit=True,  # SwiGLU: gate and up fused in linear_fc1, as in Llama
        add_bias_linear=False,
        use_cpu_initialization=True,
    )
    with _model_parallel_world_of_one(), torch.device("meta"):
        model = GPTModel(config, get_gpt_layer_local_spec(), vocab_size=128, max_sequence_length=64)
    return {
        name: "colwise" if isinstance(module, ColumnParallelLinear) else "rowwise"
        for name, module in model.named_modules()
        if isinstance(module, (ColumnParallelLinear, RowParallelLinear))
    }


def megatron_float8_modules(path: str | Path, n_layers: int) -> frozenset[str]:
    """The GPTModel modules (Megatron's names) that Megatron-Core runs quantized with the precision config at
    `path`, for a model of `n_layers` decoder layers: its own loader, matcher and config parser."""
    from megatron.core.extensions.transformer_engine import TEQuantizationParams
    from megatron.core.quantization.utils import get_quant_config_or_none, load_quantization_recipe

    names = gpt_model_te_linear_names(n_layers)
    try:
        recipe = load_quantization_recipe(str(path))
        float8 = set()
        for name in names:
            picked = get_quant_config_or_none(name, recipe)
            if picked is None:
                continue  # no matcher: the module runs as the command line says
            training = TEQuantizationParams.parse_from_config(picked).training_recipe
            if training.fp8_quantization_recipe is not None or training.fp4_quantization_recipe is not None:
                float8.add(name)
    except Exception as error:  # noqa: BLE001 - Megatron's own refusal (AssertionError, ValueError, KeyError)
        raise ConfigError(
            f"{FRAMEWORK} rejects this precision config: {describe_error(error)}",
            location=str(path),
            hint="write it again with `fp8advisor suggest --format megatron`",
        ) from error
    return frozenset(float8)


def megatron_conversion(path: str | Path, n_layers: int) -> NativeConversion | NotRun:
    """What Megatron-Core puts in float8 with the precision config at `path` for a model of `n_layers`
    decoder layers (`megatron_float8_modules`, its import-time warnings silenced): `linear_fqns` are
    Megatron's module names (`decoder.layers.N.mlp.linear_fc1`). NotRun when Megatron-Core is not installed
    or cannot be imported here."""
    version = installed_version("megatron-core")
    if version is None:
        return NotRun(FRAMEWORK, "not installed (pip install megatron-core)")
    framework = f"{FRAMEWORK} {version}"
    try:
        with warnings.catch_warnings():  # Megatron's import-time notes (no Apex, ...) say nothing here
            warnings.filterwarnings("ignore", module=r"megatron\.")
            float8 = megatron_float8_modules(path, n_layers)
    except ImportError as error:
        return NotRun(FRAMEWORK, f"{framework} cannot be run here ({describe_error(error)})")
    notes = ("assumes --fp8-format on the command line, as the file's header says",)
    return NativeConversion(framework, float8, None, (*notes, "names: Megatron's GPTModel modules"))


__all__ = [
    "FRAMEWORK",
    "gpt_model_parallel_linears",
    "gpt_model_te_linear_names",
    "megatron_conversion",
    "megatron_float8_modules",
]
