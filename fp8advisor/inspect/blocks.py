"""A model's distinct blocks, each with the input it really receives: what `fp8advisor bench --model`
measures in context.

`discover_blocks` builds the model as `layers` does (meta device, one traced forward) and, from the same
forward, finds:

- the repeated blocks: the children of a `ModuleList`, `ModuleDict` or `nn.Sequential` that hold an
  `nn.Linear` (the outermost such container wins: `layers.{0..31}`, not the experts inside a block). Children
  of the same class with the same Linear layers (relative name, K, N) and the same inputs are one *distinct*
  block, measured once for all of them;
- the head: every `nn.Linear` outside those blocks (`output`, `lm_head`), each a unit of its own;
- each unit's input as the forward passed it (positional and keyword arguments: tensors by shape and dtype,
  plain values as they are), recorded by a forward pre-hook on its first call;
- the Linear *groups* of each unit: the Linear layers that read one and the same input tensor (`wq`, `wk`,
  `wv` after the attention norm; `w1`, `w3` in a SwiGLU), what the local search flips together.

`materialize` then builds ONE unit for real (random weights, bf16) and `make_inputs` the tensors it reads.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from fp8advisor.errors import TargetError
from fp8advisor.inspect.folding import fold_repeated
from fp8advisor.inspect.layers import inspect_loaded
from fp8advisor.inspect.records import ModelLayers

#: What a unit is: one of a model's repeated blocks, or a Linear outside them.
BLOCK, HEAD = "block", "head"


@dataclass(frozen=True)
class UnitLinear:
    """An nn.Linear of a unit: its name relative to the unit ("" for a head Linear itself), K, N, and
    whether float8 conversion applies to it (traced, K, N and M divisible by 16)."""

    name: str
    K: int
    N: int
    convertible: bool

    def to_json(self) -> dict:
        return {"name": self.name, "K": self.K, "N": self.N, "convertible": self.convertible}


@dataclass(frozen=True)
class Unit:
    """A distinct block (or head Linear) of the model: measured once, on behalf of every instance."""

    pattern: str  # "layers.{0..31}", or "output"
    kind: str  # BLOCK or HEAD
    cls: str
    instances: tuple[str, ...]  # FQNs of every module it stands for; the first is the one built
    linears: tuple[UnitLinear, ...]
    groups: tuple[tuple[str, ...], ...]  # convertible Linear names (relative) that read one input tensor
    inputs: dict  # {"args": [...], "kwargs": {...}}, encoded by `encode_value`
    problem: str | None = None  # why it cannot be measured (an input we cannot make), else None

    @property
    def representative(self) -> str:
        return self.instances[0]

    @property
    def convertible(self) -> frozenset[str]:
        return frozenset(linear.name for linear in self.linears if linear.convertible)

    def relative(self, fqns) -> frozenset[str]:
        """The names (relative) of this unit's convertible Linear layers whose FQN in the representative
        instance is in `fqns`."""
        return frozenset(name for name in self.convertible if member_fqn(self.representative, name) in fqns)

    def everywhere(self, names) -> set[str]:
        """Model FQNs of Linear layers `names` (relative) in every instance."""
        return {member_fqn(instance, name) for instance in self.instances for name in names}

    def to_json(self) -> dict:
        return {
            "pattern": self.pattern,
            "kind": self.kind,
            "class": self.cls,
            "instances": list(self.instances),
            "linears": [linear.to_json() for linear in self.linears],
            "groups": [list(group) for group in self.groups],
            "inputs": self.inputs,
            "problem": self.problem,
        }


@dataclass(frozen=True)
class Discovery:
    """A model's layers (as `layers` reports them) and its units; `loaded` holds the model, on meta."""

    model_layers: ModelLayers
    units: tuple[Unit, ...]
    loaded: Any

    @property
    def fingerprint(self) -> str:
        return model_fingerprint(self.model_layers)

    def module(self, unit: Unit):
        return self.loaded.model.get_submodule(unit.representative)


