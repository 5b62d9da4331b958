"""Time whole training steps of a Llama-3-8B-shaped decoder: bf16 against three choices of float8 layers.

Usage (on a GPU with FP8 tensor cores, sm_89+; the default run is sized for one 80 GB H100):

    python benchmarks/train_step.py [--layers 16] [--recipes rowwise] [--out results/train-step.json] \
        [--trace-dir results/traces]
    python benchmarks/train_step.py --emulate --tiny --no-compile   # the whole flow on a CPU, in seconds

What one run measures, per token count (batch 1 x seq 8192 and batch 1 x seq 2048) and per recipe:

1. `bf16`: the model in bf16, no conversion.
2. `float8_all_convertible`: torchao `convert_to_float8_training` on every `nn.Linear` whose K and N are
   multiples of 16 (what float8 GEMMs need), the output head included.
3. `float8_torchao_auto`: torchao's own `_auto_filter_for_recipe(recipe, filter_fqns=[])` as module filter.
4. `float8_advice`: exactly the layers fp8advisor advises for this model at this token count and recipe
   (`inspect_model` -> `select_profile` -> `advise` -> `Advice.module_filter_fqns`).

Each variant builds a fresh model (same seed, same data) from `data/models/llama3.py:llama3_8b(n_layers=N)`
in bf16, converts it, compiles each transformer block and the head (final norm, output Linear, cross-entropy)
with `torch.compile` (per-block compilation, as torchtitan does: one graph serves every identical block, so
compile time does not grow with the number of layers), and trains with `torch.optim.AdamW` (fused on CUDA). A
step is
forward, backward and optimizer step on random tokens. After `--warmup` steps (compilation happens there) it
times `--steps` steps, each between two CUDA events (`time.perf_counter` on the CPU), and records the median,
20th and 80th percentile, tokens/s, peak GPU memory and the losses (a float8 run must stay finite and close to
bf16). With `--trace-dir DIR` it then runs two more steps under `torch.profiler` (CPU and CUDA activities,
input shapes recorded; the first step warms the profiler up, the second is recorded as `ProfilerStep#1`) and
keeps that step's trace as `DIR/step-<tokens>-<variant>[-<recipe>].json.gz`, the Chrome/Kineto format that
torchtitan's profiling writes; those steps are not timed and their losses are not recorded. Between
variants everything is freed (`del`, `gc.collect`, `torch.cuda.empty_cache`, `torch._dynamo.reset`).

Next to each measured step it puts what fp8advisor predicted: the Linear-time speedup of each strategy
(`Advice.strategy(name).predicted_speedup`: the advice, every convertible layer, torchao's auto filter),
and the step model's predicted step time and step speedup (`fp8advisor.advice.step`: one GPU, no activation
checkpointing, AdamW states in bf16, for the profile's GPU). Everything goes to `--out` as JSON (device,
software versions, command, date, method); a markdown table goes to stdout, ready for docs/benchmarks.md;
progress goes to stderr.

`--emulate` runs the same flow on the CPU with torchao's emulated float8 (`Float8LinearConfig(emulate=True)`)
and float32 weights (CPU bf16 GEMMs are slow enough to dominate a test): its times are CPU wall-clock of
emulation, labelled EMULATED everywhere, and are not measurements of float8 or bf16.
Without a usable GPU and without `--emulate` the script says so and exits with status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import platform
import shlex
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path

SCHEMA = "fp8advisor.train-step/1"
DEFAULT_OUT = Path("fp8advisor-results") / "train-step.json"

#: Design estimate, not a measurement (`estimated_peak_bytes`): at 18 blocks of Llama 3 8B, batch 1 x seq
#: 8192, bf16 weights, gradients and AdamW states (8 bytes per parameter: 4.98 B parameters, 39.8 GB) plus
#: saved activations (1.14 GB per block, 20.5 GB) and the head's logits (10.5 GB) come to 70.9 GB (66 GiB),
#: 83% of an 80 GB H100 (85.0 GB = 79.2 GiB). The count is on the safe side: it holds every gradient alive
#: together with every activation, which never happens (the peak is at the start of the backward, before
#: most gradients exist; about 7.9 GB less), and leaves the rest for what it omits (compile workspaces,
#: allocator fragmentation, float8 casts). After a run the script prints how many blocks the measured peak
#: would allow (`layers_that_would_fit`).
DEFAULT_LAYERS = 18
DEFAULT_SEQS = (8192, 2048)
DEFAULT_WARMUP = 3
DEFAULT_STEPS = 10
#: Tiny sizes for --tiny (CPU tests): K = 1152 > 1024 and N = 4352 > 4096 make torchao's rowwise auto filter
#: accept the output head, so that every float8 variant converts a non-trivial, checkable set of layers. The
#: FFN is narrowed (hidden 768 instead of 1536) to keep the CPU steps short.
TINY_MODEL = {
    "n_layers": 2,
    "dim": 1152,
    "n_heads": 8,
    "n_kv_heads": 2,
    "vocab_size": 4352,
    "multiple_of": 256,
    "ffn_dim_multiplier": 0.25,
}
TINY_SEQS = (64, 32)
#: Leave this share of the GPU's memory unused when suggesting a number of blocks from a measured peak.
MEMORY_HEADROOM = 0.05


class Variant(str, Enum):
    BF16 = "bf16"
    ALL_CONVERTIBLE = "float8_all_convertible"
    TORCHAO_AUTO = "float8_torchao_auto"
    ADVICE = "float8_advice"

    def __str__(self) -> str:
        return self.value


#: The `Advice.strategies` entry whose predicted Linear-time speedup belongs to each float8 variant.
STRATEGY_OF_VARIANT = {
    Variant.ALL_CONVERTIBLE: "all_convertible",
    Variant.TORCHAO_AUTO: "torchao_auto",
    Variant.ADVICE: "advice",
}


@dataclasses.dataclass(frozen=True)
class Settings:
    """What one run measures; recorded whole in the JSON."""

    layers: int = DEFAULT_LAYERS
    seqs: tuple[int, ...] = DEFAULT_SEQS
    batch: int = 1
    recipes: tuple[str, ...] = ("rowwise",)
    variants: tuple[Variant, ...] = tuple(Variant)
    warmup: int = DEFAULT_WARMUP
    steps: int = DEFAULT_STEPS
    compile: bool = True
    emulate: bool = False
    tiny: bool = False
    seed: int = 0
    learning_rate: float = 1e-5
    profile: str | None = None
    min_speedup: float | None = None  # None: fp8advisor's default
    out: Path = DEFAULT_OUT
    trace_dir: Path | None = None  # where each variant's profiled step goes; None: no trace

    @property
    def device(self) -> str:
        return "cpu" if self.emulate else "cuda"

    @property
    def dtype_name(self) -> str:
        """The high-precision dtype of weights and activations: bf16; float32 under --emulate (CPU speed)."""
        return "float32" if self.emulate else "bfloat16"

    @property
    def model_overrides(self) -> dict:
        return {**TINY_MODEL, "n_layers": self.layers} if self.tiny else {"n_layers": self.layers}

    @property
    def target(self) -> str:
        """The fp8advisor TARGET string of the model, as `fp8advisor suggest` would take it."""
        from fp8advisor.paths import MODELS_DIR

        arguments = ", ".join(f"{key}={value!r}" for key, value in self.model_overrides.items())
        return f"{MODELS_DIR / 'llama3.py'}:llama3_8b({arguments})"

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data.update(variants=[v.value for v in self.variants], out=str(self.out), target=self.target)
        data.update(trace_dir=None if self.trace_dir is None else str(self.trace_dir))
        return data


# --- arguments ----------------------------------------------------------------------------------------------


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values or any(value < 1 for value in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give positive integers, e.g. 8192,2048")
    return values


def _recipe_list(text: str) -> tuple[str, ...]:
    from fp8advisor.recipes import parse_recipe

    try:
        return tuple(parse_recipe(part.strip()).value for part in text.split(",") if part.strip())
    except Exception as error:  # parse_recipe raises the project's AdvisorError with the valid names
        raise argparse.ArgumentTypeError(str(error)) from None


def _variant_list(text: str) -> tuple[Variant, ...]:
    try:
        chosen = {Variant(part.strip()) for part in text.split(",") if part.strip()}
    except ValueError:
        names = ", ".join(v.value for v in Variant)
        raise argparse.ArgumentTypeError(f"{text!r}: choose among {names}") from None
    return tuple(v for v in Variant if v in chosen)  # always in the canonical order, bf16 first


def parse_args(argv: Sequence[str] | None) -> Settings:
    parser = argparse.ArgumentParser(
        prog="train_step.py",
        description="Median training-step time of a Llama-3-8B-shaped decoder: bf16 vs float8 layer choices.",
    )
    parser.add_argument(
        "--layers", type=int, default=None, help=f"transformer blocks (default {DEFAULT_LAYERS})"
    )
    parser.add_argument("--seqs", type=_int_list, default=None, help="sequence lengths (default 8192,2048)")
    parser.add_argument("--batch", type=int, default=1, help="sequences per step (default 1)")
    parser.add_argument("--recipes", type=_recipe_list, default=("rowwise",), help="default rowwise")
    parser.add_argument(
        "--variants", type=_variant_list, default=tuple(Variant), help="subset, comma-separated (default all)"
    )
    parser.add_argument(
        "--warmup", type=int, default=DEFAULT_WARMUP, help="untimed steps (compile happens here)"
    )
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="timed steps")
    parser.add_argument("--no-compile", dest="compile", action="store_false", help="run eagerly")
    parser.add_argument(
        "--emulate", action="store_true", help="CPU, torchao emulated float8: not a measurement"
    )
    parser.add_argument(
        "--tiny", action="store_true", help="a tiny model and seq 64/32 (for --emulate tests)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--profile", default=None, help="fp8advisor profile for the advice (default: detected)"
    )
    parser.add_argument(
        "--min-speedup", type=float, default=None, help="the advice's threshold (default 1.01)"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON results (default {DEFAULT_OUT})")
    parser.add_argument(
        "--trace-dir", type=Path, default=None, help="keep a profiler trace of one step of each variant here"
    )
    args = parser.parse_args(argv)
    if args.warmup < 0 or args.steps < 1 or args.batch < 1:
        parser.error("--warmup must be >= 0, --steps and --batch >= 1")
    layers = (
        args.layers if args.layers is not None else (TINY_MODEL["n_layers"] if args.tiny else DEFAULT_LAYERS)
    )
    if layers < 1:
        parser.error("--layers must be >= 1")
    if args.emulate and not args.tiny:
        parser.error("--emulate runs on the CPU: add --tiny (the 8B shapes are far too large for a CPU run)")
    seqs = args.seqs if args.seqs is not None else (TINY_SEQS if args.tiny else DEFAULT_SEQS)
    return Settings(
        layers=layers,
        seqs=seqs,
        batch=args.batch,
        recipes=args.recipes,
        variants=args.variants,
        warmup=args.warmup,
        steps=args.steps,
        compile=args.compile,
        emulate=args.emulate,
        tiny=args.tiny,
        seed=args.seed,
        profile=args.profile,
        min_speedup=args.min_speedup,
        out=args.out,
        trace_dir=args.trace_dir,
    )


# --- memory estimate (a design estimate, never a measurement) -----------------------------------------------


def estimated_peak_bytes(model_args, n_parameters: int, tokens: int) -> dict:
    """What a bf16 step should need, by counting: the basis of `DEFAULT_LAYERS`, set beside the measured peak.

    Parameters: 8 bytes each (bf16 weight, gradient, AdamW exp_avg and exp_avg_sq). Saved activations per
    token and block, bf16: the inputs of the four Linear groups (attention norm out, attention out, FFN norm
    out, SiLU(w1) * w3), q/k/v after rotary, the w1 and w3 outputs and the residual stream twice (for the
    norms' backward). The head: 10 bytes per logit (bf16 logits, the float32 upcast for the loss, its
    gradient).
    """
    kv_width = model_args.n_kv_heads * (model_args.dim // model_args.n_heads)
    saved_per_token_block = 2 * (6 * model_args.dim + 2 * kv_width + 3 * model_args.ffn_hidden_dim)
    state = 8 * n_parameters
    activations = tokens * model_args.n_layers * saved_per_token_block
    logits = 10 * tokens * model_args.vocab_size
    per_block_state = 8 * (n_parameters - _non_block_parameters(model_args)) // max(model_args.n_layers, 1)
    return {
        "weights_grads_adamw_bytes": state,
        "activation_bytes": activations,
        "logits_bytes": logits,
        "total_bytes": state + activations + logits,
        "per_block_bytes": per_block_state + tokens * saved_per_token_block,
        "what": "design estimate by counting (not a measurement): 8 B/parameter + saved bf16 activations "
        "+ 10 B/logit",
    }


def _non_block_parameters(model_args) -> int:
    # embedding + output head + final norm
    return 2 * model_args.vocab_size * model_args.dim + model_args.dim


def layers_that_would_fit(layers: int, peak_bytes: int, per_block_bytes: int, total_bytes: int) -> int:
    """Blocks a run could have, from a measured peak at `layers` blocks and the estimated cost of one more."""
    spare = total_bytes * (1 - MEMORY_HEADROOM) - peak_bytes
    return layers + math.floor(spare / per_block_bytes)


# --- model, conversion, step --------------------------------------------------------------------------------


def build_model(settings: Settings, device: str):
    """A fresh model (bf16; float32 under --emulate) with the run's seed: the same weights every variant."""
    import torch

    from fp8advisor.inspect.target import load_model

    torch.manual_seed(settings.seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, settings.dtype_name))  # bf16 directly: no float32 copy on the GPU
    try:
        return load_model(settings.target, device).model
    finally:
        torch.set_default_dtype(previous)


