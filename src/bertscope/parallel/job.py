"""What the distributed model evaluates: a `Job` (model, run, layout; `bertscope.job`) on a
`Cluster` (what it runs on). `Workload` is a job's layout-free part (model, per-sequence run
settings and the global batch), which a layout search spreads in every valid way
(`Workload.job`); `check_layout` says whether a job fits a cluster."""

from __future__ import annotations

from dataclasses import dataclass, replace
from numbers import Integral

from bertscope.config import Checkpoint, ModelConfig, Optimizer, Precision, RunConfig
from bertscope.errors import BertscopeError, check_positive_ints, is_positive_int
from bertscope.hardware import Device
from bertscope.job import Job, Layout
from bertscope.packing import Packing, active, mean_real_tokens
from bertscope.parallel.topology import Link, Topology, topology_for
from bertscope.perf import DeviceProfile, default_profile, load_profile


@dataclass(kw_only=True, frozen=True, slots=True)
class Workload:
    """What is trained, whatever the layout: the model, the run settings of one sequence, and
    the optimizer step's batch. `run` has batch 1, one micro-batch and no recomputation: a
    layout search chooses those per layout (`job`). Hashable: it keys the compute-table
    cache."""

    model: ModelConfig
    """The model."""
    run: RunConfig
    """Run settings with batch 1, one micro-batch and no recomputation (`of` normalizes)."""
    global_batch: int
    """Sequences per optimizer step, over all replicas and micro-batches."""

    def __post_init__(self) -> None:
        if not isinstance(self.model, ModelConfig):
            raise BertscopeError(f"model must be a ModelConfig, got {self.model!r}")
        if not isinstance(self.run, RunConfig):
            raise BertscopeError(f"run must be a RunConfig, got {self.run!r}")
        check_positive_ints(self, ("global_batch",))
        object.__setattr__(self, "run", replace(self.run, batch=1, micro_batches=1,
                                                checkpoint=Checkpoint.NONE))
        self.run.check(self.model)

    @classmethod
    def of(cls, job: Job) -> Workload:
        """A job's workload: its model, its run per sequence and its global batch."""
        return cls(model=job.model, run=job.run, global_batch=job.global_batch)

    @property
    def seq(self) -> int:
        """Tokens per sequence (`run.seq`)."""
        return self.run.seq

    @property
    def precision(self) -> Precision:
        """fp32, or mixed fp16/bf16 (`run.precision`)."""
        return self.run.precision

    @property
    def optimizer(self) -> Optimizer:
        """Optimizer of the update step (`run.optimizer`)."""
        return self.run.optimizer

    @property
    def tokens(self) -> int | float:
        """Real tokens per optimizer step (padding never counted)."""
        return self.global_batch * self.tokens_per_sequence

    @property
    def tokens_per_sequence(self) -> int | float:
        """Real tokens per sequence slot (per row when packed), unrounded: `seq`, or with
        `run.seq_lengths` the real lengths (`packing.mean_real_tokens`)."""
        return mean_real_tokens(self.run)

    @property
    def computed_per_sequence(self) -> int | float:
        """Token positions the token-wise ops compute per sequence slot, unrounded: `seq`,
        or the mean real length when unpadded (`packing.computed_tokens` per slot)."""
        if active(self.run) and self.run.packing is Packing.UNPADDED:
            return mean_real_tokens(self.run)
        return self.run.seq

    def run_for(self, micro_batch: int) -> RunConfig:
        """The run settings of one micro-batch of `micro_batch` sequences: `run` with that
        batch (one micro-batch, no recomputation)."""
        return replace(self.run, batch=int(micro_batch))

    def job(self, layout: Layout, micro_batches: int = 1,
            checkpoint: Checkpoint | str = Checkpoint.NONE) -> Job:
        """The job that trains this workload with `layout`, `micro_batches` micro-batches per
        replica and `checkpoint` recomputation: global batch / (dp x micro-batches) sequences
        per micro-batch. Raises `BertscopeError` when they do not divide the global batch."""
        if isinstance(micro_batches, Integral) and not isinstance(micro_batches, bool):
            micro_batches = int(micro_batches)  # numpy integers (a frame's rows) too
        if not is_positive_int(micro_batches):
            raise BertscopeError(f"micro_batches must be a positive integer, got "
                                 f"{micro_batches!r}")
        per_step = layout.dp * micro_batches
        if self.global_batch % per_step:
            raise BertscopeError(f"global batch {self.global_batch} is not divisible by dp x "
                                 f"micro-batches = {per_step}")
        run = replace(self.run, batch=self.global_batch // per_step,
                      micro_batches=micro_batches, checkpoint=checkpoint)
        return Job(model=self.model, run=run, layout=layout)


@dataclass(kw_only=True, frozen=True, slots=True)
class Cluster:
    """The devices a job runs on: a device profile, how many, and the node design."""

    profile: DeviceProfile
    """Device plus efficiency models (the performance model's input)."""
    devices: int
    """Devices in all."""
    topology: Topology
    """Links inside and between nodes."""

    def __post_init__(self) -> None:
        check_positive_ints(self, ("devices",))

    @classmethod
    def build(cls, device: str | Device | DeviceProfile, devices: int, *,
              devices_per_node: int | None = None, intra: str | Link | None = None,
              inter: str | Link | None = None) -> Cluster:
        """A cluster of `devices` catalog devices (name, `Device` or profile) in the node
        design the device usually comes in (`topology_for`), with any link overridden."""
        if isinstance(device, DeviceProfile):
            profile = device
        elif isinstance(device, Device):
            profile = default_profile(device)
        else:
            profile = load_profile(device)
        if not is_positive_int(devices):
            raise BertscopeError(f"devices must be a positive integer, got {devices!r}")
        topo = topology_for(profile.device, devices_per_node=devices_per_node, intra=intra,
                            inter=inter).fit(devices)
        return cls(profile=profile, devices=devices, topology=topo)

    @property
    def memory_bytes(self) -> float:
        """Memory of one device."""
        return self.profile.device.memory_bytes


def check_layout(job: Job, cluster: Cluster) -> None:
    """Raise `BertscopeError` when `job` cannot run on `cluster` (the job checked itself: its
    layout fits the model and its run; here, the device count)."""
    lay = job.layout
    if lay.devices != cluster.devices:
        raise BertscopeError(f"dp x tp x pp = {lay.dp} x {lay.tp} x {lay.pp} = "
                             f"{lay.devices}, but the cluster has {cluster.devices} devices")


__all__ = ["Cluster", "Workload", "check_layout"]