def member_fqn(instance: str, name: str) -> str:
    """The model FQN of Linear `name` (relative) in unit `instance`; `""` names a head Linear itself."""
    return f"{instance}.{name}" if name else instance


def model_fingerprint(model_layers: ModelLayers) -> str:
    """16 hex digits naming a model at a batch and seq: every layer's FQN, K, N, rows per call and status, and
    the batch and seq (1 x 64 and 2 x 32 give the same rows, not the same attention). In-context results
    belong to the model, batch and seq whose fingerprint they carry."""
    table = [
        [layer.fqn, layer.K, layer.N, list(layer.M_per_call), layer.status.value]
        for layer in model_layers.layers
    ]
    named = [model_layers.batch, model_layers.seq, table]
    return hashlib.sha256(json.dumps(named).encode()).hexdigest()[:16]


# --- inputs -------------------------------------------------------------------------------------------------


class UnsupportedInput(Exception):
    """A unit input `encode_value` cannot describe (and so `make_inputs` could not make)."""


def encode_value(value, depth: int = 0) -> dict:
    """A JSON description of one forward argument: {"tensor": shape, "dtype": name}, {"value": plain},
    {"tuple"/"list": [...]}, {"dict": {...}}."""
    import torch

    if depth > 8:
        raise UnsupportedInput("nested more than 8 deep")
    if isinstance(value, torch.Tensor):
        return {"tensor": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
    if value is None or isinstance(value, bool | int | float | str):
        return {"value": value}
    if isinstance(value, tuple | list):
        kind = "tuple" if isinstance(value, tuple) else "list"
        return {kind: [encode_value(item, depth + 1) for item in value]}
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        return {"dict": {key: encode_value(item, depth + 1) for key, item in value.items()}}
    raise UnsupportedInput(f"an argument of type {type(value).__name__}")


def make_inputs(inputs: dict, *, device: str, seed: int):
    """(args, kwargs, x) from an encoded input: real floating tensors in bf16 (the training step's dtype),
    drawn from a normal distribution, except a keyword argument named like a mask (`attention_mask`): zero,
    the additive mask that hides nothing; complex ones (rotary tables) as recorded; bool ones all True (a
    mask that hides nothing); integer ones zero (positions). `x`, the first drawn tensor, requires grad: the
    block's input comes from the previous block, whose gradient the backward computes."""
    import torch

    generator = torch.Generator(device=device).manual_seed(seed + 1)
    made: list = []

    def decode(spec: dict, name: str = ""):
        if "tensor" in spec:
            dtype = getattr(torch, spec["dtype"])
            shape = spec["tensor"]
            if dtype.is_floating_point and "mask" in name.lower():
                return torch.zeros(shape, dtype=torch.bfloat16, device=device)
            if dtype.is_floating_point:
                tensor = torch.randn(shape, dtype=torch.bfloat16, device=device, generator=generator)
                made.append(tensor)
                return tensor
            if dtype.is_complex:
                return torch.randn(shape, dtype=dtype, device=device, generator=generator)
            if dtype is torch.bool:
                return torch.ones(shape, dtype=dtype, device=device)
            return torch.zeros(shape, dtype=dtype, device=device)
        if "value" in spec:
            return spec["value"]
        if "tuple" in spec:
            return tuple(decode(item, name) for item in spec["tuple"])
        if "list" in spec:
            return [decode(item, name) for item in spec["list"]]
        return {key: decode(item, key) for key, item in spec["dict"].items()}

    args = [decode(spec) for spec in inputs["args"]]
    kwargs = {key: decode(spec, key) for key, spec in inputs["kwargs"].items()}
    x = made[0].requires_grad_() if made else None
    return args, kwargs, x


# --- discovery ----------------------------------------------------------------------------------------------


def _containers():
    from torch import nn

    return (nn.ModuleList, nn.ModuleDict, nn.Sequential)


def _holds_linear(module) -> bool:
    from torch import nn

    return any(isinstance(sub, nn.Linear) for sub in module.modules())


def _instances(model) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """(block instances, head Linears), each as (FQN, module), in module order."""
    from torch import nn

    blocks: list[tuple[str, Any]] = []
    inside: list[str] = []  # FQN prefixes of the blocks found

    def within(fqn: str) -> bool:
        return any(fqn == prefix or fqn.startswith(prefix + ".") for prefix in inside)

    for fqn, module in model.named_modules():
        if within(fqn) or not isinstance(module, _containers()):
            continue
        for name, child in module.named_children():
            if _holds_linear(child):
                child_fqn = f"{fqn}.{name}" if fqn else name
                blocks.append((child_fqn, child))
                inside.append(child_fqn)
    heads = [
        (fqn, module)
        for fqn, module in model.named_modules()
        if isinstance(module, nn.Linear) and not within(fqn)
    ]
    return blocks, heads


class _Watcher:
    """Forward hooks that record each unit's first input and, per Linear, the input tensor it reads."""

    def __init__(self, units: list[tuple[str, Any]], linears: list[tuple[str, Any]]):
        self.inputs: dict[str, dict] = {}
        self.problems: dict[str, str] = {}
        self.read: dict[str, int] = {}  # Linear FQN -> id of the first input tensor it read
        self._alive: list = []  # the tensors whose ids are kept: an id is unique while its object lives
        self._handles = []
        for fqn, module in units:
            self._handles.append(module.register_forward_pre_hook(self._unit_hook(fqn), with_kwargs=True))
        for fqn, module in linears:
            self._handles.append(module.register_forward_pre_hook(self._linear_hook(fqn)))

    def _unit_hook(self, fqn: str):
        def hook(module, args, kwargs):
            if fqn in self.inputs or fqn in self.problems:
                return
            try:
                self.inputs[fqn] = {
                    "args": [encode_value(arg) for arg in args],
                    "kwargs": {key: encode_value(value) for key, value in kwargs.items()},
                }
            except UnsupportedInput as error:
                self.problems[fqn] = f"its forward receives {error}, which bench cannot make"

        return hook

    def _linear_hook(self, fqn: str):
        def hook(module, args):
            if fqn not in self.read and args:
                self._alive.append(args[0])
                self.read[fqn] = id(args[0])

        return hook

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._alive.clear()


def _groups(
    instance: str, linears: tuple[UnitLinear, ...], read: dict[str, int]
) -> tuple[tuple[str, ...], ...]:
    """The convertible Linear names of one instance grouped by the input tensor they read, in module order."""
    groups: dict[object, list[str]] = {}
    for linear in linears:
        if not linear.convertible:
            continue
        fqn = member_fqn(instance, linear.name)
        groups.setdefault(read.get(fqn, fqn), []).append(linear.name)
    return tuple(tuple(names) for names in groups.values())


def discover_blocks(
    loaded, *, batch: int, seq: int, debug: bool = False, recipes: tuple[str, ...] = ()
) -> Discovery:
    """The model's layers and distinct units (module docstring), from one traced forward of `loaded` (a model
    built by `fp8advisor.inspect.target.load_model`, on meta). A Linear is convertible when its K and N fit
    every recipe of `recipes` (`recipes.dims_supported`: 32 for MXFP8, so one run with MXFP8 keeps a K = 48
    layer in bf16 for its float8 recipes too), or multiples of 16 when no recipe is given."""
    from torch import nn

    from fp8advisor.recipes import dims_divisible_by_16, dims_supported

    model = loaded.model
    blocks, heads = _instances(model)
    linears = [(fqn, module) for fqn, module in model.named_modules() if isinstance(module, nn.Linear)]
    watcher = _Watcher(blocks + heads, linears)
    try:
        model_layers = inspect_loaded(loaded, batch=batch, seq=seq, debug=debug)
    finally:
        watcher.remove()
    by_fqn = {layer.fqn: layer for layer in model_layers.layers}

    def unit_linears(instance: str, module) -> tuple[UnitLinear, ...]:
        found = []
        for name, sub in module.named_modules():
            if not isinstance(sub, nn.Linear):
                continue
            fqn = member_fqn(instance, name)
            layer = by_fqn.get(fqn)
            convertible = (
                layer is not None
                and layer.is_linear
                and layer.convertible
                and (
                    all(dims_supported(recipe, layer.K, layer.N) for recipe in recipes)
                    if recipes
                    else dims_divisible_by_16(layer.K, layer.N)
                )
            )
            found.append(UnitLinear(name, sub.in_features, sub.out_features, convertible))
        return tuple(found)

    @dataclass(frozen=True)
    class _Seen:
        fqn: str
        kind: str
        module: Any
        linears: tuple[UnitLinear, ...]

    seen = [_Seen(fqn, BLOCK, module, unit_linears(fqn, module)) for fqn, module in blocks]
    seen += [_Seen(fqn, HEAD, module, unit_linears(fqn, module)) for fqn, module in heads]
    units = []
    called = [item for item in seen if item.fqn in watcher.inputs or item.fqn in watcher.problems]

    def signature(item: _Seen):
        inputs = watcher.inputs.get(item.fqn)
        return (item.kind, type(item.module).__qualname__, item.linears, json.dumps(inputs, sort_keys=True))

    for folded in fold_repeated(called, key=signature):
        first = folded.first
        if not first.linears or not any(linear.convertible for linear in first.linears):
            continue  # nothing float8 could change: nothing to measure
        units.append(
            Unit(
                pattern=folded.pattern,
                kind=first.kind,
                cls=type(first.module).__qualname__,
                instances=folded.fqns,
                linears=first.linears,
                groups=_groups(first.fqn, first.linears, watcher.read),
                inputs=watcher.inputs.get(first.fqn, {"args": [], "kwargs": {}}),
                problem=watcher.problems.get(first.fqn),
            )
        )
    if not units:
        raise TargetError(
            f"{loaded.spec.text} has no block or Linear that float8 could convert and the forward calls",
            hint="`fp8advisor layers` shows each Linear's status",
        )
    return Discovery(model_layers=model_layers, units=tuple(units), loaded=loaded)


# --- a unit, for real ---------------------------------------------------------------------------------------


def materialize(module, *, device: str, seed: int):
    """A copy of `module` (built on meta) on `device` in bf16, with random weights: matrices drawn from
    N(0, 1/fan_in) (activations stay of order one through the block), vectors (norm scales, biases) ones,
    buffers zero. A Hugging Face block built with eager attention (as `fp8advisor.inspect.target` builds a
    config.json, for the meta trace) gets sdpa back, the attention training runs. Returns (module, names of
    the buffers zero-filled, whether the attention was switched to sdpa)."""
    import torch

    torch.manual_seed(seed)
    built = copy.deepcopy(module).to_empty(device=device)
    configs = {id(sub.config): sub.config for sub in built.modules() if hasattr(sub, "config")}
    switched = False
    for config in configs.values():
        if getattr(config, "_attn_implementation", None) == "eager":
            config._attn_implementation = "sdpa"
            switched = True
    with torch.no_grad():
        for parameter in built.parameters():
            if parameter.dim() >= 2:
                parameter.normal_(0.0, parameter.shape[-1] ** -0.5)
            else:
                parameter.fill_(1.0)
        buffers = []
        for name, buffer in built.named_buffers():
            buffer.zero_()
            buffers.append(name)
    return built.to(torch.bfloat16), buffers, switched


__all__ = [
    "BLOCK",
    "HEAD",
    "Discovery",
    "Unit",
    "UnitLinear",
    "UnsupportedInput",
    "discover_blocks",
    "encode_value",
    "make_inputs",
    "materialize",
    "member_fqn",
    "model_fingerprint",
]
