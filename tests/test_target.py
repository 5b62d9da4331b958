"""fp8advisor.inspect.target: parsing TARGET, resolving what to build, building on meta, guessing inputs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from fp8advisor.errors import ModelInputsError, TargetError
from fp8advisor.inspect.inputs import make_example_inputs
from fp8advisor.inspect.sandbox import redirect_devices
from fp8advisor.inspect.target import load_model, parse_target
from fp8advisor.paths import MODELS_DIR

sys.path.insert(0, str(Path(__file__).parent))
from _layers_helpers import line_of, write_model  # noqa: E402

TWO_LINEAR = """
class Net(nn.Module):
    def __init__(self, width=64):
        super().__init__()
        self.a = nn.Linear(width, width)
        self.b = nn.Linear(width, 32)

    def forward(self, x):
        return self.b(self.a(x))
"""


# --------------------------------------------------------------------------------------- parse_target


@pytest.mark.parametrize(
    ("suffix", "name", "kwargs"),
    [
        ("", None, {}),  # bare file: resolved by convention later
        (":build", "build", {}),  # a name
        (":make(n_layers=4)", "make", {"n_layers": 4}),  # one literal keyword
        # every literal kind; nothing is evaluated
        (
            ":make(a=1.5, b='x', c=True, d=None, e=[1, 2], f=(3,), g={'k': -1})",
            "make",
            {"a": 1.5, "b": "x", "c": True, "d": None, "e": [1, 2], "f": (3,), "g": {"k": -1}},
        ),
    ],
)
def test_parse_target_python_forms(tmp_path, suffix, name, kwargs):
    path = write_model(tmp_path, TWO_LINEAR)
    spec = parse_target(f"{path}{suffix}")
    assert (spec.kind, spec.path, spec.name, spec.kwargs) == ("python", path, name, kwargs)


@pytest.mark.parametrize(
    ("suffix", "message"),
    [
        (":make(4)", "positional arguments are not accepted"),  # positional
        (":make(n=__import__('os').getcwd())", "is not a literal"),  # code is never run
        (":make(n=1", "cannot read the arguments"),  # unbalanced
        (":make(**opts)", "**kwargs are not accepted"),
        (":3x", "is not a Python name"),
    ],
)
def test_parse_target_rejects_non_literal_arguments(tmp_path, suffix, message):
    path = write_model(tmp_path, TWO_LINEAR)
    with pytest.raises(TargetError, match=message.replace("*", r"\*").replace("(", r"\(")):
        parse_target(f"{path}{suffix}")


def test_parse_target_missing_file(tmp_path):
    with pytest.raises(TargetError, match="no such file"):
        parse_target(str(tmp_path / "absent.py"))


def test_parse_target_directory_without_config(tmp_path):
    with pytest.raises(TargetError, match="without a config.json"):
        parse_target(str(tmp_path))


def test_parse_target_other_file_kind(tmp_path):
    (tmp_path / "model.txt").write_text("x")
    with pytest.raises(TargetError, match="neither a Python file nor"):
        parse_target(str(tmp_path / "model.txt"))


def test_parse_target_hf_forms():
    directory = MODELS_DIR / "tiny_llama_hf"
    assert parse_target(str(directory)).path == directory / "config.json"
    assert parse_target(str(directory / "config.json")).kind == "hf_config"


# ----------------------------------------------------------------------------------------- resolution


@pytest.mark.parametrize(
    ("body", "target_suffix", "built_by"),
    [
        # a conventional factory wins over the class in the same file
        (TWO_LINEAR + "\ndef get_model():\n    return Net(width=16)\n", "", "get_model()"),
        # build_model comes before build in the resolution order
        (
            TWO_LINEAR + "\ndef build():\n    return Net()\n\ndef build_model():\n    return Net(16)\n",
            "",
            "build_model()",
        ),
        # no factory: the single module-level instance
        (TWO_LINEAR + "\nmodel = Net(width=16)\n", "", "model"),
        # no factory, no instance: the single class that builds without arguments
        (TWO_LINEAR, "", "Net()"),
        # NAME: a class, with literal keyword arguments
        (TWO_LINEAR, ":Net(width=16)", "Net(width=16)"),
        # NAME: a factory taking keyword arguments
        (
            TWO_LINEAR + "\ndef small(width=8):\n    return Net(width)\n",
            ":small(width=16)",
            "small(width=16)",
        ),
    ],
)
def test_resolution_order(tmp_path, body, target_suffix, built_by):
    path = write_model(tmp_path, body)
    loaded = load_model(f"{path}{target_suffix}")
    assert loaded.built_by == built_by
    assert isinstance(loaded.model, nn.Module)
    assert all(p.is_meta for p in loaded.model.parameters())


def test_ambiguous_instances(tmp_path):
    path = write_model(tmp_path, TWO_LINEAR + "\nfirst = Net()\nsecond = Net()\n")
    with pytest.raises(TargetError, match=r"ambiguous.*2 nn.Module instances \(first, second\)") as caught:
        load_model(str(path))
    assert f"{path}:first" in caught.value.hint


def test_ambiguous_classes(tmp_path):
    path = write_model(tmp_path, TWO_LINEAR + "\nclass Other(Net):\n    pass\n")
    with pytest.raises(TargetError, match=r"ambiguous.*\(Net, Other\)"):
        load_model(str(path))


def test_unknown_name_lists_candidates(tmp_path):
    path = write_model(tmp_path, TWO_LINEAR + "\ndef build_small():\n    return Net(8)\n")
    with pytest.raises(TargetError, match="has no name 'build_smal'") as caught:
        load_model(f"{path}:build_smal")
    assert "did you mean build_small" in caught.value.hint
    assert "Net (nn.Module class)" in caught.value.hint


def test_nothing_to_build(tmp_path):
    path = write_model(
        tmp_path, "class NeedsArgs(nn.Module):\n    def __init__(self, width):\n        super().__init__()\n"
    )
    with pytest.raises(TargetError, match="no model to build") as caught:
        load_model(str(path))
    assert "NeedsArgs (nn.Module class)" in caught.value.hint


def test_syntax_error_names_file_and_line(tmp_path):
    path = write_model(tmp_path, "def build_model():\n    return nn.Linear(16, 16\n\nx = 1\n")
    with pytest.raises(TargetError, match="syntax error") as caught:
        load_model(str(path))
    assert caught.value.location.startswith(f"{path}:")


def test_import_error_names_line(tmp_path):
    path = write_model(tmp_path, "import package_that_is_not_installed\n")
    with pytest.raises(TargetError, match="ModuleNotFoundError") as caught:
        load_model(str(path))
    assert caught.value.location == f"{path}:{line_of(path, 'package_that_is_not_installed')}"
    assert "install the missing package" in caught.value.hint


def test_constructor_that_raises_points_at_user_code(tmp_path):
    path = write_model(
        tmp_path,
        """
        class Broken(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(16, 16)
                raise ValueError("width must be even")
        """,
    )
    with pytest.raises(TargetError, match="ValueError: width must be even") as caught:
        load_model(str(path))
    assert caught.value.location == f"{path}:{line_of(path, 'raise ValueError')}"


def test_factory_returning_something_else(tmp_path):
    path = write_model(tmp_path, "def build_model():\n    return {'not': 'a module'}\n")
    with pytest.raises(TargetError, match="returned a dict, not a torch.nn.Module"):
        load_model(str(path))


def test_wrong_keyword_for_factory(tmp_path):
    path = write_model(tmp_path, TWO_LINEAR)
    with pytest.raises(TargetError, match="cannot call Net\\(depth=2\\)"):
        load_model(f"{path}:Net(depth=2)")


def test_keyword_arguments_for_an_instance(tmp_path):
    path = write_model(tmp_path, TWO_LINEAR + "\nmodel = Net()\n")
    with pytest.raises(TargetError, match="instance: it takes no arguments"):
        load_model(f"{path}:model(width=3)")


def test_overrides_shrink_a_factory():
    loaded = load_model(f"{MODELS_DIR / 'llama3.py'}:llama3_70b", overrides={"n_layers": 1})
    assert len(loaded.model.layers) == 1
    assert loaded.model.layers["0"].attention.wk.weight.shape == (1024, 8192)


# -------------------------------------------------------------------------------------------- devices

GPU_FILE = """
device = torch.device("cuda")

class GpuNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(64, 64, device="cuda")
        self.b = nn.Linear(64, 64).cuda()
        self.c = nn.Linear(64, 64).to("cuda:0")
        self.d = nn.Linear(64, 64).to(device, torch.bfloat16)
        with torch.device("cuda"):
            self.e = nn.Linear(64, 64)
        self.register_buffer("scale", torch.ones(64, device=torch.cuda.current_device()))
        torch.cuda.synchronize()

    def forward(self, x):
        x = x.cuda() + x.new_zeros(64, device="cuda")
        return self.e(self.d(self.c(self.b(self.a(x))).bfloat16()).float()) * self.scale

def build_model():
    return GpuNet().to("cuda")
"""


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_a_file_written_for_a_gpu_builds_anywhere(tmp_path, device):
    path = write_model(tmp_path, GPU_FILE)
    loaded = load_model(str(path), device)
    assert {p.device.type for p in loaded.model.parameters()} == {device}
    assert loaded.model.d.weight.dtype == torch.bfloat16  # dtype requests are kept, only the device moves
    inputs = loaded.example_inputs(2, 8)
    with torch.no_grad(), redirect_devices(device):
        out = loaded.model(*inputs.args)
    assert out.shape == (2, 8, 64) and out.device.type == device


def test_meta_build_allocates_nothing_and_cpu_build_is_real():
    meta = load_model(f"{MODELS_DIR / 'llama3.py'}:build_model")
    cpu = load_model(f"{MODELS_DIR / 'llama3.py'}:build_model", "cpu")
    assert all(p.is_meta for p in meta.model.parameters())
    weight = cpu.model.layers["0"].attention.wq.weight
    assert weight.device.type == "cpu" and weight.abs().sum() > 0  # initialised, not skipped


# --------------------------------------------------------------------------------------------- inputs


def test_inputs_token_ids_when_the_model_starts_with_an_embedding():
    loaded = load_model(str(MODELS_DIR / "llama3.py"))
    inputs = loaded.example_inputs(2, 128)
    (tokens,) = inputs.args
    assert tokens.shape == (2, 128) and tokens.dtype == torch.long and tokens.is_meta


def test_inputs_float_when_the_model_starts_with_a_linear(tmp_path):
    loaded = load_model(str(write_model(tmp_path, TWO_LINEAR)))
    (x,) = loaded.example_inputs(3, 5).args
    assert x.shape == (3, 5, 64) and x.dtype == torch.float32


def test_inputs_from_the_users_example_inputs(tmp_path):
    path = write_model(
        tmp_path,
        TWO_LINEAR.replace("def forward(self, x):", "def forward(self, x, scale):").replace(
            "return self.b(self.a(x))", "return self.b(self.a(x)) * scale"
        )
        + "\ndef example_inputs(batch, seq):\n    return torch.randn(batch, seq, 64), 2.0\n",
    )
    loaded = load_model(str(path))
    inputs = make_example_inputs(loaded.model, loaded.namespace, 4, 16, "meta", spec=loaded.spec)
    assert inputs.args[0].shape == (4, 16, 64) and inputs.args[1] == 2.0
    assert inputs.how == "example_inputs(4, 16)"


def test_inputs_the_tool_cannot_guess(tmp_path):
    path = write_model(tmp_path, TWO_LINEAR.replace("def forward(self, x):", "def forward(self, x, mask):"))
    loaded = load_model(str(path))
    with pytest.raises(ModelInputsError, match=r"forward\(x, mask\) needs arguments") as caught:
        loaded.example_inputs(1, 8)
    assert "def example_inputs(batch, seq):" in caught.value.hint
    assert caught.value.location == f"{path}:{line_of(path, 'def forward')}"


# --------------------------------------------------------------------------------------- Hugging Face


@pytest.fixture(scope="module")
def hf_model():
    pytest.importorskip("transformers")
    return load_model(str(MODELS_DIR / "tiny_llama_hf"))


def test_hugging_face_config_builds_offline_on_meta(hf_model):
    model = hf_model.model
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.model.layers[1].self_attn.k_proj.weight.shape == (256, 512)
    assert all(p.is_meta for p in model.parameters())
    inputs = hf_model.example_inputs(1, 32)
    assert inputs.kwargs["use_cache"] is False and inputs.args[0].shape == (1, 32)


def test_hugging_face_without_transformers(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` now raises ImportError
    with pytest.raises(TargetError, match="needs the transformers package") as caught:
        load_model(str(MODELS_DIR / "tiny_llama_hf"))
    assert caught.value.hint == "pip install 'fp8advisor[hf]'"


def test_hugging_face_config_values_override(hf_model):
    loaded = load_model(f"{MODELS_DIR / 'tiny_llama_hf' / 'config.json'}:(num_hidden_layers=1)")
    assert len(loaded.model.model.layers) == 1


def test_hugging_face_config_takes_no_name():
    with pytest.raises(TargetError, match="takes no NAME"):
        parse_target(f"{MODELS_DIR / 'tiny_llama_hf' / 'config.json'}:build")