def convertible(module, fqn: str) -> bool:
    """Every nn.Linear float8 GEMMs can run: K and N multiples of 16 (`torch._scaled_mm`)."""
    from torch import nn

    return isinstance(module, nn.Linear) and module.in_features % 16 == 0 and module.out_features % 16 == 0


def torchao_auto_filter(recipe: str) -> Callable:
    from fp8advisor import compat

    return compat.auto_filter_for_recipe(recipe, filter_fqns=[])


def module_filter(variant: Variant, recipe: str, advice) -> Callable:
    """The `module_filter_fn(module, fqn)` of a float8 variant."""
    if variant is Variant.ALL_CONVERTIBLE:
        return convertible
    if variant is Variant.TORCHAO_AUTO:
        return torchao_auto_filter(recipe)
    if variant is Variant.ADVICE:
        advised = frozenset(advice.module_filter_fqns)
        return lambda module, fqn: fqn in advised
    raise ValueError(f"{variant} converts nothing")


def convert(model, variant: Variant, recipe: str, advice, *, emulate: bool) -> list[str]:
    """Convert `model` in place for `variant`; the FQNs now in float8, sorted (empty for bf16)."""
    if variant is Variant.BF16:
        return []
    from torchao.float8 import convert_to_float8_training

    from fp8advisor import compat
    from fp8advisor.recipes import float8_config

    convert_to_float8_training(
        model,
        module_filter_fn=module_filter(variant, recipe, advice),
        config=float8_config(recipe, emulate=emulate),
    )
    float8_linear = compat.float8_linear()
    return sorted(fqn for fqn, module in model.named_modules() if isinstance(module, float8_linear))


