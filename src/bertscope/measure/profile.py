"""Profile real pretraining iterations and break them down in the op-table taxonomy.

    result = profile(get_model("bert-base"), RunConfig(batch=4, seq=128), iters=3)
    result.table.by_category()        # measured time, share, FLOPs per category
    result.comparison()               # measured vs analytic FLOPs, achieved FLOP/s and B/s

Warm-up iterations run unprofiled; the measured ones run under torch.profiler with module
scopes (see `attribution.py`). On a CPU keeping freed memory, profiled iterations that still
fault in fresh pages (the profiler's first captures grow the heap) are thrown away first
(`MAX_SETTLING`, `allocator.settled`); meta records how many ("settling_iterations") and the
minor page faults of each measured iteration ("page_faults"). The whole run is a measuring
loop of the stop protocol (`bertscope.stop`): a stop request (SIGINT or SIGTERM under the
CLI; Ctrl-C in a program) ends it after the iteration in progress; the measured iterations
that completed make a valid result marked `partial`, and with none (a stop during warm-up or
settling) it raises `Interrupted`.

`bertscope.measure.ddp_worker` runs the same loop on every rank of a DistributedDataParallel
job: `profile(..., wrap=DDP, data_seed=..., analyze=...)` wraps the model, gives each rank its
own batches, and adds the capture's communication facts to the result's meta.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from bertscope.analytic import build
from bertscope.analytic.memory import MemoryEstimate
from bertscope.config import (
    Attention,
    Checkpoint,
    Family,
    ModelConfig,
    Precision,
    Recipe,
    RunConfig,
    WeightCast,
)
from bertscope.errors import BertscopeError, parse_enum
from bertscope.families import resolve
from bertscope.io import atomic_path, whole_json, write_or_rescue
from bertscope.job import Job
from bertscope.measure.allocator import (
    HostAllocator,
    keep_freed_memory,
    minor_faults,
    release_freed_memory,
    settling,
)
from bertscope.measure.allocator import host_allocator as current_allocator
from bertscope.measure.attribution import ITER, PHASE, Attributor, ScopeHooks
from bertscope.measure.hf import build_hf_model, hf_layers, hf_sublayer
from bertscope.measure.host_load import cpu_times, cpus, load_average, steal_share
from bertscope.measure.lamb import make_optimizer
from bertscope.measure.quiet import QuietProfiler
from bertscope.optable import Extra, OpTable, ProfileFacts, Provenance
from bertscope.stop import STOP, Interrupted
from bertscope.taxonomy import Classifier, Phase, Sublayer
from bertscope.trace.attribute import Statistic, between_ops, iteration_time

if TYPE_CHECKING:
    import pandas as pd

Progress = Callable[[str, int, int], None]
"""progress(stage, done, total): stage is "warmup", "settle" (a profiled iteration thrown
away: total is the most there can be) or "measure"."""

MAX_SETTLING = 4
"""Most profiled settling iterations before the measured ones (a 2-micro-batch bert-mini
run settles in 2 on the dev VM)."""
Wrap = Callable[[nn.Module], nn.Module]
"""Wraps the built model for training (e.g. in DistributedDataParallel); the optimizer and
the scope hooks stay on the inner model."""
Analyze = Callable[[Any, int], dict[str, Any]]
"""analyze(events, completed) -> meta entries the result carries (as an `Extra` record,
written as they are), from the capture's events and the number of completed measured
iterations."""


@dataclass
class ProfileResult:
    """A measured breakdown: the measured op table (carrying the run's `ProfileFacts`) and
    the analytic one."""

    table: OpTable
    analytic: OpTable

    @property
    def facts(self) -> ProfileFacts:
        """What the run measured beside its rows (iteration times, device, health)."""
        return ProfileFacts.of(self.table)

    @property
    def unattributed_share(self) -> float:
        """Share of measured op time that no layer/sublayer claimed."""
        return float(self.facts.unattributed_share or 0.0)

    def comparison(self) -> pd.DataFrame:
        """Per category: measured time and share, measured vs analytic FLOPs, achieved
        FLOP/s, and bytes/s (analytic bytes over measured time; CPUs count no bytes)."""
        d = self.table.df
        a = self.analytic.df
        m = d.groupby("category")[["time_s", "flops"]].sum().rename(
            columns={"flops": "flops_measured"})
        an = a.groupby("category")[["flops", "bytes_read", "bytes_written"]].sum().rename(
            columns={"flops": "flops_analytic"})
        out = m.join(an, how="outer").fillna(0.0)
        total = out["time_s"].sum()
        out["time_share"] = out["time_s"] / total if total else 0.0
        t = out["time_s"].where(out["time_s"] > 0)
        out["flops_per_s"] = out["flops_measured"] / t
        out["bytes_per_s"] = (out["bytes_read"] + out["bytes_written"]) / t
        return out.drop(columns=["bytes_read", "bytes_written"]).sort_values(
            "time_s", ascending=False)

    def write_json(self, path: str | Path) -> Path:
        """Write the result (meta, measured rows, comparison) atomically as JSON; if `path`
        cannot be written, the result goes to a rescue file and the one-line error says where
        (a finished measurement is never lost)."""
        rows = json.loads(self.table.df.to_json(orient="records"))
        comp = json.loads(self.comparison().reset_index().to_json(orient="records"))
        doc = {"meta": _strict(self.table.export_meta()), "rows": rows, "comparison": comp}
        return write_or_rescue(path, json.dumps(doc, indent=1, default=str,
                                                allow_nan=False).encode())


def _strict(obj: Any) -> Any:
    """`obj` with NaN and infinities as None, so the JSON written is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_strict(v) for v in obj]
    return obj


