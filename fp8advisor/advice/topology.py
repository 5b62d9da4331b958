"""Where the GPUs of a training job sit and how fast they reach each other: the GPU systems' datasheet links,
and the time of one collective over a group of GPUs.

A **GPU system** (`GPU_SYSTEMS`) is the machine a GPU family is sold in: how many GPUs share one NVLink domain
(`gpus_per_node`: 8 in a DGX/HGX, 72 in a GB200 NVL72 rack) and the bandwidth each GPU has per direction
inside that domain (NVLink) and to other nodes (its network adapters). Figures are datasheet peaks:

- DGX/HGX H100 and H200: NVLink 4, 900 GB/s bidirectional per GPU (450 GB/s each way); eight ConnectX-7
  400 Gb/s adapters per node, one per GPU: 50 GB/s each way per GPU.
- DGX/HGX B200: NVLink 5, 1.8 TB/s bidirectional (900 GB/s each way); eight 400 Gb/s ConnectX-7: 50 GB/s.
- HGX B300: NVLink 5 (900 GB/s each way); ConnectX-8 800 Gb/s per GPU: 100 GB/s.
- GB200 NVL72: 72 GPUs in one NVLink 5 domain (900 GB/s each way); one 400 Gb/s ConnectX-7 per GPU: 50 GB/s.
- MI300X platform: 8 GPUs, Infinity Fabric 7 links x 64 GB/s each way (448 GB/s); 400 Gb/s per GPU: 50 GB/s.

`Topology` is one job's system with the user's overrides (`--gpus-per-node`, `--inter-node-gbps`).

**A collective** over n GPUs is timed as NCCL's ring algorithm moves data: an all-gather or reduce-scatter of
a buffer of S bytes (the gathered size) moves (n-1)/n x S through each GPU's link, an all-reduce twice that
(`collective_time_s`). The link is NVLink when the group lies inside one NVLink domain; a ring that leaves
the node runs a channel over each network adapter its members in a node have (rail-optimised clusters give
every GPU one): k members per node reach k adapters' bandwidth, at most NVLink's (nccl-tests across DGX H100
nodes: "around 48GB/s from each CX7 NIC ... up to ~396GB/s with the RING protocol", NVIDIA/nccl-tests issue
319). NCCL reaches a fraction of the datasheet peak, its bus bandwidth:
`NVLINK_BUS_EFFICIENCY` and `NETWORK_BUS_EFFICIENCY` (their sources there). Which GPUs form a group follows
torchtitan's device mesh, [pp, dp_replicate, dp_shard, cp, tp] with tp innermost: a group of `size` ranks
`stride` apart (`Group`).
"""

from __future__ import annotations

from dataclasses import dataclass

from fp8advisor.errors import AdvisorError

#: NCCL's all-gather / reduce-scatter bus bandwidth inside an H100 node over the datasheet's 450 GB/s each
#: way: "NCCL can get an effective NVLink bandwidth of 370GB/s, which you can observe as "BusBw" when running
#: non-allreduce operations" (NVIDIA's NCCL maintainer, NVIDIA/nccl-tests issue 212); used as this fraction
#: of every NVLink system's peak (no NVIDIA figure for NVLink 5 all-gather was found).
NVLINK_BUS_EFFICIENCY = 370 / 450
#: The same across nodes: "around 48GB/s from each CX7 NIC at 400Gbps" (NVIDIA, NVIDIA/nccl-tests issue 319),
#: of the 50 GB/s line rate; used as this fraction of every network.
NETWORK_BUS_EFFICIENCY = 48 / 50

GB = 1e9


@dataclass(frozen=True)
class GpuSystem:
    """A machine a GPU family comes in: its NVLink domain and the per-GPU bandwidths, each way."""

    name: str
    gpus_per_node: int  # GPUs in one NVLink domain
    nvlink_bytes_per_s: float  # per GPU, each way
    network_bytes_per_s: float  # per GPU to other nodes, each way
    source: str


GPU_SYSTEMS: dict[str, GpuSystem] = {
    "H100": GpuSystem(
        "DGX/HGX H100", 8, 450 * GB, 50 * GB, "NVLink 4 900 GB/s bidirectional; 8x ConnectX-7 400 Gb/s"
    ),
    "H200": GpuSystem(
        "DGX/HGX H200", 8, 450 * GB, 50 * GB, "NVLink 4 900 GB/s bidirectional; 8x ConnectX-7 400 Gb/s"
    ),
    "B200": GpuSystem(
        "DGX/HGX B200", 8, 900 * GB, 50 * GB, "NVLink 5 1.8 TB/s bidirectional; 8x ConnectX-7 400 Gb/s"
    ),
    "B300": GpuSystem(
        "HGX B300", 8, 900 * GB, 100 * GB, "NVLink 5 1.8 TB/s bidirectional; ConnectX-8 800 Gb/s per GPU"
    ),
    "GB200": GpuSystem(
        "GB200 NVL72", 72, 900 * GB, 50 * GB, "72 GPUs in one NVLink 5 domain; ConnectX-7 400 Gb/s per GPU"
    ),
    "MI300X": GpuSystem(
        "MI300X platform", 8, 448 * GB, 50 * GB, "Infinity Fabric 7 x 64 GB/s each way; 400 Gb/s per GPU"
    ),
}