def _head_loss(norm, output, hidden, labels):
    logits = output(norm(hidden))
    import torch.nn.functional as F

    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())


def make_loss_function(model, *, compile: bool) -> Callable:
    """loss(tokens, labels): embedding eager, each block and the head compiled (torchtitan's way)."""
    import torch

    head = _head_loss
    if compile:
        for block in model.layers.values():
            block.compile()  # in place: FQNs unchanged, one graph shared by identical blocks
        head = torch.compile(_head_loss)

    def loss(tokens, labels):
        hidden = model.tok_embeddings(tokens)
        for block in model.layers.values():
            hidden = block(hidden)
        return head(model.norm, model.output, hidden, labels)

    return loss


def make_optimizer(model, settings: Settings):
    import torch

    fused = settings.device == "cuda"  # one multi-tensor kernel on the GPU; foreach on the CPU
    kwargs = {"fused": True} if fused else {"foreach": True}
    return torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, **kwargs)


def make_batch(settings: Settings, seq: int, vocab_size: int, device: str):
    import torch

    generator = torch.Generator(device="cpu").manual_seed(settings.seed + 1)
    tokens = torch.randint(0, vocab_size, (settings.batch, seq + 1), generator=generator).to(device)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def time_steps(step: Callable, warmup: int, steps: int, device: str) -> tuple[list[float], float]:
    """(seconds of each timed step, seconds of warm-up): CUDA events per step on a GPU, else perf_counter."""
    import torch

    started = time.perf_counter()
    for _ in range(warmup):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    warmup_s = time.perf_counter() - started
    if device == "cuda":
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(steps)
        ]
        for start, end in events:
            start.record()
            step()
            end.record()
        torch.cuda.synchronize()
        return [start.elapsed_time(end) / 1e3 for start, end in events], warmup_s
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times, warmup_s


