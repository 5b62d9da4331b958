"""Record real torch.profiler traces of a small Llama training step on the CPU, in bf16 and in torchao float8.

Why: `fp8advisor trace` (issue 29) must read what torch.profiler really writes, and tell a float8 GEMM from a
bf16 one by its aten op and input shapes. These traces are that evidence for the tests: recorded by
torch.profiler itself on the CPU (CPU activity only, so no device records and no kernel times), for the
project's own example model (`data/models/llama3.py:build_model`), in bf16 and converted by torchao's
`convert_to_float8_training` with `Float8LinearConfig.emulate` False, so the float8 GEMMs go through
`aten::_scaled_mm` with float8 operands, as on a GPU.

What a CPU float8 GEMM looks like (torch 2.13, torchao 0.18): torchao's `matmul_with_hp_or_float8_args`
calls `aten::mm` on its tensor subclass (Input type BFloat16, the subclass's dtype), under which come
`PythonSubclass` and `aten::_scaled_mm` (Input type Float8_e4m3fn / Float8_e5m2, scales float); torch's CPU
`_scaled_mm` then converts both operands to float32, multiplies by the scales and runs an `aten::mm` in
float32 inside it. So a reader must classify a GEMM by its outermost GEMM op and what runs under it, never
count the inner ones again. A kept (bf16) layer's GEMM is a plain `aten::mm` (under `aten::linear` /
`aten::matmul` forward, `MmBackward0` backward) with no `_scaled_mm` under it. In the rowwise recipe only
the forward GEMM has rowwise scales (`Input Dims` [M, 1] and [1, N]); torchao runs the two backward GEMMs
(no fast accumulation) as a tensorwise `_scaled_mm` with scales of one (dims []) and multiplies the row and
column scales in afterwards (`addmm_float8_unwrapped`), on a GPU as here.

Usage:

    python benchmarks/make_cpu_traces.py [--out tests/data/traces/cpu] [--layers 1] [--no-compile]
        [--only FILE[,FILE...]]

`--only` records the named files alone and keeps the other entries of an existing MANIFEST.json (each entry
says when, and with which versions, its file was recorded).

What one run writes under `--out` (gzipped Chrome/Kineto JSON; gzip header without a time stamp or name):

- `llama-bf16.json.gz`: the model in bf16, eager, `record_shapes=True`;
- `llama-float8-tensorwise.json.gz`, `llama-float8-rowwise.json.gz`,
  `llama-float8-rowwise_with_gw_hp.json.gz`: torchao's "tensorwise" / "rowwise" / "rowwise_with_gw_hp"
  recipe on every Linear except the kept set (`output` and every block's `attention.wk` / `attention.wv`),
  so the trace holds a mixed conversion: float8 GEMMs for the converted layers, bf16 ones for the kept layers,
  whose shapes (K=256, N=64 and K=256, N=2048) no converted layer shares;
- `llama-bf16-noshapes.json.gz`: as bf16, with `record_shapes=False` (no `Input Dims`: the "re-profile"
  case);
- `llama-bf16-compiled.json.gz`: bf16 with each block and the head `torch.compile`d (torchtitan's way),
  compiled in one extra training step before profiling (so its losses are one step ahead of the others);
  skipped with `--no-compile`, or when compiling takes more than 60 s;
- `moe-bf16.json.gz`: the project's MoE example (`data/models/moe.py:build_model`, two blocks, each:
  attention, a router over 4 experts, top 3, whose 3-D weights run through `torch._grouped_mm`, and a shared
  expert) in bf16. On the CPU `_grouped_mm` runs one `aten::mm` per expert inside it, forward (`a[384, 256] @
  b[4, 256, 512]`) and in `GroupedMmBackward0` (the input gradient 2-D x 3-D, the weight gradient 2-D x 2-D
  split by the offsets). No float8 MoE trace: torch's `_scaled_grouped_mm` has no CPU kernel;
- `moe-linear-list-bf16.json.gz`: the same model with its experts held as a ModuleList of 4 nn.Linear MLPs
  (`experts="linear_list"`, as Hugging Face's Mixtral-style models hold them), each multiplying the rows
  routed to it;
- `MANIFEST.json`: per file, the factory call, batch, seq, recipe, converted and kept FQNs, losses, size;
  the torch / torchao versions, date and command. Each trace also carries the model, recipe and converted
  FQNs under its top-level key `fp8advisor_make_cpu_traces` (torch.profiler's `add_metadata_json`).

The model: `build_model(n_layers=1, vocab_size=2048)`: dim 256, 8 heads (2 KV heads, so wk/wv are
256 -> 64), FFN 1024 (w1/w3 256 -> 1024, w2 1024 -> 256), vocabulary 2048; every Linear has K and N multiples
of 16. One block keeps each float8 trace under 300 KB (`--layers 2`: 330-350 KB). One training step: forward
on random tokens (batch 1, seq 128), cross-entropy in float32, backward, AdamW step (foreach), zero_grad. The
profiler schedule is wait=0, warmup=1, active=2, so each trace holds `ProfilerStep#1` and `ProfilerStep#2`.
Weights, tokens and the conversion are seeded; the times in a trace are not reproducible, its ops are.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_step import make_loss_function  # noqa: E402 - the sibling script, found through sys.path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "tests" / "data" / "traces" / "cpu"
MODEL_FILE = "data/models/llama3.py"
FACTORY = "build_model"
DEFAULT_LAYERS = 1  # 2 blocks make the float8 traces 330-350 KB gzipped; one keeps them under 300 KB
VOCAB_SIZE = 2048  # output head 256 -> 2048: a shape no converted layer has
BATCH = 1
SEQ = 128
SEED = 2029
LEARNING_RATE = 1e-4
COMPILE_LIMIT_S = 60.0
#: FQN suffixes of the Linear layers kept in bf16 in the float8 traces (the mixed conversion).
KEPT_SUFFIXES = ("output", "attention.wk", "attention.wv")
WHAT = "recorded by torch.profiler on the CPU (no device records) by benchmarks/make_cpu_traces.py"


#: The MoE example's sizes: three distinct GEMM sizes in its experts (dim 256, M_total = 128 tokens x top 3
#: = 384 rows, expert hidden 512), K and N multiples of 16; the router's N = 4 keeps it out of float8.
MOE_OVERRIDES = {
    "n_layers": 2,  # two MoE blocks: which block's experts ran float8 must be told apart
    "dim": 256,
    "n_heads": 8,
    "vocab_size": VOCAB_SIZE,
    "n_experts": 4,
    "top_k": 3,
    "expert_hidden_dim": 512,
    "shared_hidden_dim": 320,
}
#: model name -> (file, factory)
MODELS = {
    "llama": (MODEL_FILE, FACTORY),
    "moe": ("data/models/moe.py", "build_model"),
    "moe-linear-list": ("data/models/moe.py", "build_model"),
}


@dataclasses.dataclass(frozen=True)
class Variant:
    file: str
    recipe: str | None = None  # torchao recipe name; None: bf16, no conversion
    record_shapes: bool = True
    compile: bool = False
    model: str = "llama"  # a key of MODELS


VARIANTS = (
    Variant("llama-bf16.json.gz"),
    Variant("llama-float8-tensorwise.json.gz", recipe="tensorwise"),
    Variant("llama-float8-rowwise.json.gz", recipe="rowwise"),
    Variant("llama-float8-rowwise_with_gw_hp.json.gz", recipe="rowwise_with_gw_hp"),
    Variant("llama-bf16-noshapes.json.gz", record_shapes=False),
    Variant("llama-bf16-compiled.json.gz", compile=True),
    Variant("moe-bf16.json.gz", model="moe"),
    Variant("moe-linear-list-bf16.json.gz", model="moe-linear-list"),
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"folder for the traces ({DEFAULT_OUT})"
    )
    parser.add_argument("--layers", type=int, default=DEFAULT_LAYERS, help=f"blocks ({DEFAULT_LAYERS})")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile'd bf16 trace")
    parser.add_argument(
        "--only",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        default=None,
        help="record these files alone (comma-separated), keeping the other entries of MANIFEST.json",
    )
    args = parser.parse_args(argv)
    known = {variant.file for variant in VARIANTS}
    unknown = sorted(set(args.only or ()) - known)
    if unknown:
        parser.error(f"--only: unknown file(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return args


def model_overrides(model: str, layers: int) -> dict:
    """The keyword arguments given to the model's factory (`layers`: the Llama's blocks; the MoE has 2)."""
    if model == "moe":
        return dict(MOE_OVERRIDES)
    if model == "moe-linear-list":
        return {**MOE_OVERRIDES, "experts": "linear_list"}
    return {"n_layers": layers, "vocab_size": VOCAB_SIZE}


def build_model(model: str, overrides: dict):
    """The example model in bf16 on the CPU, seeded: the same weights for every variant of it."""
    import torch

    from fp8advisor.inspect.target import load_model

    torch.manual_seed(SEED)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    model_file, factory = MODELS[model]
    try:
        return load_model(str(REPO / f"{model_file}:{factory}"), "cpu", overrides=overrides).model
    finally:
        torch.set_default_dtype(previous)


def keep_in_bf16(fqn: str) -> bool:
    return any(fqn == suffix or fqn.endswith("." + suffix) for suffix in KEPT_SUFFIXES)


def convert(model, recipe: str | None) -> list[str]:
    """Convert every Linear but the kept ones with torchao's `recipe` (emulate False); the converted FQNs."""
    if recipe is None:
        return []
    from torch import nn
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    from torchao.float8.float8_linear import Float8Linear

    def module_filter(module, fqn: str) -> bool:
        return isinstance(module, nn.Linear) and not keep_in_bf16(fqn)

    config = Float8LinearConfig.from_recipe_name(recipe)
    assert not config.emulate, "the traces must hold real float8 GEMMs (torch._scaled_mm), not emulation"
    convert_to_float8_training(model, config=config, module_filter_fn=module_filter)
    return sorted(fqn for fqn, module in model.named_modules() if isinstance(module, Float8Linear))


