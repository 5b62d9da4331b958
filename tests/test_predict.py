"""Prediction: exact at measured points, linear in log space between them, a stated rule outside."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from fp8advisor.errors import ProfileError
from fp8advisor.gpus import GPU_SPECS
from fp8advisor.predict.figures import SpeedupPoint
from fp8advisor.predict.interpolation import EXTRAPOLATED, INTERPOLATED, LogGridModel, multilinear
from fp8advisor.predict.profile import DeviceInfo, Profile, RecipeProfile
from fp8advisor.predict.profile_files import PROFILE_DIR_ENV, load_profile
from fp8advisor.predict.roofline import linear_fwd_bwd_time_s, roofline_speedup
from fp8advisor.predict.selection import select_profile as _select
from fp8advisor.predict.speedup import (
    MODELLED,
    predict_speedup,
    predicted_bf16_time_s,
    predicted_times_s,
)


@pytest.fixture(autouse=True)
def no_user_profiles(tmp_path, monkeypatch):
    monkeypatch.setenv(PROFILE_DIR_ENV, str(tmp_path / "none"))


@pytest.fixture(scope="module")
def published():
    return load_profile("h100-published-rowwise-2025-06")


def profile_of(points, recipe="rowwise", family="H100") -> Profile:
    return Profile(
        name="test",
        provenance="measured",
        source="test",
        created="2026-11-22",
        device=DeviceInfo(name=f"NVIDIA {family}", family=family),
        recipes={recipe: RecipeProfile(points=tuple(points))},
    )


def test_reproduces_every_published_point(published):
    for point in published.recipe("rowwise").points:
        prediction = predict_speedup(published, "rowwise", *point.shape)
        assert prediction.speedup == pytest.approx(point.speedup, rel=1e-12)
        assert (prediction.how, prediction.provenance) == (INTERPOLATED, "published")


def test_midpoint_is_the_geometric_mean_of_the_corners():
    """Trilinear in (log2 M, log2 K, log2 N) on log speedup: the centre is the mean of the corners' logs."""
    corners = {shape: 0.5 + 0.1 * i for i, shape in enumerate(itertools.product((1024, 4096), repeat=3))}
    profile = profile_of(SpeedupPoint(*shape, value) for shape, value in corners.items())
    centre = predict_speedup(profile, "rowwise", 2048, 2048, 2048)
    assert centre.speedup == pytest.approx(math.exp(np.mean(np.log(list(corners.values())))), rel=1e-12)
    assert centre.how == INTERPOLATED


def test_one_axis_interpolates_linearly_in_log2_size(published):
    # between M=4096 and M=8192 at (K, N) = (8192, 8192): M=5793 ~ 2^12.5 is the geometric mean
    low = predict_speedup(published, "rowwise", 4096, 8192, 8192).speedup
    high = predict_speedup(published, "rowwise", 8192, 8192, 8192).speedup
    middle = predict_speedup(published, "rowwise", round(2**12.5), 8192, 8192).speedup
    assert middle == pytest.approx(math.sqrt(low * high), rel=1e-3)


@pytest.mark.parametrize(
    ("query", "edge"),
    [
        ((65536, 8192, 8192), (32768, 8192, 8192)),  # above in M only
        ((131072, 65536, 65536), (32768, 32768, 32768)),  # above in all three
        ((16384, 4096, 262144), (16384, 4096, 32768)),  # above in N only
    ],
)
def test_above_the_grid_clamps_to_the_edge(published, query, edge):
    prediction = predict_speedup(published, "rowwise", *query)
    assert prediction.speedup == pytest.approx(
        predict_speedup(published, "rowwise", *edge).speedup, rel=1e-12
    )
    assert prediction.how == EXTRAPOLATED and "clamped" in prediction.detail