def trace_step(step: Callable, device: str, path: Path) -> Path:
    """Two more steps under torch.profiler: the first warms it up (CUPTI drops records at the start of a
    session, fp8advisor.measure.timers), the second is kept, as `ProfilerStep#1`, in the trace at `path`
    (gzipped when the name ends in .gz)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    path.unlink(missing_ok=True)  # an earlier run's trace must not pass for this one's
    with profile(
        activities=activities,
        record_shapes=True,
        schedule=schedule(wait=0, warmup=1, active=1, repeat=1),
        on_trace_ready=lambda session: session.export_chrome_trace(str(path)),
    ) as session:
        for _ in range(2):
            step()
            if device == "cuda":
                torch.cuda.synchronize()
            session.step()
    if not path.is_file():
        raise RuntimeError(f"the profiler wrote no trace to {path}")
    return path


def trace_name(seq: int, batch: int, variant: Variant, recipe: str | None) -> str:
    return f"step-{seq * batch}-{variant.value}{'-' + recipe if recipe else ''}.json.gz"


def _quantiles(times: Sequence[float]) -> dict:
    """Median and 20th/80th percentiles, as `fp8advisor bench` reports its wall times."""
    from fp8advisor.measure.timers import quantiles_s

    quantiles = quantiles_s(times)
    return {f"{name}_s": quantiles[name] for name in ("median", "p20", "p80")}


def _compiled_graphs() -> int | None:
    """Graphs dynamo has compiled in this process (a running count, not reset by `torch._dynamo.reset`)."""
    from fp8advisor import compat

    try:
        return compat.compiled_graph_count()
    except Exception:  # a private counter: absent in some torch versions
        return None


def run_variant(settings: Settings, seq: int, recipe: str | None, variant: Variant, advice) -> dict:
    """Build, convert, compile, warm up and time one variant; everything it allocated is garbage on return."""
    import torch

    device = settings.device
    record: dict = {"seq": seq, "batch": settings.batch, "tokens_per_step": seq * settings.batch}
    record.update(recipe=recipe, variant=variant.value)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        # ~0 when the previous variant was freed; its peak would otherwise count against this one
        record["memory_at_start_bytes"] = torch.cuda.memory_allocated()
    started = time.perf_counter()
    graphs_before = _compiled_graphs() if settings.compile else None
    try:
        model = build_model(settings, device)
        converted = convert(model, variant, recipe or "", advice, emulate=settings.emulate)
        record["converted"] = len(converted)
        record["converted_fqns"] = converted
        record["linear_layers"] = sum(1 for m in model.modules() if isinstance(m, torch.nn.Linear))
        loss_of = make_loss_function(model, compile=settings.compile)
        optimizer = make_optimizer(model, settings)
        tokens, labels = make_batch(settings, seq, model.args.vocab_size, device)
        losses = []

        def step():
            optimizer.zero_grad(set_to_none=True)
            loss = loss_of(tokens, labels)
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())

        times, warmup_s = time_steps(step, settings.warmup, settings.steps, device)
        values = [float(loss) for loss in losses]
        record.update(_quantiles(times))
        record.update(
            status="ok" if all(math.isfinite(v) for v in values) else "non-finite loss",
            step_times_s=[round(t, 6) for t in times],
            tokens_per_s=record["tokens_per_step"] / record["median_s"],
            warmup_s=round(warmup_s, 3),
            losses=[round(v, 5) for v in values],
            # per variant: one graph per kind of block plus the head when blocks share their graph
            compiled_graphs=None if graphs_before is None else (_compiled_graphs() or 0) - graphs_before,
        )
        if settings.trace_dir is not None:
            settings.trace_dir.mkdir(parents=True, exist_ok=True)
            path = settings.trace_dir / trace_name(seq, settings.batch, variant, recipe)
            try:
                record["trace"] = trace_step(step, device, path).name
            except Exception as error:  # noqa: BLE001 - the timed steps stand without their trace
                record.update(trace=None, trace_error=_first_line(error))
    except torch.OutOfMemoryError as error:
        record.update(status="out of memory", error=_first_line(error))
    except Exception as error:  # one broken variant (a compile error...) must not lose the others' figures
        record.update(status=f"failed: {type(error).__name__}", error=_first_line(error))
        _log(f"seq {seq} {variant} failed:\n{traceback.format_exc()}")
    record["wall_s"] = round(time.perf_counter() - started, 3)
    if device == "cuda":
        record["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
        record["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    else:
        record["peak_memory_bytes"] = None
    return record


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def free_memory() -> None:
    """Drop compiled code first (it holds the modules), then the cycles, then the cached GPU blocks."""
    import torch

    from fp8advisor import compat

    compat.dynamo_reset()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# --- the advice ---------------------------------------------------------------------------------------------


def plan_advice(settings: Settings, seq: int, recipe: str, profile_choice):
    """fp8advisor's advice for this exact model, token count and recipe, and the inspection it rests on."""
    from fp8advisor.advice.decide import advise
    from fp8advisor.inspect.layers import inspect_model
    from fp8advisor.request import DEFAULT_MIN_SPEEDUP

    model_layers = inspect_model(settings.target, batch=settings.batch, seq=seq)
    advice = advise(
        model_layers,
        profile_choice,
        recipe,
        settings.min_speedup if settings.min_speedup is not None else DEFAULT_MIN_SPEEDUP,
        device_capability=None if settings.emulate else "detect",
    )
    return advice, model_layers


