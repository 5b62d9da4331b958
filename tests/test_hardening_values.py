"""Odd but legal numbers (issue 25, classes 6, 8 and 9 in part): every numeric option either works with
sensible, finite figures or is refused with exit 2 and one clear message, and nothing a user types sizes
unbounded work before measuring starts.

The roots: `SuggestRequest` (`fp8advisor.request`: --batch, --seq, --min-speedup, --tp, --ep, however the
request is built) and `StepConfig.check` (--world-size, --grad-accum); `advise` for what needs the model (a
--tp wider than the dimension the TP plan splits of a layer: refused; one that splits a layer unevenly:
warned, named, bf16); `fp8advisor.measure.schedule` for --shard (`Shard.check`, against the grid's shapes)
and --time-budget; the step model prices every GEMM layer the forward runs (`OTHER_GEMMS`) and re-judges M
at each token count of its break-even (`inspect.rows.at_rows`).
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _advice_helpers import StubChoice, StubPredictor, layer, modelled_choice  # noqa: E402

from fp8advisor.advice.decide import advise  # noqa: E402
from fp8advisor.errors import AdvisorError  # noqa: E402
from fp8advisor.inspect.records import LayerStatus, ModelLayers  # noqa: E402
from fp8advisor.request import MAX_DEGREE, SuggestRequest  # noqa: E402

REPO = Path(__file__).parent.parent
SMALL = "data/models/llama3.py:build_model"  # 2 blocks, dim 256, FFN 1024
#: Two Llama-3-8B blocks: float8 pays from a few thousand tokens (the break-even exists).
TWO_BLOCKS = f"{REPO}/data/models/llama3.py:llama3_8b(n_layers=2)"


@pytest.fixture
def cli(cli, monkeypatch):
    """conftest's `cli`, run from the repository (the tests name data/ relative to it)."""
    monkeypatch.chdir(REPO)
    return cli