def make_batch(vocab_size: int):
    import torch

    generator = torch.Generator().manual_seed(SEED + 1)
    tokens = torch.randint(0, vocab_size, (BATCH, SEQ + 1), generator=generator)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def make_step(model, *, compile: bool) -> Callable[[], float]:
    """One training step: forward, cross-entropy, backward, AdamW step, zero_grad; returns the loss."""
    import torch

    loss_fn = make_loss_function(model, compile=compile)  # train_step.py's: the same step as on the GPU
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, foreach=True)
    tokens, labels = make_batch(model.tok_embeddings.num_embeddings)

    def step() -> float:
        loss = loss_fn(tokens, labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    return step


def record(step: Callable[[], float], *, record_shapes: bool, json_path: Path, metadata: dict) -> list[float]:
    """Three steps under torch.profiler (CPU only): warm-up, then ProfilerStep#1 and #2 into `json_path`."""
    from torch.profiler import ProfilerActivity, profile, schedule

    losses = []
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=record_shapes,
        schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
        on_trace_ready=lambda session: session.export_chrome_trace(str(json_path)),
    ) as session:
        session.add_metadata_json("fp8advisor_make_cpu_traces", json.dumps(metadata, sort_keys=True))
        for _ in range(3):
            losses.append(step())
            session.step()
    if not json_path.is_file():
        raise RuntimeError(f"the profiler wrote no trace to {json_path}")
    return losses


