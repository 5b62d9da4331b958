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

The second half says whose names a model has. A registry target's are the installed torchtitan's, known
without building it (`installed_names_version`): a torchtitan config for the other version is refused
(`registry_format_conflict`, asked before the work). Any other model's are guessed from its names
(`names_look_like`): torchtitan 0.2's Llama has `attention.wq` / `wk` / `wv` and an `output` head, 0.3's a
fused `attention.qkv_linear.wqkv` and `lm_head`; 0.2's MoE holds its grouped experts as `moe.experts`, 0.3's
as `moe.routed_experts.inner_experts`; DeepSeek-V3's MLA (`attention.wq`, `wkv_a`, `wkv_b`) is named alike in
both. A config written from one version's names for the other version's model matches the wrong layers: for
a guess, a warning (`version_mismatch`), since the user's own model may carry such names in either version.
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
#: Attention projections: 0.2's Llama Attention holds wq / wk / wv itself; 0.3's GQAttention holds a
#: qkv_linear (FusedQKVLinear.wqkv by default, QKVLinear.wq / wk / wv when unfused). DeepSeek-V3's MLA has
#: `attention.wq` (q_lora_rank 0) but wkv_a / wkv_b, in 0.2.2 and 0.3.0 alike (models/deepseek_v3/model/
#: model.py `Attention` there, the MLA config here): a `wq` alone says nothing of the version.
_ATTENTION_0_2 = re.compile(r"(^|\.)attention\.w[qkv]$")
_ATTENTION_0_2_KV = re.compile(r"(^|\.)attention\.w[kv]$")
_ATTENTION_0_3 = re.compile(r"(^|\.)attention\.qkv_linear\.w(qkv|q|k|v)$")
#: torchtitan's feed-forward names (w1, w2, w3), shared by 0.2 and 0.3: they tell a torchtitan model's head
#: (0.2 `output`, 0.3 `lm_head`) from another library's (Hugging Face's is `lm_head` too).
_TORCHTITAN_FEED_FORWARD = re.compile(r"(^|\.)feed_forward\.w[123]$")
#: The grouped experts of a torchtitan MoE layer: 0.2.2's `moe.experts` (models/moe/moe.py `MoE.experts`, a
#: GroupedExperts), 0.3.0's `moe.routed_experts.inner_experts` (models/common/moe `RoutedExperts` around
#: its GroupedExperts). Both MoE layers hold the router as `moe.router.gate`.
_EXPERTS_0_2 = re.compile(r"(^|\.)moe\.experts$")
_EXPERTS_0_3 = re.compile(r"(^|\.)moe\.routed_experts\.inner_experts$")
_ROUTER = re.compile(r"(^|\.)moe\.router\.gate$")
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
    """Which torchtitan version's names a model has, and the evidence: its attention projections, its head,
    its grouped MoE experts (each None when it says nothing)."""

    version: str  # TORCHTITAN_0_2 or TORCHTITAN_0_3
    attention: str | None  # e.g. "attention.wq / wk / wv"
    head: str | None  # "output" or "lm_head", when the model has that head
    experts: str | None = None  # "moe.experts" or "moe.routed_experts.inner_experts"

    def words(self, *, experts: bool = True) -> str:
        """The evidence in words: `attention.wq / wk / wv and the head 'output'` (`experts`: with the
        grouped experts' name, when it is evidence)."""
        parts = [self.attention] if self.attention else []
        if self.head:
            parts.append(f"the head {self.head!r}")
        if self.experts and experts:
            parts.append(f"the grouped MoE experts {self.experts}")
        return " and ".join(parts)


def names_look_like(
    linear_fqns: list[str] | tuple[str, ...], expert_groups: list[str] | tuple[str, ...] = ()
) -> NamesLookLike | None:
    """torchtitan 0.2 when an attention holds `wq` with `wk` / `wv` itself, or torchtitan's MoE holds its
    grouped experts as `moe.experts` beside a `moe.router.gate`; 0.3 when an attention holds a `qkv_linear`
    or the experts are `moe.routed_experts.inner_experts`. None for other names (Hugging Face, Megatron, a
    model of the user's own, DeepSeek-V3's MLA without experts, which both versions name alike) and when the
    evidence disagrees. `expert_groups`: the FQNs of the modules holding grouped expert weights."""
    old_attention = any(_ATTENTION_0_2_KV.search(fqn) for fqn in linear_fqns) and any(
        fqn.endswith("attention.wq") for fqn in linear_fqns
    )
    new_attention = any(_ATTENTION_0_3.search(fqn) for fqn in linear_fqns)
    router = any(_ROUTER.search(fqn) for fqn in linear_fqns)
    old_experts = router and any(_EXPERTS_0_2.search(group) for group in expert_groups)
    new_experts = any(_EXPERTS_0_3.search(group) for group in expert_groups)
    old, new = old_attention or old_experts, new_attention or new_experts
    if old == new:
        return None
    torchtitan_ffn = any(_TORCHTITAN_FEED_FORWARD.search(fqn) for fqn in linear_fqns)
    if old:
        head = "output" if torchtitan_ffn and "output" in linear_fqns else None
        attention = "attention.wq / wk / wv" if old_attention else None
        return NamesLookLike(TORCHTITAN_0_2, attention, head, "moe.experts" if old_experts else None)
    fused = any(fqn.endswith("qkv_linear.wqkv") for fqn in linear_fqns)
    head = "lm_head" if torchtitan_ffn and "lm_head" in linear_fqns else None
    attention = None
    if new_attention:
        attention = "attention.qkv_linear.wqkv" if fused else "attention.qkv_linear.wq / wk / wv"
    experts = "moe.routed_experts.inner_experts" if new_experts else None
    return NamesLookLike(TORCHTITAN_0_3, attention, head, experts)


