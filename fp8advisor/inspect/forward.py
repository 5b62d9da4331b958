"""One forward of the model on the meta device, under the GEMM recorder, hooks on its Linear layers and the
op census: what `fp8advisor.inspect.layers` reads every layer's M from.

The forward runs in training mode (eval mode sends nn.MultiheadAttention down a fused path the recorder cannot
see into), with the user's code contained (`fp8advisor.inspect.sandbox`) and its explicit devices redirected
to meta. Meta tensors hold no values: an op whose result depends on them (`.item()`, `nonzero`) stops the
trace there, and the layers that had not run yet get an assumed M (`fp8advisor.inspect.rows`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from fp8advisor.inspect.recorder import GemmCall, TracingStopped, gemm_ops, make_recorder

if TYPE_CHECKING:
    from fp8advisor.inspect.census import OpCensus

#: What a data-dependent aten op means in the user's words.
_DATA_DEPENDENT_WORDS = {
    "_local_scalar_dense": "a tensor value read in Python: .item(), bool(), int() or an if on a tensor",
    "nonzero": "nonzero / boolean-mask indexing: the output size depends on the values",
}


def _stop_location(error: BaseException, source_file) -> str | None:
    """file:line of the user's code where the forward stopped (the innermost frame outside torch and us)."""
    import os
    import traceback

    from fp8advisor.inspect.sandbox import user_location

    found = user_location(source_file, error.__traceback__)
    if found:
        return found
    torch_dir = os.path.dirname(os.path.dirname(__import__("torch").__file__))
    own_dir = os.path.dirname(os.path.abspath(__file__))
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        path = os.path.abspath(frame.filename)
        if not path.startswith(own_dir) and not path.startswith(os.path.join(torch_dir, "torch")):
            return f"{frame.filename}:{frame.lineno}"
    return None


class TracedForward(NamedTuple):
    """What one forward under the recorder saw."""

    calls: list[GemmCall]  # every GEMM on a parameter, in the order it ran
    module_calls: dict[int, int]  # id(Linear) -> number of forward calls
    module_rows: dict[int, list[int]]  # id(Linear) -> input rows of each call
    stopped: tuple[str, str | None] | None  # (what, where) when tracing stopped part-way
    census: OpCensus  # the op census of the forward at its tokens


@dataclass
class _LinearWatch:
    """Hooks on the Linear layers: which one is running (the recorder's `inside`), how often each ran and the
    rows of its input in each call."""

    tensor: type  # torch.Tensor
    active: list = field(default_factory=list)
    calls: dict[int, int] = field(default_factory=dict)
    rows: dict[int, list[int]] = field(default_factory=dict)

    def before(self, module, args) -> None:
        self.active.append(module)
        self.calls[id(module)] = self.calls.get(id(module), 0) + 1
        # Rows of the input, for a call whose GEMM is not an mm/addmm on its weight
        x = args[0] if args else None
        rows = x.numel() // module.in_features if isinstance(x, self.tensor) and module.in_features else 0
        self.rows.setdefault(id(module), []).append(rows)

    def after(self, module, _args, _output) -> None:
        if self.active and self.active[-1] is module:
            self.active.pop()

    def attach(self, linears) -> list:
        """Hook every module of `linears`; the handles that remove the hooks."""
        handles = []
        for module in linears:
            handles.append(module.register_forward_pre_hook(self.before))
            handles.append(module.register_forward_hook(self.after))
        return handles


def run_forward(
    loaded, inputs, parameters_by_storage: dict, linears: list, debug: bool, tokens: int
) -> TracedForward:
    """One forward under the recorder and Linear hooks, and the op census at `tokens`.

    Tracing may stop part-way (`TracedForward.stopped`); raises when the forward fails before anything ran.
    """
    import torch

    from fp8advisor.errors import CompatError, TargetError, describe_error
    from fp8advisor.inspect.census import CensusTracer
    from fp8advisor.inspect.sandbox import redirect_devices, running_user_code

    model = loaded.model
    watch = _LinearWatch(torch.Tensor)
    calls: list[GemmCall] = []
    handles = watch.attach(linears)
    stopped: tuple[str, str | None] | None = None  # (what, where)
    census = CensusTracer(parameters_by_storage, gemm_ops())
    recorder = make_recorder(parameters_by_storage, watch.active, calls, census=census)
    output = None
    # Training mode: float8 conversion is for training, and eval mode sends nn.MultiheadAttention down a fused
    # fast path that multiplies its weights inside one op, out of the recorder's sight.
    model.train()
    try:
        with (
            running_user_code(loaded.source_file, f"running the forward on {inputs.how}"),
            torch.no_grad(),
            redirect_devices(loaded.device),
            census.attention_mode(),
            recorder,
        ):
            output = model(*inputs.args, **inputs.kwargs)
    except TracingStopped as error:
        what = _DATA_DEPENDENT_WORDS.get(error.op, f"data-dependent aten.{error.op}")
        stopped = (what, _stop_location(error, loaded.source_file))
        _print_if_debug(error, debug)
    except (CompatError, TargetError):
        raise  # a torch name of ours moved, or the model's code ended the process (named by the sandbox)
    except Exception as error:
        where = _stop_location(error, loaded.source_file)
        if not calls and not watch.calls:
            raise _forward_failed(error, loaded, inputs, where) from error
        stopped = (describe_error(error), where)
        _print_if_debug(error, debug)
    finally:
        for handle in handles:
            handle.remove()

    what = None if stopped is None else f"{stopped[0]} at {stopped[1] or 'an unknown place'}"
    census_found = census.finish(output, tokens=tokens, stopped=what)
    return TracedForward(calls, watch.calls, watch.rows, stopped, census_found)


def _forward_failed(error: Exception, loaded, inputs, where: str | None) -> Exception:
    """The error to raise when the forward failed before it ran anything: the model's code (`TargetError`)
    or the inputs the tool guessed for it (`ModelInputsError`), with a hint at what to write."""
    from fp8advisor.errors import ModelInputsError, TargetError, describe_error

    error_class = TargetError if inputs.how.startswith("example_inputs") else ModelInputsError
    if error_class is TargetError:
        hint = "fix the model code or example_inputs; run with --debug for the full traceback"
    elif loaded.spec.kind == "hf_config":
        hint = (
            "this model's forward needs more than token ids: write a model.py that builds it with "
            "transformers (from_config) and defines example_inputs(batch, seq)"
        )
    else:
        hint = (
            f"the tool guessed {inputs.how}; if forward wants something else, add to the file:\n"
            "    def example_inputs(batch, seq):\n"
            "        return (x,)   # forward's positional arguments (or a dict of keyword arguments)"
        )
    return error_class(
        f"the forward failed on {inputs.how}: {describe_error(error)}", location=where, hint=hint
    )


def _print_if_debug(error: BaseException, debug: bool) -> None:
    """The full traceback of where tracing stopped, under --debug."""
    if debug:
        import traceback

        traceback.print_exception(error)