def available_memory(device: torch.device) -> int | None:
    """Free memory on `device` in bytes (None when it cannot be read)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def check_memory(analytic: OpTable, device: torch.device) -> None:
    """Raise a clear error when the analytic peak estimate exceeds free memory."""
    free = available_memory(device)
    mem = MemoryEstimate.of(analytic)
    if free is not None and mem.peak > free:
        gib = 2**30
        seg = (f", segment memory {mem.segment_memory / gib:.1f} GiB" if mem.segment_memory
               else "")
        raise BertscopeError(
            f"this run needs ~{mem.peak / gib:.1f} GiB (analytic estimate: weights+grads+"
            f"optimizer {mem.static / gib:.1f} GiB, activations {mem.activations / gib:.1f}"
            f" GiB{seg}) but {device.type} has {free / gib:.1f} GiB free; lower --batch or --seq, "
            f"or add --checkpoint full")


@contextlib.contextmanager
def _phase(hooks: ScopeHooks, phase: Phase) -> Iterator[None]:
    hooks.set_phase(phase)
    with torch.autograd.profiler.record_function(f"{PHASE}{phase.value}"):
        yield


class _Trainer:
    """One model + optimizer + data: runs training iterations with phase scopes."""

    def __init__(self, m: ModelConfig, run: RunConfig, device: torch.device, *, hf: bool,
                 seed: int, wrap: Wrap | None = None, data_seed: int | None = None) -> None:
        torch.manual_seed(seed)
        self.run, self.device, self.hf, self.family = run, device, hf, m.family
        fam = m.family.spec
        if hf:
            self.model: nn.Module = build_hf_model(m, run).to(device)
            sublayer_of, layers = hf_sublayer(m), hf_layers(m, self.model)
        else:
            self.model = resolve(fam.reference)(m, run).to(device)
            sublayer_of = resolve(fam.reference_sublayer)
            layer_type = resolve(fam.reference_layer)
            layers = [mod for mod in self.model.modules() if isinstance(mod, layer_type)]
        self.model.train()
        self.net = wrap(self.model) if wrap is not None else self.model  # what runs forward
        self.hooks = ScopeHooks(self.model, sublayer_of, layers, m.stack_layers)
        self.opt = make_optimizer(run.optimizer, self.model.parameters())
        batch = resolve(fam.batch)
        self.batches: list[dict[str, Any]] = [
            batch(m, run, (seed if data_seed is None else data_seed) + i, device, hf)
            for i in range(run.micro_batches)]
        self.scaler = (torch.amp.GradScaler(device.type)
                       if run.precision is Precision.FP16 else None)
        self.dtype = {Precision.FP16: torch.float16, Precision.BF16: torch.bfloat16}.get(
            run.precision)
        self.tf32 = run.precision is Precision.TF32

    def step(self) -> None:
        """One optimizer step: forward and backward per micro-batch, then the update.
        A DDP-wrapped model synchronizes gradients in the last micro-batch only (no_sync).
        A tf32 run turns on TF32 matmuls for the step and restores the flags after it."""
        if self.tf32:
            cuda, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
            before = (cuda.allow_tf32, cudnn.allow_tf32)
            cuda.allow_tf32 = cudnn.allow_tf32 = True
            try:
                self._step()
            finally:
                cuda.allow_tf32, cudnn.allow_tf32 = before
        else:
            self._step()

    def _step(self) -> None:
        last = len(self.batches) - 1
        for i, b in enumerate(self.batches):
            with (self.net.no_sync() if i < last and hasattr(self.net, "no_sync")
                  else contextlib.nullcontext()):
                with _phase(self.hooks, Phase.FORWARD), torch.autocast(
                        self.device.type, dtype=self.dtype, enabled=self.dtype is not None):
                    loss = self._loss(self.net(**b))
                    if len(self.batches) > 1:
                        loss = loss / len(self.batches)
                with _phase(self.hooks, Phase.BACKWARD):
                    (self.scaler.scale(loss) if self.scaler else loss).backward()
                del loss  # nothing of a micro-batch outlives its backward
        with _phase(self.hooks, Phase.OPTIMIZER):
            if self.scaler:
                self.scaler.step(self.opt)
                self.scaler.update()
            else:
                self.opt.step()
            self.opt.zero_grad(set_to_none=True)

    @staticmethod
    def _loss(out: Any) -> torch.Tensor:
        """The loss of a forward pass's output, which is dropped here: the output also holds
        the logits (batch x seq x vocabulary, the largest activation of a pretraining step;
        59.6 MiB for bert-mini at 4x128: 4 x 128 x 30,522 x 4 bytes), which backward does not
        need, so they are freed before backward runs instead of after it
        (`tests/integration/test_profile_memory.py`)."""
        return out.loss if hasattr(out, "loss") else out[0]

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def drop_garbage() -> None:
    """Free the cyclic garbage now, between iterations.

    A walked capture's events (torch's FunctionEvent tree: parents and children refer to
    each other) are freed only by Python's cycle collector, which runs whenever its
    allocation counters say: often in the middle of the next iteration, after that
    iteration's tensors were laid out around the ~26 MiB of event memory (bert-mini:16:128)
    still held. Where freed memory is kept (`allocator`), every such iteration moved the
    largest activations to fresh pages and the process grew by up to ~240 MiB per
    profiled iteration; collected here, each profiled iteration reuses the pages of the
    one before (bench/results/bench_study_cost.txt)."""
    gc.collect()


def resolve_device(name: str) -> torch.device:
    """"cpu", "cuda", "cuda:N" or "auto" (CUDA when present)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise BertscopeError(f"unknown device {name!r}; use cpu, cuda or auto") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise BertscopeError("--measure-on cuda: no CUDA device here; use --measure-on cpu")
    if dev.type not in ("cpu", "cuda"):
        raise BertscopeError(f"device {name!r} is not supported; use cpu or cuda")
    return dev


