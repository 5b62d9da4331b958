"""The execution check of `verify`: one forward and backward on small real tensors, traced.

On a GPU with FP8 tensor cores when there is one (`torch._scaled_mm`), else with torchao's emulated float8 on
the CPU (`Float8LinearConfig(emulate=True)`: the casts to float8 are real, the GEMM multiplies the float8
values in float32). Never torch.compile: eager shows which GEMMs run in float8 and costs no compile time.

- A model of at most `REAL_MODEL_MAX_PARAMETERS` parameters is built for real by the user's own code, cast to
  bf16 and run whole at batch 1 x seq `RUN_SEQ` (a multiple of 16): the user's forward decides which layers
  run.
- A larger model (an 8B or 70B shape) cannot be allocated here. Its *shadow* runs instead
  (`fp8advisor.verification.shadow`), and so does that of a model whose real run fails.

Each step runs a bf16 model and its float8 twin: the bf16 one records what each converted layer saw (for
`fp8advisor.verification.numerics`), the float8 one runs under `fp8advisor.verification.trace.OpTrace`.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import nn

from fp8advisor.device import MIN_FP8_CAPABILITY
from fp8advisor.errors import AdvisorError, TargetError
from fp8advisor.frameworks.config_record import FrameworkConfig
from fp8advisor.inspect.spec import TargetSpec
from fp8advisor.recipes import Recipe, dims_supported, mx_unsupported_reason, sqnr_db
from fp8advisor.verification.conversion import convert
from fp8advisor.verification.report import Execution
from fp8advisor.verification.shadow import SHADOW_MAX_DIM, shadow_models
from fp8advisor.verification.trace import OpTrace

#: Models up to this many parameters are built for real (bf16, on the CPU: ~0.4 GB per copy, two copies).
REAL_MODEL_MAX_PARAMETERS = 100_000_000
#: The run uses batch `RUN_BATCH` and `RUN_SEQ` tokens (a multiple of 16: float8's grad_weight GEMM
#: multiplies over the tokens).
RUN_BATCH = 1
RUN_SEQ = 32


def step_tokens(run_seq: int, seq: int, recipe: Recipe) -> int:
    """The tokens the step runs: at most `run_seq` and the model's seq, a multiple of what the recipe's
    grad_weight GEMM needs along them (16 for float8; 32, the MX scale block, for MXFP8), at least that."""
    block = recipe.block_size
    return max(block, min(run_seq, seq) // block * block)


class ExecutionDevice(NamedTuple):
    """Where the step runs: a GPU with FP8 tensor cores, else the CPU with torchao's emulated float8."""

    device: torch.device
    words: str  # for the report
    emulate: bool


def execution_device(recipe: Recipe | None = None) -> ExecutionDevice:
    """The GPU when it runs the recipe (FP8 tensor cores; for MXFP8, Blackwell's block-scaled GEMMs:
    `recipes.mx_unsupported_reason`), else the CPU with torchao's emulated float8 (MXFP8: its EMULATED
    kernels)."""
    mx = recipe is not None and recipe.is_mx
    low = "MXFP8" if mx else "float8"
    if torch.cuda.is_available():
        capability = torch.cuda.get_device_capability(0)
        name = torch.cuda.get_device_name(0)
        if mx and mx_unsupported_reason(capability) is None:
            return ExecutionDevice(torch.device("cuda"), name, False)
        if not mx and capability >= MIN_FP8_CAPABILITY:
            return ExecutionDevice(torch.device("cuda"), name, False)
        lacks = "Blackwell's MXFP8 GEMMs" if mx else "FP8 tensor cores"
        words = f"cpu (torchao emulated {low}; {name} has no {lacks})"
        return ExecutionDevice(torch.device("cpu"), words, True)
    return ExecutionDevice(torch.device("cpu"), f"cpu (torchao emulated {low})", True)


