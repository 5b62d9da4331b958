"""Shared by the verify and MoE-format tests: a tiny model, a predictor needing no profile, its advice."""

from __future__ import annotations

from pathlib import Path

from fp8advisor.predict.speedup import LayerTimes, Prediction

#: Every layer a tiny model the CPU runs in well under a second; names and shapes chosen so that the advice is
#: known in advance (see `predictor`): `up` and `down` convert; `gate` is too small; `spare` is never called;
#: `head` has N = 100, not divisible by 16.
TINY_MODEL = """
import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(64, 256, bias=False)
        self.down = nn.Linear(256, 64, bias=False)
        self.gate = nn.Linear(64, 32)
        self.spare = nn.Linear(64, 64)  # registered, never called

    def forward(self, x):
        return x + self.down(F.silu(self.up(x))) + self.gate(x).mean(-1, keepdim=True)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 64)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(64, 100, bias=False)

    def forward(self, tokens):
        h = self.embed(tokens)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def build_model():
    return Net()
"""

ADVISED = ("blocks.0.down", "blocks.0.up", "blocks.1.down", "blocks.1.up")


def predictor(recipe, M, K, N):
    """2x for layers with K x N >= 64 x 256, 0.5x below: stands for a profile in tests."""
    speedup = 2.0 if K * N >= 64 * 256 else 0.5
    prediction = Prediction(speedup, "modelled", "modelled", "test")
    return LayerTimes(1e-3, 1e-3 / speedup, prediction, "modelled", "modelled")


def advise_with_predictor(model_layers, **options):
    """`advise` as the verify tests run it: rowwise, decided by `predictor`, no GPU, no comparison with
    torchao's auto filter; `options` as `advise` takes them (min_speedup, expert_parallel, ...)."""
    from fp8advisor.advice.decide import advise
    from fp8advisor.verification.settings import _TestProfile

    return advise(
        model_layers,
        _TestProfile(),
        "rowwise",
        predictor=predictor,
        device_capability=None,
        compare_torchao_auto=False,
        **options,
    )


def write_tiny_model(directory: Path) -> str:
    path = directory / "tiny.py"
    path.write_text(TINY_MODEL)
    return str(path)


def torchtitan_toml(
    filter_fqns: list[str], recipe: str = "rowwise", converters: str = "quantize.linear.float8"
) -> str:
    entries = ", ".join(f'"{entry}"' for entry in filter_fqns)
    return (
        f'[model]\nconverters = ["{converters}"]\n\n[quantize.linear.float8]\nrecipe_name = "{recipe}"\n'
        f"filter_fqns = [{entries}]\n\n[compile]\nenable = true\n"
    )


def use_test_predictor(monkeypatch) -> None:
    """The CLI's `verify` asks for a profile; make it answer with `predictor` (the verify CLI tests' autouse
    fixture calls this)."""
    from dataclasses import replace

    from fp8advisor.verification import verifier as verify_module

    real_verify = verify_module.verify

    def verify_with_predictor(request, config, **kwargs):
        kwargs["predictor"] = predictor
        return real_verify(replace(request, profile=None), config, **kwargs)

    monkeypatch.setattr(verify_module, "verify", verify_with_predictor)