def _refused(result, *fragments: str) -> str:
    """Exit 2, no traceback, one `error:` line holding every fragment; returns stderr."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.stderr.startswith("error: ") and result.stderr.count("error: ") == 1, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr
    return result.stderr


def _strict_json(text: str):
    """JSON as other tools read it: NaN and Infinity are not JSON."""

    def refuse(constant):
        raise ValueError(f"{constant} in JSON")

    return json.loads(text, parse_constant=refuse)


# --- class 8: the settings of a request, whoever builds it -----------------------------------------------


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("batch", 0, "--batch must be 1 or more, not 0"),
        ("seq", -1, "--seq must be 1 or more, not -1"),
        ("seq", 8.0, "--seq must be a whole number, not 8.0"),
        ("tensor_parallel", 0, "--tp must be 1 or more, not 0"),
        ("tensor_parallel", 10**12, "--tp must be at most 1,048,576"),
        ("expert_parallel", MAX_DEGREE + 1, "--ep must be at most 1,048,576"),
        ("min_speedup", float("nan"), "--min-speedup must be a positive number"),
        ("min_speedup", float("inf"), "--min-speedup must be a positive number"),
        ("min_speedup", 1e308, "no larger than 100"),
        ("min_speedup", 0.0, "--min-speedup must be a positive number"),
    ],
)
def test_a_request_refuses_values_no_run_could_have(setting, value, message):
    with pytest.raises(AdvisorError, match=re.escape(message)):
        SuggestRequest("m.py", **{setting: value})
    # a header naming such a value is no command suggest wrote: it reads as none
    option = {"tensor_parallel": "--tp", "expert_parallel": "--ep", "min_speedup": "--min-speedup"}
    words = {"--batch": "1", "--seq": "8192", option.get(setting, f"--{setting}"): str(value)}
    line = "fp8advisor suggest m.py " + " ".join(f"{k} {v}" for k, v in words.items()) + " --format filter"
    assert SuggestRequest.from_command(line) is None


@pytest.mark.parametrize(
    ("arguments", "fragments"),
    [
        (["--seq", "0"], ["--seq must be 1 or more"]),
        (["--tp", "1000000000000"], ["--tp must be at most"]),
        (["--min-speedup", "nan"], ["--min-speedup must be a positive number"]),
        (["--min-speedup", "1e308"], ["no larger than 100"]),
        (["--world-size", "1000000000000"], ["--world-size must be at most"]),
        (["--grad-accum", "0"], ["--grad-accum must be 1 or more"]),
        (
            ["--tp", "1000000"],
            ["--tp 1000000 is wider than what tensor parallelism splits", "layers.0.attention.wq 256x256"],
        ),
        # the plan splits wk's N (64): the narrowest split of the 8 layers it cannot split 257 ways
        (
            ["--tp", "257"],
            ["--tp 257 is wider than what tensor parallelism splits of 8 layer(s)", "at most --tp 64"],
        ),
    ],
)
def test_suggest_refuses_odd_numbers_with_one_clear_message(cli, arguments, fragments):
    _refused(cli("suggest", SMALL, *arguments), *fragments)


# --- class 8: tensor parallelism against the layers ------------------------------------------------------


def _model(*layers, tokens=8192):
    return ModelLayers("m.py", 1, tokens, tuple(layers))


@pytest.mark.parametrize("tensor_parallel", [3, 5, 7, 96])
def test_an_uneven_tensor_parallel_split_is_named_predicted_at_its_widest_slice_and_kept_bf16(
    tensor_parallel,
):
    wide, even = layer("blocks.0.wide", 256, 4096), layer("blocks.0.even", 4096 * 3, 96 * 35)
    predictor = StubPredictor(rule=lambda M, K, N: 1.5)
    advice = advise(
        _model(wide, even),
        StubChoice(),
        "rowwise",
        tensor_parallel=tensor_parallel,
        predictor=predictor,
        device_capability=None,
        compare_torchao_auto=False,
    )
    decided = {item.fqn: item for item in advice.layers}
    widest = -(-256 // tensor_parallel)
    assert ("rowwise", 8192, widest, 4096) in predictor.calls  # ceil, never the floor's narrower slice
    assert ("rowwise", 8192, 256 // tensor_parallel, 4096) not in predictor.calls
    assert not decided["blocks.0.wide"].convert
    assert f"--tp {tensor_parallel} does not divide K=256" in decided["blocks.0.wide"].reason
    (warning,) = [w for w in advice.warnings if "splits" in w or "split them unevenly" in w]
    assert (
        f"--tp {tensor_parallel} does not divide K or N of" in warning and "blocks.0.wide 256x4096" in warning
    )


def test_a_tensor_parallel_degree_that_divides_every_layer_warns_of_nothing_uneven():
    advice = advise(
        _model(layer("blocks.0.a", 4096, 4096), layer("blocks.0.b", 4096, 1024)),
        StubChoice(),
        "rowwise",
        tensor_parallel=8,
        predictor=StubPredictor(rule=lambda M, K, N: 1.5),
        device_capability=None,
        compare_torchao_auto=False,
    )
    assert all(item.convert for item in advice.layers)
    assert not any("unevenly" in w for w in advice.warnings)


@pytest.mark.parametrize(
    ("shape", "tensor_parallel"), [((256, 256), 257), ((16, 48), 64), ((256, 64), 1000000)]
)
def test_a_tensor_parallel_degree_wider_than_a_layer_is_refused_naming_it(shape, tensor_parallel):
    narrow = layer("blocks.0.narrow", *shape)
    with pytest.raises(AdvisorError, match=re.escape(f"blocks.0.narrow {shape[0]}x{shape[1]}")) as raised:
        advise(
            _model(layer("blocks.0.wide", 8192, 2**20), narrow),
            StubChoice(),
            "rowwise",
            tensor_parallel=tensor_parallel,
            predictor=StubPredictor(),
            device_capability=None,
        )
    assert "a GPU's slice would be empty" in str(raised.value)
    assert "blocks.0.wide" not in str(raised.value)  # N = 2^20 splits: only the narrow layer is named


def test_a_layer_narrower_than_tp_in_one_dimension_splits_the_other():
    predictor = StubPredictor(rule=lambda M, K, N: 1.5)
    advice = advise(
        _model(layer("blocks.0.gate", 4096, 16)),
        StubChoice(),
        "rowwise",
        tensor_parallel=32,
        predictor=predictor,
        device_capability=None,
        compare_torchao_auto=False,
    )
    assert {call[2:] for call in predictor.calls} == {(128, 16)}  # K split only: N = 16 < 32
    assert advice.layers[0].shard == (128, 16)


# --- class 8 and 9: fewer than 16 tokens, and the step model's figures -----------------------------------


@pytest.fixture(scope="module")
def inspected():
    from fp8advisor.inspect.layers import inspect_model

    return {seq: inspect_model(TWO_BLOCKS, batch=1, seq=seq) for seq in (1, 8, 15, 16)}


def _report(model_layers):
    from fp8advisor.advice.step import StepConfig, StepGpu
    from fp8advisor.advice.step_comparison import step_report
    from fp8advisor.gpus import GPU_SPECS

    choice = modelled_choice()
    advice = advise(model_layers, choice, "rowwise", device_capability=None, compare_torchao_auto=False)
    return step_report(advice, model_layers, choice, StepGpu.of(GPU_SPECS["H100"]), StepConfig())


@pytest.mark.parametrize("seq", [1, 8, 15])
def test_fewer_than_16_tokens_give_a_whole_finite_step_and_a_break_even(inspected, seq):
    report, sixteen = _report(inspected[seq]), _report(inspected[16])
    advice_step = report.prediction("advice")  # no layer converts: the advice is the bf16 step
    assert advice_step.step_s == pytest.approx(report.baseline.step_s)
    # every Linear the forward runs is in the step, though none has a float8 prediction
    other = report.baseline.term("other_gemms").seconds
    assert other == pytest.approx(sixteen.baseline.term("linear_bf16").seconds, rel=0.05)
    # at 16 tokens and more every M is a multiple of 16 again: the break-even is found, as at seq 16
    assert report.break_even.tokens is not None
    assert abs(report.break_even.tokens - sixteen.break_even.tokens) <= 64
    json.dumps(report.to_json(), allow_nan=False)  # no NaN or infinity anywhere


@pytest.mark.parametrize("seq", ["1", "8", "15"])
def test_suggest_prints_the_step_of_a_sequence_shorter_than_16_tokens(cli, seq):
    result = cli("suggest", SMALL, "--seq", seq)
    assert result.exit_code == 0, (result.output, result.exception)
    lines = result.stdout.splitlines()
    assert any(line.split()[:3] == ["this", "advice", "0"] for line in lines)
    assert any(line.split()[:2] == ["other", "gemms"] for line in lines)
    assert "break-even: rowwise never reaches 1.05x" in result.stdout  # float8 never pays at dim 256


def test_suggest_json_of_extreme_legal_values_is_strict_json(cli):
    for arguments in (
        ["--seq", "8"],
        ["--world-size", str(MAX_DEGREE), "--grad-accum", "1000000000000"],
        ["--min-speedup", "100"],
        ["--min-speedup", "1e-300"],
    ):
        result = cli("suggest", SMALL, *arguments, "--json")
        assert result.exit_code == 0, (arguments, result.output)
        step = _strict_json(result.stdout)["step"]
        assert all(s["step_s"] > 0 and s["tokens_per_s_per_gpu"] > 0 for s in step["strategies"].values())


def test_moving_a_layer_to_other_rows_judges_its_m_again():
    from fp8advisor.inspect.rows import _divisibility_reason, at_rows

    traced = layer("blocks.0.a", 256, 256, 16)
    odd = at_rows(traced, [8])
    assert odd.status is LayerStatus.NOT_CONVERTIBLE and odd.reason.startswith("M = 8 is not a multiple")
    back = at_rows(odd, [32])
    assert (back.status, back.reason, back.M_per_call) == (LayerStatus.TRACED, None, (32,))
    # assumed before M made it unconvertible: assumed again, its reason kept
    assumed = layer(
        "blocks.0.b", 256, 256, 24, LayerStatus.NOT_CONVERTIBLE,
        reason=f"{_divisibility_reason(256, 256, [24])}; M assumed: tracing stopped",
    )  # fmt: skip
    assert (at_rows(assumed, [48]).status, at_rows(assumed, [48]).reason) == (
        LayerStatus.ASSUMED,
        "M assumed: tracing stopped",
    )
    # a structural reason is not M's: the layer stays out at any M
    subclass = layer("blocks.0.c", 256, 256, 8, LayerStatus.NOT_CONVERTIBLE, reason="X overrides forward")
    assert at_rows(subclass, [16]).status is LayerStatus.NOT_CONVERTIBLE


# --- class 6: nothing typed sizes unbounded work: --shard, --time-budget, --compile-workers -------------


@pytest.mark.parametrize("text", ["1/100000000", "7/999999999", "9/9"])
def test_more_shards_than_shapes_are_refused_at_once(text):
    from fp8advisor.measure.linear import GRIDS
    from fp8advisor.measure.schedule import Shard

    shard, points = Shard.parse(text), GRIDS["quick"].points()  # 8 shapes
    started = time.monotonic()
    with pytest.raises(AdvisorError, match=r"the grid has 8 shape\(s\), so it splits into at most 8"):
        shard.select(points)
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize("text", ["1/" + "9" * 5000, "1/9999999999", "99999999999/99999999999"])
def test_a_shard_count_no_grid_could_have_is_refused_as_typed(text):
    from fp8advisor.measure.schedule import Shard

    with pytest.raises(AdvisorError, match="N is more than any grid has shapes") as raised:
        Shard.parse(text)
    assert len(str(raised.value)) < 700  # the typed value is quoted short


@pytest.mark.parametrize(
    ("arguments", "fragments"),
    [
        (["--shard", "1/100000000"], ["--shard 1/100000000: the grid has 1 shape(s)"]),
        (["--shard", "2/" + "9" * 5000], ["N is more than any grid has shapes"]),
        (["--time-budget", "inf"], ["--time-budget must be a positive number of seconds, at most"]),
        (["--time-budget", "nan"], ["--time-budget must be a positive number"]),
        (["--time-budget", "1e308"], ["at most 31,536,000 (a year)"]),
        (["--compile-workers", "1000000000000"], ["--compile-workers"]),
    ],
)
def test_bench_refuses_work_sizes_before_writing_anything(cli, tmp_path, arguments, fragments):
    from _bench_helpers import CLI_GRID

    out = tmp_path / "results"
    result = cli("bench", *CLI_GRID, "--out", out, "--no-png", *arguments)
    assert result.exit_code == 2, (result.output, result.exception)
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in result.output, result.output
    assert not out.exists()


def test_a_step_of_nothing_has_no_nan_or_infinity():
    from types import SimpleNamespace

    from fp8advisor.advice.step import StepPrediction, Term

    empty = StepPrediction("s", "s", 0, 16, (Term("x", 0.0, "modelled", ""),))
    assert empty.speedup_over(empty) == 1.0 and empty.tokens_per_s == 0.0
    json.dumps(empty.to_json(SimpleNamespace(step_s=0.0)), allow_nan=False)
