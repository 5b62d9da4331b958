"""torchtitan's own models as targets (`torchtitan:llama3/8B`), and torchtitan's Linear names by version.

A registry target names a model package of `torchtitan.models` and one of its flavors. The model is built the
way torchtitan's trainer builds it: `torchtitan.models.<MODEL>.model_registry(FLAVOR)` gives a `ModelSpec`
whose `model` config builds the module, here on the meta device (no memory). torchtitan is an optional extra
(`pip install 'fp8advisor[torchtitan]'`), imported only for such a target.

torchtitan 0.3's attention runs `flex_attention` (a compiled kernel) or `varlen_attn` (CUDA only); neither
accepts meta tensors, so a trace would stop in the first block and assume the rest. While the model is built
here, each of those inner attentions is replaced by `CausalAttention`: the same (q, k, v) -> output contract,
computed by `F.scaled_dot_product_attention(is_causal=True)`. The Linear layers, their shapes and the inputs
they receive are unchanged; what differs is the attention itself (no document masking, no sliding window), and
the model says so in its notes.

The second half reads a model's Linear names: torchtitan 0.2's Llama has `attention.wq` / `wk` / `wv` and an
`output` head, 0.3's a fused `attention.qkv_linear.wqkv` and `lm_head`. A torchtitan config written from one
version's names for the other version's model matches the wrong layers (`version_mismatch`).
"""

from __future__ import annotations

import functools
import importlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fp8advisor.errors import TargetError, quote

if TYPE_CHECKING:
    import torch
    from torch import nn

    from fp8advisor.inspect.spec import LoadedModel, TargetSpec

PREFIX = "torchtitan:"
INSTALL_HINT = "pip install 'fp8advisor[torchtitan]'"
#: Packages of torchtitan.models that hold shared building blocks, not a model.
_NOT_MODELS = frozenset({"common"})
_INNER_ATTENTION_CLASSES = ("FlexAttention", "VarlenAttention")


# ----------------------------------------------------------------------------------------------------
# Parsing


@dataclass(frozen=True)
class RegistryName:
    """`torchtitan:MODEL/FLAVOR` split: a package of torchtitan.models and a key of its flavor table."""

    model: str
    flavor: str

    def __str__(self) -> str:
        return f"{PREFIX}{self.model}/{self.flavor}"


def is_registry_target(text: str) -> bool:
    """Whether TARGET is a torchtitan registry target (recognised before any other form)."""
    return text.strip().startswith(PREFIX)


def parse_registry_name(text: str) -> RegistryName:
    """`torchtitan:llama3/8B` -> RegistryName("llama3", "8B"); one TargetError when it is not of that form."""
    rest = text.strip()[len(PREFIX) :]
    model, slash, flavor = rest.partition("/")
    if not slash or not model or not flavor or not re.fullmatch(r"[A-Za-z_]\w*", model):
        raise TargetError(
            f"{quote(text.strip())} is not a torchtitan registry target",
            hint="write torchtitan:MODEL/FLAVOR, e.g. torchtitan:llama3/8B or torchtitan:qwen3/0.6B",
        )
    return RegistryName(model, flavor)


def parse(text: str) -> TargetSpec:
    """The TargetSpec of a `torchtitan:MODEL/FLAVOR` target (syntax only: torchtitan is not imported)."""
    from fp8advisor.inspect.spec import TargetSpec

    name = parse_registry_name(text)
    return TargetSpec(text.strip(), None, "torchtitan", name.model, {}, flavor=name.flavor)


# ----------------------------------------------------------------------------------------------------
# Building


def _import_torchtitan() -> Any:
    try:
        import torchtitan.models
    except ImportError as error:
        raise TargetError(
            f"a torchtitan target needs the torchtitan package ({error.msg})", hint=INSTALL_HINT
        ) from None
    return torchtitan


def torchtitan_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torchtitan")
    except PackageNotFoundError:
        return "unknown"


def available_models() -> list[str]:
    """The model packages of the installed torchtitan (`torchtitan.models.<name>`), sorted."""
    import pkgutil

    torchtitan = _import_torchtitan()
    return sorted(
        info.name
        for info in pkgutil.iter_modules(torchtitan.models.__path__)
        if info.ispkg and info.name not in _NOT_MODELS
    )


