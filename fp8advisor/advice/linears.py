"""The decision for each Linear layer: convert it to float8, or keep it in bf16.

For each Linear the forward calls, the profile predicts the float8 forward+backward speedup at the layer's own
(M, K, N) (`fp8advisor.predict.speedup.predicted_times_s`); a layer called several times is judged on its
total time over its calls. A layer is converted when float8 conversion would swap it, the forward runs it
(status `traced` or `assumed`), K and N are divisible by 16 and the predicted speedup reaches `min_speedup`.

Under uncertainty the rule is the same, on the point prediction: a profile chosen by the evidence states an
interval for each speedup (`Prediction.interval`, the 10th-90th percentile of its held-out residuals); a
layer whose interval holds `min_speedup` is decided by its point prediction and marked `uncertain`, and
`suggest` says what the uncertain layers put at stake in the step and that `bench` settles them.

With tensor parallelism (`--tp`) each GPU multiplies a slice of K (row-parallel) or of N (column-parallel),
as the training framework's plan says (`fp8advisor.advice.tp_plan`: torchtitan's, Hugging Face's and
Megatron's names); a layer no plan names is judged on the slower of the two (`tensor_parallel_slices`). A
split whose dimension tp does not divide is uneven (Megatron-LM refuses it; DTensor pads the slices): it is
predicted at its widest slice, ceil(D / tp), and the layer stays in bf16, since float8 needs every GPU's
slice to be a multiple of 16 (`caveats` names those layers). A dimension narrower than tp is not split (a
GPU would get nothing); a layer the plan cannot split is refused by `advise` (`unsplittable_layers`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fp8advisor.advice.records import LayerAdvice
from fp8advisor.advice.tp_plan import COLWISE, ROWWISE, tp_style
from fp8advisor.inspect.folding import Folded, fold_repeated
from fp8advisor.inspect.records import GemmLayer, LayerStatus
from fp8advisor.predict.figures import weakest_provenance
from fp8advisor.recipes import Recipe, dims_supported

#: `predictor(recipe, M, K, N)` -> an object with bf16_s, float8_s and speedup (a
#: `predict.speedup.Prediction`), as `fp8advisor.predict.speedup.LayerTimes`.
Predictor = Callable[[Recipe, int, int, int], Any]


def default_predictor(profile_choice) -> Predictor:
    """Predictions of `fp8advisor.predict.speedup.predicted_times_s` for a `ProfileChoice` (or a
    `Profile`)."""
    from fp8advisor.predict.speedup import predicted_times_s

    # A model repeats a few shapes many times, and the step model asks again at each batch it tries: each
    # distinct question is answered once (the answers are immutable).
    @functools.cache
    def predict(recipe: Recipe, M: int, K: int, N: int):
        return predicted_times_s(profile_choice, recipe, M, K, N)

    return predict


def split_by_tensor_parallel(layer: GemmLayer) -> bool:
    """Whether the advice predicts `layer` (a convertible Linear the forward runs), and so splits it under
    tensor parallelism."""
    return layer.convertible and layer.is_linear and bool(layer.M_per_call) and min(layer.M_per_call) > 0


def tensor_parallel_slices(
    K: int, N: int, tensor_parallel: int, style: str | None = None
) -> list[tuple[int, int]]:
    """The (K, N) one GPU multiplies: [(K, N)] without tensor parallelism; else, by the plan's `style`
    (`tp_plan.COLWISE`: N split, `ROWWISE`: K split; None: both candidates, K split then N split), each at its
    widest slice ceil(D / tp) (the GPU with the widest slice sets the pace), leaving out a split of a
    dimension narrower than tp. Empty: no split the plan allows can be made."""
    if tensor_parallel == 1:
        return [(K, N)]
    slices = []
    if K >= tensor_parallel and style in (None, ROWWISE):
        slices.append((-(-K // tensor_parallel), N))
    if N >= tensor_parallel and style in (None, COLWISE):
        slices.append((K, -(-N // tensor_parallel)))
    return slices


def layer_slices(layer, tensor_parallel: int) -> list[tuple[int, int]]:
    """`tensor_parallel_slices` of a layer (a `GemmLayer` or `LayerAdvice`) under its plan's split."""
    return tensor_parallel_slices(layer.K, layer.N, tensor_parallel, tp_style(layer.fqn))


def uneven_split(K: int, N: int, tensor_parallel: int, style: str | None = None) -> bool:
    """Whether tensor parallelism would split K or N unevenly: tp does not divide a dimension it may split
    (under the plan's `style`, or either one without a plan)."""
    dims = {None: (K, N), ROWWISE: (K,), COLWISE: (N,)}[style]
    return tensor_parallel > 1 and any(dim % tensor_parallel for dim in dims if dim >= tensor_parallel)


