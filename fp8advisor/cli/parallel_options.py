"""`suggest`'s set-up options for the step model: parallel degrees, nodes and links, into one `StepConfig`.

The job's GPUs are `--world-size`, or `--nodes` x `--gpus-per-node`, or, with `--dp-shard`, the product of
every degree; the FSDP degree is what the other degrees leave of the world size (torchtitan's
`data_parallel_shard_degree = -1`). Two ways of saying it that disagree are refused, as is a world size the
degrees do not divide (`StepConfig.check`).
"""

from __future__ import annotations

from dataclasses import dataclass

from fp8advisor.errors import AdvisorError, parse_choice
from fp8advisor.recipes import parse_recipe
from fp8advisor.request import AUTO


@dataclass(frozen=True)
class ParallelOptions:
    """The options as typed (None: not given)."""

    world_size: int | None
    tp: int
    cp: int
    pp: int
    dp_replicate: int
    dp_shard: int | None
    nodes: int | None
    gpus_per_node: int | None
    inter_node_gbps: float | None
    async_tp: bool

    def world(self, family: str | None) -> int:
        """The job's GPUs from whichever options say it; `family`: the GPU, for its system's node size."""
        from fp8advisor.advice.topology import system_of
        from fp8advisor.request import check_degree

        said: list[tuple[str, int]] = []
        if self.world_size is not None:
            said.append((f"--world-size {self.world_size}", check_degree("--world-size", self.world_size)))
        if self.nodes is not None:
            per_node = self.gpus_per_node or system_of(family or "H100").gpus_per_node
            check_degree("--nodes", self.nodes)
            said.append((f"--nodes {self.nodes} x {per_node} GPUs per node", self.nodes * per_node))
        if self.dp_shard is not None:
            shard = check_degree("--dp-shard", self.dp_shard)
            total = shard * self.dp_replicate * self.tp * self.cp * self.pp
            said.append((f"--dp-shard {self.dp_shard} x the other degrees", total))
        if len({value for _, value in said}) > 1:
            raise AdvisorError(
                "the job's size is given twice, differently: "
                + "; ".join(f"{words} = {value}" for words, value in said),
                hint="give one of --world-size, --nodes (with --gpus-per-node) or --dp-shard",
            )
        if said:
            return said[0][1]
        return self.dp_replicate * self.tp * self.cp * self.pp  # no data parallelism beyond HSDP


def step_config_of(
    options: ParallelOptions, ac: str, grad_accum: int, float8_all_gather: bool, recipe: str, gpu: str | None
):
    """The checked `StepConfig` of `suggest`'s options (one `AdvisorError` for a set-up no trainer runs)."""
    from fp8advisor.advice.step import Checkpointing, StepConfig

    config = StepConfig(
        world_size=options.world(gpu),
        ac=parse_choice(Checkpointing, ac, "--ac value"),
        grad_accum=grad_accum,
        float8_all_gather=float8_all_gather,
        tp=options.tp,
        cp=options.cp,
        pp=options.pp,
        dp_replicate=options.dp_replicate,
        async_tp=options.async_tp,
        gpus_per_node=options.gpus_per_node,
        inter_node_gbps=options.inter_node_gbps,
    )
    config.check(None if recipe == AUTO else parse_recipe(recipe))
    return config


__all__ = ["ParallelOptions", "step_config_of"]
