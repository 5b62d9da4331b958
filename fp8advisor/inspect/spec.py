"""What a TARGET names (`TargetSpec`, parsed by `fp8advisor.inspect.target.parse_target`) and what building
it gives (`LoadedModel`): the records every loader (Python file, Hugging Face config, torchtitan) returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fp8advisor.inspect.inputs import ExampleInputs, make_example_inputs


@dataclass(frozen=True)
class TargetSpec:
    """A parsed TARGET: where the model comes from and how to build it."""

    text: str  # as the user typed it
    path: Path | None  # the model file or config.json; None for a torchtitan registry target
    kind: str  # "python", "hf_config" or "torchtitan"
    # factory, class or instance in the file (None = resolve by convention); torchtitan: the model package
    name: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    flavor: str | None = None  # torchtitan: the flavor in the model's registry
    hub_id: str | None = None  # "org/name[@revision]" when `path` is a config.json fetched from the Hub


@dataclass
class LoadedModel:
    """A built model with what is needed to run it: the user's module namespace (for `example_inputs`)."""

    model: nn.Module
    spec: TargetSpec
    device: torch.device
    namespace: dict[str, Any]  # globals of the user's file; {} for a Hugging Face config
    source_file: Path | None  # the user's file (for error locations); None for a Hugging Face config
    built_by: str  # e.g. "llama3_70b()" or "LlamaForCausalLM.from_config(config.json)"
    notes: list[str] = field(default_factory=list)  # what was changed to build it (inspection prints them)

    def example_inputs(self, batch: int, seq: int) -> ExampleInputs:
        return make_example_inputs(self.model, self.namespace, batch, seq, self.device, spec=self.spec)
