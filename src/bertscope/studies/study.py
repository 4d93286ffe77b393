"""`bertscope study`: the paper's characterization in one run, written as one folder.

    result = study(StudyConfig(output="study"))     # report.html, figures/, tables/, study.json

The study ("Demystifying BERT: Implications for Accelerator Design", Pati et al., IISWC 2022)
measures BERT pretraining on the local device and projects it on catalog accelerators:
where the time goes, compute- vs memory-bound work, GEMM heterogeneity, the optimizer,
precision, scale, checkpointing, distributed training, what it all implies for hardware, and
the paper's software stack (eager PyTorch) beside fused ones (the `fused` and `megatron`
training recipes).
Sections live in the `sections` package, one module each; every finding is computed from their
tables. The folder is written beside its destination and renamed into place when complete,
so a failed or interrupted study leaves nothing half-written: a stop request
(`bertscope.stop`) during the measured part ends the study after the iteration in progress
with `Interrupted` (exit 130), never a study finished as if nothing was asked.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bertscope.config import ModelConfig, Precision, from_dict
from bertscope.errors import BertscopeError, as_values, parse_enum, shown
from bertscope.io import usual_mode
from bertscope.perf import DeviceProfile, load_profile
from bertscope.presets import get_model
from bertscope.report.table_notes import factor_notes
from bertscope.requirements import require
from bertscope.stop import STOP
from bertscope.studies import sections as s
from bertscope.studies.fresh import measure_fresh
from bertscope.studies.measured import load_result

DEVICES = ("v100", "a100", "h100", "b200", "mi250x", "mi300x", "tpu-v3", "tpu-v4", "tpu-v5p")
"""The catalog devices a study projects on by default."""
MODELS = ("bert-base", "bert-large")
REPORT_LIBRARIES = ("matplotlib", "pyarrow")
"""What the report folder's writer needs (figures: matplotlib; tables: Parquet through
pyarrow): dependencies of the package, checked before any work all the same."""
PHASES = (s.PhaseSpec("phase 1", 128, 32), s.PhaseSpec("phase 2", 512, 8))
"""BERT pretraining's two phases (Devlin et al. 2019: 90% of steps at seq 128, the rest at
512), with per-device micro-batches that fit a 16 GB V100 for bert-large in bf16."""

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, kw_only=True)
class StudyConfig:
    """What a study covers; checked on construction."""

    output: str | Path = "study"
    models: tuple[str, ...] = MODELS
    devices: tuple[str, ...] = DEVICES
    precisions: tuple[str, ...] = ("fp32", "bf16")
    quick: bool = False
    measure: bool = True
    from_trace: str | Path | None = None

    def __post_init__(self) -> None:
        """Each list takes one value or several (a string is one value: `precisions="fp32"`);
        every value, flag and path is checked here, before any work."""
        for name in ("models", "devices", "precisions"):
            values = as_values(getattr(self, name), name)
            if not values:
                raise BertscopeError(f"--{name}: give at least one")
            bad = [v for v in values if not isinstance(v, str | os.PathLike)]
            if bad:
                raise BertscopeError(f"{name}: expected names or paths, got "
                                     f"{type(bad[0]).__name__} {shown(bad[0])}")
            object.__setattr__(self, name, tuple(os.fspath(v) for v in values))
        for p in self.precisions:
            parse_enum(Precision, p, "precision")
        for name in ("quick", "measure"):
            if not isinstance(getattr(self, name), bool):
                raise BertscopeError(f"{name} must be true or false (a bool), got "
                                     f"{shown(getattr(self, name))}")
        for name in ("output", "from_trace"):
            value = getattr(self, name)
            optional = value is None and name != "output"
            if not (optional or isinstance(value, str | os.PathLike)):
                raise BertscopeError(f"{name}: expected a path, got {type(value).__name__} "
                                     f"{shown(value)}")


@dataclass
class StudyResult:
    """A finished study: its folder and what it found."""

    folder: Path
    sections: list[s.Section]
    settings: dict[str, Any]
    seconds: float
    files: list[str] = field(default_factory=list)


def _check_output(path: Path) -> None:
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise BertscopeError(f"{path}: exists and is not an empty folder; give a new --output "
                             f"folder (a study never overwrites)")
    parent = path.resolve().parent
    if not parent.is_dir():
        raise BertscopeError(f"{path}: its folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise BertscopeError(f"{path}: cannot write in {parent}")


def _measure(cfg: StudyConfig, models: list[ModelConfig], tell: Progress
             ) -> list[s.MeasuredPart]:
    """The measured part: a profile on this machine's CPU (or GPU), or an ingested trace."""
    if cfg.from_trace is not None:
        from bertscope.trace import read_trace

        table = read_trace(cfg.from_trace)
        return [s.MeasuredPart(label=f"trace {Path(cfg.from_trace).name}", model="trace",
                               phase="trace", precision="trace", table=table,
                               note=f"measured part read from {cfg.from_trace}")]
    if not cfg.measure:
        return []
    # Profiled in a fresh process (`studies.fresh`): its heap, kept whole while it measures
    # (`allocator.keep_freed_memory`), goes with it, and this process never loads torch.
    # bert-small with the MLM head on the masked positions only (NVIDIA's BERT recipe) fits
    # in 1.5 GiB with LAMB's state; bert-base's weights, gradients and LAMB moments alone are
    # 110 M x 16 B = 1.8 GB in fp32.
    name, iters, spec = (("bert-mini", 1, "bert-mini:4:128:lamb") if cfg.quick else
                         ("bert-small", 2, "bert-small:4:128:lamb:masked"))
    tell("measure", 0, 1)
    with tempfile.TemporaryDirectory(prefix="bertscope-study-") as tmp:
        result = load_result(measure_fresh(spec, Path(tmp) / "measured.json",
                                           iters=iters, warmup=1, device="auto",
                                           statistic="mean"))
    tell("measure", 1, 1)
    kind = "cpu" if result.facts.device in (None, "cpu") else "cuda"
    why = (f"--quick: {name}, batch 4 x seq 128, one iteration" if cfg.quick
           else f"{name}, batch 4 x seq 128, MLM head on the masked tokens, {iters} "
                f"iterations")
    return [s.MeasuredPart(label=f"this machine ({kind})", model=name, phase="seq 128",
                           precision="fp32", table=result.table,
                           note=f"measured with torch.profiler on {kind} in a fresh process: "
                                f"{why}",
                           iteration_s=result.facts.iteration_s)]


