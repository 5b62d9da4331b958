"""fp8advisor.compat: every private torch / torchao name resolves on the installed versions, and a moved one
fails with one message naming the installed version and the missing name."""

from __future__ import annotations

import importlib
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torchao
from torch import nn

from fp8advisor import compat
from fp8advisor.errors import AdvisorError, CompatError

HAS_CUDA = torch.cuda.is_available()
LAST = torch.channels_last

# --- importing compat is free -------------------------------------------------------------------------------


def test_importing_compat_imports_neither_torch_nor_torchao():
    # `layers` and `suggest` import compat on their fast path: every lookup waits for its first call
    code = "import sys, fp8advisor.compat; print(sorted(m for m in ('torch', 'torchao') if m in sys.modules))"
    environment = dict(os.environ, PYTHONPATH=str(Path(compat.__file__).parents[1]))
    completed = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "[]"


# --- torch: building a model on another device --------------------------------------------------------------


def test_device_constructors_are_torch_factories():
    constructors = compat.device_constructors()
    assert {torch.empty, torch.zeros, torch.randn, torch.tensor} <= constructors
    assert torch.add not in constructors


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        (("cuda",), {}, (torch.device("cuda"), None, False, None)),  # a device alone
        ((torch.bfloat16,), {}, (None, torch.bfloat16, False, None)),  # a dtype alone
        (
            ("meta", torch.float16),
            {"non_blocking": True},
            (torch.device("meta"), torch.float16, True, None),
        ),  # both
        ((), {"device": "cpu", "memory_format": LAST}, (torch.device("cpu"), None, False, LAST)),  # by name
    ],
)
def test_parse_to_reads_a_to_call_as_torch_does(args, kwargs, expected):
    assert tuple(compat.parse_to(*args, **kwargs)) == expected


def test_parse_to_takes_a_tensor_for_its_device_and_dtype():
    device, dtype, _, _ = compat.parse_to(torch.empty(1, dtype=torch.float64, device="meta"))
    assert (torch.device(device), dtype) == (torch.device("meta"), torch.float64)


def test_dynamo_imported_says_whether_torch_dynamo_is_loaded():
    assert compat.dynamo_imported() is ("torch._dynamo" in sys.modules)


def test_dynamo_disabled_functions_are_the_functions_inside_the_wrappers():
    functions = compat.dynamo_disabled_functions()
    assert functions and all(callable(function) for function in functions)
    wrapper_code = torch._disable_dynamo(lambda: None).__code__
    assert not any(getattr(function, "__code__", None) is wrapper_code for function in functions)
    assert compat.dynamo_disabled_functions() is functions  # found once per process


def test_a_function_holding_the_cache_attribute_is_called_without_dynamo():
    def original():
        return "original"

    wrapper = torch._disable_dynamo(original)
    setattr(original, compat.DYNAMO_DISABLE_CACHE_ATTR, lambda: "cached")
    assert wrapper() == "cached"  # the wrapper called what the attribute holds, not torch._dynamo.disable


# --- torch: tracing what a forward runs ---------------------------------------------------------------------


def test_torch_dispatch_mode_sees_aten_ops():
    seen = []

    class Watch(compat.torch_dispatch_mode()):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Watch():
        torch.ones(2) + 1
    assert torch.ops.aten.add.Tensor in seen


def test_eager_dispatch_mode_keeps_torch_dispatch_as_written():
    def dispatch(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))

    Eager = type("Eager", (compat.eager_dispatch_mode(),), {"__torch_dispatch__": dispatch})
    Plain = type("Plain", (compat.torch_dispatch_mode(),), {"__torch_dispatch__": dispatch})
    assert issubclass(Eager, compat.torch_dispatch_mode())
    assert Eager.__dict__["__torch_dispatch__"] is dispatch  # not wrapped: no torch._dynamo import
    assert Plain.__dict__["__torch_dispatch__"] is not dispatch  # what the hook saves


@pytest.mark.parametrize(
    "name", ["_scaled_mm", "_grouped_mm", "_to_copy", "_unsafe_view", "_addmm_activation"]
)
def test_aten_op_finds_private_ops(name):
    assert compat.aten_op(name) is getattr(torch.ops.aten, name)


def test_aten_op_answers_none_for_an_op_this_torch_lacks():
    assert compat.aten_op("_no_such_op") is None


@pytest.mark.parametrize(
    ("op", "mutable"),
    [
        (torch.ops.aten.add.Tensor, False),  # a fresh output
        (torch.ops.aten.add_.Tensor, True),  # in place
    ],
)
def test_op_schema_is_the_function_schema(op, mutable):
    schema = compat.op_schema(op)
    assert isinstance(schema, torch.FunctionSchema)
    assert schema.is_mutable is mutable


