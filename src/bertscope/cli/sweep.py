"""`bertscope sweep`: every configuration of a grid, predicted on every device, in one run.

Each axis takes a comma list (`--batch 8,16,32`) or an inclusive integer range
(`--batch 1..256`); model presets (or config.json paths) are a comma list in the first
argument. Parsing only: the grid is checked and evaluated by `bertscope.sweep`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from bertscope.cli.options import check_suffix, check_top
from bertscope.cli.runs import NoStoreOpt, StoreOpt, open_store, record
from bertscope.errors import BertscopeError
from bertscope.io import check_output

_RANGE_MAX = 10_000_000
"""Most values one `A..B` range may hold."""


def parse_ints(text: str, what: str) -> list[int]:
    """'8,16,32' or '1..256' (inclusive; may be mixed: '1..4,8')."""
    out: list[int] = []
    for part in _parts(text, what):
        lo, sep, hi = part.partition("..")
        try:
            a, b = (int(lo), int(hi)) if sep else (int(part), int(part))
        except ValueError:
            raise BertscopeError(f"--{what}: {part!r} is not an integer or an A..B range"
                                 ) from None
        if b < a:
            raise BertscopeError(f"--{what}: the range {part} is empty; write A..B with "
                                 f"A <= B")
        if b - a >= _RANGE_MAX:
            raise BertscopeError(f"--{what}: the range {part} holds more than "
                                 f"{_RANGE_MAX:,} values")
        out += range(a, b + 1)
    return out


def parse_floats(text: str, what: str) -> list[float]:
    """'0.5,1,2': multipliers."""
    try:
        return [float(p) for p in _parts(text, what)]
    except ValueError:
        raise BertscopeError(f"--{what}: write numbers separated by commas, got {text!r}"
                             ) from None


def parse_words(text: str, what: str) -> list[str]:
    """'fp32,bf16'."""
    return list(_parts(text, what))


_BOOLS = {"on": True, "true": True, "yes": True, "off": False, "false": False, "no": False}


def parse_bools(text: str, what: str) -> list[bool]:
    """'on,off' (or true/false, yes/no)."""
    out = []
    for p in _parts(text, what):
        if p.lower() not in _BOOLS:
            raise BertscopeError(f"--{what}: {p!r} is not on/off (or true/false, yes/no)")
        out.append(_BOOLS[p.lower()])
    return out


def _parts(text: str, what: str) -> list[str]:
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise BertscopeError(f"--{what}: an empty value in {text!r}; write a comma list")
    return parts


def _opt(help_text: str) -> Any:
    return typer.Option(help=help_text)


def sweep_cmd(
    models: Annotated[str, typer.Argument(
        metavar="MODELS", help="Comma list of presets or config.json paths.")],
    device: Annotated[str, typer.Option(help="Comma list of catalog devices, device files "
                                             "or calibrated profiles.")] = "a100",
    batch: Annotated[str, _opt("Sequences per micro-batch.")] = "8",
    seq: Annotated[str, _opt("Tokens per sequence.")] = "128",
    micro_batches: Annotated[str, _opt("Micro-batches per optimizer step.")] = "1",
    precision: Annotated[str, _opt("fp32, fp16, bf16.")] = "fp32",
    optimizer: Annotated[str, _opt("sgd, adam, adamw, lamb.")] = "adam",
    checkpoint: Annotated[str, _opt("none, full.")] = "none",
    dropout: Annotated[str, _opt("on, off.")] = "on",
    masked_lm_only: Annotated[str, _opt("MLM head on the masked 15% only: on, off.")] = "off",
    attention: Annotated[str, _opt("eager, fused-softmax, sdpa.")] = "eager",
    fused: Annotated[str, _opt("Predict with memory-bound chains and the optimizer fused "
                               "(perf.fuse): on, off.")] = "off",
    layers: Annotated[str | None, _opt("Encoder layers (default: each model's).")] = None,
    hidden: Annotated[str | None, _opt("Hidden size (default: each model's).")] = None,
    heads: Annotated[str | None, _opt("Attention heads (default: each model's).")] = None,
    ffn: Annotated[str | None, _opt("FFN size (default: the model's ratio to hidden).")] = None,
    vocab: Annotated[str | None, _opt("Vocabulary size (default: each model's).")] = None,
    dp: Annotated[str, _opt("Data-parallel replicas (above 1, or tp/pp/zero: the "
                            "distributed model times the point).")] = "1",
    tp: Annotated[str, _opt("Tensor-parallel ranks.")] = "1",
    pp: Annotated[str, _opt("Pipeline stages (1F1B).")] = "1",
    zero: Annotated[str, _opt("ZeRO stage 0-3 over the replicas.")] = "0",
    gemm_peak: Annotated[str, _opt("What-if: x the GEMM peak.")] = "1",
    bandwidth: Annotated[str, _opt("What-if: x the memory bandwidth.")] = "1",
    overhead: Annotated[str, _opt("What-if: x the per-launch overhead.")] = "1",
    memory: Annotated[str, _opt("What-if: x the memory capacity.")] = "1",
    sort: Annotated[str, _opt("Rank by this column.")] = "tokens_per_s",
    top: Annotated[int, _opt("Show the N best rows.")] = 10,
    output: Annotated[Path | None, _opt("Write every row (.csv or .parquet).")] = None,
    yes: Annotated[bool, typer.Option(
        "--yes", help="Evaluate a grid above 2,000,000 configurations.")] = False,
    store: StoreOpt = None,
    no_store: NoStoreOpt = False,
) -> None:
    """Predict every configuration of a grid (models x run settings x devices x knobs)."""
    from bertscope.report.progress import progress_bar
    from bertscope.report.sweep import print_sweep
    from bertscope.report.tables import make_console
    from bertscope.sweep import MAX_CONFIGS, check_sort, sweep

    check_top(top, 0)
    check_sort(sort)
    check_suffix(output, (".csv", ".parquet"), "--output")
    if output is not None:
        check_output(output)
    st = open_store(store, no_store)
    axes: dict[str, Any] = {
        "batch": parse_ints(batch, "batch"), "seq": parse_ints(seq, "seq"),
        "micro_batches": parse_ints(micro_batches, "micro-batches"),
        "precision": parse_words(precision, "precision"),
        "optimizer": parse_words(optimizer, "optimizer"),
        "checkpoint": parse_words(checkpoint, "checkpoint"),
        "dropout": parse_bools(dropout, "dropout"),
        "masked_lm_only": parse_bools(masked_lm_only, "masked-lm-only"),
        "attention": parse_words(attention, "attention"),
        "fused": parse_bools(fused, "fused"),
        **{k: parse_floats(v, k.replace("_", "-")) for k, v in
           (("gemm_peak", gemm_peak), ("bandwidth", bandwidth), ("overhead", overhead),
            ("memory", memory))},
        **{k: parse_ints(v, k) for k, v in (("dp", dp), ("tp", tp), ("pp", pp),
                                            ("zero", zero))},
        **{k: parse_ints(v, k) for k, v in (("layers", layers), ("hidden", hidden),
                                            ("heads", heads), ("ffn", ffn), ("vocab", vocab))
           if v is not None},
    }
    with progress_bar() as tell:
        result = sweep(parse_words(models, "models"), parse_words(device, "device"),
                       max_configs=None if yes else MAX_CONFIGS, progress=tell, **axes)
    ranked = result.ranked(sort, top)  # checks the column before anything is written
    console = make_console()
    print_sweep(result, ranked, console, sort=sort)
    if output is not None:
        result.export(output)
        console.print(f"wrote {result.evaluated:,} rows to {output}")
    # the grid's axes and its best rows (the full frame stays in --output)
    record(st, console, "sweep", model=models, device=device,
           inputs={"models": models, "devices": device, **axes},
           summary={"evaluated": result.evaluated, "skipped": result.skipped,
                    "seconds": result.seconds, "sort": sort,
                    "best": ranked.head(5).to_dict(orient="records")})


def register(app: typer.Typer) -> None:
    """Add `sweep` to a typer app."""
    app.command("sweep")(sweep_cmd)


__all__ = ["parse_bools", "parse_floats", "parse_ints", "parse_words", "register", "sweep_cmd"]
