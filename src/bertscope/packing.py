"""Real sequence lengths: padded, unpadded (variable-length) and packed micro-batches.

A run's `seq` is the row length every tensor is shaped for; `seq_lengths` says how long the
sequences really are and `packing` how the kernels treat the difference (`RunConfig` fields):

- **none** (padded): every sequence is padded to `seq`; every op computes the padding
  (Hugging Face's default collator; NVIDIA's BERT phase 2 without unpadding). Only the
  throughput changes with real lengths: tokens/s counts real tokens, not padded slots.
- **unpadded**: the padding is removed before the layers (`unpad_input` of FlashAttention's
  `bert_padding`, as MosaicML's BERT runs it; NVIDIA's MLPerf BERT "unpad" path with its
  fused multi-head attention, mlcommons/training_results_v1.0 NVIDIA/benchmarks/bert):
  token-wise work (every linear, norm, activation, dropout, residual, the MLM head) runs on the
  real tokens; a variable-length attention kernel (`flash_attn_varlen_func` with `cu_seqlens`;
  torch.nn.attention.varlen.varlen_attn, https://docs.pytorch.org/docs/stable/nn.attention.varlen.html)
  costs each sequence its own L^2. Kernels without a variable-length form (eager, fused
  softmax) pad the attention core back to the longest listed length.
- **packed**: several sequences are concatenated into each row of `seq` slots and attend only
  within themselves (a block-diagonal mask: Krell, Kosec et al. 2021, "Efficient Sequence
  Packing without Cross-contamination", arXiv:2107.02027, section 3, whose BERT phase-2
  packs hold at most 3 sequences). The rows stay dense tensors of `seq` slots, so token-wise
  work covers every slot (slots a pack leaves empty are padding, computed); a
  variable-length attention kernel over the row's `cu_seqlens` costs sum L^2 per row, while
  eager and fused-softmax kernels compute the full seq x seq scores under a (b, 1, s, s)
  block-diagonal additive mask.

`seq_lengths` is a list of lengths joined by `+`, each `L` or `LxN` (N sequences of length
L): "64+128+320", "512x3+128" (`+`, not commas: a sweep's axis values are comma lists, so
"266,64+128+320" sweeps two specs). Under `packed` the list is the content of one row (every row
alike: sum <= seq); otherwise it is the distribution each sequence's length is drawn from,
each listed length equally likely, and a micro-batch of b sequences costs b times the mean
over the list (exact for b a multiple of the list's size; otherwise that expectation rounded
to a whole token, so shapes stay integers and a layout's split changes the total by under a
token per micro-batch). Empty:
every sequence fills `seq` (today's padded `batch x seq`).

Every function here takes a run whose batch and seq may be numpy arrays (a sweep's `RunView`)
and is plain arithmetic on them; with no lengths given each returns exactly the padded
expression (`batch * seq`), so the default run's numbers do not move.
"""

from __future__ import annotations

import functools
from enum import StrEnum
from typing import Any

from bertscope.errors import BertscopeError, shown

MAX_LENGTHS = 4096
"""Most sequences a `seq_lengths` list may name (a histogram's bins, counted with `xN`)."""


class Packing(StrEnum):
    """How the sequences of a micro-batch fill its `batch x seq` slots (module docstring)."""

    NONE = "none"
    """Each sequence padded to `seq`; every op computes the padding."""
    UNPADDED = "unpadded"
    """Padding removed: token-wise work on the real tokens, variable-length attention."""
    PACKED = "packed"
    """Several sequences per row of `seq` slots, attending within themselves
    (block-diagonal)."""


@functools.lru_cache(maxsize=256)
def parse_lengths(spec: str) -> tuple[int, ...]:
    """The lengths a `seq_lengths` spec lists, in order, each `LxN` spelled out N times
    ("64+128x2" -> (64, 128, 128)); "" -> (). Raises `BertscopeError` in one line."""
    if not isinstance(spec, str):
        raise BertscopeError(f"seq_lengths must be a string such as \"64+128+320\", got "
                             f"{shown(spec)}")
    text = spec.strip()
    if not text:
        return ()
    out: list[int] = []
    for part in text.split("+"):
        length, _, times = part.strip().lower().partition("x")
        try:
            value, count = int(length), int(times) if times else 1
        except ValueError:
            raise BertscopeError(f"seq_lengths {shown(spec)}: {shown(part.strip())} is not a "
                                 f"length; write lengths as L or LxN (N sequences of L "
                                 f"tokens) joined by +: \"64+128x2\"") from None
        if value < 1 or count < 1:
            raise BertscopeError(f"seq_lengths {shown(spec)}: lengths and counts must be "
                                 f"positive, got {shown(part.strip())}")
        if len(out) + count > MAX_LENGTHS:
            raise BertscopeError(f"seq_lengths {shown(spec)} names more than {MAX_LENGTHS} "
                                 f"sequences; give the histogram with smaller counts")
        out += [value] * count
    return tuple(out)


