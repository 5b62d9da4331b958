"""Measure the user's own blocks in context: `fp8advisor bench --model`.

A Linear's float8 speedup depends on its neighbours: `wq`, `wk` and `wv` read one tensor, whose cast
torch.compile may share; `wo` reads attention's output, with nothing to fuse its cast into; `w2` follows a
SiLU-times-gate. The microbenchmark (`fp8advisor.measure.linear`) sees none of this. So for each distinct unit
of the model (`fp8advisor.inspect.blocks`: one instance of each repeated block, and each Linear outside them),
built for real with random bf16 weights and fed the input it really receives, this times forward + backward
under `torch.compile`, as the training step runs it, for:

- all bf16 (once per unit), then per recipe: every convertible Linear in float8 ("all"), the profile's
  advice ("advice"), torchao's auto filter ("auto"), and the local search of `fp8advisor.measure.block_search`
  from the best of those, flipping one Linear group at a time ("search").

This module holds what is measured: a unit built on the device and timed per variant (`UnitBench`), and the
records it leaves. Each variant is one results record (`"kind": "block"`, `"context": "block"`,
`block_record`) in the run files of `fp8advisor.measure.results`; when a unit's search for a recipe ends, a
`"kind": "block_choice"` record (`choice_record`) holds the chosen set with the seeds' and the choice's times:
what `suggest --measured` reads. The sweep over the units (lock, time budget, resume) is
`fp8advisor.measure.block_sweep`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

from fp8advisor.inspect.blocks import Discovery, Unit, make_inputs, materialize
from fp8advisor.measure.block_search import SearchResult, Timing, Variant
from fp8advisor.measure.protocol import (
    BenchSettings,
    Measurement,
    checked_sqnr,
    compile_module,
    measurement_fields,
    time_step,
)
from fp8advisor.measure.run_writer import utc_now
from fp8advisor.measure.timers import Timer
from fp8advisor.recipes import BASELINE, convert_linears, sqnr_db

CONTEXT = "block"

BLOCK_GPU_METHOD = {
    "workload": "one instance of each distinct block (and each Linear outside the blocks) of the user's "
    "model, random bf16 weights, fed random tensors of the shapes and dtypes it receives in the traced "
    "forward; forward + backward of the block's first floating output against a random gradient",
    "compile": "torch.compile default mode, torch._dynamo.reset() before each variant, compiled in the "
    "timing process",
    "kernel_time": "torch.profiler, 5 iterations in one padded session, as bench",
    "wall_time": "CUDA events per iteration after warm-up, L2 flushed, median and 20th/80th percentiles, "
    "at least 5 iterations (triton.testing.do_bench)",
    "correctness": "SQNR (dB) of float8 output and input gradient against the eager bf16 block",
    "variants": "bf16; per recipe: all convertible Linear, the profile's advice, torchao's auto filter, then "
    "a local search flipping one Linear group (the Linear layers reading one input) at a time from the best",
    "noise": "a variant is clearly faster than another when its 80th percentile is below the other's 20th",
}

BLOCK_EMULATED_METHOD = {
    **BLOCK_GPU_METHOD,
    "compile": "EMULATED: torch.compile with the aot_eager backend on the CPU (dynamo and AOTAutograd, no "
    "inductor code generation: seconds, not minutes, per variant), torchao float8 with emulate=True",
    "kernel_time": None,
    "wall_time": "EMULATED on the CPU, one thread: time.perf_counter per iteration, compile call + 2 warm-up "
    "+ 5 timed iterations, median and 20th/80th percentiles",
}


# --- records ------------------------------------------------------------------------------------------------


def variant_recipe(recipe: str, variant: Variant) -> str:
    """The recipe a variant runs: bf16 when nothing is in float8."""
    return recipe if variant else BASELINE


def block_record(
    run_id: str,
    unit: Unit,
    recipe: str,
    variant: Variant,
    *,
    labels: Sequence[str],
    emulated: bool,
    measurement: Measurement | None = None,
    failure: str | None = None,
    duration_s: float | None = None,
    zeroed_buffers: Sequence[str] = (),
    attention: str | None = None,
) -> dict:
    """The results line of one variant of one unit: ok with a measurement, or failed with a reason.
    `attention` says when a Hugging Face block's eager attention was switched back to sdpa."""
    in_float8 = [list(group) for group in unit.groups if set(group) <= variant]
    return {
        "kind": "block",
        "context": CONTEXT,
        "run_id": run_id,
        "block": unit.pattern,
        "instance": unit.representative,
        "class": unit.cls,
        "recipe": variant_recipe(recipe, variant),
        "float8": sorted(variant),
        "float8_groups": in_float8,
        "variant": list(labels),
        **measurement_fields(measurement, failure),
        "zeroed_buffers": list(zeroed_buffers),
        "attention": attention,
        "duration_s": duration_s,
        "measured_at": utc_now(),
        "emulated": emulated,
    }