def unsplittable_layers(layers: Sequence[GemmLayer], tensor_parallel: int) -> list[GemmLayer]:
    """The layers the advice predicts that the plan cannot split (every dimension it may split is narrower
    than `tensor_parallel`)."""
    return [
        layer
        for layer in layers
        if split_by_tensor_parallel(layer) and not layer_slices(layer, tensor_parallel)
    ]


def split_width(layer) -> int:
    """The width tensor parallelism may split of a layer: N for a column-parallel one, K for a row-parallel
    one, the wider of the two for a layer no plan names."""
    return {COLWISE: layer.N, ROWWISE: layer.K}.get(tp_style(layer.fqn), max(layer.K, layer.N))


def unevenly_split_layers(layers: Sequence[GemmLayer], tensor_parallel: int) -> list[GemmLayer]:
    """The layers the advice predicts that `tensor_parallel` splits unevenly (`uneven_split`)."""
    return [
        layer
        for layer in layers
        if split_by_tensor_parallel(layer)
        and uneven_split(layer.K, layer.N, tensor_parallel, tp_style(layer.fqn))
    ]


#: How a figure was obtained, best first: a sum of figures is as good as its worst `how`.
HOW_RANK = {"interpolated": 0, "modelled": 1, "extrapolated": 2}


@dataclass(frozen=True)
class _Predicted:
    """One layer's prediction summed over its calls (`_predict_layer`)."""

    bf16_s: float
    float8_s: float
    provenance: str
    how: str
    bf16_provenance: str
    shape: tuple[int, int]
    #: The layer's speedup at the low and high ends of every call's interval; None when a call has none.
    interval: tuple[float, float] | None


def _predict_layer(
    layer: GemmLayer, recipe: Recipe, predictor: Predictor, tensor_parallel: int
) -> _Predicted:
    """bf16 and float8 seconds, provenance, how and bf16 provenance summed over the layer's calls, the (K, N)
    they are for, and the speedup interval (each call's float8 time at its interval's ends, summed).

    With tensor parallelism each GPU multiplies the slice the framework's plan gives it (`layer_slices`);
    for a layer no plan names both splits are predicted and the slower float8 outcome (and its slice) is kept.
    """
    shapes = layer_slices(layer, tensor_parallel)
    if not shapes:  # `advise` refuses such a degree first, naming every such layer (`unsplittable_layers`)
        from fp8advisor.errors import AdvisorError

        raise AdvisorError(f"--tp {tensor_parallel} is larger than both K and N of {layer.fqn}")
    worst: _Predicted | None = None
    for K, N in shapes:
        bf16 = float8 = 0.0
        provenances: set[str] = set()
        hows: set[str] = set()
        bf16_provenances: set[str] = set()
        ends: list[float] | None = [0.0, 0.0]  # float8 seconds at the interval's low and high speedups
        for M in layer.M_per_call:
            times = predictor(recipe, M, K, N)
            bf16 += times.bf16_s
            float8 += times.float8_s
            provenances.add(times.speedup.provenance)
            hows.add(times.speedup.how)
            bf16_provenances.add(getattr(times, "bf16_provenance", None) or times.speedup.provenance)
            interval = getattr(times.speedup, "interval", None)
            if ends is not None and interval is not None:
                ends = [ends[0] + times.bf16_s / interval[0], ends[1] + times.bf16_s / interval[1]]
            else:
                ends = None
        provenance = weakest_provenance(provenances)
        how = max(hows, key=lambda h: HOW_RANK.get(h, 9))
        if worst is None or bf16 / float8 < worst.bf16_s / worst.float8_s:
            span = None if ends is None else (bf16 / ends[0], bf16 / ends[1])
            worst = _Predicted(
                bf16, float8, provenance, how, weakest_provenance(bf16_provenances), (K, N), span
            )
    assert worst is not None
    return worst


def odd_mx_tokens(recipe: Recipe, token_counts) -> list[int]:
    """The token counts an MXFP8 recipe cannot run: its weight-gradient GEMM casts 1x32 blocks along the
    tokens (torchao's dim1 casts assert rows % 32), so each call's M must be a multiple of 32; none for
    float8 (`pad_inner_dim` pads) and for `mxfp8_rceil_wgrad_with_hp` (a bf16 grad_weight GEMM)."""
    if not recipe.is_mx or recipe.grad_weight_in_bf16:
        return []
    return sorted({m for m in token_counts if m % recipe.block_size})