@dataclass
class _Capture:
    """What a profiler session recorded: the attributor its kept iterations were walked
    into, their times, walked time (us) and minor page faults, and the settling iterations
    thrown away before them (walked into `scratch`, so they allocate as kept ones do)."""

    attr: Attributor
    scratch: Attributor
    prof: Any = None
    walked_us: list[float] = field(default_factory=list)
    done: list[float] = field(default_factory=list)
    faults: list[int] = field(default_factory=list)
    settling: int = 0
    partial: bool = False
    pending: Attributor | None = None
    """Where the capture ending next is walked (None: a capture with no iteration)."""

    def walk(self, p: Any) -> None:
        """Walk a finished capture's iteration into the attributor it is pending for."""
        attr, self.pending = self.pending, None
        if attr is None:
            return
        attr.new_iteration()
        attr.end_tree()
        took = walk_capture(attr, p.events(), len(self.done) + (attr is self.scratch))
        attr.new_iteration()  # forget the forward events it keeps: the capture can be freed
        if attr is self.attr:
            self.walked_us.append(took)


@dataclass
class _Session:
    """Profiled iterations of a trainer under torch.profiler, one capture per iteration
    (or one for all: `whole`)."""

    trainer: Any
    activities: list[Any]
    device_time: bool
    tell: Progress

    def capture(self, iters: int, *, whole: bool, settle: int) -> _Capture:
        """Run and walk `iters` kept profiled iterations, after at most `settle` thrown
        away while they fault in fresh pages (Ctrl-C keeps those completed)."""
        cap = _Capture(attr=Attributor(Classifier(), use_device_time=self.device_time),
                       scratch=Attributor(Classifier(), use_device_time=self.device_time))
        settle = 0 if whole else settle  # a whole-run capture keeps every iteration
        with warnings.catch_warnings():
            # a capture per iteration has no warm-up of its own and clears its events as it
            # ends
            warnings.filterwarnings("ignore", message=".*(warmup|clears events).*")
            cap.prof = torch.profiler.profile(
                activities=self.activities, record_shapes=True, with_flops=True,
                schedule=None if whole else torch.profiler.schedule(
                    wait=0, warmup=0, active=1, repeat=iters + settle),
                on_trace_ready=None if whole else cap.walk)
            quiet = QuietProfiler(cap.prof)
            try:
                with quiet:
                    while len(cap.done) < iters:
                        f0, t0 = minor_faults(), time.perf_counter()
                        with torch.autograd.profiler.record_function(f"{ITER}{len(cap.done)}"):
                            self.trainer.step()
                            self.trainer.sync()
                        took = time.perf_counter() - t0
                        f1 = minor_faults()
                        faults = None if f0 is None or f1 is None else f1 - f0
                        if cap.settling < settle and settling(faults):
                            cap.settling += 1
                            cap.pending = cap.scratch
                            self.tell("settle", cap.settling, settle)
                        else:
                            cap.done.append(took)
                            cap.faults.extend([] if faults is None else [faults])
                            cap.pending = cap.attr
                            self.tell("measure", len(cap.done), iters)
                        if not whole:
                            quiet.step()
                            drop_garbage()  # the capture just walked: see `drop_garbage`
                        if STOP and len(cap.done) < iters:  # the stop protocol (`stop`)
                            cap.partial = True
                            break
            except KeyboardInterrupt:  # a second signal, or Ctrl-C without the CLI: the
                cap.partial = True     # iteration in progress is abandoned
        if whole:
            cap.pending = cap.attr
            cap.walk(cap.prof)
        return cap