def test_storage_address_is_shared_by_views_only():
    tensor, other = torch.empty(4, 4, device="meta"), torch.empty(4, 4, device="meta")
    address = compat.storage_address(tensor.untyped_storage())
    assert isinstance(address, int)
    assert compat.storage_address(tensor.t().untyped_storage()) == address
    assert compat.storage_address(other.untyped_storage()) != address  # data_ptr() is 0 for both


def test_current_autograd_node_is_the_running_backward():
    seen = []

    class Identity(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            seen.append(compat.current_autograd_node())
            return grad

    x = torch.ones(2, requires_grad=True)
    y = Identity.apply(x)
    assert compat.current_autograd_node() is None  # outside backward
    y.sum().backward()
    assert seen == [y.grad_fn]


def test_scaled_mm_is_the_float8_gemm():
    assert compat.scaled_mm() is torch._scaled_mm


# --- torch: compilation -------------------------------------------------------------------------------------


def test_compile_cache_counters_read_every_counter_as_an_int():
    counters = compat.compile_cache_counters()
    assert set(counters) == set(compat.CACHE_COUNTERS)
    assert all(isinstance(value, int) and value >= 0 for value in counters.values())


def test_compiled_graph_count_survives_a_reset():
    before = compat.compiled_graph_count()
    compat.dynamo_reset()
    assert isinstance(before, int) and compat.compiled_graph_count() == before


def test_raise_recompile_limit_only_raises():
    config = importlib.import_module("torch._dynamo.config")
    # torch's patch: see the inductor test below for why not monkeypatch
    with config.patch(recompile_limit=8):
        compat.raise_recompile_limit(64)
        assert config.recompile_limit == 64
        compat.raise_recompile_limit(16)
        assert config.recompile_limit == 64


def test_configure_compile_worker_sets_inductor_config():
    config = importlib.import_module("torch._inductor.config")
    # torch's own patch, not monkeypatch: monkeypatch's undo deletes a setting that had no user override,
    # which hides it from every later reader ("compile_threads does not exist")
    with config.patch(compile_threads=8, autotune_local_cache=True):
        compat.configure_compile_worker()
        assert (config.compile_threads, config.autotune_local_cache) == (1, False)


# --- torch: the GPU timeline --------------------------------------------------------------------------------


@pytest.mark.skipif(not HAS_CUDA, reason="launches a GPU kernel")
def test_cuda_sleep_launches_a_kernel():
    compat.cuda_sleep(1000)
    torch.cuda.synchronize()


@pytest.mark.parametrize(
    ("device_type", "annotation", "expected"),
    [
        ("CUDA", False, True),  # a kernel
        ("CPU", False, False),  # a CPU op
        ("CUDA", True, False),  # a user annotation's GPU span
    ],
)
def test_is_device_record(device_type, annotation, expected):
    from torch.autograd import DeviceType

    event = SimpleNamespace(device_type=getattr(DeviceType, device_type), is_user_annotation=annotation)
    assert compat.is_device_record(event) is expected


@pytest.mark.parametrize("name", compat.TORCHAO_IMPORT_LOGGERS)
def test_torchao_import_loggers_are_module_loggers(name):
    module = importlib.import_module(name)
    loggers = [value for value in vars(module).values() if isinstance(value, logging.Logger)]
    assert name in {logger.name for logger in loggers}


# --- torchao ------------------------------------------------------------------------------------------------


def test_auto_filter_for_recipe_is_torchaos_module_filter():
    module_filter = compat.auto_filter_for_recipe("rowwise", filter_fqns=["output"])
    big = nn.Linear(4096, 4096, bias=False, device="meta")
    assert module_filter(big, "layers.0.wq") is True
    assert module_filter(big, "output") is False  # filtered by name
    assert module_filter(nn.Linear(64, 64, device="meta"), "layers.0.small") is False  # too small to pay


def test_auto_filter_for_recipe_keeps_torchaos_refusal():
    with pytest.raises(NotImplementedError):
        compat.auto_filter_for_recipe("rowwise_with_gw_hp", filter_fqns=[])


def test_float8_linear_is_what_conversion_swaps_in():
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 16))
    convert_to_float8_training(model, config=Float8LinearConfig(emulate=True))
    assert issubclass(compat.float8_linear(), nn.Linear)
    assert isinstance(model[0], compat.float8_linear()) and isinstance(model[2], compat.float8_linear())


def test_float8_training_tensor_is_a_tensor_subclass():
    assert issubclass(compat.float8_training_tensor(), torch.Tensor)