def llama3_flavor(layers) -> str:
    """torchtitan 0.3's llama3 flavor with the same width and depth as a 0.2-named Llama (`layers`: objects
    with fqn and K), or FLAVOR when none matches."""
    query = [layer for layer in layers if _ATTENTION_0_2.search(layer.fqn) and layer.fqn.endswith(".wq")]
    if not query:
        return "FLAVOR"
    return _LLAMA3_FLAVORS_0_3.get((query[0].K, len(query)), "FLAVOR")


def version_mismatch(layers, writes_version: str, expert_groups: tuple[str, ...] = ()) -> str | None:
    """A warning when a torchtitan config for `writes_version` (TORCHTITAN_0_2: torchtitan-toml,
    TORCHTITAN_0_3: torchtitan-py) is written from a model that is not torchtitan's registry (a model file,
    a Hugging Face config) whose names are the other version's: its filter names layers that torchtitan's
    model of that version does not have. A heuristic, so a warning: the user's own model may have these
    names in either version. A registry target never comes here (`registry_format_conflict`: its names are
    the installed torchtitan's, known, and a mismatch is refused). `layers`: objects with fqn and K (the
    advice's layers); `expert_groups`: the FQNs of the modules holding grouped expert weights."""
    looks = names_look_like([layer.fqn for layer in layers], expert_groups)
    if looks is None or looks.version == writes_version:
        return None
    if writes_version == TORCHTITAN_0_3:
        if looks.attention is None:  # 0.2 experts only: 0.3's converter takes every group, whatever its name
            return None
        return (
            f"this model has torchtitan 0.2's Linear names ({looks.words(experts=False)}), but --format "
            "torchtitan-py is for torchtitan 0.3, whose Llama has a fused attention.qkv_linear.wqkv and "
            "lm_head: on that model this filter_fqns converts a set nobody advised. Advise on torchtitan "
            "0.3's own model: "
            f"fp8advisor suggest torchtitan:llama3/{llama3_flavor(layers)} --format torchtitan-py"
        )
    return (
        f"this model has torchtitan 0.3's names ({looks.words()}), but --format torchtitan-toml is for "
        "torchtitan 0.2.x, whose Llama has separate attention.wq / wk / wv and an output head, and whose MoE "
        "holds its grouped experts as moe.experts: this file names layers torchtitan 0.2 does not have. For "
        "torchtitan 0.3 write --format torchtitan-py"
    )


def installed_names_version() -> str | None:
    """The torchtitan version whose names a registry target has: the installed torchtitan's major.minor
    ("0.3" of 0.3.0), which builds it (`load`); None when torchtitan is not installed or its version cannot
    be read."""
    match = re.match(r"(\d+)\.(\d+)", torchtitan_version())
    return f"{match[1]}.{match[2]}" if match else None


def _version_key(version: str) -> tuple[int, int]:
    major, _, minor = version.partition(".")
    return int(major), int(minor)


def registry_format_conflict(target: str, writes_version: str, fmt_name: str) -> str | None:
    """Why a torchtitan config for `writes_version` (TORCHTITAN_0_2: torchtitan-toml, TORCHTITAN_0_3:
    torchtitan-py) cannot be written from the registry target `target`, or None when it can (or `target` is
    not one). A registry model is built by the installed torchtitan's `model_registry` (torchtitan 0.3 and
    later: 0.2.x has none), so its names are that version's, known for certain: torchtitan-toml (0.2.x)
    never fits, torchtitan-py fits 0.3 and later. Checked before the work (nothing is imported)."""
    if not is_registry_target(target):
        return None
    installed = installed_names_version()
    if writes_version == TORCHTITAN_0_2:
        built_by = f"torchtitan {torchtitan_version()}" if installed else "torchtitan 0.3 or later"
        return (
            f"{target.strip()} is built by {built_by} (model_registry: torchtitan 0.2.x has none), so its "
            f"names are that version's; --format {fmt_name} is torchtitan 0.2.x's job config, whose models "
            "name their layers differently (0.2's Llama has attention.wq / wk / wv and an output head, its "
            "MoE experts are moe.experts, not moe.routed_experts.inner_experts): the file would convert "
            "other layers than advised"
        )
    if installed is not None and _version_key(installed) < _version_key(TORCHTITAN_0_3):
        return (
            f"--format {fmt_name} is torchtitan 0.3's recipe function, but the installed torchtitan is "
            f"{torchtitan_version()}, whose model names are {installed}'s"
        )
    return None
