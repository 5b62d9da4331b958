"""`fp8advisor bench --model` (fp8advisor.measure.block_bench): the emulated pipeline end to end, resume, the
time budget, failures, and how the results are read back."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fp8advisor.advice.seeds import seed_sets
from fp8advisor.cli import app
from fp8advisor.errors import ResultsError
from fp8advisor.inspect.blocks import discover_blocks
from fp8advisor.inspect.target import load_model
from fp8advisor.measure.block_search import Timing
from fp8advisor.measure.block_sweep import run_block_sweep
from fp8advisor.measure.protocol import BenchSettings
from fp8advisor.measure.results import read_run, runs_in
from fp8advisor.paths import MODELS_DIR

runner = CliRunner()
LLAMA = f"{MODELS_DIR / 'llama3.py'}:build_model"
TINY = """
import torch
from torch import nn

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(32, 64, bias=False)
        self.gate = nn.Linear(32, 64, bias=False)
        self.down = nn.Linear(64, 32, bias=False)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)) * self.gate(x))

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(32, 64, bias=False)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)

def build_model():
    return Model()

def example_inputs(batch, seq):
    return (torch.randn(batch, seq, 32),)
"""


@pytest.fixture
def tiny(tmp_path) -> str:
    path = tmp_path / "tiny.py"
    path.write_text(TINY)
    return str(path)


def sweep(target: str, out: Path, seq: int = 16, **options):
    from fp8advisor.predict.selection import select_profile

    discovery = discover_blocks(load_model(target, "meta"), batch=1, seq=seq)
    choice = select_profile("h100-roofline")
    seeds = seed_sets(discovery, ["tensorwise"], choice)
    settings = BenchSettings(emulate=True, breakdown=False)
    return discovery, run_block_sweep(
        discovery, ["tensorwise"], seeds, out, settings, seeds_from=choice.name, **options
    )


def variant_keys(records) -> list[tuple]:
    return [(record["block"], record["recipe"], tuple(record["float8"])) for record in records]


def measured_keys(directory: Path) -> list[tuple]:
    return [key for run in runs_in(directory) for key in variant_keys(run.blocks)]


def edit_line(out: Path, index: int, edit) -> Path:
    """Change line `index` of the one run file in `out` in place (`edit` mutates the decoded JSON)."""
    (path,) = out.glob("run-*.jsonl")
    lines = path.read_text().splitlines()
    decoded = json.loads(lines[index])
    edit(decoded)
    lines[index] = json.dumps(decoded)
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def llama_sweep(tmp_path_factory):
    """The emulated pipeline on the shipped 2-block Llama, through the CLI, once for the tests below."""
    out = tmp_path_factory.mktemp("in-context")
    args = ["bench", "--model", LLAMA, "--emulate", "--recipes", "tensorwise", "--out", str(out)]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return out, result


def test_the_emulated_pipeline_measures_each_distinct_block_once(llama_sweep):
    out, result = llama_sweep
    (run,) = runs_in(out)
    assert run.in_context and run.emulated and run.points == []
    assert run.header["model"]["units"][0]["pattern"] == "layers.{0..1}"
    assert {record["block"] for record in run.blocks} == {"layers.{0..1}", "output"}
    assert all(record["context"] == "block" and record["emulated"] for record in run.blocks)
    assert all(record["status"] == "ok" for record in run.blocks), [r["reason"] for r in run.blocks]
    # every variant once: bf16, the seeds, the search's flips
    keys = [(record["block"], record["recipe"], tuple(record["float8"])) for record in run.blocks]
    assert len(keys) == len(set(keys))
    labels = {label for record in run.blocks for label in record["variant"]}
    assert {"bf16", "all", "search"} <= labels
    by_block = {choice["block"]: choice for choice in run.choices}
    assert set(by_block) == {"layers.{0..1}", "output"}
    block = by_block["layers.{0..1}"]
    assert block["instances"] == ["layers.0", "layers.1"]
    # at 64 tokens the profile advises nothing: its seed is the bf16 block, measured once for both
    assert block["seeds"]["advice"] == {"float8": [], "wall_time_s": block["bf16_wall_time_s"]}
    assert len(block["seeds"]["all"]["float8"]) == 7
    # the chosen set is never clearly slower than any seed it started from
    chosen = Timing.from_wall(block["wall_time_s"])
    for seed in block["seeds"].values():
        assert not Timing.from_wall(seed["wall_time_s"]).clearly_faster_than(chosen)
    # float8 variants are checked against the bf16 block (SQNR of the output and input gradient)
    float8 = [record for record in run.blocks if record["float8"]]
    assert float8 and all(record["sqnr_db"]["grad_input"] > 10 for record in float8)
    assert "EMULATED" in result.output and "layers.{0..1}" in result.output


def test_suggest_refuses_emulated_in_context_results(llama_sweep):
    out, _ = llama_sweep
    result = runner.invoke(app, ["suggest", LLAMA, "--seq", "64", "--measured", str(out)])
    assert result.exit_code == 2
    assert "only emulated in-context results" in result.output


def test_fit_says_in_context_results_are_not_a_grid(llama_sweep):
    out, _ = llama_sweep
    result = runner.invoke(app, ["fit", str(out), "-o", str(out / "p.json")])
    assert result.exit_code == 2 and "in-context block results" in result.output


#: Synthetic block times (ms) for the deterministic tests: a saving per Linear in float8, and "up" and "gate"
#: (one group: they read one input) pay only together.
SAVING_MS = {"down": 0.5, "": 0.3}


def synthetic_ms(variant: frozenset) -> float:
    ms = 10.0 - sum(SAVING_MS.get(name, 0.0) for name in variant)
    if {"up", "gate"} <= variant:
        ms -= 1.0
    return ms


@pytest.fixture
def synthetic(monkeypatch):
    """UnitBench.measure answers from `synthetic_ms` (blocks are still built and checked for real)."""
    import fp8advisor.measure.block_bench
    from fp8advisor.measure.protocol import Measurement

    measured = []

    def measure(self, recipe, variant):
        measured.append((self.unit.pattern, recipe, variant))
        ms = synthetic_ms(variant)
        wall = {"median": ms / 1e3, "p20": (ms - 0.01) / 1e3, "p80": (ms + 0.01) / 1e3, "iterations": 5}
        return Measurement(kernel_time_s=None, wall_time_s=wall, peak_memory_bytes=None, sqnr_db=None)

    monkeypatch.setattr(fp8advisor.measure.block_bench.UnitBench, "measure", measure)
    return measured


def choices_of(directory: Path) -> dict:
    return {(c["block"], c["recipe"]): c["float8"] for run in runs_in(directory) for c in run.choices}


def test_a_second_run_measures_nothing_and_writes_no_file(tiny, tmp_path, synthetic):
    out = tmp_path / "out"
    _, first = sweep(tiny, out)
    assert first.records and not first.reused
    assert choices_of(out) == {
        ("blocks.{0..1}", "tensorwise"): ["down", "gate", "up"],
        ("head", "tensorwise"): [""],
    }
    synthetic.clear()
    _, second = sweep(tiny, out)
    assert synthetic == [] and second.records == [] and second.path is None
    assert second.reused == len(first.records)
    assert len(runs_in(out)) == 1


def test_a_sweep_stopped_by_the_budget_resumes_where_it_stopped(tiny, tmp_path, synthetic):
    whole = tmp_path / "whole"
    sweep(tiny, whole)
    expected = sorted(measured_keys(whole))

    ticks = itertools.count(step=10.0)  # every clock reading is 10 s later than the one before
    out = tmp_path / "parts"
    _, stopped = sweep(tiny, out, time_budget_s=120, clock=lambda: next(ticks))
    assert stopped.stopped_by_budget
    assert 0 < len(stopped.records) < len(expected)
    _, resumed = sweep(tiny, out)
    assert not resumed.stopped_by_budget and resumed.reused == len(stopped.records)
    assert sorted(measured_keys(out)) == expected  # the same variants, each measured once
    assert choices_of(out) == choices_of(whole)  # and the same choices


# What changed since the first sweep into a directory; each returns the seq of the second sweep.


def _another_seq(tiny: str, out: Path) -> int:
    """Block names (`blocks.{0..1}`, `head`) are the same at another seq, as across Llama-3 sizes."""
    return 32


def _wider_blocks(tiny: str, out: Path) -> int:
    """The same file and block names, other widths: the model was edited since its run."""
    Path(tiny).write_text(TINY.replace("(32, 64", "(32, 128").replace("(64, 32", "(128, 32"))
    return 16


def _other_software(tiny: str, out: Path) -> int:
    """The earlier run's header says it was measured with another torch."""
    edit_line(out, 0, lambda header: header["software"].update(torch="2.0.0"))
    return 16


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (_another_seq, "another model or token count: {tiny}, batch 1 x seq 16"),
        (_wider_blocks, "the layers of {tiny}, batch 1 x seq 16 have changed since"),
        (_other_software, "another device or software: torch 2.0.0"),
    ],
)
def test_runs_of_another_model_or_setup_are_not_reused_and_the_summary_says_why(
    tiny, tmp_path, synthetic, change, why
):
    out = tmp_path / "out"
    _, first = sweep(tiny, out)
    assert first.passed_over == {}
    seq = change(tiny, out)
    synthetic.clear()
    _, second = sweep(tiny, out, seq=seq)
    assert second.reused == 0 and second.resumed_from == []
    assert second.passed_over == {first.run_id: why.format(tiny=tiny)}
    # every variant measured again: the synthetic times depend on the variant alone, so the same variants
    assert sorted(variant_keys(second.records)) == sorted(variant_keys(first.records))
    assert len(synthetic) == len(first.records)
    # and only this run's choices count for it
    assert {choice["run_id"] for choice in second.choices} == {second.run_id}
    (second_run,) = [run for run in runs_in(out) if run.run_id == second.run_id]
    assert second_run.header["resumes"] == []