@contextlib.contextmanager
def one_cpu_thread(device: ExecutionDevice) -> Iterator[None]:
    """Run the step on the CPU with one intra-op thread, as torch was set before afterwards.

    The step's GEMMs are small (RUN_SEQ tokens; a shadow's K and N at most SHADOW_MAX_DIM) and, emulated,
    in float32: on the 2-core development machine each ran 3 to 10x slower on 2 OpenMP threads than on 1
    (docs/benchmarks.md), the threads' synchronisation costing more than the work they share.
    """
    if device.device.type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _count(number: int) -> str:
    return f"{number / 1e9:.2f}B" if number >= 1e9 else f"{number / 1e6:.1f}M"


def _floating_outputs(value: Any) -> list[torch.Tensor]:
    """Every floating tensor in a model's output (tensor, tuple, list, dict, Hugging Face ModelOutput)."""
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() and value.requires_grad else []
    if isinstance(value, dict):
        return [t for item in value.values() for t in _floating_outputs(item)]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _floating_outputs(item)]
    if hasattr(value, "to_tuple"):
        return _floating_outputs(value.to_tuple())
    return []


def _loss(outputs: Sequence[torch.Tensor], seed: int) -> torch.Tensor:
    """A fixed random projection of every output: the same gradient for the bf16 and the float8 model."""
    generator = torch.Generator().manual_seed(seed)
    total = torch.zeros((), dtype=torch.float32, device=outputs[0].device)
    for output in outputs:
        weights = torch.randn(output.shape, generator=generator).to(output.device)
        total = total + (output.float() * weights).sum() / math.sqrt(output.numel())
    return total


def _run(model: nn.Module, args: tuple, kwargs: dict, seed: int) -> list[torch.Tensor]:
    outputs = _floating_outputs(model(*args, **kwargs))
    if not outputs:
        raise TargetError(
            f"{type(model).__name__}'s forward returned no floating tensor that needs a gradient",
            hint="verify runs a backward from the model's output; return the logits or the loss",
        )
    _loss(outputs, seed).backward()
    return outputs


class _Capture:
    """The input and output gradient of each watched Linear's first call (bf16 model)."""

    def __init__(self, model: nn.Module, fqns: Iterable[str]):
        self.inputs: dict[str, torch.Tensor] = {}
        self.grad_outputs: dict[str, torch.Tensor] = {}
        self._handles = []
        modules = dict(model.named_modules())
        for fqn in fqns:
            if fqn in modules:  # not an alias: the bf16 model holds a shared module under its first name only
                self._handles.append(modules[fqn].register_forward_hook(self._hook(fqn)))

    def _hook(self, fqn: str) -> Callable:
        def hook(module, args, output):
            if fqn in self.inputs or not args or not isinstance(args[0], torch.Tensor):
                return
            self.inputs[fqn] = args[0].detach().clone()
            if isinstance(output, torch.Tensor) and output.requires_grad:

                def keep(grad: torch.Tensor) -> None:
                    self.grad_outputs.setdefault(fqn, grad.detach().clone())

                output.register_hook(keep)

        return hook

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


def _forward_backward(bf16_model, float8_model, args, kwargs, converted, seed):
    """One traced step of each model: (bf16 captures, bf16 outputs, float8 outputs, float8 trace)."""
    bf16_capture = _Capture(bf16_model, converted)
    try:
        bf16_outputs = _run(bf16_model, args, kwargs, seed)
    finally:
        bf16_capture.remove()
    bf16_model.zero_grad(set_to_none=True)  # nothing reads them: the float8 run's peak holds one set only
    with OpTrace(float8_model) as trace:
        float8_outputs = _run(float8_model, args, kwargs, seed)
    return bf16_capture, bf16_outputs, float8_outputs, trace


