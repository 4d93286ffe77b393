"""What a distributed training job is: the layout (how it is spread), the workload (what is
trained) and the cluster (what it runs on), each validated once on construction, and
`check_layout` for whether the three fit together."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from bertscope.config import Checkpoint, ModelConfig, Optimizer, Precision, RunConfig
from bertscope.errors import BertscopeError, check_positive_ints, is_positive_int, parse_enum
from bertscope.hardware import Device
from bertscope.parallel.memory import ZeroStage, stack_layers
from bertscope.parallel.pipeline import Schedule
from bertscope.parallel.topology import Link, Topology, topology_for
from bertscope.perf import DeviceProfile, default_profile, load_profile

_LAYOUT_SIZES = ("dp", "tp", "pp", "micro_batches", "virtual_stages")


def zero_stage(stage: ZeroStage | int) -> ZeroStage:
    """The ZeRO stage `stage` names (0-3), or a one-line error."""
    try:
        return ZeroStage(int(stage))
    except (ValueError, TypeError):
        raise BertscopeError(f"ZeRO stage must be 0, 1, 2 or 3, got {stage!r}") from None


@dataclass(kw_only=True, frozen=True, slots=True)
class Layout:
    """How a training job is spread over devices. Raises `BertscopeError` when inconsistent."""

    dp: int = 1
    """Data-parallel replicas."""
    tp: int = 1
    """Tensor-parallel ranks (Megatron-style split of every layer)."""
    pp: int = 1
    """Pipeline stages."""
    micro_batches: int = 1
    """Micro-batches per optimizer step per replica (pipeline micro-batches, or gradient
    accumulation steps when pp = 1)."""
    zero: ZeroStage = ZeroStage.NONE
    """ZeRO stage 0-3 across the data-parallel replicas."""
    checkpoint: Checkpoint = Checkpoint.NONE
    """Activation recomputation: none, selective or full."""
    sequence_parallel: bool = False
    """Split layernorm/dropout/residual work and activations along the sequence (needs tp > 1)."""
    schedule: Schedule = Schedule.ONE_F_ONE_B
    """Pipeline schedule (no effect with pp = 1)."""
    virtual_stages: int = 1
    """Model chunks per device for the interleaved schedule (>= 2 there, 1 otherwise)."""

    def __post_init__(self) -> None:
        for f in _LAYOUT_SIZES:  # numpy integers (a search frame's rows) become ints
            value = getattr(self, f)
            if isinstance(value, np.integer):
                object.__setattr__(self, f, int(value))
        check_positive_ints(self, _LAYOUT_SIZES)
        object.__setattr__(self, "zero", zero_stage(self.zero))
        object.__setattr__(self, "checkpoint",
                           parse_enum(Checkpoint, self.checkpoint, "checkpoint"))
        object.__setattr__(self, "schedule", parse_enum(Schedule, self.schedule, "schedule"))
        object.__setattr__(self, "sequence_parallel", bool(self.sequence_parallel))
        if self.sequence_parallel and self.tp == 1:
            raise BertscopeError("sequence parallelism splits tensor-parallel regions: it needs "
                                 "tp > 1")
        if self.schedule is Schedule.INTERLEAVED:
            if self.pp == 1:
                raise BertscopeError("the interleaved schedule needs pp > 1")
            if self.virtual_stages < 2:
                raise BertscopeError("the interleaved schedule needs virtual_stages >= 2")
        elif self.virtual_stages != 1:
            raise BertscopeError(f"virtual_stages {self.virtual_stages} needs the interleaved "
                                 f"schedule")
        if self.zero >= ZeroStage.GRADIENTS and self.pp > 1:
            raise BertscopeError("ZeRO-2/3 partition gradients every micro-batch, which "
                                 "pipeline parallelism does not support (DeepSpeed); use "
                                 "ZeRO 0 or 1 with pp > 1")

    @classmethod
    def fill(cls, devices: int, *, dp: int | None = None, tp: int | None = None,
             pp: int | None = None, micro_batches: int | None = None,
             zero: ZeroStage | int | None = None, checkpoint: Checkpoint | str | None = None,
             sequence_parallel: bool | None = None, schedule: Schedule | str | None = None,
             virtual_stages: int | None = None) -> Layout:
        """The layout on `devices` devices with the unpinned dimensions (None) filled in:
        tp = pp = 1, dp = devices / (tp x pp), one micro-batch, ZeRO 0, no recomputation, no
        sequence parallelism, 1F1B, and 2 virtual stages for the interleaved schedule."""
        t = 1 if tp is None else tp
        p = 1 if pp is None else pp
        if dp is None:
            if not (is_positive_int(t) and is_positive_int(p)):
                dp = 1  # the layout's own checks below refuse the bad tp or pp
            elif devices % (t * p):
                raise BertscopeError(f"tp x pp = {t * p} does not divide {devices} devices; "
                                     f"give --tp/--pp that do, or --dp")
            else:
                dp = devices // (t * p)
        sched = parse_enum(Schedule, schedule or Schedule.ONE_F_ONE_B, "schedule")
        v = virtual_stages if virtual_stages is not None else (
            2 if sched is Schedule.INTERLEAVED else 1)
        return cls(dp=dp, tp=t, pp=p,
                   micro_batches=1 if micro_batches is None else micro_batches,
                   zero=zero_stage(0 if zero is None else zero),
                   checkpoint=Checkpoint.NONE if checkpoint is None else checkpoint,
                   sequence_parallel=bool(sequence_parallel), schedule=sched,
                   virtual_stages=v)

    @property
    def devices(self) -> int:
        """dp x tp x pp."""
        return self.dp * self.tp * self.pp

    def label(self) -> str:
        """A short description, e.g. "dp8 tp4 sp pp2 1f1b m16 zero1 selective"."""
        parts = [f"dp{self.dp}", f"tp{self.tp}" + (" sp" if self.sequence_parallel else ""),
                 f"pp{self.pp}"]
        if self.pp > 1:
            parts.append(self.schedule.value + (f" v{self.virtual_stages}"
                                                if self.virtual_stages > 1 else ""))
        parts += [f"m{self.micro_batches}", f"zero{int(self.zero)}", self.checkpoint.value]
        return " ".join(parts)


@dataclass(kw_only=True, frozen=True, slots=True)
class Workload:
    """What is trained: the model, the run settings, and the optimizer step's batch.

    `run` is the typed run configuration (sequence length, precision, optimizer, dropout,
    MLM head on masked positions only). Its `batch` and `micro_batches` are a template that
    each layout overrides: a layout runs `Layout.micro_batches` micro-batches of
    global_batch / (dp x micro-batches) sequences per replica (`run_for`). Recomputation
    belongs to the layout as well (`Layout.checkpoint`), so `run.checkpointing` must be off.
    Hashable: it keys the compute-table cache."""

    model: ModelConfig
    """The encoder."""
    run: RunConfig
    """Run settings; batch and micro_batches are overridden per layout (see above)."""
    global_batch: int
    """Sequences per optimizer step, over all replicas and micro-batches."""

    def __post_init__(self) -> None:
        if not isinstance(self.model, ModelConfig):
            raise BertscopeError(f"model must be a ModelConfig, got {self.model!r}")
        if not isinstance(self.run, RunConfig):
            raise BertscopeError(f"run must be a RunConfig, got {self.run!r}")
        check_positive_ints(self, ("global_batch",))
        if self.run.checkpointing:
            raise BertscopeError("recomputation is part of the layout: set Layout.checkpoint "
                                 "(selective or full) and leave run.checkpointing off")
        self.run.check(self.model)

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
    def tokens(self) -> int:
        """Tokens per optimizer step."""
        return self.global_batch * self.run.seq

    def run_for(self, micro_batch: int) -> RunConfig:
        """The run settings of one micro-batch of `micro_batch` sequences: `run` with that
        batch and a single micro-batch."""
        return replace(self.run, batch=int(micro_batch), micro_batches=1)


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


def check_layout(layout: Layout, workload: Workload, cluster: Cluster) -> None:
    """Raise `BertscopeError` when `layout` cannot run `workload` on `cluster`."""
    m = workload.model
    if layout.devices != cluster.devices:
        raise BertscopeError(f"dp x tp x pp = {layout.dp} x {layout.tp} x {layout.pp} = "
                             f"{layout.devices}, but the cluster has {cluster.devices} devices")
    per_step = layout.dp * layout.micro_batches
    if workload.global_batch % per_step:
        raise BertscopeError(f"global batch {workload.global_batch} is not divisible by dp x "
                             f"micro-batches = {per_step}")
    for what, size in (("heads", m.heads), ("intermediate size", m.intermediate)):
        if size % layout.tp:
            raise BertscopeError(f"tp {layout.tp} does not divide {m.name}'s {size} {what}")
    chunks = layout.pp * layout.virtual_stages
    if stack_layers(m) % chunks:
        raise BertscopeError(f"{stack_layers(m)} layers do not split into pp x virtual stages = "
                             f"{chunks} equal stages")
    if layout.schedule is Schedule.INTERLEAVED and layout.micro_batches % layout.pp:
        raise BertscopeError(f"the interleaved schedule needs micro-batches "
                             f"({layout.micro_batches}) to be a multiple of pp ({layout.pp})")


__all__ = ["Cluster", "Layout", "Workload", "check_layout", "zero_stage"]
