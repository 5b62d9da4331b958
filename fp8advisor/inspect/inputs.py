"""Inputs for one forward of a built model: the user's `example_inputs(batch, seq)` when the file has one,
else token ids when the model starts with an embedding, else a (batch, seq, K) float tensor."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from fp8advisor.errors import CompatError, ModelInputsError
from fp8advisor.inspect.sandbox import (
    describe_error,
    object_location,
    redirect_devices,
    running_user_code,
    user_location_or_file,
)

if TYPE_CHECKING:
    from fp8advisor.inspect.spec import TargetSpec

EXAMPLE_INPUTS_NAME = "example_inputs"


@dataclass(frozen=True)
class ExampleInputs:
    """Arguments for one forward: `model(*args, **kwargs)`; `how` says where they came from."""

    args: tuple
    kwargs: dict[str, Any]
    how: str


def _first_parametrized_module(model: nn.Module) -> nn.Module | None:
    for module in model.modules():
        if any(True for _ in module.parameters(recurse=False)):
            return module
    return None


def _float_dtype(model: nn.Module) -> torch.dtype:
    for parameter in model.parameters():
        if parameter.is_floating_point():
            return parameter.dtype
    return torch.get_default_dtype()


def _required_positional(forward: Callable) -> tuple[int, bool]:
    """(number of required positional parameters, whether one positional argument can be passed at all)."""
    try:
        parameters = list(inspect.signature(forward).parameters.values())
    except (TypeError, ValueError):
        return 1, True
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    variadic = any(p.kind == p.VAR_POSITIONAL for p in parameters)
    required = [
        p for p in parameters if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    return len(required), bool(positional) or variadic


def make_example_inputs(
    model: nn.Module,
    namespace: dict[str, Any],
    batch: int,
    seq: int,
    device: str | torch.device = "meta",
    *,
    spec: TargetSpec | None = None,
) -> ExampleInputs:
    """Inputs for one forward of `model`: the user's `example_inputs(batch, seq)` when the file has one, else
    token ids (batch, seq) when the model starts with an embedding, else a (batch, seq, K) float tensor.

    Raises ModelInputsError when the forward needs more than the tool can guess.
    """
    device = torch.device(device)
    where = spec.path if spec is not None and spec.kind == "python" else Path("model.py")
    user_fn = namespace.get(EXAMPLE_INPUTS_NAME)
    if callable(user_fn):
        with (
            running_user_code(where, f"calling {EXAMPLE_INPUTS_NAME}({batch}, {seq})"),
            redirect_devices(device),
        ):
            try:
                value = user_fn(batch, seq)
            except CompatError:
                raise  # our own lookup of a torch internal failed, not the user's code
            except Exception as error:
                raise ModelInputsError(
                    f"{EXAMPLE_INPUTS_NAME}({batch}, {seq}) failed: {describe_error(error)}",
                    location=user_location_or_file(where, error.__traceback__),
                    hint=f"{EXAMPLE_INPUTS_NAME}(batch, seq) must return a tensor, a tuple or a dict",
                ) from error
        if isinstance(value, torch.Tensor):
            return ExampleInputs((value,), {}, f"{EXAMPLE_INPUTS_NAME}({batch}, {seq})")
        if isinstance(value, dict):
            return ExampleInputs((), dict(value), f"{EXAMPLE_INPUTS_NAME}({batch}, {seq})")
        if isinstance(value, (tuple, list)):
            return ExampleInputs(tuple(value), {}, f"{EXAMPLE_INPUTS_NAME}({batch}, {seq})")
        raise ModelInputsError(
            f"{EXAMPLE_INPUTS_NAME}({batch}, {seq}) returned a {type(value).__name__}",
            location=object_location(user_fn, spec) if spec else None,
            hint="return a tensor, a tuple of positional arguments or a dict of keyword arguments",
        )

    forward = model.forward
    required, takes_positional = _required_positional(forward)
    example_hint = (
        f"add to {where.name}:\n"
        f"    def {EXAMPLE_INPUTS_NAME}(batch, seq):\n"
        "        return (tokens_or_x, other_argument, ...)   # a tuple of forward's positional arguments\n"
        "  (the tool calls it with the --batch and --seq values; return tensors of those sizes)"
    )
    forward_location = object_location(forward, spec) if spec is not None and spec.kind == "python" else None
    if required > 1 or not takes_positional:
        names = list(inspect.signature(forward).parameters)
        raise ModelInputsError(
            f"{type(model).__name__}.forward({', '.join(names)}) needs arguments the tool cannot guess",
            location=forward_location,
            hint=example_hint,
        )
    first = _first_parametrized_module(model)
    if isinstance(first, nn.Embedding):
        tokens = torch.randint(0, first.num_embeddings, (batch, seq), device=device)
        kwargs: dict[str, Any] = {}
        if spec is not None and spec.kind == "hf_config":
            # An explicit all-ones mask and no cache: transformers then asks no data-dependent questions.
            kwargs["use_cache"] = False
            with redirect_devices(device):
                kwargs["attention_mask"] = torch.ones(batch, seq, dtype=torch.long)
        return ExampleInputs((tokens,), kwargs, f"token ids ({batch}, {seq})")
    features = _input_features(model, first)
    if features is None:
        raise ModelInputsError(
            f"cannot tell what {type(model).__name__}.forward takes (no embedding, Linear or norm first)",
            location=forward_location,
            hint=example_hint,
        )
    x = torch.randn(batch, seq, features, dtype=_float_dtype(model), device=device)
    return ExampleInputs((x,), {}, f"float input ({batch}, {seq}, {features})")


def _input_features(model: nn.Module, first: nn.Module | None) -> int | None:
    if isinstance(first, nn.Linear):
        return first.in_features
    if isinstance(first, (nn.LayerNorm, nn.RMSNorm)) and first.normalized_shape:
        return int(first.normalized_shape[-1])
    if first is not None:
        weight = getattr(first, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.dim() == 1:
            return int(weight.shape[0])  # a norm of some other class
    for module in model.modules():
        if isinstance(module, nn.Linear):
            return module.in_features
    return None