@pytest.mark.parametrize(
    ("query", "edge"),
    [
        ((512, 4096, 14336), (1024, 4096, 14336)),  # below in M
        ((256, 512, 8192), (1024, 1024, 8192)),  # below in M and K
        ((8192, 4096, 128), (8192, 4096, 1024)),  # below in N
        ((512, 4096, 65536), (1024, 4096, 32768)),  # below in M and above in N: clamp N, scale M
    ],
)
def test_below_the_grid_scales_the_edge_by_the_roofline_ratio(published, query, edge):
    clamped_above = tuple(min(q, 32768) for q in query)
    ratio = roofline_speedup(*clamped_above, "rowwise", "H100") / roofline_speedup(*edge, "rowwise", "H100")
    edge_value = predict_speedup(published, "rowwise", *edge).speedup
    prediction = predict_speedup(published, "rowwise", *query)
    assert prediction.speedup == pytest.approx(edge_value * min(ratio, 1.0), rel=1e-12)
    assert prediction.speedup <= edge_value  # never more than the measured edge
    assert prediction.how == EXTRAPOLATED and "roofline ratio" in prediction.detail


def test_below_the_grid_ratio_is_capped_at_one():
    """Where the roofline predicts a rise below the grid, the rule keeps the measured edge value."""
    # at M=16 the roofline rowwise speedup rises from K=256 down to K=128
    assert roofline_speedup(16, 128, 8192, "rowwise", "H100") > roofline_speedup(
        16, 256, 8192, "rowwise", "H100"
    )
    profile = profile_of([SpeedupPoint(16, K, 8192, 0.3) for K in (256, 512)])
    prediction = predict_speedup(profile, "rowwise", 16, 128, 8192)
    assert prediction.speedup == pytest.approx(0.3, rel=1e-12)
    assert prediction.how == EXTRAPOLATED and "ratio 1" in prediction.detail


def test_grid_with_a_hole_fills_it_from_its_neighbours_and_keeps_the_others_exact():
    # log speedup linear in log2 M and log2 K: the axis-wise interpolations both give the exact value
    sizes = (1024, 2048, 4096)

    def value(M, K):
        return 0.5 * (M / 1024) ** 0.25 * (K / 1024) ** 0.5

    points = [SpeedupPoint(M, K, 4096, value(M, K)) for M in sizes for K in sizes if (M, K) != (2048, 2048)]
    profile = profile_of(points)
    assert predict_speedup(profile, "rowwise", 2048, 2048, 4096).speedup == pytest.approx(value(2048, 2048))
    for point in points:
        assert predict_speedup(profile, "rowwise", *point.shape).speedup == pytest.approx(
            point.speedup, rel=1e-12
        )


def test_hole_between_unevenly_spaced_sizes_is_weighted_by_log2_distance():
    """The default K/N axis 1024, 4096, 32768 is log2 10, 12, 15: a hole at K=4096 lies 2/5 of the way from
    1024 to 32768, so it takes 3/5 of the 1024 value's log and 2/5 of the 32768 value's (not 1/2 and 1/2, and
    not the weights mirrored)."""
    points = [SpeedupPoint(1024, K, 4096, 1.0 + K / 65536) for K in (1024, 4096, 32768)]
    points += [SpeedupPoint(8192, 1024, 4096, 0.5), SpeedupPoint(8192, 32768, 4096, 1.5)]
    model = LogGridModel([p.shape for p in points], [p.speedup for p in points])
    assert not model.is_complete_grid  # (8192, 4096, 4096) is the hole
    # along M the hole has a measured cell on one side only: the K axis alone fills it
    expected = math.exp(0.6 * math.log(0.5) + 0.4 * math.log(1.5))  # 0.7759
    filled = math.exp(model.log_value(np.log2(np.array([8192, 4096, 4096], dtype=float))))
    assert filled == pytest.approx(expected, rel=1e-12)
    assert abs(filled - math.sqrt(0.5 * 1.5)) > 0.03  # what equal weights would give: 0.8660
    assert abs(filled - math.exp(0.4 * math.log(0.5) + 0.6 * math.log(1.5))) > 0.1  # mirrored: 0.9680


def test_hole_at_a_corner_takes_the_nearest_measured_neighbours():
    sizes = (1024, 2048, 4096)
    points = [SpeedupPoint(M, K, 4096, 1.0 + M / 4096 + K / 8192) for M in sizes for K in sizes]
    corner = points.pop(0)  # (1024, 1024): no axis has measured cells on both sides
    model = LogGridModel([p.shape for p in points], [p.speedup for p in points])
    neighbours = [p.speedup for p in points if p.shape in ((2048, 1024, 4096), (1024, 2048, 4096))]
    expected = math.exp(np.mean(np.log(neighbours)))
    assert math.exp(model.log_value(np.log2(np.array(corner.shape, dtype=float)))) == pytest.approx(expected)