def _model_package(model: str):
    models = available_models()
    if model not in models:
        raise TargetError(
            f"torchtitan {torchtitan_version()} has no model {model!r}",
            hint=f"models: {', '.join(models)}; write torchtitan:MODEL/FLAVOR",
        )
    try:
        package = importlib.import_module(f"torchtitan.models.{model}")
    except Exception as error:  # a model whose optional dependency is missing (qwen3_5 needs `fla`)
        raise TargetError(
            f"importing torchtitan.models.{model} failed: {_describe(error)}",
            hint="install what it needs, or choose another model",
        ) from error
    if not callable(getattr(package, "model_registry", None)):
        raise TargetError(
            f"torchtitan.models.{model} has no model_registry (torchtitan {torchtitan_version()})",
            hint="torchtitan targets need torchtitan >= 0.3: pip install -U 'fp8advisor[torchtitan]'",
        )
    return package


def flavors(package) -> list[str]:
    """The flavors `package.model_registry` accepts: the keys of the flavor table it looks up.

    Each model package exports that table in `__all__` as `<model>_configs` (`llama3_configs`); a package
    exporting more than one (muse_glimmer's vision configs) is told apart by which one `model_registry` reads.
    """
    tables = [
        name
        for name in getattr(package, "__all__", ())
        if name.endswith("_configs") and isinstance(getattr(package, name, None), dict)
    ]
    read = set(getattr(getattr(package.model_registry, "__code__", None), "co_names", ()))
    chosen = [name for name in tables if name in read] or tables
    return [flavor for name in chosen for flavor in getattr(package, name)]


def load(spec: TargetSpec, device: torch.device, overrides: dict[str, Any]) -> LoadedModel:
    """Build a registry target on `device` through torchtitan's own `model_registry`, its inner attention
    replaced by `CausalAttention` (module docstring). On a real device its states are initialised as
    torchtitan's trainer does (`init_weights`)."""
    from fp8advisor.inspect.sandbox import redirect_devices
    from fp8advisor.inspect.spec import LoadedModel

    name = RegistryName(spec.name or "", spec.flavor or "")
    if overrides:
        raise TargetError(
            f"{name} takes no arguments ({', '.join(overrides)})",
            hint="choose another flavor, or write a model.py that builds the model you want",
        )
    package = _model_package(name.model)
    known = flavors(package)
    if name.flavor not in known:
        raise TargetError(
            f"torchtitan's {name.model} has no flavor {name.flavor!r}",
            hint=f"flavors of {name.model}: {', '.join(known)}",
        )
    built_by = f"torchtitan.models.{name.model}.model_registry({name.flavor!r}).model.build()"
    try:
        model_config = package.model_registry(name.flavor).model
        with redirect_devices(device, skip_init=True):
            model = model_config.build()
            if device.type != "meta":
                model.init_weights(buffer_device=device)
    except Exception as error:
        raise TargetError(
            f"building {name} failed in {built_by}: {_describe(error)}",
            hint="choose another model or flavor; run with --debug for the full traceback",
        ) from error
    replaced = replace_inner_attention(model)
    notes = []
    if replaced:
        kinds = " / ".join(sorted(replaced))
        count = sum(replaced.values())
        notes.append(
            f"torchtitan's {kinds} (which cannot run on the meta device) was replaced in {count} attention "
            "layer(s) by causal F.scaled_dot_product_attention with the same shapes: the Linear layers are "
            "unchanged; attention is counted as causal over the whole sequence (no document mask or sliding "
            "window)"
        )
    return LoadedModel(
        model, spec, device, {}, None, f"{built_by} (torchtitan {torchtitan_version()})", notes
    )


def _describe(error: BaseException) -> str:
    from fp8advisor.inspect.sandbox import describe_error

    return describe_error(error)