def study(cfg: StudyConfig | None = None, progress: Progress | None = None,
          **settings: Any) -> StudyResult:
    """Run the study and write its folder (see the module docstring): `cfg`, or the fields
    of a `StudyConfig` as keywords (`study(output="study", quick=True)`)."""
    if cfg is None:
        cfg = from_dict(StudyConfig, settings, "study")
    elif settings:
        raise BertscopeError("give a StudyConfig or keyword settings, not both")
    elif not isinstance(cfg, StudyConfig):
        raise BertscopeError(f"study: expected a StudyConfig (or keyword settings), got "
                             f"{type(cfg).__name__} {shown(cfg)}")
    if progress is not None and not callable(progress):
        raise BertscopeError(f"progress must be a callable (stage, done, total) or None, "
                             f"got {shown(progress)}")
    from bertscope.report.study_html import write_report
    from bertscope.sweep import sweep

    t0 = time.perf_counter()
    out = Path(cfg.output)
    _check_output(out)
    require("the study's report", *REPORT_LIBRARIES)
    if cfg.measure and cfg.from_trace is None:
        require("the study's measured part", "torch", otherwise="or pass --no-measure")
    tell = progress or (lambda *_: None)
    models = [get_model(m) for m in cfg.models]
    devices: list[DeviceProfile] = [load_profile(d) for d in cfg.devices]
    precisions = [parse_enum(Precision, p, "precision") for p in cfg.precisions]
    s.Ctx(models=models, devices=devices, precisions=precisions,
          phases=list(PHASES)).check()  # every device and column runs: before any work
    parent = out.resolve().parent
    try:  # the folder is built here and renamed into place when complete
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    except OSError as e:
        raise BertscopeError(f"{out}: cannot create a folder in {parent} "
                             f"({e.strerror or e})") from None
    try:
        measured = _measure(cfg, models, tell)
        STOP.check()  # asked to stop while measuring (even in its last iteration): no study
        ctx = s.Ctx(models=models, devices=devices, precisions=precisions,
                     phases=list(PHASES), measured=measured)
        steps: Sequence[Callable[[s.Ctx], s.Section]] = (
            s.where_time_goes, s.bound_share, s.gemm_shapes,
            lambda c: s.optimizer_share(c, sweep), s.mixed_precision,
            lambda c: s.scaling(c, sweep), lambda c: s.checkpointing(c, sweep),
            s.distributed, lambda c: s.implications(c, sweep), s.recipe_stacks)
        sections = []
        for i, step in enumerate(steps):
            STOP.check()
            sections.append(step(ctx))
            tell("sections", i + 1, len(steps))
        settings = _settings(cfg, ctx, measured, time.perf_counter() - t0)
        sections.append(s.method(ctx, measured, settings))
        files = write_report(tmp, sections, settings, tell)
        doc = {"settings": settings, "sections": [_section_doc(s) for s in sections]}
        (tmp / "study.json").write_text(json.dumps(doc, indent=1, default=str))
        files.append("study.json")
        if out.exists():
            out.rmdir()  # empty (checked above)
        usual_mode(tmp)  # mkdtemp made it private (0700); a study folder is an ordinary one
        os.replace(tmp, out)
    except OSError as e:  # a full disk, a folder that appeared meanwhile: nothing is left
        shutil.rmtree(tmp, ignore_errors=True)
        raise BertscopeError(f"{out}: could not write the study ({e.strerror or e}); "
                             f"nothing was kept") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return StudyResult(folder=out, sections=sections, settings=settings,
                       seconds=time.perf_counter() - t0, files=files)


def _section_doc(sec: s.Section) -> dict[str, Any]:
    """A section as study.json holds it: its tables as records, with the long text a column
    repeats said once per table in `table_notes` (as the CSVs and report.html write them)."""
    noted = {k: factor_notes(v) for k, v in sec.tables.items()}
    return {"key": sec.key, "title": sec.title, "findings": sec.findings, "notes": sec.notes,
            "tables": {k: json.loads(v.table.to_json(orient="records"))
                       for k, v in noted.items()},
            "table_notes": {k: v.notes for k, v in noted.items() if v.notes}}


def _settings(cfg: StudyConfig, ctx: s.Ctx, measured: list[s.MeasuredPart], seconds: float
              ) -> dict[str, Any]:
    import bertscope

    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        torch_version = None
    return {"config": {k: (list(v) if isinstance(v, tuple) else
                           (str(v) if isinstance(v, Path) else v))
                       for k, v in asdict(cfg).items()},
            "phases": [asdict(p) for p in PHASES], "optimizer": ctx.optimizer.value,
            "devices": [{"name": d.device.name, "sku": d.device.sku, "sources": d.sources}
                        for d in ctx.devices],
            "bertscope": bertscope.__version__, "torch": torch_version,
            "python": platform.python_version(), "machine": platform.machine(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "measured": [m.note for m in measured],
            "seconds": seconds}


__all__ = ["DEVICES", "MODELS", "PHASES", "StudyConfig", "StudyResult", "study"]