def test_sparse_points_use_triangulation_and_stay_exact():
    """Points filling less than half of their product grid (a list of model shapes)."""
    shapes = [
        (1024, 1024, 1024),
        (8192, 1024, 4096),
        (1024, 8192, 8192),
        (8192, 8192, 1024),
        (4096, 4096, 4096),
    ]
    model = LogGridModel(shapes, [0.5, 0.9, 1.1, 1.3, 1.0])
    assert model.fill_fraction < 0.5
    for shape, expected in zip(shapes, [0.5, 0.9, 1.1, 1.3, 1.0], strict=True):
        assert math.exp(model.log_value(np.log2(np.array(shape, dtype=float)))) == pytest.approx(expected)
    # inside the bounding box, outside the convex hull: nearest neighbour, still finite
    assert math.isfinite(model.log_value(np.log2(np.array([8192, 8192, 8192], dtype=float))))


def test_single_shape_profile_is_constant_inside_and_extrapolates_outside():
    profile = profile_of([SpeedupPoint(4096, 4096, 4096, 1.3)])
    assert predict_speedup(profile, "rowwise", 4096, 4096, 4096).how == INTERPOLATED
    assert predict_speedup(profile, "rowwise", 8192, 8192, 8192).speedup == pytest.approx(1.3)


def test_modelled_profile_is_the_roofline_of_its_constants():
    h200 = load_profile("h200-roofline")
    prediction = predict_speedup(h200, "tensorwise", 8192, 4096, 14336)
    assert prediction.speedup == pytest.approx(
        roofline_speedup(8192, 4096, 14336, "tensorwise", GPU_SPECS["H200"])
    )
    assert (prediction.how, prediction.provenance, prediction.profile) == (
        MODELLED,
        "modelled",
        "h200-roofline",
    )


def test_choice_falls_back_to_the_modelled_profile_for_other_recipes():
    choice = _select("h100-published-rowwise-2025-06", device_name="NVIDIA H100 80GB HBM3")
    measured = predict_speedup(choice, "rowwise", 8192, 4096, 4096)
    modelled = predict_speedup(choice, "tensorwise", 8192, 4096, 4096)
    assert (measured.provenance, measured.profile) == ("published", "h100-published-rowwise-2025-06")
    assert (modelled.provenance, modelled.how, modelled.profile) == ("modelled", MODELLED, "h100-roofline")


def test_a_bare_profile_without_the_recipe_is_an_error(published):
    with pytest.raises(ProfileError, match="no figures for recipe tensorwise"):
        predict_speedup(published, "tensorwise", 1024, 1024, 1024)


@pytest.mark.parametrize("shape", [(0, 1024, 1024), (1024, -1, 1024)])
def test_non_positive_sizes_are_rejected(published, shape):
    with pytest.raises(ValueError, match="positive"):
        predict_speedup(published, "rowwise", *shape)


def test_times_without_measured_times_come_from_the_roofline(published):
    times = predicted_times_s(published, "rowwise", 8192, 4096, 14336)
    assert times.bf16_s == pytest.approx(linear_fwd_bwd_time_s(8192, 4096, 14336, "bf16", "H100"), rel=1e-12)
    assert times.float8_s == pytest.approx(times.bf16_s / times.speedup.speedup, rel=1e-12)
    assert (times.bf16_provenance, times.bf16_how, times.provenance) == (MODELLED, MODELLED, "published")