def check_lengths(spec: str, seq: int, packing: Packing) -> None:
    """Raise `BertscopeError` in one line when the lengths cannot be `seq`-slot sequences:
    one longer than `seq`, or (packed) a row's sequences summing past `seq`."""
    lengths = parse_lengths(spec)
    if not lengths:
        return
    if max(lengths) > seq:
        raise BertscopeError(f"seq_lengths: a sequence of {max(lengths)} tokens does not fit "
                             f"seq {seq}; raise --seq or shorten the lengths")
    if packing is Packing.PACKED and sum(lengths) > seq:
        raise BertscopeError(f"seq_lengths {shown(spec)} sums to {sum(lengths)} tokens, more "
                             f"than one packed row of seq {seq}; list one row's sequences")


def active(run: Any) -> bool:
    """Whether the run states real lengths (otherwise every sequence fills `seq`)."""
    return bool(parse_lengths(run.seq_lengths))


def _packed(run: Any) -> bool:
    return Packing(run.packing) is Packing.PACKED


def _mean_times(b: Any, total: int, n: int) -> Any:
    """b x total / n rounded to the nearest integer (halves up): exact where n divides
    b x total; integer arithmetic on ints and on a sweep's float arrays alike (op-table
    shapes are whole tokens)."""
    return (2 * b * total + n) // (2 * n)


def per_sequence(run: Any, f: Any) -> Any:
    """The sum of f(L) over a micro-batch's sequences (f maps a length to a number): under
    `packed` the rows' listed sequences, otherwise b sequences drawn from the list (b times
    its mean, rounded to an integer); with no lengths, b sequences of `seq`."""
    lengths = parse_lengths(run.seq_lengths)
    if not lengths:
        return run.batch * f(run.seq)
    total = sum(f(L) for L in lengths)
    if _packed(run):
        return run.batch * total
    return _mean_times(run.batch, total, len(lengths))


def sequences(run: Any) -> Any:
    """Sequences in one micro-batch: `batch`, or under `packed` batch rows x the sequences
    listed per row."""
    if _packed(run) and active(run):
        return run.batch * len(parse_lengths(run.seq_lengths))
    return run.batch


def real_tokens(run: Any) -> Any:
    """Real (non-padding) tokens in one micro-batch: the sum of its sequences' lengths
    (`batch * seq` when no lengths are given)."""
    if not active(run):
        return run.batch * run.seq
    return per_sequence(run, lambda L: L)


def mean_real_tokens(run: Any) -> Any:
    """Real tokens per sequence slot (per row when packed), unrounded: `seq`, a packed row's
    sum, or the mean of the listed lengths. A throughput over a whole step (any split of
    its global batch) is its global batch times this."""
    lengths = parse_lengths(run.seq_lengths)
    if not lengths:
        return run.seq
    return sum(lengths) if _packed(run) else sum(lengths) / len(lengths)


def computed_tokens(run: Any) -> Any:
    """Token positions token-wise ops compute in one micro-batch: the real tokens when
    `unpadded`, every slot (`batch * seq`) when padded or packed (a pack's rows are dense)."""
    if active(run) and Packing(run.packing) is Packing.UNPADDED:
        return real_tokens(run)
    return run.batch * run.seq


def longest(run: Any) -> int:
    """The longest listed sequence (0 with none listed)."""
    return max(parse_lengths(run.seq_lengths), default=0)


def min_seq(run: Any) -> int:
    """The shortest `seq` the lengths fit: the longest sequence, or under `packed` the sum of
    a row's sequences (0 with none listed)."""
    lengths = parse_lengths(run.seq_lengths)
    if not lengths:
        return 0
    return sum(lengths) if _packed(run) else max(lengths)


def describe(run: Any) -> str:
    """The run's lengths in words for a report ("" with none listed)."""
    lengths = parse_lengths(run.seq_lengths)
    if not lengths:
        return ""
    mean = sum(lengths) / len(lengths)
    kind = Packing(run.packing)
    if kind is Packing.PACKED:
        return (f"packed: {len(lengths)} sequences per row of {run.seq} ({sum(lengths)} real "
                f"tokens, block-diagonal attention)")
    how = "unpadded (varlen kernels)" if kind is Packing.UNPADDED else "padded to seq"
    return f"{how}: sequences of {mean:,.4g} real tokens on average of seq {run.seq}"


__all__ = ["MAX_LENGTHS", "Packing", "active", "check_lengths", "computed_tokens", "describe",
           "longest", "mean_real_tokens", "min_seq", "parse_lengths", "per_sequence",
           "real_tokens", "sequences"]