@dataclass(frozen=True)
class Step:
    """One traced forward and backward of the bf16 model and its float8 twin (the model, or its shadow)."""

    bf16_model: nn.Module
    float8_model: nn.Module
    capture: _Capture  # what each converted layer saw in the bf16 model
    trace: OpTrace  # the GEMMs and casts each layer of the float8 model ran
    execution: Execution
    notes: tuple[str, ...]


@dataclass(frozen=True)
class StepPlan:
    """What one traced step runs: the model, the config, what converts, where, and on how many tokens."""

    spec: TargetSpec  # the model, parsed once: a Hub id is not looked up again
    config: FrameworkConfig  # with its recipe
    shapes_model: nn.Module  # the unconverted meta model: the real shapes, for a shadow
    linear_layers: Sequence  # the model's nn.Linear layers (`fp8advisor.inspect.records.GemmLayer`)
    converted: set[str]  # the FQNs the framework converts on the meta model
    device: ExecutionDevice
    run_tokens: int
    real_model_max_parameters: int  # a larger model runs as its shadow
    seed: int


def run_step(plan: StepPlan) -> Step:
    """The model built for real by its own code when it has at most `plan.real_model_max_parameters`, else
    (or when that fails) its shadow; one forward and backward of each (module docstring)."""
    parameter_count = sum(p.numel() for p in plan.shapes_model.parameters())
    notes: list[str] = []
    plan = _runnable(plan, notes)
    ran = None
    if parameter_count <= plan.real_model_max_parameters:
        ran = _run_real_model(plan, notes)
    if ran is not None:
        mode = "model"
        why = (
            f"{_count(parameter_count)} parameters: built for real by the model's own code, in bf16, "
            f"run at batch {RUN_BATCH} x seq {plan.run_tokens}"
        )
        sqnr_scope = "every converted layer"
    else:
        ran = _run_shadow(plan)
        mode = "shadow"
        why = _why_shadow(plan, parameter_count)
        sqnr_scope = (
            "the first converted layer of each repeated group (a shadow runs one code on random weights)"
        )
    bf16_model, float8_model, (capture, bf16_outputs, float8_outputs, trace) = ran
    model_sqnr = sqnr_db(bf16_outputs[0], float8_outputs[0]) if mode == "model" else None
    device = plan.device
    execution = Execution(
        device.words, device.emulate, mode, RUN_BATCH, plan.run_tokens, why, sqnr_scope, model_sqnr
    )
    if trace.unattributed_float8_gemms:
        notes.append(f"{trace.unattributed_float8_gemms} float8 GEMM(s) ran outside any nn.Linear")
    return Step(bf16_model, float8_model, capture, trace, execution, tuple(notes))


def _runnable(plan: StepPlan, notes: list[str]) -> StepPlan:
    """The plan without the converted layers the recipe cannot run (K or N not a multiple of 32 for MXFP8:
    torchao's MX casts raise on them), which then run in bf16 with a note saying why: `differences`
    reports each as converted without low-precision GEMMs, instead of the step failing."""
    recipe = plan.config.recipe
    assert recipe is not None
    unrunnable = {
        layer.fqn
        for layer in plan.linear_layers
        if layer.fqn in plan.converted and not dims_supported(recipe, layer.K, layer.N)
    }
    if not unrunnable:
        return plan
    notes.append(
        f"{', '.join(sorted(unrunnable))}: converted, but K or N is not a multiple of {recipe.block_size}, "
        f"which {recipe.value} needs (torchao's casts raise on it): the step ran it in bf16"
    )
    rule = plan.config.filter_for

    def without(model):
        keep = rule(model)
        return lambda module, fqn: fqn not in unrunnable and keep(module, fqn)

    config = dataclasses.replace(plan.config, _rule_factory=without)
    return dataclasses.replace(plan, config=config, converted=plan.converted - unrunnable)