def test_times_from_measured_kernel_times():
    grid = list(itertools.product((1024, 4096), repeat=3))
    points = [
        SpeedupPoint(*shape, 1.2, bf16_time_s=1e-12 * math.prod(shape), float8_time_s=1.0) for shape in grid
    ]
    profile = profile_of(points)
    for shape in grid:
        assert predicted_bf16_time_s(profile, *shape) == pytest.approx(
            (1e-12 * math.prod(shape), "measured", INTERPOLATED)
        )
    # outside: the edge time times the roofline bf16 time ratio, above the grid too (time does not saturate)
    seconds, provenance, how = predicted_bf16_time_s(profile, 8192, 4096, 4096)
    ratio = linear_fwd_bwd_time_s(8192, 4096, 4096, "bf16", "H100") / linear_fwd_bwd_time_s(
        4096, 4096, 4096, "bf16", "H100"
    )
    assert seconds == pytest.approx(1e-12 * 4096**3 * ratio, rel=1e-12)
    assert (provenance, how) == ("measured", EXTRAPOLATED)
    # the bf16 time does not depend on the recipe: a fallback recipe shares the baseline
    choice = _select(device_name="NVIDIA H100", detect_device=False)
    assert (
        predicted_times_s(choice, "tensorwise", 8192, 4096, 4096).bf16_s
        == predicted_times_s(choice, "rowwise", 8192, 4096, 4096).bf16_s
    )


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_multilinear_is_scipys_regular_grid_interpolation(dims):
    # The numpy interpolation stands in for scipy's RegularGridInterpolator(method="linear"): the same values
    # at random points, at grid nodes, on the faces and at the upper corner.
    from scipy.interpolate import RegularGridInterpolator

    rng = np.random.default_rng(dims)
    axes = [np.sort(rng.choice(np.arange(6.0, 16.0), size=size, replace=False)) for size in (3, 4, 5)[:dims]]
    grid = rng.normal(size=[len(a) for a in axes])
    reference = RegularGridInterpolator(tuple(axes), grid, method="linear")
    lower, upper = np.array([a[0] for a in axes]), np.array([a[-1] for a in axes])
    points = [lower + (upper - lower) * rng.random(dims) for _ in range(200)]
    points += [np.array([a[i % len(a)] for a in axes]) for i in range(5)]  # nodes
    points += [upper, lower, np.where(np.arange(dims) == 0, upper, lower)]
    for point in points:
        assert multilinear(axes, grid, point) == pytest.approx(float(reference(point[None, :])[0]), abs=1e-12)


# --- routed experts -----------------------------------------------------------------------------------------


def _expert_group(M_total=8192 * 8, E=64, gemms=((2048, 1408), (1408, 2048))):
    from fp8advisor.inspect.records import ExpertForm, ExpertGemm, ExpertGroup

    return ExpertGroup(
        "layers.1.moe.experts",
        "GroupedExperts",
        ExpertForm.GROUPED,
        E,
        8,
        "router.top_k",
        8192,
        M_total,
        tuple(ExpertGemm(f"w{i}", K, N, (f"layers.1.moe.experts.w{i}",)) for i, (K, N) in enumerate(gemms)),
    )


class StandInGrouped:
    """The bench part's contract: `speedup_at(E, M_per_expert, K, N)` -> (speedup, how) or None."""

    provenance = "measured"

    def __init__(self, rule):
        self.rule = rule
        self.asked: list[tuple] = []

    def speedup_at(self, E, M_per_expert, K, N):
        self.asked.append((E, M_per_expert, K, N))
        return self.rule(E, M_per_expert, K, N)


def _profile_with(grouped):
    from types import SimpleNamespace

    return SimpleNamespace(grouped=grouped)


def test_expert_group_without_a_grouped_profile_is_the_grouped_roofline():
    from fp8advisor.predict.roofline import grouped_fwd_bwd_time_s, routed_rows
    from fp8advisor.predict.speedup import predict_expert_group

    h100 = Profile(
        name="t",
        provenance="modelled",
        source="tests",
        created="2026-11-22",
        device=DeviceInfo("NVIDIA H100 80GB HBM3", "H100", (9, 0)),
        recipes={"rowwise": RecipeProfile(model={"fused": True})},
        roofline=GPU_SPECS["H100"],
    )
    group = _expert_group()
    times = predict_expert_group(h100, group)
    rows = routed_rows(group.M_total, 64)  # 1024 rows per expert
    bf16 = sum(grouped_fwd_bwd_time_s(rows, K, N, "bf16", "H100") for K, N in ((2048, 1408), (1408, 2048)))
    float8 = sum(
        grouped_fwd_bwd_time_s(rows, K, N, "rowwise", "H100") for K, N in ((2048, 1408), (1408, 2048))
    )
    assert times.bf16_s == pytest.approx(bf16) and times.float8_s == pytest.approx(float8)
    assert (times.provenance, times.how, times.speedup_range) == ("modelled", "modelled", None)
    assert predict_expert_group(h100, _expert_group(M_total=None)) is None


