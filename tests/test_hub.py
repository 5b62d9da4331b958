"""Hugging Face Hub ids as targets (`fp8advisor.inspect.hub`), from a pre-filled huggingface_hub cache, no
network."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fp8advisor.cli import app
from fp8advisor.errors import TargetError
from fp8advisor.inspect import hub
from fp8advisor.inspect.target import parse_target
from fp8advisor.paths import MODELS_DIR

huggingface_hub = pytest.importorskip("huggingface_hub")
pytest.importorskip("transformers")


def _http_client():
    """The HTTP client whose responses huggingface_hub's errors carry: httpx2 from huggingface_hub 2, httpx
    in 1.x (the 1.x that torchtitan's datasets pin brings into the test environment)."""
    for name in ("httpx2", "httpx"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    pytest.skip("neither httpx2 nor httpx: the HTTP client of huggingface_hub >= 1", allow_module_level=True)


httpx = _http_client()
from huggingface_hub import constants, errors  # noqa: E402

REPO = "meta-llama/Llama-3.1-8B"
SHA = "0e9e39f249a16976918f6564b8830bc894c89659"  # a commit id: the cache's snapshot folder is named by one
# Llama 3.1 8B's published config (the shipped example; Hub ids are tested with the very same file).
LLAMA_31_8B = json.loads((MODELS_DIR / "llama31_8b_hf" / "config.json").read_text())


def _cache_repo(cache: Path, repo: str, config: dict, sha: str = SHA) -> Path:
    """huggingface_hub's cache layout: models--org--name/{refs/main, snapshots/<sha>/config.json}."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(sha)
    snapshot = folder / "snapshots" / sha
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(config, indent=2))
    return snapshot / "config.json"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An offline huggingface_hub whose cache (in tmp) holds REPO's config.json and nothing else.

    The variables are set for any process started from here; huggingface_hub reads them when imported, so
    the constants of the copy already imported in this process are set too."""
    cache = tmp_path / "hf" / "hub"
    config = _cache_repo(cache, REPO, LLAMA_31_8B)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return config


@pytest.fixture
def requested(monkeypatch):
    """Every file asked of huggingface_hub (the real hf_hub_download still answers)."""
    calls = []
    real = huggingface_hub.hf_hub_download

    def recording(repo_id, filename, **kwargs):
        calls.append((repo_id, filename, kwargs.get("revision")))
        return real(repo_id, filename, **kwargs)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", recording)
    return calls


def _failing_download(monkeypatch, error: Exception):
    def download(repo_id, filename, **kwargs):
        raise error

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)


def _response(status: int) -> httpx.Response:
    url = f"https://huggingface.co/{REPO}/resolve/main/config.json"
    return httpx.Response(status, request=httpx.Request("HEAD", url))


def _run(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "160"})


# ---------------------------------------------------------------------------------------- the id's form


@pytest.mark.parametrize(
    "text, expected",
    [
        ("meta-llama/Llama-3.1-8B", ("meta-llama/Llama-3.1-8B", None)),
        ("Qwen/Qwen2.5-0.5B@main", ("Qwen/Qwen2.5-0.5B", "main")),
        (f"org/name@{SHA}", ("org/name", SHA)),
        ("org/name@refs/pr/1", ("org/name", "refs/pr/1")),
        ("torchtitan:llama3/8B", None),  # another kind of target
        ("a/b/c", None),  # a path
        ("./org/name", None),
        ("/org/name", None),
        ("org/../name", None),
        ("org--x/name", None),  # the Hub refuses '--'
        ("name", None),  # a bare name: a mistyped local file, not a legacy Hub model
        ("org/", None),
    ],
)
def test_parse_hub_id(text, expected):
    assert hub.parse_hub_id(text) == expected


def test_model_file_paths_are_never_hub_ids(monkeypatch):
    _failing_download(monkeypatch, AssertionError("the Hub was asked"))
    for text in ("org/model.py", "org/config.json", "org/model.py:build(n=1)"):
        with pytest.raises(TargetError, match="no such file or directory"):
            parse_target(text)


# ----------------------------------------------------------------------------------- from the cache


def test_hub_id_reads_only_config_json_from_the_cache(hub_cache, requested):
    spec = parse_target(REPO)
    assert (spec.kind, spec.hub_id, spec.path) == ("hf_config", REPO, hub_cache)
    assert requested == [(REPO, "config.json", None)]  # one file, config.json, never weights


def test_revision_is_passed_to_the_hub(hub_cache, requested):
    spec = parse_target(f"{REPO}@{SHA}")
    assert spec.path == hub_cache
    assert requested == [(REPO, "config.json", SHA)]


def test_local_path_wins_over_hub_id(hub_cache, tmp_path, monkeypatch):
    local = tmp_path / "work" / REPO
    local.mkdir(parents=True)
    (local / "config.json").write_text((MODELS_DIR / "tiny_llama_hf" / "config.json").read_text())
    monkeypatch.chdir(tmp_path / "work")
    _failing_download(monkeypatch, AssertionError("the Hub was asked"))
    spec = parse_target(REPO)
    assert spec.hub_id is None and spec.path == Path(REPO) / "config.json"