@functools.cache
def _causal_attention_class():
    import torch
    import torch.nn.functional as F
    from torch import nn

    class CausalAttention(nn.Module):
        """torchtitan's inner-attention contract, (B, L, N, H) in and out, as causal SDPA."""

        def __init__(self, replaces: str):
            super().__init__()
            self.replaces = replaces

        def forward(self, q, k, v, *, scale=None, enable_gqa=False, out_transform=None, **_masks):
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, N, L, H), as SDPA takes them
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=enable_gqa)
            out = out.transpose(1, 2)
            if out_transform is None:
                return out
            # gpt_oss's attention sinks rescale by the log-sum-exp of the scores, which SDPA does not return.
            return out_transform(out, _causal_logsumexp(q, k, scale, enable_gqa))

        def extra_repr(self) -> str:
            return f"replaces={self.replaces}"

    def _causal_logsumexp(q, k, scale, enable_gqa) -> torch.Tensor:
        if enable_gqa and k.shape[1] != q.shape[1]:
            k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        scores = (q @ k.transpose(-2, -1)).float() * (q.shape[-1] ** -0.5 if scale is None else scale)
        length = q.shape[2]
        future = torch.ones(length, length, dtype=torch.bool, device=q.device).triu(1)
        lse = scores.masked_fill(future, float("-inf")).logsumexp(dim=-1)  # (B, N, L)
        return lse.transpose(1, 2)  # (B, L, N), as torchtitan's out_transform takes it

    return CausalAttention


def replace_inner_attention(model: nn.Module) -> dict[str, int]:
    """Swap every torchtitan FlexAttention / VarlenAttention in `model` for a `CausalAttention`, in place.
    Returns how many of each class were replaced."""
    causal_attention = _causal_attention_class()
    replaced: dict[str, int] = {}
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            kind = type(child).__name__
            if kind in _INNER_ATTENTION_CLASSES and type(child).__module__.startswith("torchtitan."):
                setattr(parent, child_name, causal_attention(kind))
                replaced[kind] = replaced.get(kind, 0) + 1
    return replaced


def base_recipe(name: RegistryName) -> str | None:
    """The function of `torchtitan.models.<MODEL>.config_registry` that is torchtitan's own training recipe
    for this flavor: of the public functions calling `model_registry(FLAVOR, ...)`, the one whose call
    changes least (fewest keyword arguments: `llama3_debugmodel` rather than `sft_debugmodel`, which asks
    for flex attention), then the shortest name (`llama3_8b` rather than `llama3_8b_mxfp8`); None when
    torchtitan is not installed or has none. Read from the source, never run (a recipe builds a whole
    trainer config)."""
    import ast
    import importlib.util
    from pathlib import Path

    found = importlib.util.find_spec("torchtitan")
    if found is None or found.origin is None:
        return None
    path = Path(found.origin).parent / "models" / name.model / "config_registry.py"
    from fp8advisor.errors import AdvisorError
    from fp8advisor.reading import read_text

    try:
        tree = ast.parse(read_text(path, "torchtitan recipe file"))
    except (AdvisorError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    recipes = []  # (keyword arguments of its model_registry call, len(name), name)
    for function in tree.body:
        if isinstance(function, ast.FunctionDef) and not function.name.startswith("_"):
            calls = [node for node in ast.walk(function) if _calls_registry_with(node, name.flavor)]
            if calls:
                recipes.append((min(len(call.keywords) for call in calls), len(function.name), function.name))
    return min(recipes)[2] if recipes else None


def _calls_registry_with(node, flavor: str) -> bool:
    import ast

    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "model_registry"
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == flavor
    )


# ----------------------------------------------------------------------------------------------------
# Whose names: torchtitan 0.2 or 0.3


TORCHTITAN_0_2 = "0.2"
TORCHTITAN_0_3 = "0.3"
#: Attention projections: 0.2's Attention holds wq / wk / wv itself; 0.3's GQAttention holds a qkv_linear
#: (FusedQKVLinear.wqkv by default, QKVLinear.wq / wk / wv when unfused).
_ATTENTION_0_2 = re.compile(r"(^|\.)attention\.w[qkv]$")
_ATTENTION_0_3 = re.compile(r"(^|\.)attention\.qkv_linear\.w(qkv|q|k|v)$")
#: torchtitan's feed-forward names (w1, w2, w3), shared by 0.2 and 0.3: they tell a torchtitan model's head
#: (0.2 `output`, 0.3 `lm_head`) from another library's (Hugging Face's is `lm_head` too).
_TORCHTITAN_FEED_FORWARD = re.compile(r"(^|\.)feed_forward\.w[123]$")
_LLAMA3_FLAVORS_0_3 = {  # (dim, blocks) -> flavor, from torchtitan 0.3.0's llama3_configs
    (256, 6): "debugmodel",
    (2048, 16): "1B",
    (3072, 28): "3B",
    (4096, 32): "8B",
    (8192, 80): "70B",
    (16384, 126): "405B",
}