def _run_real_model(plan: StepPlan, notes: list[str]) -> tuple[nn.Module, nn.Module, tuple] | None:
    """(bf16 model, float8 model, their traced step) of the model built for real by its own code; None, with
    a note saying why, when its code fails on real tensors."""
    from fp8advisor.errors import describe_error
    from fp8advisor.inspect.sandbox import running_user_code

    spec = plan.spec
    try:
        with running_user_code(spec.path if spec.kind == "python" else None, "running the model for real"):
            bf16_model, float8_model, args, kwargs = _real_models(plan)
            ran = _forward_backward(bf16_model, float8_model, args, kwargs, plan.converted, plan.seed)
            return bf16_model, float8_model, ran
    except AdvisorError:
        raise
    except Exception as error:  # the user's code on real tensors: fall back, and say why
        notes.append(
            f"running the model for real failed ({describe_error(error)[:200]}); its shadow was run instead"
        )
        return None


def _run_shadow(plan: StepPlan) -> tuple[nn.Module, nn.Module, tuple]:
    """(bf16 shadow, float8 shadow, their traced step) on `plan.run_tokens` random tokens."""
    bf16_model, float8_model = shadow_models(
        plan.shapes_model, plan.linear_layers, plan.config, plan.converted, plan.device, plan.seed
    )
    args, kwargs = (bf16_model.example_inputs(plan.run_tokens, plan.seed),), {}
    ran = _forward_backward(bf16_model, float8_model, args, kwargs, plan.converted, plan.seed)
    return bf16_model, float8_model, ran


def _why_shadow(plan: StepPlan, parameter_count: int) -> str:
    """Why the shadow ran: the model is too large to build here, or its real run failed."""
    if parameter_count > plan.real_model_max_parameters:
        return (
            f"{_count(parameter_count)} parameters, more than the {_count(plan.real_model_max_parameters)} "
            f"built for real here: a shadow with the same FQNs, K and N capped at {SHADOW_MAX_DIM}, each "
            f"Linear called as often as the traced forward calls it, on {plan.run_tokens} random tokens"
        )
    return (
        "the model could not run for real: a shadow with the same FQNs, K and N capped at "
        f"{SHADOW_MAX_DIM}, on {plan.run_tokens} random tokens"
    )


class _RealRunUnavailable(Exception):
    """The model cannot be built or run for real here; the shadow is used instead."""


def _real_models(plan: StepPlan) -> tuple[nn.Module, nn.Module, tuple, dict]:
    """(bf16 model, float8 model, args, kwargs): the model built by its own code, in bf16, converted as on
    the meta model, and its example inputs at batch `RUN_BATCH` x `plan.run_tokens`."""
    from fp8advisor.inspect.inputs import make_example_inputs
    from fp8advisor.inspect.target import load_model

    recipe = plan.config.recipe
    assert recipe is not None
    device, expected = plan.device.device, plan.converted
    torch.manual_seed(plan.seed)
    loaded = load_model(plan.spec, device)
    model = loaded.model.to(dtype=torch.bfloat16)
    model.train()
    bf16_model = copy.deepcopy(model)
    actual = convert(model, plan.config, recipe, emulate=plan.device.emulate)
    if actual != expected:
        raise _RealRunUnavailable(
            f"conversion on the real model differs from the meta model: {sorted(actual ^ expected)}"
        )
    inputs = make_example_inputs(
        loaded.model, loaded.namespace, RUN_BATCH, plan.run_tokens, device, spec=loaded.spec
    )
    args = tuple(_as_run_input(value) for value in inputs.args)
    kwargs = {key: _as_run_input(value) for key, value in inputs.kwargs.items()}
    return bf16_model, model, args, kwargs


def _as_run_input(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.to(torch.bfloat16)
    return value


__all__ = [
    "REAL_MODEL_MAX_PARAMETERS",
    "RUN_BATCH",
    "RUN_SEQ",
    "ExecutionDevice",
    "Step",
    "StepPlan",
    "execution_device",
    "one_cpu_thread",
    "run_step",
    "step_tokens",
]