def plan_step(advice, model_layers, profile_choice):
    """fp8advisor's step model for this script's step: one GPU, no activation checkpointing, AdamW with
    states in the bf16 weights' precision (2 bytes), the profile's GPU; no break-even search."""
    from fp8advisor.advice.step import StepConfig, StepGpu
    from fp8advisor.advice.step_comparison import step_report
    from fp8advisor.predict.speedup import roofline_specs_for

    config = StepConfig(world_size=1, optimizer_state_bytes=2)
    gpu = StepGpu.of(roofline_specs_for(profile_choice.primary))
    return step_report(advice, model_layers, profile_choice, gpu, config, break_even_target=None)


def prediction_record(advice, seq: int, settings: Settings, step=None) -> dict:
    """What fp8advisor predicted for one token count and recipe (JSON); `step`: its step model report."""
    from fp8advisor.advice.linears import group_layers
    from fp8advisor.predict.figures import weakest_provenance

    timed = [layer for layer in advice.layers if layer.counts_in_linear_time]
    strategies = {}
    for variant, name in STRATEGY_OF_VARIANT.items():
        try:
            strategy = advice.strategy(name)
        except StopIteration:
            strategies[variant.value] = {
                "predicted_linear_speedup": None,
                "converted": None,
                "note": "absent",
            }
            continue
        strategies[variant.value] = {
            "predicted_linear_speedup": strategy.predicted_speedup,
            "converted": len(strategy.converted),
            "note": strategy.note,
        }
    return {
        "seq": seq,
        "batch": settings.batch,
        "tokens_per_step": seq * settings.batch,
        "recipe": advice.recipe.value,
        "profile": advice.profile_name,
        "profile_provenance": advice.profile_provenance,
        "min_speedup": advice.min_speedup,
        "advised_fqns": list(advice.convert_fqns),
        "module_filter_fqns": list(advice.module_filter_fqns),
        # the weakest evidence behind the layer figures: the roofline answers for a recipe the profile lacks
        "figure_provenance": weakest_provenance(layer.provenance for layer in timed if layer.provenance),
        "predicted_bf16_linear_time_s": sum(layer.bf16_time_s for layer in timed),
        "strategies": strategies,
        # one row per layer kind (`layers.{0..17}.feed_forward.w1`): what each strategy's figure is made of
        "layers": [
            {
                "layers": row.pattern,
                "count": row.count,
                "M": row.first.M,
                "K": row.first.K,
                "N": row.first.N,
                "predicted_speedup": row.first.predicted_speedup,
                "provenance": row.first.provenance,
                "how": row.first.how,
                "advised": row.first.convert,
            }
            for row in group_layers(timed)
        ],
        "warnings": list(advice.warnings),
        # the step model (fp8advisor/advice/step.py) for the profile's GPU: predicted step time of each
        # variant
        "step": None if step is None else step.to_json(),
    }