def test_bench_model_says_which_earlier_run_it_did_not_reuse(tiny, tmp_path, synthetic):
    out = tmp_path / "out"
    _, first = sweep(tiny, out)
    args = ["bench", "--model", tiny, *"--emulate --recipes tensorwise --seq 32 --out".split(), str(out)]
    result = runner.invoke(app, args, env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert (
        f"not reused: the earlier run {first.run_id} in {out} (another model or token count: {tiny}, "
        "batch 1 x seq 16)"
    ) in result.output
    assert "reused from" not in result.output
    _, second = sweep(tiny, out)  # the first model again: its run is continued, the seq-32 one passed over
    assert second.reused == len(first.records) and second.resumed_from == [first.run_id]
    assert list(second.passed_over.values()) == [f"another model or token count: {tiny}, batch 1 x seq 32"]


def test_a_block_that_fails_is_recorded_and_the_sweep_goes_on(tiny, tmp_path, monkeypatch):
    import fp8advisor.measure.block_bench

    real = fp8advisor.measure.block_bench.materialize

    def out_of_memory(module, **kwargs):
        if type(module).__name__ == "Block":
            raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB\nmore detail")
        return real(module, **kwargs)

    monkeypatch.setattr(fp8advisor.measure.block_bench, "materialize", out_of_memory)
    out = tmp_path / "out"
    _, summary = sweep(tiny, out)
    assert summary.failed_units == {
        "blocks.{0..1}": "RuntimeError: CUDA out of memory. Tried to allocate 20.00 GiB"
    }
    (run,) = runs_in(out)
    failed = [record for record in run.blocks if record["status"] == "failed"]
    assert [(r["block"], r["recipe"]) for r in failed] == [("blocks.{0..1}", "bf16")]
    assert {choice["block"] for choice in run.choices} == {"head"}  # the head was measured after it


def test_a_block_whose_float8_variants_all_fail_gets_no_choice(tiny, tmp_path, monkeypatch, synthetic):
    import fp8advisor.measure.block_bench

    measure = fp8advisor.measure.block_bench.UnitBench.measure

    def no_float8(self, recipe, variant):
        if variant:
            raise NotImplementedError("this recipe does not run here")
        return measure(self, recipe, variant)

    monkeypatch.setattr(fp8advisor.measure.block_bench.UnitBench, "measure", no_float8)
    out = tmp_path / "out"
    _, summary = sweep(tiny, out)
    assert choices_of(out) == {}  # bf16 is not a measured decision when nothing was measured against it
    assert summary.failed_units == {
        "blocks.{0..1} tensorwise": "every float8 variant failed",
        "head tensorwise": "every float8 variant failed",
    }


def test_a_block_that_cannot_be_built_on_resume_records_no_variant_as_failed(
    tiny, tmp_path, monkeypatch, synthetic
):
    import fp8advisor.measure.block_bench
    from fp8advisor.measure.block_sweep import BlockSweepInterrupted

    measure = fp8advisor.measure.block_bench.UnitBench.measure

    def stop_after_bf16(self, recipe, variant):
        if variant:
            raise KeyboardInterrupt  # Ctrl-C once the block's bf16 time is saved
        return measure(self, recipe, variant)

    monkeypatch.setattr(fp8advisor.measure.block_bench.UnitBench, "measure", stop_after_bf16)
    out = tmp_path / "out"
    with pytest.raises(BlockSweepInterrupted) as stopped:
        sweep(tiny, out)
    assert [(r["block"], r["recipe"]) for r in stopped.value.summary.records] == [("blocks.{0..1}", "bf16")]
    monkeypatch.setattr(fp8advisor.measure.block_bench.UnitBench, "measure", measure)
    real = fp8advisor.measure.block_bench.materialize

    def flaky(module, **kwargs):
        raise RuntimeError("CUDA out of memory (another process holds the GPU)")

    monkeypatch.setattr(fp8advisor.measure.block_bench, "materialize", flaky)
    _, second = sweep(tiny, out)
    assert second.failed_units["blocks.{0..1}"].startswith("building the block failed: RuntimeError")
    assert [
        r for r in second.records if r["block"] == "blocks.{0..1}"
    ] == []  # nothing saved against a variant
    monkeypatch.setattr(fp8advisor.measure.block_bench, "materialize", real)
    _, third = sweep(tiny, out)
    assert ("blocks.{0..1}", "tensorwise") in choices_of(out)
    # the head's bf16 failed to build in the second run: that is its recorded outcome, as a grid point's is
    assert list(third.failed_units) == ["head"]


def test_an_edited_block_line_is_named_and_left_out(tiny, tmp_path):
    out = tmp_path / "out"
    sweep(tiny, out)
    path = edit_line(out, 1, lambda record: record["wall_time_s"].update(median=-1))
    run = read_run(path)
    assert any(":2: wall_time_s is" in problem for problem in run.problems)
    _, again = sweep(tiny, out)
    assert len(again.records) == 1  # the edited variant is measured again, nothing else


def test_bench_model_refuses_grid_options(tiny):
    result = runner.invoke(app, ["bench", "--model", tiny, "--grid", "quick", "--emulate"])
    assert result.exit_code == 2 and "--grid" in result.output


def test_fit_of_no_grid_is_refused_even_through_load_results(tmp_path):
    from fp8advisor.predict.measurements import load_measurements

    with pytest.raises(ResultsError):
        load_measurements([tmp_path / "missing"])
