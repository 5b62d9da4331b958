"""The local search of `bench --model` (fp8advisor.measure.block_search) on synthetic timing tables."""

from __future__ import annotations

import pytest

from fp8advisor.measure.block_search import Timing, best_of, flip, local_search

QKV, WO, W13, W2 = ("wq", "wk", "wv"), ("wo",), ("w1", "w3"), ("w2",)
GROUPS = (QKV, WO, W13, W2)
ALL = frozenset(QKV + WO + W13 + W2)
NONE: frozenset[str] = frozenset()


def timed(ms: float, noise: float = 0.01) -> Timing:
    """A timing whose middle 60% spans `ms` +- `noise` ms."""
    return Timing(median=ms / 1e3, p20=(ms - noise) / 1e3, p80=(ms + noise) / 1e3)


class Table:
    """A synthetic block: each group's float8 saving (ms, negative: a loss), a bonus when some groups are all
    in float8 together, and a record of what was measured."""

    def __init__(
        self, saving: dict, together: dict | None = None, base_ms: float = 10.0, noise: float = 0.01
    ):
        self.saving, self.together, self.base_ms, self.noise = saving, together or {}, base_ms, noise
        self.measured: list[frozenset[str]] = []

    def __call__(self, variant: frozenset[str]) -> Timing:
        self.measured.append(variant)
        ms = self.base_ms
        for group, saving in self.saving.items():
            if set(group) <= variant:
                ms -= saving
        for groups, bonus in self.together.items():
            if all(set(group) <= variant for group in groups):
                ms -= bonus
        return timed(ms, self.noise)


def test_flip_a_group_wholly():
    assert flip(NONE, QKV) == frozenset(QKV)
    assert flip(frozenset(QKV), QKV) == NONE
    assert flip(frozenset({"wq"}), QKV) == frozenset(QKV)  # partly in float8: all of it goes


def test_noise_decides_what_counts_as_faster():
    assert timed(9.0).clearly_faster_than(timed(10.0))
    assert not timed(9.99).clearly_faster_than(timed(10.0))  # inside each other's 20th-80th percentiles
    assert not timed(9.0, noise=0.6).clearly_faster_than(timed(10.0, noise=0.6))


def test_the_search_keeps_the_groups_that_pay_and_drops_those_that_do_not():
    table = Table({QKV: 0.5, WO: -0.2, W13: 1.0, W2: 0.3})
    result = local_search(GROUPS, [NONE, ALL], table)
    assert result.start == ALL  # the best seed
    assert result.chosen == frozenset(QKV + W13 + W2)  # wo alone loses: flipped back to bf16
    assert [step.group for step in result.steps if step.kept] == [WO]


def test_two_groups_that_only_pay_together_are_found_from_the_all_float8_seed():
    # Either alone loses 0.2 ms (its cast is not shared); together they gain 1 ms (one cast of their input)
    table = Table({WO: -0.2, W2: -0.2}, together={(WO, W2): 1.4})
    from_bf16 = local_search(GROUPS, [NONE], Table({WO: -0.2, W2: -0.2}, together={(WO, W2): 1.4}))
    assert from_bf16.chosen == NONE  # one flip at a time from bf16 never sees the pair pay
    result = local_search(GROUPS, [NONE, frozenset(WO + W2)], table)
    assert result.chosen == frozenset(WO + W2)
    assert table(result.chosen).median < table(NONE).median


def test_a_difference_inside_the_noise_is_never_a_win():
    table = Table({QKV: 0.001, WO: 0.001, W13: 0.001, W2: 0.001})  # float8 saves 4 us, the noise is 10 us
    result = local_search(GROUPS, [NONE, ALL], table)
    assert result.chosen == NONE  # bf16 is as fast within the noise, and float8 costs accuracy
    # ... and from an all-float8 start, every flip to bf16 is kept while it stays inside the noise
    alone = local_search(GROUPS, [ALL], Table({QKV: 0.001, WO: 0.001, W13: 0.001, W2: 0.001}))
    assert alone.chosen == NONE


def test_flips_to_bf16_inside_the_noise_cannot_drift_to_a_clearly_slower_set():
    # each group saves 8 us (inside the 10 us noise alone), all four together 32 us (clearly faster)
    table = Table({QKV: 0.008, WO: 0.008, W13: 0.008, W2: 0.008})
    result = local_search(GROUPS, [ALL], table)
    fastest = table(ALL)
    assert not fastest.clearly_faster_than(table(result.chosen))
    assert len(result.chosen) < len(ALL)  # some float8 was dropped where it did not pay


def test_the_chosen_set_is_never_clearly_slower_than_any_seed():
    table = Table({QKV: -0.3, WO: 0.4, W13: 0.9, W2: -0.1})
    seeds = [NONE, ALL, frozenset(W13), frozenset(QKV + W13)]
    result = local_search(GROUPS, seeds, table)
    for seed in seeds:
        assert not table(seed).clearly_faster_than(table(result.chosen))
    assert result.chosen == frozenset(WO + W13)


def test_each_variant_is_measured_once():
    table = Table({QKV: 0.5, WO: -0.2, W13: 1.0, W2: 0.3})
    local_search(GROUPS, [NONE, ALL, ALL, NONE], table)
    assert len(table.measured) == len(set(table.measured))


def test_a_variant_that_fails_is_never_chosen():
    table = Table({QKV: 0.5, WO: 0.5, W13: 1.0, W2: 0.3})

    def measure(variant):
        return None if "wo" in variant else table(variant)  # e.g. out of memory

    result = local_search(GROUPS, [NONE, ALL], measure)
    assert "wo" not in result.chosen
    assert result.chosen == frozenset(QKV + W13 + W2)


def test_no_seed_measured_means_no_result():
    assert local_search(GROUPS, [NONE, ALL], lambda variant: None) is None


@pytest.mark.parametrize(
    ("timings", "expected"),
    [
        ({NONE: timed(10.0), ALL: timed(8.0)}, ALL),
        ({NONE: timed(10.0), ALL: timed(9.995)}, NONE),  # tied within noise: fewer float8 layers
    ],
)
def test_best_of(timings, expected):
    assert best_of(timings, timings) == expected


def test_a_noisy_set_with_the_lowest_median_does_not_hide_a_clearly_faster_one():
    bf16 = Timing(median=1.10, p20=1.05, p80=1.15)
    steady = Timing(median=0.95, p20=0.94, p80=0.96)  # clearly faster than bf16
    noisy = Timing(median=0.90, p20=0.30, p80=1.60)  # the lowest median, overlapping everything
    timings = {NONE: bf16, frozenset(QKV): steady, ALL: noisy}
    assert best_of(timings, timings) == frozenset(QKV)  # not bf16, which the steady set clearly beats


def test_flips_to_bf16_cannot_drift_past_a_noisy_seed():
    times = {
        frozenset("ab"): Timing(median=1.00, p20=0.99, p80=1.01),
        frozenset("b"): Timing(median=1.05, p20=1.00, p80=1.10),  # inside the noise of {a, b}
        frozenset(): Timing(median=1.10, p20=1.05, p80=1.30),  # inside the noise of {b}, not of {a, b}
        frozenset("abc"): Timing(median=0.90, p20=0.30, p80=1.60),  # the lowest median, all noise
    }
    result = local_search(
        [("a",), ("b",), ("c",)], [frozenset("ab"), frozenset("abc")], lambda v: times.get(v)
    )
    assert not times[frozenset("ab")].clearly_faster_than(times[result.chosen])
    assert result.chosen == frozenset("b")