def gzip_file(source: Path, target: Path) -> None:
    """gzip `source` into `target` with no time stamp or file name in the header."""
    with source.open("rb") as raw, target.open("wb") as out:
        with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as packed:
            shutil.copyfileobj(raw, packed)


def run_variant(variant: Variant, layers: int, out: Path, scratch: Path) -> dict:
    """Build, convert, (compile,) profile one variant; its manifest entry. Raises on a compile over time."""
    import torch

    torch._dynamo.reset()
    overrides = model_overrides(variant.model, layers)
    model = build_model(variant.model, overrides)
    converted = convert(model, variant.recipe)
    step = make_step(model, compile=variant.compile)
    compile_s = None
    if variant.compile:
        started = time.perf_counter()
        step()  # compiles; outside the profiler
        compile_s = round(time.perf_counter() - started, 1)
        if compile_s > COMPILE_LIMIT_S:
            raise TimeoutError(f"compiling took {compile_s} s (> {COMPILE_LIMIT_S:.0f} s)")
    model_file, factory = MODELS[variant.model]
    entry = {
        "what": WHAT,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": versions(),
        "model": f"{model_file}:{factory}({_call_arguments(overrides)})",
        "model_factory": factory,
        "model_overrides": overrides,
        "dtype": "bfloat16",
        "batch": BATCH,
        "seq": SEQ,
        "seed": SEED,
        "recipe": variant.recipe,
        "emulate": False if variant.recipe else None,
        "converted_fqns": converted,
        "kept_in_bf16": _kept_linears(model) if variant.recipe else None,
        "record_shapes": variant.record_shapes,
        "compiled": variant.compile,
        "compile_s": compile_s,
        "step": "forward, cross_entropy (float32), backward, AdamW(foreach) step, zero_grad",
        "profiler": "activities=[CPU], schedule(wait=0, warmup=1, active=2): ProfilerStep#1 and #2",
    }
    json_path = scratch / variant.file.removesuffix(".gz")
    metadata = {key: entry[key] for key in ("model", "recipe", "converted_fqns", "compiled")}
    entry["losses"] = record(
        step, record_shapes=variant.record_shapes, json_path=json_path, metadata=metadata
    )
    gzip_file(json_path, out / variant.file)
    entry["bytes"] = (out / variant.file).stat().st_size
    return entry