def refuse_unmeasured(run: RunConfig) -> None:
    """Refuse the run settings the profiler does not measure, in one line: selective
    recomputation and kernel fusion (the reference models run neither; ops, predict, sweep
    and distributed model them)."""
    if run.recipe is not Recipe.EAGER:
        raise BertscopeError(f"--recipe {run.recipe.value} is not measured: the reference "
                             f"models are the eager recipe (Hugging Face-style eager PyTorch "
                             f"with autocast); ops, predict, sweep and distributed model it")
    if run.checkpoint is Checkpoint.SELECTIVE:
        raise BertscopeError("--checkpoint selective is not measured: the reference models "
                             "recompute none or full; ops, predict, sweep and distributed "
                             "model it")
    if run.fusion:
        raise BertscopeError("--fusion is not measured: the reference models run unfused "
                             "kernels; ops, predict, sweep and distributed model it")
    if run.seq_lengths:
        raise BertscopeError("--seq-lengths is not measured: the reference models train on "
                             "full batch x seq rows; ops, predict, sweep and distributed "
                             "model real lengths (leave --seq-lengths out to profile)")
    if run.precision.mixed and run.weight_cast is not WeightCast.PER_MICRO_BATCH:
        raise BertscopeError(f"--weight-cast {run.weight_cast.value} is not measured: the "
                             f"reference models train with torch.autocast (per_micro_batch); "
                             f"ops, predict, sweep and distributed model it")
    if run.vocab_multiple != 1:
        raise BertscopeError(f"--vocab-multiple {run.vocab_multiple} is not measured: the "
                             f"reference models keep the model's vocabulary; ops, predict, "
                             f"sweep and distributed model it (--vocab-multiple 1)")
    if run.fused_accumulation:
        raise BertscopeError("--fused-accumulation is not measured: the reference models "
                             "accumulate gradients with autograd; ops, predict, sweep and "
                             "distributed model it")