# --- report -------------------------------------------------------------------------------------------------


def prediction_of(report: dict, record: dict) -> dict | None:
    """The prediction a result record is set beside: the one of its token count and recipe (bf16 is the
    same in every recipe's prediction: the first at its token count), or None."""
    bf16 = record["variant"] == Variant.BF16.value
    return next(
        (
            p
            for p in report["predictions"]
            if p["tokens_per_step"] == record["tokens_per_step"] and (bf16 or p["recipe"] == record["recipe"])
        ),
        None,
    )


def step_strategy_of(variant: str) -> str:
    """The step model's name (`StepReport` strategies) for a variant's strategy."""
    return "bf16" if variant == Variant.BF16.value else STRATEGY_OF_VARIANT[Variant(variant)]


def attach_speedups(report: dict) -> None:
    """Measured step speedups over the bf16 run of the same token count, and the step model's predictions."""
    baselines = {
        r["tokens_per_step"]: r
        for r in report["results"]
        if r["variant"] == Variant.BF16.value and r["status"] == "ok"
    }
    for record in report["results"]:
        baseline = baselines.get(record["tokens_per_step"])
        ok = record["status"] == "ok" and baseline is not None
        record["measured_step_speedup"] = baseline["median_s"] / record["median_s"] if ok else None
        prediction = prediction_of(report, record)
        strategy = step_strategy_of(record["variant"])
        record["predicted_linear_speedup"] = None
        if prediction is not None and record["variant"] != Variant.BF16.value:
            record["predicted_linear_speedup"] = prediction["strategies"][record["variant"]][
                "predicted_linear_speedup"
            ]
        step = (prediction or {}).get("step") or {}
        predicted = step.get("strategies", {}).get(strategy)
        # the step model predicts the profile's GPU: beside CPU emulation times it means nothing
        comparable = predicted is not None and not report["emulated"]
        record["predicted_step_s"] = predicted["step_s"] if comparable else None
        record["predicted_step_speedup"] = (
            predicted["step_speedup"] if comparable and strategy != "bf16" else None
        )


def _fmt(value, pattern: str, missing: str = "-", suffix: str = "") -> str:
    return missing if value is None else format(value, pattern) + suffix