def test_compute_error_is_sqnr_in_db():
    reference = torch.ones(16)
    assert float(compat.compute_error(reference, reference * 1.01)) == pytest.approx(40.0, abs=0.01)


# --- a moved name -------------------------------------------------------------------------------------------

T = torch.ones(2)
MOVED = [
    # (module, attribute, a call that needs it)
    ("torch.utils._device", "_device_constructors", compat.device_constructors),
    ("torch._C._nn", "_parse_to", lambda: compat.parse_to("cpu")),
    ("torch", "_disable_dynamo", compat.dynamo_disabled_functions),
    ("torch._decomp", "global_decomposition_table", compat.dynamo_disabled_functions),
    ("torch.utils._python_dispatch", "TorchDispatchMode", compat.torch_dispatch_mode),
    ("torch.utils._python_dispatch", "TorchDispatchMode", compat.eager_dispatch_mode),
    ("torch._C", "_current_autograd_node", compat.current_autograd_node),
    ("torch", "_scaled_mm", compat.scaled_mm),
    ("torch._dynamo", "reset", compat.dynamo_reset),
    ("torch._dynamo.utils", "counters", compat.compile_cache_counters),
    ("torch._dynamo.utils", "counters", compat.compiled_graph_count),
    ("torch.cuda", "_sleep", lambda: compat.cuda_sleep(1)),
    ("torchao.float8", "_auto_filter_for_recipe", lambda: compat.auto_filter_for_recipe("rowwise", [])),
    ("torchao.float8.float8_linear", "Float8Linear", compat.float8_linear),
    ("torchao.float8.float8_training_tensor", "Float8TrainingTensor", compat.float8_training_tensor),
    ("torchao.float8.float8_utils", "compute_error", lambda: compat.compute_error(T, T)),
]


def _version(module: str) -> str:
    package = module.partition(".")[0]
    return f"{package} {(torch if package == 'torch' else torchao).__version__}"


@pytest.mark.parametrize(
    ("module", "attribute", "call"), MOVED, ids=lambda value: getattr(value, "__name__", None)
)
def test_a_moved_name_fails_with_the_version_and_the_name(monkeypatch, module, attribute, call):
    monkeypatch.delattr(importlib.import_module(module), attribute)
    compat.dynamo_disabled_functions.cache_clear()  # found once per process: look again
    with pytest.raises(CompatError) as caught:
        call()
    message = str(caught.value).splitlines()[0]
    assert message == f"{_version(module)} has no {module}.{attribute}"
    assert compat.TESTED_WITH in caught.value.hint
    assert isinstance(caught.value, AdvisorError)  # the CLI prints it on one line, exit status 2


def test_a_moved_module_fails_with_the_version_and_the_module(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchao.float8.float8_utils", None)  # `import` now raises
    with pytest.raises(
        CompatError, match=rf"^{re.escape(_version('torchao'))} cannot import torchao\.float8\."
    ):
        compat.compute_error(T, T)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: compat.storage_address(object()), "torch.UntypedStorage._cdata"),
        (lambda: compat.op_schema(object()), "_schema"),
    ],
)
def test_a_moved_attribute_of_a_torch_object_fails_likewise(call, name):
    with pytest.raises(CompatError, match=rf"^{re.escape(_version('torch'))} has no .*{re.escape(name)}"):
        call()


def test_a_moved_dynamo_wrapper_degrades_inspection_only(monkeypatch):
    from fp8advisor.inspect import sandbox

    monkeypatch.delattr(torch, "_disable_dynamo")
    monkeypatch.setattr(compat, "dynamo_imported", lambda: False)  # as in a fresh `layers` process
    compat.dynamo_disabled_functions.cache_clear()
    with sandbox.redirect_devices("meta"):  # `_skip_dynamo_import` patches nothing, and builds anyway
        assert nn.Linear(8, 8).weight.is_meta
    compat.dynamo_disabled_functions.cache_clear()


@pytest.mark.parametrize(
    ("module", "attribute"),
    [
        ("torch.utils._python_dispatch", "TorchDispatchMode"),  # the tracer's base class
        ("torch._C._nn", "_parse_to"),  # called inside the model's forward (llama3 moves its rope table)
    ],
)
def test_the_cli_prints_a_moved_name_on_one_line(monkeypatch, module, attribute):
    from typer.testing import CliRunner

    from fp8advisor.cli import app
    from fp8advisor.paths import MODELS_DIR

    monkeypatch.delattr(importlib.import_module(module), attribute)
    target = f"{MODELS_DIR / 'llama3.py'}:build_model(n_layers=1)"
    result = CliRunner().invoke(app, ["layers", target, "--seq", "64"], env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert f"{_version(module)} has no {module}.{attribute}" in result.output
    assert "Traceback" not in result.output