def profile(
    m: ModelConfig,
    run: RunConfig,
    *,
    iters: int = 3,
    warmup: int = 1,
    device: str = "cpu",
    hf: bool = False,
    trace_out: str | Path | None = None,
    seed: int = 0,
    progress: Progress | None = None,
    wrap: Wrap | None = None,
    data_seed: int | None = None,
    analyze: Analyze | None = None,
    statistic: Statistic | str = Statistic.MEAN,
    host_allocator: HostAllocator | str = HostAllocator.KEEP,
) -> ProfileResult:
    """Run `warmup` + `iters` real training iterations and attribute every measured op.

    Each row's time and the iteration time are the `statistic` (mean, median or min) over
    the measured iterations; median and min resist slow iterations on a shared machine.
    On a CPU, `host_allocator` "keep" first tunes glibc to keep freed memory, so ops are not
    charged for page faults (see `bertscope.measure.allocator`; process-wide).

    `wrap` wraps the model (DistributedDataParallel), `data_seed` seeds the synthetic batches
    (default: `seed`), `analyze` adds its findings on the capture to the meta (see `Wrap`,
    `Analyze`)."""
    if iters < 1 or warmup < 0:
        raise BertscopeError(f"need --iters >= 1 and --warmup >= 0, got {iters} and {warmup}")
    statistic = parse_enum(Statistic, statistic, "statistic")
    host_allocator = parse_enum(HostAllocator, host_allocator, "host allocator")
    Job(model=m, run=run)  # the pair's one check: the sequence fits the positions
    refuse_unmeasured(run)
    if run.attention is Attention.FUSED_SOFTMAX or (hf and run.attention is not
                                                     Attention.EAGER):
        raise BertscopeError(f"attention {run.attention.value} is not measured"
                             f"{' with --hf' if hf else ''}: the reference models run eager "
                             f"or sdpa; ops, predict and sweep model it")
    if hf and m.family is Family.ALBERT and not m.share_layers:
        raise BertscopeError("Hugging Face ALBERT shares its layers; set share_layers")
    if run.precision is Precision.FP8:
        raise BertscopeError("--precision fp8 is not measured: the reference models have no "
                             "Transformer Engine FP8 GEMMs; ops, predict and sweep model it "
                             "(profile --precision bf16 instead)")
    dev = resolve_device(device)
    if run.precision is Precision.TF32 and dev.type != "cuda":
        raise BertscopeError(f"--precision tf32 runs fp32 matmuls on a GPU's TF32 tensor "
                             f"units; this device is {dev.type}: use --precision fp32")
    analytic = build(m, run)
    check_memory(analytic, dev)
    if host_allocator is HostAllocator.KEEP and dev.type == "cpu":
        keep_freed_memory()
    trainer = _Trainer(m, run, dev, hf=hf, seed=seed, wrap=wrap, data_seed=data_seed)
    tell = progress or (lambda *_: None)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if dev.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    # One capture per iteration, walked and dropped as soon as it ends: the profiler's
    # buffers are then reused by the next iteration instead of growing (~90,000 page faults
    # per bert-base iteration on a CPU, charged to whatever op was running). A trace file or
    # an `analyze` callback needs the whole run in one capture.
    whole = trace_out is not None or analyze is not None
    session = _Session(trainer, activities, dev.type == "cuda", tell)
    # profiled iterations thrown away while they fault in fresh pages: the profiler's buffers
    # grow the heap in its first captures and move tensors onto untouched pages (see
    # `allocator`); only where freed memory is kept (else every iteration faults)
    settle = MAX_SETTLING if current_allocator() is HostAllocator.KEEP else 0
    try:
        with STOP.graceful():  # warm-up, settling and measured iterations alike
            STOP.check()  # asked already (while the model was built): nothing to keep
            warm_times: list[float] = []  # unprofiled: each warm-up iteration to its end
            for i in range(warmup):
                start = time.perf_counter()
                trainer.step()
                trainer.sync()
                warm_times.append(time.perf_counter() - start)
                tell("warmup", i + 1, warmup)
                STOP.check()  # nothing measured yet: nothing to keep
            drop_garbage()  # building and warm-up's: none lands in the profiled iterations
            ticks = cpu_times()  # how busy the machine was while measuring (`host_load`)
            cap = session.capture(iters, whole=whole,
                                  settle=settle if dev.type == "cpu" else 0)
            busy = (load_average(), steal_share(ticks, cpu_times()))
    finally:
        trainer.hooks.remove()
    # measuring is over: the model, its optimizer state and the kept activation memory go
    # before the rows are built (pandas and the tables are imported and allocated on top of
    # what stays, not of the training iteration's peak)
    del trainer, session
    drop_garbage()
    release_freed_memory()
    prof, attr, done, partial = cap.prof, cap.attr, cap.done, cap.partial
    if not done:  # stopped while settling: no measured iteration to keep
        raise Interrupted()
    iter_time_us = sum(cap.walked_us)
    extra = analyze(prof.events(), len(done)) if analyze is not None else {}
    trace_error = None
    if trace_out is not None:
        try:
            _export_trace(prof, Path(trace_out))
        except BertscopeError as e:  # the measurement is kept; the caller says what failed
            trace_error = str(e)

    table = OpTable.from_ops(attr.ops(len(done), statistic),
                             (Provenance("profile", Provenance.of(analytic).params),),
                             job=analytic.job)
    d = table.df
    op_time = float(d["time_s"].sum())
    unattributed = float(d.loc[(d["sublayer"] == Sublayer.OTHER) & ~d["phase"].isin(
        [Phase.OPTIMIZER, Phase.COMMUNICATION]), "time_s"].sum())
    row_times = attr.per_iteration(len(done))
    gaps = between_ops(done, row_times)
    iteration_s = iteration_time(statistic, done, op_time, gaps)
    facts = ProfileFacts(
        device=torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        torch=torch.__version__,
        threads=torch.get_num_threads(),
        hf=hf,
        iters=len(done),
        warmup=warmup,
        settling_iterations=cap.settling,
        page_faults=tuple(cap.faults),
        partial=partial,
        trace_error=trace_error or None,
        statistic=statistic.value,
        host_allocator=current_allocator().value,  # process-wide, once set
        iteration_s=iteration_s,
        iteration_times_s=tuple(done),
        row_times_s=tuple(tuple(r) for r in row_times),  # per row (table order), per iteration
        gap_times_s=tuple(gaps),  # per iteration: its time minus its rows'
        tokens_per_s=run.tokens / iteration_s,
        op_time_s=op_time,
        unattributed_s=unattributed,
        unattributed_share=unattributed / op_time if op_time else 0.0,
        # profiled iteration time not covered by any op: Python, hooks, the profiler itself
        framework_share=max(0.0, 1 - op_time / (iter_time_us * 1e-6 / len(done)))
        if iter_time_us else 0.0,
        # the first warm-up iteration allocates, autotunes and compiles: left out
        unprofiled_iteration_s=statistic.of(warm_times[1:]) if warmup > 1 else None,
        unprofiled_iteration_times_s=tuple(warm_times[1:]) if warmup > 1 else None,
        load_average=busy[0], steal_share=busy[1], cpus=cpus())
    table = table.with_records(facts, *((Extra(extra),) if extra else ()))
    return ProfileResult(table=table, analytic=analytic)