def system_of(family: str) -> GpuSystem:
    """The GPU system a family is sold in (H100's for a family not in `GPU_SYSTEMS`)."""
    return GPU_SYSTEMS.get(family, GPU_SYSTEMS["H100"])


@dataclass(frozen=True)
class Group:
    """The GPUs one collective runs over: `size` ranks, `stride` apart in the job's rank order."""

    name: str  # for people: "FSDP", "TP", ...
    size: int
    stride: int = 1


@dataclass(frozen=True)
class Topology:
    """One job's GPU system, with the user's overrides."""

    system: GpuSystem
    gpus_per_node: int
    network_bytes_per_s: float

    @classmethod
    def of(
        cls, system: GpuSystem | str, gpus_per_node: int | None = None, inter_node_gbps: float | None = None
    ) -> Topology:
        """A GPU system (or the system of a GPU family, H100's for one not in `GPU_SYSTEMS`), overridden by
        `--gpus-per-node` and `--inter-node-gbps` (gigabits per second per GPU, as adapters are sold)."""
        if isinstance(system, str):
            system = system_of(system)
        if gpus_per_node is not None and gpus_per_node < 1:
            raise AdvisorError(
                f"--gpus-per-node must be at least 1, got {gpus_per_node}", hint="e.g. --gpus-per-node 8"
            )
        if inter_node_gbps is not None and not inter_node_gbps > 0:
            raise AdvisorError(
                f"--inter-node-gbps must be a positive number, got {inter_node_gbps}",
                hint="the network bandwidth per GPU in Gb/s, e.g. 400 for one 400 Gb/s adapter per GPU",
            )
        network = system.network_bytes_per_s if inter_node_gbps is None else inter_node_gbps * GB / 8
        return cls(system, gpus_per_node or system.gpus_per_node, network)

    def spans_nodes(self, group: Group) -> bool:
        """Whether `group`'s ranks lie in more than one NVLink domain (ranks are placed node by node)."""
        return group.size > 1 and (group.size - 1) * group.stride >= self.gpus_per_node

    def members_per_node(self, group: Group) -> int:
        """How many of `group`'s ranks share one node (1 when they are a node or more apart)."""
        return max(1, min(group.size, -(-self.gpus_per_node // group.stride)))

    def bus_bytes_per_s(self, group: Group) -> float:
        """The bandwidth a ring over `group` reaches per GPU: NVLink's inside a node; across nodes, the
        network adapters of the group's members in a node together (NCCL runs a ring channel per adapter),
        at most NVLink's; each at NCCL's share."""
        nvlink = self.system.nvlink_bytes_per_s * NVLINK_BUS_EFFICIENCY
        if not self.spans_nodes(group):
            return nvlink
        return min(nvlink, self.members_per_node(group) * self.network_bytes_per_s * NETWORK_BUS_EFFICIENCY)

    def link_words(self, group: Group) -> str:
        """Which link a group's collectives use, for people."""
        rate = self.bus_bytes_per_s(group) / GB
        where = "across nodes" if self.spans_nodes(group) else "NVLink"
        return f"{group.name} over {group.size} GPU(s), {where} at {rate:.0f} GB/s bus bandwidth"


def collective_time_s(kind: str, buffer_bytes: float, group: Group, topology: Topology) -> float:
    """Seconds of one ring collective over `group`: `kind` all_gather or reduce_scatter moves (n-1)/n of the
    gathered `buffer_bytes` through each GPU's link, all_reduce twice that; 0 for a group of one."""
    n = group.size
    if n <= 1 or buffer_bytes <= 0:
        return 0.0
    passes = {"all_gather": 1, "reduce_scatter": 1, "all_reduce": 2}[kind]
    return passes * (n - 1) / n * buffer_bytes / topology.bus_bytes_per_s(group)


__all__ = [
    "GPU_SYSTEMS",
    "NETWORK_BUS_EFFICIENCY",
    "NVLINK_BUS_EFFICIENCY",
    "GpuSystem",
    "Group",
    "Topology",
    "collective_time_s",
    "system_of",
]
