"""The shadow of a model too large to build here (an 8B or 70B shape), which `verify`'s step runs instead.

A module tree with the same FQNs in which each nn.Linear is a real Linear with K and N capped at
`SHADOW_MAX_DIM` (plus K % 32 and N % 32, so divisibility by 16 and 32 is kept), called as many times as the
traced forward called the real one (layers the forward never calls are not called). Which layers convert is
still decided by the framework's filter on the real-shaped meta model, so the conversion check stays exact.
What a shadow
cannot show: the user's forward itself (a layer bypassed at run time but not when traced on the meta device)
and the model's own activations (its numerics use random inputs). The report says which was used.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from fp8advisor.frameworks.config_record import FrameworkConfig
from fp8advisor.inspect.records import LayerStatus
from fp8advisor.verification.conversion import convert

if TYPE_CHECKING:
    from fp8advisor.verification.execution import ExecutionDevice

#: The shadow of a large model caps K and N at this (plus K % 32, N % 32, so divisibility is kept).
SHADOW_MAX_DIM = 128


def _reduced(dim: int) -> int:
    """`dim` capped at `SHADOW_MAX_DIM`, keeping its remainder by 32 (MXFP8's scale block; 16's with it)."""
    return dim if dim <= SHADOW_MAX_DIM else SHADOW_MAX_DIM + dim % 32


class _Shadow(nn.Module):
    """Same FQNs as the model, each Linear at reduced size, called in the traced order and number."""

    def __init__(self, model: nn.Module, call_plan: Sequence[tuple[str, int]], dtype: torch.dtype, device):
        super().__init__()
        for fqn, module in model.named_modules():
            if not isinstance(module, nn.Linear):
                continue
            parent: nn.Module = self
            parts = fqn.split(".")
            for part in parts[:-1]:
                child = getattr(parent, part, None)
                if not isinstance(child, nn.Module):
                    child = nn.Module()
                    parent.add_module(part, child)
                parent = child
            out_features, in_features = module.weight.shape
            linear = nn.Linear(
                _reduced(in_features),
                _reduced(out_features),
                bias=module.bias is not None,
                dtype=dtype,
                device=device,
            )
            parent.add_module(parts[-1], linear)
        self.call_plan = tuple((fqn, calls) for fqn, calls in call_plan if calls > 0)

    def example_inputs(self, tokens: int, seed: int) -> dict[str, torch.Tensor]:
        generator = torch.Generator().manual_seed(seed)
        modules = dict(self.named_modules())
        inputs = {}
        for fqn, _ in self.call_plan:
            linear = modules[fqn]
            x = torch.randn(tokens, linear.in_features, generator=generator)
            inputs[fqn] = x.to(device=linear.weight.device, dtype=linear.weight.dtype)
        return inputs

    def forward(self, inputs: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        modules = dict(self.named_modules())
        outputs = []
        for fqn, calls in self.call_plan:
            for _ in range(calls):
                outputs.append(modules[fqn](inputs[fqn]))
        return outputs


def shadow_models(
    shapes_model: nn.Module,
    linear_layers: Sequence,
    config: FrameworkConfig,
    converted: set[str],
    device: ExecutionDevice,
    seed: int,
) -> tuple[_Shadow, _Shadow]:
    """The bf16 shadow of the model and its float8 twin, converted by the framework's filter on the real
    shapes (so the same layers convert as on the meta model)."""
    recipe = config.recipe
    assert recipe is not None
    plan = [(layer.fqn, layer.calls or int(layer.status is LayerStatus.ASSUMED)) for layer in linear_layers]
    torch.manual_seed(seed)
    bf16_model = _Shadow(shapes_model, plan, torch.bfloat16, device.device)
    # The float8 twin shares the bf16 shadow's weights (conversion swaps modules, not weights; nothing writes
    # them): one set in memory, the same values in both.
    float8_model = copy.deepcopy(bf16_model, memo={id(p): p for p in bf16_model.parameters()})
    shadow_converted = convert(float8_model, config, recipe, emulate=device.emulate, decide_on=shapes_model)
    # The shadow holds each module once, under its first name: aliases are checked on `converted` alone.
    shadow_fqns = {fqn for fqn, _ in bf16_model.named_modules()}  # once: per layer it was quadratic
    expected = converted & shadow_fqns
    if shadow_converted != expected:  # pragma: no cover - the replayed filter must give the same set
        raise AssertionError(f"shadow conversion differs: {sorted(shadow_converted ^ expected)}")
    return bf16_model, float8_model


__all__ = ["SHADOW_MAX_DIM", "shadow_models"]