_STEP = "ProfilerStep"


def walk_capture(attr: Attributor, events: Any, completed: int) -> float:
    """Walk the first `completed` iterations of a capture into `attr`, plus the roots of
    other threads that start inside one of them (CUDA runs backward on its own thread);
    returns the iterations' total time (us). Only host (CPU) events are roots: a CUDA
    capture lists each kernel as an event of its own without a CPU parent, and walking those
    too counted every kernel a second time, as an unattributed backward row (the H200 runs of
    bench/gpu_checks.sh: op time 1.55x the trace's busy time, 35% "unattributed")."""
    roots = [e for e in events
             if e.cpu_parent is None and e.device_type == torch.autograd.DeviceType.CPU]
    # a scheduled profiler wraps each step in "ProfilerStep*" (#N in traces): look inside
    roots = [c for e in roots for c in (e.cpu_children if e.name.startswith(_STEP) else [e])]
    tops = sorted(roots, key=lambda e: e.time_range.start)
    iters = {id(e): e for e in tops
             if e.name.startswith(ITER) and int(e.name[len(ITER):]) < completed}
    windows = [(e.time_range.start, e.time_range.end, int(e.name[len(ITER):]))
               for e in iters.values()]
    main_threads = {e.thread for e in iters.values()}
    total = 0.0
    for evt in tops:  # time order: an iteration's forward before its backward nodes
        if id(evt) in iters:
            attr.iteration = int(evt.name[len(ITER):])
            attr.walk(evt)
            total += attr.time_us(evt)
        elif evt.thread not in main_threads:
            inside = [i for lo, hi, i in windows if lo <= evt.time_range.start < hi]
            if inside:
                attr.iteration = inside[0]
                attr.walk(evt, Phase.BACKWARD)
    return total


def _export_trace(prof: torch.profiler.profile, path: Path) -> None:
    with atomic_path(path, check=whole_json) as tmp:  # a full disk is an error, not 0 bytes
        prof.export_chrome_trace(tmp)


__all__ = ["Analyze", "ProfileResult", "Wrap", "available_memory", "check_memory", "profile",
           "resolve_device", "walk_capture"]