@dataclass(frozen=True)
class NamesLookLike:
    """Which torchtitan version's Linear names a model has, and the evidence."""

    version: str  # TORCHTITAN_0_2 or TORCHTITAN_0_3
    attention: str  # e.g. "attention.wq / wk / wv"
    head: str | None  # "output" or "lm_head", when the model has that head


def names_look_like(linear_fqns: list[str] | tuple[str, ...]) -> NamesLookLike | None:
    """torchtitan 0.2 when a block's attention holds `wq` / `wk` / `wv` itself, 0.3 when it holds a
    `qkv_linear`; None for other names (Hugging Face, Megatron, a model of the user's own)."""
    old = any(_ATTENTION_0_2.search(fqn) for fqn in linear_fqns)
    new = any(_ATTENTION_0_3.search(fqn) for fqn in linear_fqns)
    if old == new:
        return None
    torchtitan_ffn = any(_TORCHTITAN_FEED_FORWARD.search(fqn) for fqn in linear_fqns)
    if old:
        head = "output" if torchtitan_ffn and "output" in linear_fqns else None
        return NamesLookLike(TORCHTITAN_0_2, "attention.wq / wk / wv", head)
    fused = any(fqn.endswith("qkv_linear.wqkv") for fqn in linear_fqns)
    head = "lm_head" if torchtitan_ffn and "lm_head" in linear_fqns else None
    attention = "attention.qkv_linear.wqkv" if fused else "attention.qkv_linear.wq / wk / wv"
    return NamesLookLike(TORCHTITAN_0_3, attention, head)


def llama3_flavor(layers) -> str:
    """torchtitan 0.3's llama3 flavor with the same width and depth as a 0.2-named Llama (`layers`: objects
    with fqn and K), or FLAVOR when none matches."""
    query = [layer for layer in layers if _ATTENTION_0_2.search(layer.fqn) and layer.fqn.endswith(".wq")]
    if not query:
        return "FLAVOR"
    return _LLAMA3_FLAVORS_0_3.get((query[0].K, len(query)), "FLAVOR")


def version_mismatch(layers, writes_version: str) -> str | None:
    """A warning when a torchtitan config for `writes_version` (TORCHTITAN_0_2: torchtitan-toml,
    TORCHTITAN_0_3: torchtitan-py) is written from a model whose Linear names are the other version's: its
    filter_fqns names layers that torchtitan's model of that version does not have. `layers`: objects with
    fqn and K (the advice's layers)."""
    looks = names_look_like([layer.fqn for layer in layers])
    if looks is None or looks.version == writes_version:
        return None
    names = looks.attention + (f" and the head {looks.head!r}" if looks.head else "")
    if writes_version == TORCHTITAN_0_3:
        return (
            f"this model has torchtitan 0.2's Linear names ({names}), but --format torchtitan-py is for "
            "torchtitan 0.3, whose Llama has a fused attention.qkv_linear.wqkv and lm_head: on that model "
            "this filter_fqns converts a set nobody advised. Advise on torchtitan 0.3's own model: "
            f"fp8advisor suggest torchtitan:llama3/{llama3_flavor(layers)} --format torchtitan-py"
        )
    return (
        f"this model has torchtitan 0.3's Linear names ({names}), but --format torchtitan-toml is for "
        "torchtitan 0.2.x, whose Llama has separate attention.wq / wk / wv and an output head: this "
        "filter_fqns names layers torchtitan 0.2 does not have. For torchtitan 0.3 write "
        "--format torchtitan-py"
    )