def test_expert_group_uses_the_measured_grouped_profile_at_balanced_routing():
    from fp8advisor.predict.roofline import grouped_fwd_bwd_time_s, routed_rows
    from fp8advisor.predict.speedup import predict_expert_group

    grouped = StandInGrouped(lambda E, m, K, N: (1.5 if K == 2048 else 1.2, "interpolated"))
    times = predict_expert_group(_profile_with(grouped), _expert_group())
    rows = routed_rows(8192 * 8, 64)
    bf16_a = grouped_fwd_bwd_time_s(rows, 2048, 1408, "bf16", "H100")  # a stand-in: H100's constants
    bf16_b = grouped_fwd_bwd_time_s(rows, 1408, 2048, "bf16", "H100")
    assert times.bf16_s == pytest.approx(bf16_a + bf16_b)
    assert times.float8_s == pytest.approx(bf16_a / 1.5 + bf16_b / 1.2)
    assert (times.provenance, times.how) == ("measured", "interpolated")
    assert grouped.asked == [(64, 1024.0, 2048, 1408), (64, 1024.0, 1408, 2048)]


def test_expert_group_falls_back_to_the_roofline_where_the_grouped_profile_cannot_answer():
    from fp8advisor.predict.speedup import predict_expert_group

    grouped = StandInGrouped(lambda E, m, K, N: None if K == 1408 else (1.5, "extrapolated"))
    times = predict_expert_group(_profile_with(grouped), _expert_group())
    assert times.provenance == "modelled" and times.how == "modelled"
    extrapolated = predict_expert_group(
        _profile_with(StandInGrouped(lambda E, m, K, N: (1.5, "extrapolated"))), _expert_group()
    )
    assert (extrapolated.provenance, extrapolated.how) == ("measured", "extrapolated")


def test_imbalance_weights_each_experts_measured_speedup_by_its_bf16_time():
    from fp8advisor.predict.roofline import grouped_fwd_bwd_time_s
    from fp8advisor.predict.speedup import IMBALANCE_SAMPLES, predict_expert_group

    def rule(E, m, K, N):
        return 1.0 + m / 4096, "interpolated"

    group = _expert_group(M_total=4 * 1024, E=4, gemms=((2048, 2048),))
    times = predict_expert_group(_profile_with(StandInGrouped(rule)), group, imbalance=3.0)
    # balanced: 1024 rows each, speedup 1.25; at imbalance 3: 3072 rows on one expert (speedup 1.75) and
    # 1024 / 3 on each of the other three (speedup 1 + (1024/3)/4096), weighted by each one's bf16 time
    # (about 3:1 here: an unweighted mean over the two row counts would differ)
    assert times.speedup == pytest.approx(1.25)
    rest = 1024 / 3
    w_busy = grouped_fwd_bwd_time_s([3072.0] * 4, 2048, 2048, "bf16", "H100") / 4
    w_rest = 3 * grouped_fwd_bwd_time_s([rest] * 4, 2048, 2048, "bf16", "H100") / 4
    at_three = (w_busy + w_rest) / (w_busy / 1.75 + w_rest / (1 + rest / 4096))
    low, high = times.speedup_range
    assert low == pytest.approx(1.25) and high == pytest.approx(at_three)
    assert IMBALANCE_SAMPLES >= 2


def test_imbalance_beyond_E_is_clamped_to_one_expert_taking_every_row():
    from fp8advisor.predict.speedup import predict_expert_group

    group = _expert_group(M_total=4096, E=4, gemms=((2048, 2048),))
    standin = StandInGrouped(lambda E, m, K, N: (1.0 + m / 4096, "interpolated"))
    clamped = predict_expert_group(_profile_with(standin), group, imbalance=100.0)
    at_E = predict_expert_group(_profile_with(standin), group, imbalance=4.0)
    assert clamped.speedup_range == pytest.approx(at_E.speedup_range)
