"""How a config's framework converts a model's grouped MoE experts (3-D weights), on any model (the meta
model included): torchao and torchtitan 0.2 with torchao's own `quantize_(model, Float8TrainingOpConfig(),
filter_fn=<the file's filter>)` (or its MXFP8 config), torchtitan 0.3 every expert group (its converter has no
filter). `verify`, `suggest --current` and `trace --config` all ask this module which groups a file converts.
"""

from __future__ import annotations

from torch import nn

from fp8advisor import compat
from fp8advisor.frameworks.config_record import FrameworkConfig
from fp8advisor.frameworks.formats import expert_modules


def swapped_expert_modules(model: nn.Module, *, mx: bool = False) -> set[str]:
    """FQNs of the modules whose own parameters torchao's moe_training swapped to its float8 weight wrapper
    (`Float8TrainingWeightWrapperTensor`: its `torch._grouped_mm` calls run float8 grouped GEMMs), or with
    `mx` to its MXFP8 one (`MXFP8TrainingWeightWrapperTensor`; nn.Linear layers, which the same MXFP8
    `quantize_` swaps, are not counted: they are Linear layers, checked as such)."""
    wrapper = compat.mx_weight_tensor_class() if mx else compat.float8_training_weight_wrapper()
    return {
        fqn
        for fqn, module in model.named_modules()
        if not (mx and isinstance(module, nn.Linear))
        and any(isinstance(p, wrapper) for p in module.parameters(recurse=False))
    }


def convert_experts(model: nn.Module, config: FrameworkConfig, groups) -> set[str]:
    """Convert the grouped experts of `model` in place as the config's framework would; return the modules
    whose parameters were swapped. torchao and torchtitan 0.2: torchao's own `quantize_(model,
    Float8TrainingOpConfig(), filter_fn=<the file's filter>)`. torchtitan 0.3 swaps every GroupedExperts, a
    torchtitan class a model of any other code does not have: simulated as every module of every group."""
    if not config.converts_experts:
        return set()
    if config.expert_filter is None:
        return {module for group in groups for module in expert_modules(group)}
    if config.recipe is not None and config.recipe.is_mx:  # torchao's quantize_ with its MXFP8 config
        from torchao.quantization import quantize_

        from fp8advisor.recipes import mx_config

        quantize_(model, mx_config(config.recipe, emulate=True), filter_fn=config.expert_filter)
        return swapped_expert_modules(model, mx=True)
    compat.quantize_grouped_experts(model, config.expert_filter)
    return swapped_expert_modules(model)


def groups_in_float8(model: nn.Module, config: FrameworkConfig, groups) -> tuple:
    """The `groups` (each with `.members`, the FQNs of its 3-D weights) the config converts whole on `model`
    (converted in place): every module holding their weights swapped."""
    swapped = convert_experts(model, config, groups)
    return tuple(group for group in groups if all(module in swapped for module in expert_modules(group)))


__all__ = ["convert_experts", "groups_in_float8", "swapped_expert_modules"]
