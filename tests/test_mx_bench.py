"""MXFP8 in `bench` (Linear and grouped experts), the MX grouped roofline, and `fit` of MX results."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from _bench_helpers import serial_inductor  # noqa: E402

from fp8advisor.cli import app  # noqa: E402
from fp8advisor.errors import AdvisorError  # noqa: E402
from fp8advisor.measure import grouped, linear  # noqa: E402
from fp8advisor.predict import mx_grouped, roofline  # noqa: E402

runner = CliRunner()


# --- the MX grouped roofline: every kernel's bytes, by hand -------------------------------------------------


def test_mx_grouped_kernel_bytes_match_hand_arithmetic():
    # E = 2 experts of 288 and 96 tokens (M_total = 384), K = 192, N = 512: K pads to 256 rows and 6 scale
    # columns to 8 in the blocked layout, and the groups' 9 and 3 scale columns to 12 and 4.
    rows, K, N = [288, 96], 192, 512
    A, W, G = 384 * 192, 2 * 192 * 512, 384 * 512  # 73728, 196608, 196608 elements
    expected = [
        # fwd: cast A (bf16 read 2 + e4m3 write 1 per element) + blocked scales 384 rows x 8 columns
        ("fwd: 1x32 cast of A along K, blocked scales", 3 * A + 384 * 8),  # 221184 + 3072 = 224256
        # fwd: cast W along K + its E*N*K/32 plain scales
        ("fwd: 1x32 cast of W along K", 3 * W + W // 32),  # 589824 + 6144 = 595968
        # fwd: W's scales read, written per expert as 512 rows x 8 columns
        ("fwd: W's scales to the per-expert blocked layout", W // 32 + 2 * 512 * 8),  # 6144 + 8192 = 14336
        # dgrad: cast G along N + blocked scales 384 rows x 16 columns
        ("bwd: 1x32 cast of G along N, blocked scales", 3 * G + 384 * 16),  # 589824 + 6144 = 595968
        # dgrad: cast W along N, blocked per expert: K = 192 padded to 256 rows x 16 columns
        ("bwd: 32x1 cast of W along N, blocked scales", 3 * W + 2 * 256 * 16),  # 589824 + 8192 = 598016
        # wgrad: G along the tokens (N x 384/32 scales), zero fill of 512 rows x (12 + 4 x 2) columns, then
        # the rearrangement: read 6144, write 512 rows x (ceil(9/4)*4 + ceil(3/4)*4 = 12 + 4) columns
        ("bwd: 32x1 cast of G along the tokens", 3 * G + G // 32),  # 595968
        ("bwd: zero fill of G^T's blocked scales", 512 * 20),  # 10240
        ("bwd: G^T's scales to the per-group blocked layout", G // 32 + 512 * 16),  # 6144 + 8192 = 14336
        # the same for A: K = 192 rows padded to 256
        ("bwd: 32x1 cast of A along the tokens", 3 * A + A // 32),  # 221184 + 2304 = 223488
        ("bwd: zero fill of A^T's blocked scales", 256 * 20),  # 5120
        ("bwd: A^T's scales to the per-group blocked layout", A // 32 + 256 * 16),  # 2304 + 4096 = 6400
    ]
    assert [value for _, value in expected] == [
        224256, 595968, 14336, 595968, 598016, 595968, 10240, 14336, 223488, 5120, 6400
    ]  # fmt: skip
    assert mx_grouped.grouped_kernel_bytes(rows, K, N, "mxfp8_rceil") == expected
    # wgrad_with_hp drops the weight-gradient casts and rearrangements: the first five stay
    assert mx_grouped.grouped_kernel_bytes(rows, K, N, "mxfp8_rceil_wgrad_with_hp") == expected[:5]


def test_mx_grouped_time_is_mx_gemms_plus_its_kernels_and_the_grouped_recipe_follows_the_linear_one():
    rows, K, N, gpu = [1024.0] * 8, 4096, 14336, "B200"
    specs = roofline.get_specs(gpu)
    kernels = sum(
        max(b / (specs.bandwidth_bytes_per_s * specs.bandwidth_efficiency), specs.kernel_floor_s)
        for _, b in mx_grouped.grouped_kernel_bytes(rows, K, N, "mxfp8_rceil")
    )
    mx = roofline.grouped_fwd_bwd_time_s(rows, K, N, "mxfp8_rceil", gpu)
    assert mx == pytest.approx(roofline.grouped_gemm_time_s(rows, K, N, "mxfp8", gpu) + kernels)
    hp = roofline.grouped_fwd_bwd_time_s(rows, K, N, "mxfp8_rceil_wgrad_with_hp", gpu)
    assert hp > roofline.grouped_gemm_time_s(rows, K, N, "mxfp8", gpu)  # a bf16 grad_weight GEMM
    # exactly: the MX GEMMs with a bf16 grad_weight GEMM, plus its 5 kernels (no weight-gradient casts)
    hp_kernels = mx_grouped.grouped_kernel_bytes(rows, K, N, "mxfp8_rceil_wgrad_with_hp")
    assert len(hp_kernels) == 5
    floored = [
        max(b / (specs.bandwidth_bytes_per_s * specs.bandwidth_efficiency), specs.kernel_floor_s)
        for _, b in hp_kernels
    ]
    gemms = roofline.grouped_gemm_time_s(rows, K, N, "mxfp8", gpu, grad_weight_dtype="bf16")
    assert gemms > roofline.grouped_gemm_time_s(rows, K, N, "mxfp8", gpu)
    assert hp == gemms + sum(floored)
    with pytest.raises(ValueError, match="rowwise only"):
        roofline.grouped_fwd_bwd_time_s(rows, K, N, "tensorwise", gpu)
    assert [
        mx_grouped.grouped_recipe_for(r).value for r in ("tensorwise", "rowwise_with_gw_hp", "mxfp8")
    ] == [
        "rowwise",
        "rowwise",
        "mxfp8_rceil",
    ]


# --- emulated numerics against torchao's own reference functions --------------------------------------------


def _torchao_mx():
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.quantization.quantize_.common import KernelPreference

    return KernelPreference.EMULATED, ScaleCalculationMode.RCEIL


def _block_varied(t: torch.Tensor) -> torch.Tensor:
    """Magnitudes that differ from one 32-block of the last axis to the next (so MX's per-block scales differ
    from rowwise's per-row ones)."""
    blocks = t.shape[-1] // 32
    return (t.float() * torch.logspace(-3, 3, blocks).repeat_interleave(32)).to(torch.bfloat16)


@pytest.mark.parametrize("recipe", ["mxfp8_rceil", "mxfp8_rceil_wgrad_with_hp"])
def test_bench_mx_linear_is_torchaos_mx_mm_bit_for_bit(recipe):
    from torchao.prototype.moe_training.mxfp8_linear import _to_mxfp8_then_scaled_mm

    emulated, rceil = _torchao_mx()
    M, K, N = 64, 128, 96
    base = linear.build_module(K, N, device="cpu", seed=0)
    with torch.no_grad():
        base.fc.weight.copy_(_block_varied(base.fc.weight))
    x, grad_output = linear.make_inputs(M, K, N, device="cpu", seed=0)

    def run(module, forward):
        leaf = x.detach().clone().requires_grad_()
        y = forward(module, leaf)
        y.backward(grad_output)
        return y.detach(), leaf.grad, module.fc.weight.grad

    bench_module = linear.prepare_module(base, recipe, emulate=True)
    got = run(bench_module, lambda m, leaf: m(leaf))
    reference = copy.deepcopy(base)
    wgrad_with_hp = recipe.endswith("with_hp")
    want = run(
        reference,
        lambda m, leaf: m.sigmoid(
            _to_mxfp8_then_scaled_mm(m.ln(leaf), m.fc.weight, emulated, rceil, wgrad_with_hp)
        ),
    )
    for name, a, b in zip(("output", "grad_input", "grad_weight"), got, want, strict=True):
        assert torch.equal(a, b), name
    bf16 = run(copy.deepcopy(base), lambda m, leaf: m(leaf))
    assert not torch.equal(got[0], bf16[0]) and not torch.equal(got[1], bf16[1])  # the conversion happened
    rowwise = run(linear.prepare_module(base, "rowwise", emulate=True), lambda m, leaf: m(leaf))
    assert not torch.equal(got[0], rowwise[0])  # and it is MX, not a float8 recipe


@pytest.mark.parametrize("recipe", ["mxfp8_rceil", "mxfp8_rceil_wgrad_with_hp"])
def test_bench_mx_grouped_gemm_is_torchaos_emulated_mx_grouped_mm_bit_for_bit(recipe):
    from torchao.prototype.moe_training.mxfp8_grouped_mm import _to_mxfp8_then_scaled_grouped_mm

    emulated, rceil = _torchao_mx()
    operands = grouped.make_operands(2, 64, 64, 96, device="cpu", seed=0)
    operands["weight"] = _block_varied(operands["weight"])
    offs, grad_output = operands["offs"], operands["grad_output"]

    def run(function):
        A = operands["A"].detach().clone().requires_grad_()
        weight = operands["weight"].detach().clone().requires_grad_()
        output = function(A, weight.transpose(-2, -1), offs)
        output.backward(grad_output)
        return output.detach(), A.grad, weight.grad

    got = run(grouped.grouped_function(recipe, emulate=True))
    want = run(
        lambda A, B_t, o: _to_mxfp8_then_scaled_grouped_mm(
            A,
            B_t,
            o,
            out_dtype=torch.bfloat16,
            kernel_preference=emulated,
            wgrad_with_hp=recipe.endswith("with_hp"),
            scale_calculation_mode=rceil,
        )
    )
    for name, a, b in zip(("output", "grad_input", "grad_weight"), got, want, strict=True):
        assert torch.equal(a, b), name
    bf16 = run(grouped.grouped_function("bf16", emulate=True))
    assert not torch.equal(got[0], bf16[0]) and not torch.equal(got[1], bf16[1])
    assert torch.equal(got[2], bf16[2]) == recipe.endswith("with_hp")  # the weight gradient in bf16 or not


# --- the recipes a grid measures, by device -----------------------------------------------------------------


def test_default_recipes_follow_the_gpu_and_mx_sizes_are_checked():
    hopper, blackwell = (9, 0), (10, 0)
    float8 = ("bf16", "tensorwise", "rowwise", "rowwise_with_gw_hp")
    mx = ("mxfp8_rceil", "mxfp8_rceil_wgrad_with_hp")
    assert linear.make_grid(capability=hopper).recipes == float8
    assert linear.make_grid(capability=blackwell).recipes == float8 + mx
    assert linear.make_grid(emulate=True).recipes == float8  # the emulated grid as before
    assert linear.make_grid(emulate=True, recipes=["mxfp8"]).recipes == ("bf16", "mxfp8_rceil")
    assert grouped.make_grouped_grid(capability=hopper).recipes == ("bf16", "rowwise")
    assert grouped.make_grouped_grid(capability=blackwell).recipes == ("bf16", "rowwise", *mx)
    with pytest.raises(AdvisorError, match="compute capability 10.x"):
        linear.make_grid(recipes=["mxfp8"], capability=hopper)
    with pytest.raises(AdvisorError, match="multiples of 32"):
        linear.make_grid(emulate=True, K=[48], recipes=["mxfp8"])
    linear.make_grid(emulate=True, K=[48], recipes=["rowwise"])  # float8 keeps its own rule
    with pytest.raises(AdvisorError, match="multiples of 32"):
        grouped.make_grouped_grid(emulate=True, M_per_expert=[16], recipes=["mxfp8"])
    assert grouped.make_grouped_grid(emulate=True, M_per_expert=[32], recipes=["mxfp8"]).shapes
    # the emulated grid's 16 tokens per expert become 32 with MXFP8 (float8's grid as it was)
    emulated = grouped.make_grouped_grid(emulate=True, recipes=["mxfp8"])
    assert (emulated.name, emulated.shapes) == ("emulated", ((2, 32, 32, 32), (4, 32, 32, 32)))
    assert grouped.make_grouped_grid(emulate=True).shapes == ((2, 16, 32, 32), (4, 16, 32, 32))
    with pytest.raises(AdvisorError, match="multiples of 128"):  # torchao's GPU casts assert 128
        grouped.make_grouped_grid(
            M_per_expert=[32], K=[768], N=[768], recipes=["mxfp8"], capability=blackwell
        )


@pytest.mark.parametrize("extra", [[], ["--grouped"]])
def test_bench_mxfp8_on_a_hopper_gpu_exits_2_before_measuring(tmp_path, monkeypatch, extra):
    from fp8advisor import device
    from fp8advisor.measure import recipe_support

    monkeypatch.setattr(device, "require_fp8_gpu", lambda: None)  # a GPU with FP8 tensor cores ...
    monkeypatch.setattr(recipe_support, "gpu_capability", lambda: (9, 0))  # ... of compute capability 9.0
    out = tmp_path / "results"
    result = runner.invoke(app, ["bench", *extra, "--recipes", "mxfp8", "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "MXFP8 needs Blackwell's block-scaled GEMMs (compute capability 10.x)" in result.output
    assert "not 9.0" in result.output
    assert not out.exists() or not list(out.iterdir())  # nothing measured, nothing written


def test_mxfp8_rceil_needs_tokens_in_multiples_of_32_and_wgrad_with_hp_does_not():
    with pytest.raises(AdvisorError, match=r"--M 48: mxfp8_rceil needs M \(the tokens\) a multiple of 32"):
        linear.make_grid(emulate=True, M=[48, 64], K=[32], N=[32], recipes=["mxfp8"])
    with pytest.raises(AdvisorError, match="--M 48: mxfp8_rceil needs M"):  # named among several recipes
        linear.make_grid(M=[48], K=[32], N=[32], recipes=["rowwise", "mxfp8"], capability=(10, 0))
    hp = linear.make_grid(emulate=True, M=[48], K=[32], N=[32], recipes=["mxfp8_rceil_wgrad_with_hp"])
    assert hp.shapes == ((48, 32, 32),)  # the weight gradient in bf16: no block along the tokens
    assert linear.make_grid(emulate=True, M=[48], K=[32], N=[32], recipes=["rowwise"]).shapes


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--M", "48", "--K", "32", "--N", "32"], "--M 48: mxfp8_rceil needs M (the tokens)"),
        (["--grouped", "--M-per-expert", "16"], "--M-per-expert must be multiples of 32 with --grouped"),
    ],
)
def test_bench_emulated_mx_with_tokens_off_the_block_exits_2_before_measuring(tmp_path, arguments, message):
    out = tmp_path / "results"
    result = runner.invoke(app, ["bench", "--emulate", "--recipes", "mxfp8", *arguments, "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not out.exists() or not list(out.iterdir())


def test_emulated_mx_grouped_runs_eager_and_everything_else_compiled(monkeypatch):
    compiled = []
    monkeypatch.setattr(grouped, "compile_module", lambda function: compiled.append(function) or function)
    monkeypatch.setattr(grouped, "grouped_function", lambda recipe, emulate: (recipe, emulate))
    recipes = ("bf16", "rowwise", "mxfp8_rceil", "mxfp8_rceil_wgrad_with_hp")
    for recipe in recipes:
        for emulate in (False, True):
            assert grouped.prepared_function(recipe, emulate=emulate) == (recipe, emulate)
    # inductor fails on the CPU on a non-square MX grouped shape: emulated MXFP8 alone runs eager
    assert compiled == [(r, e) for r in recipes for e in (False, True) if not (e and r.startswith("mxfp8"))]
    assert "MXFP8 (torchao's EMULATED kernel preference) runs EAGER" in grouped.EMULATED_METHOD["compile"]


def test_fit_counts_the_grouped_mx_points_it_leaves_out_per_recipe(monkeypatch):
    from fp8advisor.measure.speedups import GroupedSpeedup
    from fp8advisor.predict import measurements

    def pair(recipe, E):
        return GroupedSpeedup(E, 32, 32, 32, recipe, 1.2, 2e-3, 1e-3, "wall_time_median", "cpu", True, "r")

    pairs = [pair("mxfp8_rceil", 2), pair("mxfp8_rceil_wgrad_with_hp", 2), pair("mxfp8_rceil", 4)]
    pairs.append(pair("rowwise", 2))
    monkeypatch.setattr(
        measurements, "pair_with_baseline", lambda group, grouped=False: pairs if grouped else []
    )
    _speedups, kept, _bases, notes = measurements._paired_points([])
    assert [point.E for point in kept] == [2]  # rowwise's, the profile's grouped recipe
    assert notes[-1].startswith(
        "grouped MXFP8 point(s) left out (2 mxfp8_rceil, 1 mxfp8_rceil_wgrad_with_hp): a profile's grouped "
        "section holds rowwise only, it has no per-recipe grouped section"
    )


def test_bench_model_with_mx_leaves_a_linear_of_48_features_in_bf16(tmp_path):
    from fp8advisor.inspect.blocks import discover_blocks
    from fp8advisor.inspect.target import load_model

    model = tmp_path / "widths.py"
    model.write_text(
        "import torch\nfrom torch import nn\n\n"
        "class Block(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.up = nn.Linear(64, 48)\n"  # N 48: a multiple of 16, not of 32
        "        self.down = nn.Linear(48, 64)\n"  # K 48
        "        self.out = nn.Linear(64, 64)\n"
        "    def forward(self, x):\n"
        "        return x + self.out(self.down(torch.relu(self.up(x))))\n\n"
        "def build_model():\n"
        "    return nn.Sequential(Block(), Block())\n\n"
        "def example_inputs(batch, seq):\n"
        "    return (torch.randn(batch, seq, 64),)\n"
    )

    def convertible(recipes):
        found = discover_blocks(load_model(str(model), "meta"), batch=1, seq=32, recipes=recipes)
        return found.units[0].convertible

    assert convertible(()) == convertible(("rowwise",)) == {"up", "down", "out"}
    assert convertible(("mxfp8_rceil",)) == {"out"}  # MXFP8 needs K and N multiples of 32
    assert convertible(("rowwise", "mxfp8_rceil_wgrad_with_hp")) == {"out"}


# --- an emulated MX sweep that `fit` turns into a profile ---------------------------------------------------


@pytest.mark.slow
def test_emulated_mx_bench_rows_fit_into_a_profile_with_an_mxfp8_entry(tmp_path):
    from fp8advisor.measure.results import load_results
    from fp8advisor.predict.profile_files import load_profile

    out = tmp_path / "results"
    with serial_inductor():
        result = runner.invoke(
            app,
            [
                "bench",
                "--emulate",
                "--M",
                "32",
                "--K",
                "32",
                "--N",
                "32",
                "--recipes",
                "mxfp8",
                "--out",
                str(out),
            ],
        )
    assert result.exit_code == 0, result.output
    records = [record for run in load_results([out]) for record in run.points]
    assert [(r["recipe"], r["status"]) for r in records] == [("bf16", "ok"), ("mxfp8_rceil", "ok")]
    assert records[1]["emulated"] is True and records[1]["sqnr_db"]["output"] > 20
    fitted = runner.invoke(app, ["fit", str(out), "--allow-emulated", "-o", str(tmp_path / "p.json")])
    assert fitted.exit_code == 0, fitted.output
    assert set(load_profile(tmp_path / "p.json").recipes) == {"mxfp8_rceil"}


@pytest.mark.slow
def test_emulated_mx_grouped_bench_measures_torchaos_emulated_path_eager_on_a_non_square_shape(tmp_path):
    from fp8advisor.measure.results import load_results

    out = tmp_path / "grouped"
    # M_total 64, K 64, N 128: torch.compile's inductor fails on the CPU here ("InductorError:
    # AssertionError ({y0: 64, y1: 4, y2: 32}, ...)"), the eager emulation measures it
    arguments = ["--E", "2", "--M-per-expert", "32", "--K", "64", "--N", "128", "--recipes", "mxfp8"]
    with serial_inductor():
        result = runner.invoke(
            app, ["bench", "--grouped", "--emulate", *arguments, "--no-png", "--out", str(out)]
        )
    assert result.exit_code == 0, result.output
    records = [record for run in load_results([out]) for record in run.points]
    assert [(r["recipe"], r["status"], r["grouped"]) for r in records] == [
        ("bf16", "ok", True),
        ("mxfp8_rceil", "ok", True),
    ]
    assert set(records[1]["sqnr_db"]) == {"output", "grad_input", "grad_weight"}
    assert all(20 < value < 60 for value in records[1]["sqnr_db"].values())  # MX noise, not bf16's
    assert (
        "MXFP8 (torchao's EMULATED kernel preference) runs EAGER"
        in (load_results([out])[0].header["method"]["compile"])
    )  # the run says how its MX points ran