def test_local_folder_without_config_is_not_looked_up(tmp_path, monkeypatch):
    (tmp_path / REPO).mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    _failing_download(monkeypatch, AssertionError("the Hub was asked"))
    with pytest.raises(TargetError, match=f"{REPO} is a directory without a config.json"):
        parse_target(REPO)


def _without_source(payload: dict) -> dict:
    """The document less what names the target (the id, or the path to the same config.json)."""
    notes = [note for note in payload.get("notes", []) if not note.startswith("built by")]
    return {**{k: v for k, v in payload.items() if k not in ("target", "notes")}, "notes": notes}


@pytest.mark.parametrize("command", ["layers", "suggest"])
def test_hub_id_gives_what_its_config_json_gives(hub_cache, requested, tmp_path, command):
    local = tmp_path / "local" / "config.json"
    local.parent.mkdir()
    local.write_text(hub_cache.read_text())
    by_id = _run(command, REPO, "--seq", "256", "--json")
    by_path = _run(command, str(local), "--seq", "256", "--json")
    assert by_id.exit_code == 0, by_id.output
    assert by_path.exit_code == 0, by_path.output
    from_hub, from_file = json.loads(by_id.stdout), json.loads(by_path.stdout)
    layers = from_hub["layers"]
    assert len(layers) == 32 * 7 + 1 and {"model.layers.31.mlp.down_proj", "lm_head"} <= {
        layer["fqn"] for layer in layers
    }
    assert _without_source(from_hub) == _without_source(from_file)
    assert f"built by AutoModelForCausalLM.from_config({REPO})" in from_hub["notes"]
    assert {filename for _, filename, _ in requested} == {"config.json"}


# ------------------------------------------------------------------------------------------ errors


def test_uncached_id_offline(hub_cache):
    result = _run("layers", "someone/not-downloaded")
    assert result.exit_code == 2
    assert "no local path 'someone/not-downloaded', and HF_HUB_OFFLINE is set while the Hub model's" in (
        result.output
    )
    assert "config.json is not in the local Hugging Face cache" in result.output
    assert "unset HF_HUB_OFFLINE" in result.output
    assert "hf download someone/not-downloaded config.json" in result.output
    assert "Traceback" not in result.output


def test_gated_repo(monkeypatch):
    _failing_download(monkeypatch, errors.GatedRepoError("403 Client Error: gated", response=_response(403)))
    with pytest.raises(TargetError) as raised:
        parse_target(REPO)
    assert "is a gated model on the Hugging Face Hub" in raised.value.message
    assert f"accept its licence on https://huggingface.co/{REPO}" in raised.value.hint
    assert "hf auth login" in raised.value.hint and "HF_TOKEN" in raised.value.hint


def test_unauthorised(monkeypatch):
    _failing_download(monkeypatch, errors.HfHubHTTPError("401 Client Error", response=_response(401)))
    with pytest.raises(TargetError) as raised:
        parse_target(REPO)
    assert "refused meta-llama/Llama-3.1-8B (HTTP 401): not authorised" in raised.value.message
    assert "hf auth login" in raised.value.hint and "HF_TOKEN" in raised.value.hint


def test_not_found(monkeypatch):
    error = errors.RepositoryNotFoundError("401 Client Error: Repository Not Found", response=_response(401))
    _failing_download(monkeypatch, error)
    result = _run("suggest", "meta-llama/Llama-9-typo")
    assert result.exit_code == 2
    assert "no local path 'meta-llama/Llama-9-typo' and no model meta-llama/Llama-9-typo on the" in (
        result.output
    )
    assert "check the path, or the id" in result.output


def test_revision_not_found(monkeypatch):
    error = errors.RevisionNotFoundError("404 Client Error: Revision Not Found", response=_response(404))
    _failing_download(monkeypatch, error)
    with pytest.raises(TargetError, match="has no revision 'v9'"):
        parse_target(f"{REPO}@v9")


def test_repo_without_config(monkeypatch):
    error = errors.RemoteEntryNotFoundError("404 Client Error: Entry Not Found", response=_response(404))
    _failing_download(monkeypatch, error)
    with pytest.raises(TargetError, match=f"the Hugging Face model {REPO} has no config.json"):
        parse_target(REPO)