def markdown(report: dict) -> str:
    emulated = report["emulated"]
    device = report["device"]
    software = report["software"]
    lines = []
    if emulated:
        lines.append(
            "**EMULATED on the CPU (torchao emulate=True, float32 weights; the `bf16` rows are float32): "
            "these times are not measurements of float8 or bf16.**"
        )
        lines.append("")
    lines.append(
        f"{device['name']}, torch {software['torch']}, torchao {software['torchao']}, "
        f"triton {software['triton']}, fp8advisor {software['fp8advisor']}; {report['date']}; "
        f"model {report['model']['built_by']} ({report['model']['parameters'] / 1e9:.2f} B parameters), "
        f"{'per-block torch.compile' if report['settings']['compile'] else 'eager'}, AdamW, "
        f"{report['settings']['warmup']} warm-up + {report['settings']['steps']} timed steps."
    )
    lines.append("")
    lines.append(f"    {report['command']}")
    lines.append("")
    lines.append(
        "| tokens/step | recipe | variant | float8 layers | step ms, median (p20-p80) | tokens/s | peak GiB "
        "| predicted step ms | measured step speedup | predicted Linear speedup | predicted step speedup |"
    )
    lines.append("|---:|---|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in report["results"]:
        if r["status"] == "ok":
            times = f"{r['median_s'] * 1e3:.1f} ({r['p20_s'] * 1e3:.1f}-{r['p80_s'] * 1e3:.1f})"
        else:
            times = r["status"]
        peak = None if r.get("peak_memory_bytes") is None else r["peak_memory_bytes"] / 2**30
        lines.append(
            f"| {r['tokens_per_step']} | {r['recipe'] or '-'} | {r['variant']} "
            f"| {_fmt(r.get('converted'), 'd')}/{_fmt(r.get('linear_layers'), 'd')} | {times} "
            f"| {_fmt(r.get('tokens_per_s'), ',.0f')} | {_fmt(peak, '.1f')} "
            f"| {_fmt(None if r.get('predicted_step_s') is None else r['predicted_step_s'] * 1e3, '.1f')} "
            f"| {_fmt(r.get('measured_step_speedup'), '.3f', suffix='x')} "
            f"| {_fmt(r.get('predicted_linear_speedup'), '.3f', suffix='x')} "
            f"| {_fmt(r.get('predicted_step_speedup'), '.3f', suffix='x')} |"
        )
    lines.append("")
    evidence = sorted({(p["recipe"], p["profile"], p["figure_provenance"]) for p in report["predictions"]})
    sources = "; ".join(
        f"{recipe}: {profile}, {provenance} figures" for recipe, profile, provenance in evidence
    )
    lines.append(
        "Predicted Linear speedup: fp8advisor's predicted bf16/float8 Linear time of the strategy "
        f"({sources or '-'}). Predicted step ms and step speedup: fp8advisor's step model "
        "(fp8advisor/advice/step.py: Linear layers from the profile; attention, memory-bound ops, loss and "
        "AdamW modelled; one GPU, no activation checkpointing; divided by the in-step efficiency fitted to "
        "torchao's published bf16 throughput), for the profile's GPU."
    )
    lines += _fastest_lines(report)
    fit = report.get("memory", {}).get("layers_that_would_fit")
    if fit is not None:
        lines.append(f"By the measured peak memory, about {fit} blocks would fit on this GPU (estimate).")
    return "\n".join(lines)


def _fastest_lines(report: dict) -> list[str]:
    """Per token count and recipe: the fastest float8 variant measured, and where the advice stands."""
    lines = []
    keys = sorted(
        {(r["tokens_per_step"], r["recipe"]) for r in report["results"] if r["recipe"]}, reverse=True
    )
    for tokens, recipe in keys:
        timed = [
            r
            for r in report["results"]
            if (r["tokens_per_step"], r["recipe"]) == (tokens, recipe) and r.get("measured_step_speedup")
        ]
        if not timed:
            continue
        fastest = max(timed, key=lambda r: r["measured_step_speedup"])
        advice = next((r for r in timed if r["variant"] == Variant.ADVICE.value), None)
        line = (
            f"{tokens} tokens, {recipe}: fastest float8 variant {fastest['variant']} "
            f"({fastest['measured_step_speedup']:.3f}x over bf16)"
        )
        if fastest.get("converted") == 0:
            line += ", which converts no layer: it is bf16 measured again"
        if advice is not None and advice is not fastest:
            line += f"; the advice {advice['measured_step_speedup']:.3f}x"
        lines.append(line + ".")
    return lines


def write_report(report: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    temporary.replace(path)  # a run killed mid-write leaves the previous complete file


def _log(message: str) -> None:
    print(f"train_step: {message}", file=sys.stderr, flush=True)


def _device_problem(settings: Settings) -> str | None:
    """Why this machine cannot run the GPU benchmark, or None."""
    if settings.emulate:
        return None
    import torch

    if not torch.cuda.is_available():
        cuda = "torch was built without CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
        return f"needs a CUDA GPU with FP8 tensor cores (sm_89 or newer); {cuda}"
    from fp8advisor.device import MIN_FP8_CAPABILITY

    capability = torch.cuda.get_device_capability()
    if capability < MIN_FP8_CAPABILITY:
        return (
            f"{torch.cuda.get_device_name()} is sm_{capability[0]}{capability[1]}: it has no FP8 tensor cores"
        )
    return None


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_args(argv)
    problem = _device_problem(settings)
    if problem is not None:
        _log(
            f"{problem}. Run on an sm_89+ GPU, or pass --emulate to run the flow on the CPU "
            "(not a measurement)."
        )
        return 2
    from fp8advisor import compat
    from fp8advisor.device import describe_device, software_versions
    from fp8advisor.inspect.target import load_model
    from fp8advisor.predict.selection import select_profile

    # per-block compile shares one graph among identical blocks; a generous limit keeps mixed blocks compiled
    compat.raise_recompile_limit(64)

    meta = load_model(settings.target, "meta")
    n_parameters = sum(p.numel() for p in meta.model.parameters())
    model_args = meta.model.args
    device = describe_device(emulate=settings.emulate)
    estimates = {
        str(seq * settings.batch): estimated_peak_bytes(model_args, n_parameters, seq * settings.batch)
        for seq in settings.seqs
    }
    report = {
        "schema": SCHEMA,
        "emulated": settings.emulate,
        "what": "EMULATED: CPU wall-clock of torchao's emulated float8, not a measurement of float8"
        if settings.emulate
        else "measured: median training-step time on the GPU",
        "method": {
            "step": "optimizer.zero_grad; loss = cross_entropy(model(tokens)); loss.backward(); AdamW step",
            "timing": "CUDA events around each timed step (time.perf_counter on the CPU), after warm-up "
            "steps that include compilation; median, 20th and 80th percentile",
            "compile": "torch.compile default mode on each transformer block and on the head (norm, output, "
            "loss); embedding eager"
            if settings.compile
            else "none (eager)",
            "optimizer": "torch.optim.AdamW, fused on CUDA (foreach on the CPU), states in the weight dtype",
            "weights": f"{settings.dtype_name} parameters; same seed and random tokens for every variant",
            "float8": "torchao convert_to_float8_training, Float8LinearConfig.from_recipe_name"
            + (" + emulate=True" if settings.emulate else ""),
            "variants": {
                Variant.BF16.value: "no conversion",
                Variant.ALL_CONVERTIBLE.value: "every nn.Linear with K and N multiples of 16",
                Variant.TORCHAO_AUTO.value: "torchao _auto_filter_for_recipe(recipe, filter_fqns=[])",
                Variant.ADVICE.value: "exactly Advice.module_filter_fqns of fp8advisor advise() at this "
                "token count",
            },
            "memory": "torch.cuda.max_memory_allocated over build, conversion, compile and steps",
        },
        "device": device,
        "software": software_versions(),
        "platform": platform.platform(),
        "command": shlex.join([sys.executable, *sys.argv])
        if argv is None
        else shlex.join(["train_step.py", *argv]),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "settings": settings.to_json(),
        "model": {"target": settings.target, "built_by": meta.built_by, "parameters": n_parameters},
        "memory": {"estimates": estimates},
        "predictions": [],
        "results": [],
    }
    del meta
    _log(("EMULATED run on the CPU: " if settings.emulate else f"{device['name']}: ") + f"{settings.target}")

    profile_choice = select_profile(settings.profile, detect_device=not settings.emulate)
    advice_by_key = {}
    for seq in settings.seqs:
        for recipe in settings.recipes:
            advice, model_layers = plan_advice(settings, seq, recipe, profile_choice)
            advice_by_key[(seq, recipe)] = advice
            step = plan_step(advice, model_layers, profile_choice)
            report["predictions"].append(prediction_record(advice, seq, settings, step))
            _log(
                f"seq {seq} {recipe}: advice converts {len(advice.convert_fqns)} layers, predicted Linear "
                f"speedup {_fmt(advice.strategy('advice').predicted_speedup, '.3f')}x ({profile_choice.name})"
            )

    # Everything alive now (torch, the advice) lives to the end: keep it out of the collections between
    # variants, which then scan only what the variants allocated (0.2 s each on a CPU otherwise).
    gc.collect()
    gc.freeze()
    run_started = time.perf_counter()
    for seq in settings.seqs:
        plan: list[tuple[str | None, Variant]] = []
        if Variant.BF16 in settings.variants:
            plan.append((None, Variant.BF16))
        plan += [(r, v) for r in settings.recipes for v in settings.variants if v is not Variant.BF16]
        for recipe, variant in plan:
            advice = advice_by_key.get((seq, recipe))
            record = run_variant(settings, seq, recipe, variant, advice)
            if variant is Variant.ADVICE:
                record["expected_converted"] = len(advice.module_filter_fqns)
            free_memory()
            report["results"].append(record)
            attach_speedups(report)
            report["wall_s"] = round(time.perf_counter() - run_started, 1)
            write_report(report, settings.out)  # after every variant: a run cut short keeps what it measured
            _log(
                f"seq {seq} {variant}{' ' + recipe if recipe else ''}: {record['status']}, "
                f"{_fmt(record.get('median_s'), '.4f')} s/step, {record.get('converted', '-')} float8 "
                f"layers, {record['wall_s']:.0f} s"
            )

    peaks = [r["peak_memory_bytes"] for r in report["results"] if r.get("peak_memory_bytes")]
    if peaks and device.get("memory_bytes"):
        tokens = max(settings.seqs) * settings.batch
        per_block = estimates[str(tokens)]["per_block_bytes"]
        report["memory"]["measured_peak_bytes"] = max(peaks)
        report["memory"]["layers_that_would_fit"] = layers_that_would_fit(
            settings.layers, max(peaks), per_block, device["memory_bytes"]
        )
    attach_speedups(report)
    write_report(report, settings.out)
    print(markdown(report))
    _log(f"wrote {settings.out} ({report['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    # Less fragmentation with a model that fills the GPU; set before torch initialises CUDA. Only when run as
    # a script: a caller of main() keeps its own allocator settings.
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    raise SystemExit(main())
