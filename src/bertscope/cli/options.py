"""Options the commands share, declared once: the model argument, the run settings (one
`RunConfig` built by `job_command`), and the device and output options.

`@job_command(...)` turns a command that takes `job: Job` into one that takes the model argument
and the named run options (`--batch`, `--seq`, `--precision`, ...); the wrapper builds and checks
the (model, run) pair once and hands it over typed. Adding a run setting is a field in
`config.RunConfig` and a row in `RUN_OPTIONS` here; every command that lists it gets it.

One vocabulary across commands: `--micro-batches` (distributed's `--microbatches` is a hidden
alias for one release), `--checkpoint none|selective|full` (`--checkpointing/--no-checkpointing`
is a hidden alias of `--checkpoint full/none`), precision fp32 by default everywhere.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from bertscope.config import Attention, Checkpoint, Optimizer, Precision, RunConfig, get_model
from bertscope.errors import BertscopeError
from bertscope.io import Format, check_output, output_format
from bertscope.job import Job

F = TypeVar("F", bound=Callable[..., Any])

ModelArg = Annotated[str, typer.Argument(help="Preset name or path to a HF config.json.")]
DeviceOpt = Annotated[str, typer.Option(
    help="Catalog device (see `bertscope devices`), a .toml/.json device file, or a profile "
         "JSON with calibrated efficiency models.")]
SeqOpt = Annotated[int, typer.Option("--seq", help="Tokens per sequence.")]
PrecisionOpt = Annotated[Precision, typer.Option(
    "--precision", help="fp32; tf32 (fp32 with TF32 matmuls, NVIDIA); or mixed fp16/bf16 "
                        "(autocast, fp16 with loss scaling, when measured).")]
OptimizerOpt = Annotated[Optimizer, typer.Option(
    "--optimizer", help="Optimizer of the update step.")]
CheckpointOpt = Annotated[Checkpoint, typer.Option(
    "--checkpoint", help="Activation recomputation: none, selective (attention core; the "
                         "distributed model only) or full (each layer's forward rerun).")]
LayoutCheckpointOpt = Annotated[Checkpoint | None, typer.Option(
    "--checkpoint", help="Activation recomputation: none, selective or full (default: none; "
                         "searched with --search).")]
MicroBatchesOpt = Annotated[int, typer.Option(
    "--micro-batches", help="Gradient accumulation: micro-batches per optimizer step.")]
LayoutMicroBatchesOpt = Annotated[int | None, typer.Option(
    "--micro-batches", help="Micro-batches per step per replica (pipeline / gradient "
                            "accumulation; default 1, searched with --search).")]
MicroBatchesAlias = Annotated[int | None, typer.Option("--microbatches", hidden=True)]
TopOpt = Annotated[int, typer.Option(help="Show the N largest entries.")]


@dataclass(frozen=True, slots=True)
class _RunOption:
    """One run setting on the command line: its `RunConfig` field, annotation and default."""

    annotation: Any
    default: Any


RUN_OPTIONS: dict[str, _RunOption] = {
    "batch": _RunOption(Annotated[int, typer.Option(
        "--batch", help="Sequences per micro-batch.")], 8),
    "seq": _RunOption(SeqOpt, 128),
    "precision": _RunOption(PrecisionOpt, Precision.FP32),
    "optimizer": _RunOption(OptimizerOpt, Optimizer.ADAM),
    "dropout": _RunOption(Annotated[bool, typer.Option(
        "--dropout/--no-dropout", help="Dropout layers on or off.")], True),
    "checkpoint": _RunOption(CheckpointOpt, Checkpoint.NONE),
    "micro_batches": _RunOption(MicroBatchesOpt, 1),
    "masked_lm_only": _RunOption(Annotated[bool, typer.Option(
        "--masked-lm-only/--no-masked-lm-only",
        help="MLM head on the 15% masked positions only (NVIDIA BERT).")], False),
    "attention": _RunOption(Annotated[Attention, typer.Option(
        "--attention", help="Attention core: eager kernels, one fused softmax, or sdpa "
                            "(one fused kernel, FlashAttention-style).")], Attention.EAGER),
    "decoder_seq": _RunOption(Annotated[int | None, typer.Option(
        "--decoder-seq", help="T5: target tokens per sequence, the decoder's length "
                              "(default: --seq).")], None),
}
"""Every run setting a command can take, in the order help lists them."""

_CHECKPOINTING_ALIAS = Annotated[bool | None, typer.Option(
    "--checkpointing/--no-checkpointing", hidden=True)]


def checkpointing(mode: Checkpoint) -> bool:
    """`RunConfig.checkpointing` for a `--checkpoint` mode: the op model and the profiler run
    none or full; selective is refused with a pointer to the distributed model."""
    if mode is Checkpoint.SELECTIVE:
        raise BertscopeError("--checkpoint selective is modelled by `bertscope distributed` "
                             "only; use --checkpoint none or full here")
    return mode is Checkpoint.FULL


def job_command(*names: str, **defaults: Any) -> Callable[[F], F]:
    """Decorate a command `f(job: Job, ...)`: its command line gains the model argument and
    the run options `names` (keys of `RUN_OPTIONS`; all of them when none are named), with
    `defaults` overriding `RunConfig`'s for this command; settings not offered take their
    default. The wrapper builds `Job(model=get_model(model), run=RunConfig(...))`, checked
    once, and calls `f(job=job, ...)` with the command's own options."""
    offered = names or tuple(RUN_OPTIONS)
    unknown = set(offered) - set(RUN_OPTIONS)
    if unknown:
        raise ValueError(f"unknown run options {sorted(unknown)}")

    def wrap(f: F) -> F:
        sig = inspect.signature(f, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != "job"]
        model = inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                  annotation=ModelArg)
        run = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                 annotation=RUN_OPTIONS[name].annotation,
                                 default=defaults.get(name, RUN_OPTIONS[name].default))
               for name in offered]
        if "checkpoint" in offered:
            run.append(inspect.Parameter("checkpointing", inspect.Parameter.KEYWORD_ONLY,
                                         annotation=_CHECKPOINTING_ALIAS, default=None))
        params = [model, *run, *[p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]]

        @functools.wraps(f)
        def command(**kw: Any) -> Any:
            settings = {name: kw.pop(name) for name in offered}
            alias = kw.pop("checkpointing", None)
            mode = settings.pop("checkpoint", defaults.get("checkpoint", Checkpoint.NONE))
            if alias is not None:
                mode = Checkpoint.FULL if alias else Checkpoint.NONE
            fixed = {k: v for k, v in defaults.items() if k not in offered
                     and k != "checkpoint"}
            run_config = RunConfig(**fixed, **settings, checkpointing=checkpointing(mode))
            job = Job(model=get_model(kw.pop("model")), run=run_config)
            return f(job=job, **kw)

        del command.__wrapped__  # typer must read the new signature, not f's
        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command  # type: ignore[return-value]

    return wrap