def test_network_error(monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    error = errors.LocalEntryNotFoundError("cannot find the requested files in the local cache")
    error.__cause__ = ConnectionError("[Errno -3] Temporary failure in name resolution")
    _failing_download(monkeypatch, error)
    with pytest.raises(TargetError) as raised:
        parse_target(REPO)
    assert "no local path 'meta-llama/Llama-3.1-8B', and the Hugging Face Hub cannot be reached" in (
        raised.value.message
    )
    assert "ConnectionError: [Errno -3] Temporary failure in name resolution" in raised.value.message
    assert "HF_HUB_OFFLINE" not in raised.value.message


def test_server_error(monkeypatch):
    _failing_download(monkeypatch, errors.HfHubHTTPError("502 Bad Gateway", response=_response(502)))
    with pytest.raises(TargetError, match="failed to send meta-llama/Llama-3.1-8B's config.json: 502"):
        parse_target(REPO)


# ------------------------------------------------------------------- what building from a config imports


def test_building_from_a_hub_id_imports_neither_dynamo_nor_torchao_nor_scipy(tmp_path):
    """In a fresh interpreter (this one may have imported them for other tests): tests/_light_imports.py,
    with the cache and offline mode given by the environment alone."""
    tiny = json.loads((MODELS_DIR / "tiny_llama_hf" / "config.json").read_text())
    _cache_repo(tmp_path / "hf" / "hub", "org/tiny-llama", tiny)
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).parents[1]),
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("HF_HUB_CACHE", None)
    script = Path(__file__).parent / "_light_imports.py"
    done = subprocess.run(
        [sys.executable, str(script), "org/tiny-llama"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    heavy = ("torch._dynamo", "torchao", "scipy", "torch.distributed.tensor")
    assert found["built_by"] == "AutoModelForCausalLM.from_config(org/tiny-llama)"
    assert found["after_build"] == dict.fromkeys(heavy, False)
    assert found["linears"] == 2 * 7 + 1
    assert found["after_decorating"] == {"dynamo_imported": False, "torch_attribute": False}
    assert found["submodule"] == {"real": True, "stand_in_gone": True}
    assert found["first_calls"] == {
        "disable": 4,
        "disable_with_arguments": 6,
        "assume_constant_result": 7,
        "marked_constant": True,
        "mode_is_real": True,
    }


def test_building_from_a_config_leaves_the_hub_online():
    """Reading a local config never turns the Hub off for the rest of the process (huggingface_hub reads
    HF_HUB_OFFLINE once, at its first import): a Hub id given later in the same process is still fetched."""
    code = (
        "from fp8advisor.inspect.target import load_model; import sys; load_model(sys.argv[1], 'meta'); "
        "from huggingface_hub import constants; print(constants.HF_HUB_OFFLINE)"
    )
    env = {key: value for key, value in os.environ.items() if not key.endswith("_OFFLINE")}
    env["PYTHONPATH"] = str(Path(__file__).parents[1])
    done = subprocess.run(
        [sys.executable, "-c", code, str(MODELS_DIR / "tiny_llama_hf")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "False"


def test_a_model_module_that_needs_a_withheld_package_is_imported_whole(monkeypatch):
    """transformers' model module failing to import without torchao/scipy/... is no error of the user's: the
    light import gives up and from_config imports it whole."""
    import transformers

    from fp8advisor.inspect import hf
    from fp8advisor.inspect.target import load_model

    config = transformers.LlamaConfig()

    class Failing(dict):
        def __getitem__(self, key):
            raise ImportError("needs scipy")

    monkeypatch.setattr(transformers, "MODEL_FOR_CAUSAL_LM_MAPPING", Failing({type(config): None}))
    hf.import_model_classes(transformers, config)  # no error
    monkeypatch.undo()
    assert load_model(str(MODELS_DIR / "tiny_llama_hf"), "meta").built_by.startswith("AutoModelForCausalLM")


def test_without_huggingface_hub_a_missing_path_is_said_first(monkeypatch, tmp_path):
    """A mistyped folder on a machine without huggingface_hub: the message leads with the path."""
    monkeypatch.chdir(tmp_path)
    for name in [name for name in sys.modules if name.split(".")[0] == "huggingface_hub"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails
    with pytest.raises(TargetError) as raised:
        parse_target("mymodels/llama")
    assert raised.value.message.startswith("no local path 'mymodels/llama'"), raised.value.message
    assert "pip install 'fp8advisor[hf]'" in raised.value.hint


def test_verify_looks_a_hub_id_up_once(hub_cache, requested, tmp_path):
    """verify builds the model twice (on meta, then for real): the id is parsed, and looked up, once."""
    tiny = json.loads((MODELS_DIR / "tiny_llama_hf" / "config.json").read_text())
    _cache_repo(Path(constants.HF_HUB_CACHE), "org/tiny-llama", tiny)
    config = tmp_path / "fp8.toml"
    written = _run("suggest", "org/tiny-llama", "--seq", "256", "-o", str(config))
    assert written.exit_code == 0, written.output
    requested.clear()
    result = _run("verify", "org/tiny-llama", "--config", str(config), "--json")
    assert result.exit_code in (0, 1), result.output  # the verdict is not the point here
    assert json.loads(result.stdout)["execution"]["mode"] == "model"  # built for real too
    assert requested == [("org/tiny-llama", "config.json", None)]