def _call_arguments(overrides: dict) -> str:
    return ", ".join(f"{key}={value!r}" for key, value in overrides.items())


def _kept_linears(model) -> list[str]:
    from torch import nn
    from torchao.float8.float8_linear import Float8Linear

    return sorted(
        fqn
        for fqn, module in model.named_modules()
        if isinstance(module, nn.Linear) and not isinstance(module, Float8Linear)
    )


def versions() -> dict:
    import torch
    import torchao

    return {"python": sys.version.split()[0], "torch": torch.__version__, "torchao": torchao.__version__}


def kept_manifest(path: Path, only: Sequence[str] | None) -> tuple[dict, dict]:
    """With `--only`, the existing manifest's entries of the other files, each with the command, date and
    versions it was recorded with, and its other files' reasons for being skipped; ({}, {}) without `--only`
    or a manifest."""
    if only is None or not path.is_file():
        return {}, {}
    old = json.loads(path.read_text())
    stamp = {key: old.get(key) for key in ("command", "date", "versions")}
    files = {name: {**stamp, **entry} for name, entry in old.get("files", {}).items() if name not in only}
    skipped = {name: why for name, why in old.get("skipped", {}).items() if name not in only}
    return files, skipped


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    files, skipped = kept_manifest(args.out / "MANIFEST.json", args.only)
    manifest = {
        "what": WHAT,
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": versions(),
        "files": files,
        "skipped": skipped,
    }
    with tempfile.TemporaryDirectory() as scratch:
        for variant in VARIANTS:
            if args.only is not None and variant.file not in args.only:
                continue
            if variant.compile and args.no_compile:
                manifest["skipped"][variant.file] = "--no-compile"
                continue
            print(f"recording {variant.file}", file=sys.stderr)
            try:
                entry = run_variant(variant, args.layers, args.out, Path(scratch))
                manifest["files"][variant.file] = {"command": manifest["command"], **entry}
            except TimeoutError as error:  # only the optional compiled trace may be skipped
                manifest["skipped"][variant.file] = str(error)
                (args.out / variant.file).unlink(missing_ok=True)
    (args.out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    for name, entry in manifest["files"].items():
        print(f"{name}: {entry['bytes']} bytes, losses {entry['losses']}")
    for name, why in manifest["skipped"].items():
        print(f"{name}: skipped ({why})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