def need_torch(what: str) -> None:
    """Refuse a command that measures when PyTorch is not installed (without importing it:
    the CLI itself stays torch-free)."""
    if importlib.util.find_spec("torch") is None:
        raise BertscopeError(f"{what} needs PyTorch: pip install 'bertscope[torch]'")


def check_export(output: Path | None, fmt: Format | str | None = None) -> None:
    """Refuse an export path before work starts: its format (from `fmt` or the suffix) must
    be csv, json or parquet, and the place writable (`io.check_output`)."""
    if output is None:
        return
    output_format(output, fmt)
    check_output(output)


def check_top(top: int, least: int = 0) -> None:
    """Refuse a `--top` below `least` in one line."""
    if top < least:
        raise BertscopeError(f"--top must be >= {least}, got {top}")


def check_suffix(path: Path | None, suffixes: tuple[str, ...], what: str) -> None:
    """Refuse an output path whose suffix is not one of `suffixes` in one line."""
    if path is not None and path.suffix.lower() not in suffixes:
        raise BertscopeError(f"{path}: {what} must be a {' or '.join(suffixes)} file")


__all__ = [
    "RUN_OPTIONS",
    "CheckpointOpt",
    "DeviceOpt",
    "LayoutCheckpointOpt",
    "LayoutMicroBatchesOpt",
    "MicroBatchesAlias",
    "MicroBatchesOpt",
    "ModelArg",
    "OptimizerOpt",
    "PrecisionOpt",
    "SeqOpt",
    "TopOpt",
    "check_export",
    "check_suffix",
    "check_top",
    "checkpointing",
    "job_command",
    "need_torch",
]