def choice_record(
    run_id: str, unit: Unit, recipe: str, seeds: Mapping[str, Variant], result: SearchResult
) -> dict:
    """The outcome of one unit's search under one recipe: the chosen set and the figures behind it."""

    def timing(variant: Variant) -> dict | None:
        found = result.timings.get(variant)
        return None if found is None else found.to_json()

    return {
        "kind": "block_choice",
        "context": CONTEXT,
        "run_id": run_id,
        "block": unit.pattern,
        "instances": list(unit.instances),
        "recipe": recipe,
        "float8": sorted(result.chosen),
        "wall_time_s": timing(result.chosen),
        "bf16_wall_time_s": timing(frozenset()),
        "seeds": {
            name: {"float8": sorted(variant), "wall_time_s": timing(variant)}
            for name, variant in seeds.items()
        },
        "search": result.to_json(),
        "measured_at": utc_now(),
    }


def block_timing(record: dict) -> Timing | None:
    """A saved variant's timing, None when it failed."""
    if record.get("status") != "ok":
        return None
    return Timing.from_wall(record["wall_time_s"])


# --- one unit on the device ---------------------------------------------------------------------------------


def _holder_class():
    import torch

    class Holder(torch.nn.Module):
        """The unit under one name, so that a head Linear ("" relative) has an FQN the filter can see."""

        def __init__(self, unit):
            super().__init__()
            self.unit = unit

        def forward(self, *args, **kwargs):
            return self.unit(*args, **kwargs)

    return Holder


def _first_floating(output):
    from fp8advisor.inspect.census import tensors_in

    for tensor in tensors_in(output):
        if tensor.is_floating_point() and tensor.requires_grad:
            return tensor
    raise ValueError("the block returns no floating-point tensor that depends on its weights or input")


class UnitBench:
    """One unit, built for real on the device, and the measurement of its variants."""

    def __init__(self, discovery: Discovery, unit: Unit, settings: BenchSettings, timer: Timer):
        self.unit, self.settings, self.timer = unit, settings, timer
        self.device = "cpu" if timer.emulated else "cuda"
        module, self.zeroed_buffers, self.sdpa = materialize(
            discovery.module(unit), device=self.device, seed=settings.seed
        )
        self.base = _holder_class()(module)
        self.args, self.kwargs, self.x = make_inputs(unit.inputs, device=self.device, seed=settings.seed)
        if self.sdpa and "attention_mask" in self.kwargs:
            self.kwargs["attention_mask"] = None  # causal sdpa, as Hugging Face trains without padding
        output = _first_floating(self.base(*self.args, **self.kwargs))
        self.grad_output = _random_gradient(output, settings.seed + 2)
        output.backward(self.grad_output)
        grad = None if self.x is None else self.x.grad  # None when the output does not depend on x
        self.reference = (output.detach(), None if grad is None else grad.detach())
        self._clear_grads(self.base)

    def _clear_grads(self, module) -> None:
        for parameter in module.parameters():
            parameter.grad = None
        if self.x is not None:
            self.x.grad = None

    def variant_module(self, recipe: str, variant: Variant):
        module = copy.deepcopy(self.base)
        if not variant:
            return module

        def chosen(_module, fqn: str) -> bool:
            return fqn.removeprefix("unit").removeprefix(".") in variant

        # float8: Float8Linear; MXFP8: torchao's MXFP8 training weight (`recipes.convert_linears`)
        return convert_linears(module, recipe, chosen, emulate=self.timer.emulated)

    def measure(self, recipe: str, variant: Variant) -> Measurement:
        timer, settings = self.timer, self.settings
        timer.release()
        memory_before = timer.memory_allocated()
        module = self.variant_module(recipe, variant)
        module = compile_module(module, backend="aot_eager" if timer.emulated else "inductor")
        self._clear_grads(module)

        def step():
            output = _first_floating(module(*self.args, **self.kwargs))
            output.backward(self.grad_output)
            return output

        grads = [*([self.x] if self.x is not None else []), *module.parameters()]
        measurement = time_step(
            step,
            grads,
            timer=timer,
            settings=settings,
            memory_before=memory_before,
            check=self._check if variant else None,
        )
        self._clear_grads(module)
        return measurement

    def _check(self, output) -> dict[str, float]:
        reference_output, reference_grad = self.reference
        sqnr = {"output": sqnr_db(reference_output, output)}
        if reference_grad is not None:
            sqnr["grad_input"] = sqnr_db(reference_grad, self.x.grad)
        return checked_sqnr(sqnr)

    def release(self) -> None:
        self.base = self.args = self.kwargs = self.x = self.grad_output = self.reference = None
        self.timer.release()


def _random_gradient(output, seed: int):
    """A random gradient for the block's output, drawn on its device from `seed`."""
    import torch

    generator = torch.Generator(device=output.device).manual_seed(seed)
    return torch.randn(output.shape, dtype=output.dtype, device=output.device, generator=generator)


__all__ = [
    "BLOCK_EMULATED_METHOD",
    "BLOCK_GPU_METHOD",
    "CONTEXT",
    "UnitBench",
    "block_record",
    "block_timing",
    "choice_record",
    "variant_recipe",
]