def decide_layers(
    layers: Sequence[GemmLayer],
    recipe: Recipe,
    predictor: Predictor,
    min_speedup: float,
    tensor_parallel: int,
) -> list[LayerAdvice]:
    """The decision for each layer at its own (M, K, N): convert when convertible and predicted to reach
    `min_speedup` (the module docstring's rule)."""
    decided = []
    for layer in layers:
        common = dict(
            fqn=layer.fqn,
            M=layer.M,
            K=layer.K,
            N=layer.N,
            calls=layer.calls,
            status=layer.status,
            is_linear=layer.is_linear,
            aliases=layer.aliases,
        )
        if not layer.convertible or not layer.is_linear:
            if layer.status is LayerStatus.NOT_CALLED:
                reason = "not called by the forward"
            else:
                reason = layer.reason or "float8 conversion does not apply"
            decided.append(LayerAdvice(convert=False, reason=reason, **common))
            continue
        if not split_by_tensor_parallel(layer):
            decided.append(LayerAdvice(convert=False, reason="no rows multiplied", **common))
            continue
        predicted = _predict_layer(layer, recipe, predictor, tensor_parallel)
        bf16, float8 = predicted.bf16_s, predicted.float8_s
        speedup = bf16 / float8
        timing = dict(
            predicted_speedup=speedup,
            bf16_time_s=bf16,
            provenance=predicted.provenance,
            how=predicted.how,
            bf16_provenance=predicted.bf16_provenance,
            shard=predicted.shape if tensor_parallel > 1 else None,
            speedup_interval=predicted.interval,
        )
        sharded = layer_slices(layer, tensor_parallel)
        size = recipe.block_size
        if not dims_supported(recipe, layer.K, layer.N):
            reason = f"K={layer.K} or N={layer.N} not divisible by {size} ({recipe}: multiples of {size})"
            decided.append(LayerAdvice(convert=False, reason=reason, float8_time_s=bf16, **timing, **common))
        elif uneven_split(layer.K, layer.N, tensor_parallel, tp_style(layer.fqn)):
            reason = (
                f"--tp {tensor_parallel} does not divide K={layer.K} or N={layer.N}: uneven slices, and "
                f"{recipe} needs every GPU's slice a multiple of {size}"
            )
            decided.append(LayerAdvice(convert=False, reason=reason, float8_time_s=bf16, **timing, **common))
        elif tensor_parallel > 1 and not all(dims_supported(recipe, k, n) for k, n in sharded):
            reason = f"a 1/{tensor_parallel} shard of K or N is not divisible by {size}"
            decided.append(LayerAdvice(convert=False, reason=reason, float8_time_s=bf16, **timing, **common))
        elif odd_mx_tokens(recipe, layer.M_per_call):
            odd_m = odd_mx_tokens(recipe, layer.M_per_call)[0]
            reason = (
                f"M = {odd_m} tokens not divisible by {size}: {recipe}'s grad_weight casts scale blocks of "
                "32 tokens (pad sequences to a multiple of 32)"
            )
            decided.append(LayerAdvice(convert=False, reason=reason, float8_time_s=bf16, **timing, **common))
        else:
            convert = speedup >= min_speedup
            reason = f"predicted {speedup:.2f}x {'>=' if convert else '<'} {min_speedup:.2f}"
            span = predicted.interval
            uncertain = span is not None and span[0] < min_speedup < span[1]
            if uncertain:
                reason += f" (interval {span[0]:.2f}-{span[1]:.2f} holds {min_speedup:.2f}: uncertain)"
            decided.append(
                LayerAdvice(
                    convert=convert,
                    reason=reason,
                    float8_time_s=float8,
                    uncertain=uncertain,
                    **timing,
                    **common,
                )
            )
    return decided


def group_layers(layers: Sequence[LayerAdvice]) -> list[Folded]:
    """Fold repeated blocks with one decision into one row each: `layers.{0..79}.attention.wq`."""

    def decision(layer: LayerAdvice) -> tuple:
        speedup = None if layer.predicted_speedup is None else round(layer.predicted_speedup, 2)
        return (layer.M, layer.K, layer.N, speedup, layer.convert, layer.reason, layer.status)

    return fold_repeated(layers, decision)


__all__ = [
    "HOW_RANK",
    "Predictor",
    "decide_layers",
    "default_predictor",
    "group_layers",
    "layer_slices",
    "split_by_tensor_parallel",
    "split_width",
    "tensor_parallel_slices",
    "uneven_split",
    "unevenly_split_layers",
    "unsplittable_layers",
]
