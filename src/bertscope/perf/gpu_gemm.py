"""A shape-aware GPU GEMM efficiency model from first principles: tile and wave quantization.

A GPU GEMM library (cuBLAS, rocBLAS/hipBLASLt, CUTLASS) splits the M x N output into
thread-block (CTA / workgroup) tiles of Tm x Tn and spreads them over the chip's SMs (CUs);
each tile steps through all of K. Every tile costs a whole tile's work, and the chip runs in
waves of one tile per SM, so (NVIDIA, *Matrix Multiplication Background User's Guide*,
DU-09799-001, section 3 "Dimension Quantization Effects"; *GPU Performance Background*):

- **tile quantization**: a 257 x 256 output with 128 x 128 tiles launches 6 tiles, not 4;
  the useful share of the launched work is M N / (ceil(M/Tm) Tm ceil(N/Tn) Tn);
- **wave quantization**: with `sm_count` SMs the tiles run in ceil(tiles / sm_count) waves;
  the share of SM-slots doing work is tiles / (waves x sm_count). The guide's example: an
  A100 (108 SMs) runs one 256 x 128 tile per SM, so a wave is 108 tiles and M = 2304,
  N = 1536 (9 x 12 = 108 tiles) fills one wave while N = 1664 (117 tiles) needs two.

For each candidate tile (the guide's section 2.3 list of typical cuBLAS tiles) and split-K
factor (K cut into s slices run as separate tiles, as libraries do when the output tiles
alone do not fill one wave):

    utilization = tile share x wave share x K share (K padded to the tensor-core
                  instruction's K, `mma_k`)
    reuse       = min(1, 2 Tm Tn / (Tm + Tn) / operand_intensity)

A split-K candidate (s > 1) also pays its partial-sum reduction, as CUTLASS's parallel
split-K does it (`GemmSplitKParallel`: each of the s slices writes its M x N partial in the
fp32 accumulator type to a workspace, and a separate reduction kernel reads the s partials
and writes the output): 2 x 4 bytes per partial element of DRAM traffic that a one-pass GEMM
does not have (the output write is the GEMM's either way). At the device's memory bandwidth
that is the time of 2 x 4 s M N x `split_k_flop_per_byte` / 2 tensor MACs (the format's
dense peak / the memory bandwidth), so a split candidate's share is

    useful / (launched / reuse + 4 s M N x split_k_flop_per_byte)

(0: the reduction is not charged).

The reuse term is the operand feed: a tile does 2 Tm Tn FLOPs per (Tm + Tn) operand elements
it loads per K step; an SM keeps its tensor units busy only when that is at least
`operand_intensity` = 2 x (16-bit tensor FLOP/clock per SM) / (L2 bytes/clock per SM)
(element bytes and tensor rate scale together across fp8/16-bit/tf32, so the ratio is format
free). 0 = not limiting (no published L2 bandwidth). The library is taken to pick the best
candidate (cuBLAS heuristics choose tiles per shape), and

    fraction = max_fraction x max over candidates (utilization x reuse)

times the **operand alignment** of the shape for the run's format (`element_bytes`, set by
`for_format`): a tensor-core kernel loads its operands 16 bytes at a time only where the
matrices' dimensions are multiples of 16 bytes, and otherwise runs a narrower-load variant
(CUTLASS's `..._align2`, `align1` kernels; the guide's section 4.1 "Tensor Core
Requirements": "most efficient when ... multiples of 16 bytes"). The share is

    alignment = min(16, element_bytes x 2^v) / 16

with 2^v the largest power of two dividing M, N and K: a bf16 GEMM over BERT's vocabulary
of 30,522 (2 x 15,261) loads 4 bytes at a time, 0.25; GPT-2's 50,257 (odd) 2 bytes, 0.125.
On the H200 lent to issue #31 such head GEMMs ran at 0.37 and 0.16 of the aligned GEMMs' rate
in the same iterations (bench/results/gpu_recipe_check.txt); NVIDIA's BERT and Megatron pad
the vocabulary to a multiple of 8 and 128 for this reason (`RunConfig.vocab_multiple`).

**Epilogue.** A tile writes its output only after its main loop over K (the epilogue:
convert the accumulators, write the C tile); with one tile per SM at a time nothing else runs
on that SM meanwhile, so the write adds to the main loop instead of hiding under it. Over the
whole GEMM that is the bytes it writes (the rows' `bytes_written`: B M N x the output element,
2 for 16-bit, 4 for fp32/tf32, the weight gradient's fp32 main grad where a recipe fuses the
accumulation) at the streaming bandwidth (`stream_fraction` x the memory bandwidth), so with
R the format's ridge (`split_k_flop_per_byte`, peak / bandwidth)

    fraction = f / (1 + f x bytes_written x R / (stream_fraction x FLOPs))

which for a plain GEMM is f / (1 + f x out_bytes x R / (stream_fraction x 2 K)): the share
falls with K. On the H200 lent to issue #31 (bench/results/gpu_gemm_caps.txt) bf16 GEMMs of
4096 x 4096 x 1024 ran at 0.674 of peak and the same FLOPs as 4096 x 1024 x 4096 at 0.753
(0.895 of it; the epilogue gives 0.90, the tile model alone 1.0); over the 40 tf32/bf16/fp16
shapes measured the median measured/model ratio goes from 0.88-0.92 to 0.97-1.01
(bench/results/gemm_caps_vs_model.txt). Rows without `bytes_written` are not charged.
A fused attention row (flash attention) writes only its B x S x d output, not the S x S
scores its M x N names, and is charged for that.

**Cited caps.** A cited fraction is one GEMM's measured rate, its epilogue included. Where
the catalog gives the shape it was measured on (`Device.gemm_shapes`), the cap is the
main-loop fraction behind it, cap = measured / (1 - measured x e) with e the epilogue charge
of that shape (out_bytes x R / (stream_fraction x 2 K)), so the epilogue is not counted
twice (A100 bf16: 0.869 measured at 1024 x 10240 x 5120 gives 0.892). Its tile and wave shares are
taken as whole: the shape is the best of a search, where the library found a tile that fits
(the guide's candidates are a subset of cuBLAS's). A fraction without a shape is the cap as
it stands.

with `max_fraction` the attainable fraction of the dense peak large GEMMs reach: per number
format where the catalog cites a microbenchmark (`Device.gemm_fractions`, e.g. V100 fp16
0.736 and fp32 0.839 from Markidis et al. 2018), picked by `for_format` for the run's GEMM
format (`predict.row_times` asks), else the assumed default. Unlike the
saturating default, the fraction can *fall* as a GEMM grows (one tile past a full wave), as
the guide shows; the time it implies never falls (more tiles never take fewer waves).
Everything is numpy arithmetic on the row columns: elementwise for any broadcast shape (the
sweep's (rows, configs...) arrays), with a Python loop only over the fixed candidates.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from bertscope.errors import BertscopeError
from bertscope.hardware import Device, DeviceKind, NumberFormat
from bertscope.perf.device_profile import ModelBase, per_launch, register_model

if TYPE_CHECKING:
    import pandas as pd

GUIDE_TILES: tuple[tuple[int, int], ...] = (
    (256, 128), (128, 256), (128, 128), (256, 64), (64, 256), (128, 64), (64, 128), (64, 64))
"""Thread-block tiles the Matrix Multiplication Background guide (section 2.3, "Typical Tile
Dimensions In cuBLAS And Performance") lists as cuBLAS's."""

SPLITS: tuple[int, ...] = (1, 2, 4, 8, 16)
"""Split-K factors considered (CUTLASS's split-K / parallel reduction), each only where the
split tiles still fit in one wave (tiles x s <= SMs): split-K is how a library fills a GPU
that the output tiles alone leave idle, not a way to even out multi-wave tails, and its
partial-sum reduction (charged, module docstring) would make that a loss."""

PARTIAL_BYTES = 8.0
"""DRAM bytes per partial-sum element of a parallel split-K: written once by the GEMM and
read once by the reduction kernel, 4 bytes each (fp32, the accumulator type of CUTLASS's
tensor-op GEMMs for 16-bit, tf32 and fp8 inputs)."""

DENSE_SHARE = 0.1
"""Share of a call's shapes with room for a split above which split candidates are timed on
the whole arrays (below it, on those shapes taken apart: gathers cost more per entry;
0.1 measured best of 0, 0.1, 0.25 and never on two sweep grids here, alternated)."""

ASSUMED_FRACTION = 0.85
"""Attainable fraction used where the catalog cites no measurement: the assumed default of
`efficiency._DEFAULTS` (not a cited figure; the profile's source says so)."""


_ASSUMED_CAP = f"cap {ASSUMED_FRACTION:g} (assumed default, not cited)"


ELEMENT_BYTES: dict[str, int] = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
"""Operand bytes per element of each GEMM format (tf32 GEMMs read fp32 operands)."""

OUTPUT_BYTES: dict[str, int] = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 2}
"""Bytes per output element of a GEMM measured in each format (a cited cap's shape): fp8
GEMMs write 16-bit outputs (torch._scaled_mm with a bf16 out_dtype)."""

ALIGNED_BYTES = 16
"""Operand load width of a fully aligned tensor-core kernel (the guide's 16 bytes)."""


def alignment(m: Any, n: Any, k: Any, element_bytes: int) -> np.ndarray:
    """The share of the aligned rate a GEMM of M x N x K reaches with operands of
    `element_bytes` (module docstring): min(16, element_bytes x 2^v) / 16, 2^v the largest
    power of two dividing M, N and K; 1 where `element_bytes` is 0 (not modelled)."""
    if element_bytes <= 0:
        return np.ones(np.broadcast(np.asarray(m), np.asarray(n), np.asarray(k)).shape)
    g = np.gcd.reduce([np.asarray(x, dtype=np.int64) for x in np.broadcast_arrays(m, n, k)])
    g = np.where(g > 0, g, ALIGNED_BYTES)  # a zero dimension (no GEMM): no penalty
    width = np.minimum(ALIGNED_BYTES, element_bytes * (g & -g))
    return width / ALIGNED_BYTES


def _ceil_div(a: np.ndarray, b: float) -> np.ndarray:
    return np.ceil(a / b)


@register_model
@dataclass(kw_only=True, frozen=True, slots=True)
class TileWaveGemmEfficiency(ModelBase):
    """GEMM fraction of the tensor peak from tile, wave and K quantization over `sm_count`
    SMs, a tile-reuse term and an attainable cap (module docstring)."""

    sm_count: int
    """SMs (NVIDIA) or CUs (AMD): tiles run in waves of this many."""
    max_fraction: float
    """Fraction of the dense peak large, well-shaped GEMMs reach."""
    tiles: tuple[tuple[int, int], ...] = GUIDE_TILES
    """Candidate thread-block tiles (Tm, Tn)."""
    splits: tuple[int, ...] = SPLITS
    """Candidate split-K factors."""
    mma_k: int = 1
    """K of one tensor-core instruction: K is padded to a multiple of it."""
    operand_intensity: float = 0.0
    """FLOPs per operand element a tile must do to keep an SM's tensor units fed from L2
    (0: not limiting)."""
    format_fractions: tuple[tuple[str, float, str], ...] = ()
    """(number format, attainable fraction, its citation) triples: the fraction replaces
    `max_fraction` for a run whose GEMMs use that format (`for_format`), the citation the
    assumed cap in `source`."""
    split_k_flop_per_byte: float = 0.0
    """Dense tensor peak / memory bandwidth (FLOP/byte) of the GEMMs' format: what a split-K
    candidate's partial-sum traffic costs in tensor work (0: not charged)."""
    format_ridges: tuple[tuple[str, float], ...] = ()
    """(number format, its `split_k_flop_per_byte`) pairs `for_format` picks from."""
    epilogue: bool = False
    """Charge the epilogue: the GEMM's output (the rows' `bytes_written`) written after its
    main loop at the streaming bandwidth (module docstring, "Epilogue"); False: not charged."""
    stream_fraction: float = 1.0
    """Fraction of the memory bandwidth a streaming kernel sustains (the device's cited
    `stream_bandwidth_fraction`): the rate of the epilogue's writes."""
    element_bytes: int = 0
    """Bytes per operand element of the GEMMs' format (`for_format` sets it): shapes whose
    dimensions are not multiples of 16 bytes run at the alignment share (module docstring);
    0: alignment not modelled."""
    source: str = "first principles"
    """Where the figures come from."""

    _bounds: ClassVar[dict[str, tuple[float, float]]] = {
        "sm_count": (1, 100_000), "max_fraction": (1e-6, 1.0), "mma_k": (1, 4096),
        "element_bytes": (0, 16), "stream_fraction": (1e-3, 1.0),
        "operand_intensity": (0.0, 1e6), "split_k_flop_per_byte": (0.0, 1e9)}

    def __post_init__(self) -> None:
        self._check()
        for name in ("sm_count", "mma_k", "element_bytes"):
            if not isinstance(getattr(self, name), int) or isinstance(getattr(self, name), bool):
                raise BertscopeError(f"TileWaveGemmEfficiency.{name} must be a whole number, "
                                     f"got {getattr(self, name)!r}")
        tiles = tuple(tuple(t) for t in self.tiles) if isinstance(self.tiles, list | tuple) else ()
        if not tiles or not all(len(t) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                    and 0 < v <= 4096 for v in t) for t in tiles):
            raise BertscopeError(f"TileWaveGemmEfficiency.tiles must be a list of [Tm, Tn] "
                                 f"positive integers, got {self.tiles!r}")
        splits = tuple(self.splits) if isinstance(self.splits, list | tuple) else ()
        if not splits or not all(isinstance(s, int) and not isinstance(s, bool) and 0 < s <= 1024
                                 for s in splits):
            raise BertscopeError(f"TileWaveGemmEfficiency.splits must be a list of positive "
                                 f"integers, got {self.splits!r}")
        if 1 not in splits:
            raise BertscopeError(f"TileWaveGemmEfficiency.splits must include 1 (no split), "
                                 f"got {self.splits!r}")
        object.__setattr__(self, "tiles", tiles)
        object.__setattr__(self, "splits", splits)
        raw = self.format_fractions if isinstance(self.format_fractions, list | tuple) else None
        triples = tuple((str(p[0]), p[1], str(p[2])) for p in raw or ()
                        if isinstance(p, list | tuple) and len(p) == 3)
        if raw is None or len(triples) != len(raw) or not all(
                isinstance(v, int | float) and not isinstance(v, bool) and 0 < v <= 1
                for _, v, _ in triples):
            raise BertscopeError(f"TileWaveGemmEfficiency.format_fractions must be [format, "
                                 f"fraction in (0, 1], citation] triples, got "
                                 f"{self.format_fractions!r}")
        object.__setattr__(self, "format_fractions", triples)
        raw = self.format_ridges if isinstance(self.format_ridges, list | tuple) else None
        pairs = tuple((str(p[0]), p[1]) for p in raw or ()
                      if isinstance(p, list | tuple) and len(p) == 2)
        if raw is None or len(pairs) != len(raw) or not all(
                isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= 1e9
                for _, v in pairs):
            raise BertscopeError(f"TileWaveGemmEfficiency.format_ridges must be [format, "
                                 f"FLOP/byte >= 0] pairs, got {self.format_ridges!r}")
        object.__setattr__(self, "format_ridges", pairs)

    def for_format(self, fmt: NumberFormat | str) -> TileWaveGemmEfficiency:
        """The model with the attainable fraction of GEMMs in `fmt`, its source naming that
        figure's citation (itself when none is given for `fmt`). Cached: a sweep asks once
        per timed slice."""
        return _for_format(self, str(fmt))

    def _for_format(self, fmt: str) -> TileWaveGemmEfficiency:
        """`for_format`, uncached."""
        ridge = dict(self.format_ridges).get(str(fmt), self.split_k_flop_per_byte)
        width = ELEMENT_BYTES.get(str(fmt), self.element_bytes)
        cited = {f: (v, why) for f, v, why in self.format_fractions}.get(str(fmt))
        if cited is None:
            return self if (ridge, width) == (self.split_k_flop_per_byte,
                                              self.element_bytes) else replace(
                self, split_k_flop_per_byte=ridge, element_bytes=width)
        base = self.source.replace(_ASSUMED_CAP, f"{fmt} cap {cited[0]:g} ({cited[1]})")
        return replace(self, max_fraction=cited[0], format_fractions=(), source=base,
                       split_k_flop_per_byte=ridge, element_bytes=width)

    def to_dict(self) -> dict[str, Any]:
        """Fields (tiles and splits as JSON lists) plus `"model"`."""
        out = ModelBase.to_dict(self)
        out["tiles"] = [list(t) for t in self.tiles]
        out["splits"] = list(self.splits)
        out["format_fractions"] = [list(t) for t in self.format_fractions]
        out["format_ridges"] = [list(t) for t in self.format_ridges]
        return out

    def utilization(self, m: Any, n: Any, k: Any, batch: Any = 1) -> np.ndarray:
        """max over candidates of tile x wave x K share x reuse, per GEMM shape (arrays
        broadcast): the fraction before the `max_fraction` cap."""
        return self._utilization(*_dims(m, n, k, batch))

    def _utilization(self, m: np.ndarray, n: np.ndarray, k: np.ndarray,
                     b: np.ndarray) -> np.ndarray:
        """`utilization` of shapes already floats >= 1 (broadcasting).

        Factored so that the candidates' loop runs on the tile counts' own shape (that of M,
        N and the batch, not K's): a tile's share x its tile count is B M N reuse / (Tm Tn)
        whatever the tile, so with P = B M N and c = reuse / (Tm Tn)

            no split:  u = P x (K / Kpad / SMs) x c / ceil(tiles / SMs)
            split s:   u = g_s(P x Ks x c) where tiles s <= SMs, Ks = K / (s ceil(Kpad / s))
                       x s / SMs and g_s(u) = u / (1 + u charge_s) (increasing in u)

        and the best candidate is P x (K / Kpad / SMs) x max over tiles of c / waves, or per
        split g_s(P x Ks x the largest c among the tiles that fit one wave split s ways)."""
        sms = float(self.sm_count)
        full = np.broadcast_shapes(m.shape, n.shape, k.shape, b.shape)
        if not full:  # one shape: as a 1-element array
            one = self._utilization(*(x.reshape(1) for x in (m, n, k, b)))
            return one.reshape(())
        tshape = np.broadcast_shapes(m.shape, n.shape, b.shape)
        cm = {tm: b * _ceil_div(m, tm) for tm in {t[0] for t in self.tiles}}
        cn = {tn: _ceil_div(n, tn) for tn in {t[1] for t in self.tiles}}
        splits = sorted(x for x in self.splits if x > 1)
        ratio = np.zeros(tshape)  # max over tiles of c / waves
        tiles, waves = np.empty(tshape), np.empty(tshape)
        fits: dict[int, np.ndarray] = {}  # per split: the largest c of the tiles that fit
        for tm, tn in self.tiles:
            c = self._reuse(tm, tn) / (tm * tn)
            np.multiply(cm[tm], cn[tn], out=tiles)  # B x ceil(M/Tm) x ceil(N/Tn)
            np.divide(tiles, sms, out=waves)  # exact where tiles is a multiple of SMs
            np.ceil(waves, out=waves)
            np.divide(c, waves, out=waves)
            np.maximum(ratio, waves, out=ratio)
            if not splits or float(tiles.min()) > sms / splits[0]:
                continue  # no shape has room for a split
            for x in splits:
                room = tiles <= sms / x
                if not room.any():
                    break  # larger splits fit fewer shapes still
                best_c = fits.setdefault(x, np.zeros(tshape))
                np.maximum(best_c, c, out=best_c, where=room)
        k_pad = _ceil_div(k, self.mma_k) * self.mma_k
        p = m * n
        p = p * b if b.size > 1 or float(b.flat[0]) != 1.0 else p
        best = p * (k / k_pad / sms) * ratio
        if fits:
            self._split(best, p, k, k_pad, fits)
        return np.minimum(best, 1.0, out=best)

    def _reuse(self, tm: int, tn: int) -> float:
        """The operand-feed factor of a Tm x Tn tile (module docstring)."""
        if self.operand_intensity <= 0:
            return 1.0
        return min(1.0, 2.0 * tm * tn / (tm + tn) / self.operand_intensity)

    def _split(self, best: np.ndarray, p: np.ndarray, k: np.ndarray, k_pad: np.ndarray,
               fits: dict[int, np.ndarray]) -> None:
        """Raise `best` to each split-K candidate's utilization g_s(P x Ks x c_s) where some
        tile fits one wave split s ways (`fits[s]`: the largest such c, 0 where none): on
        the whole arrays when many shapes qualify, else on those few taken apart."""
        sms = float(self.sm_count)
        partial_macs = PARTIAL_BYTES * self.split_k_flop_per_byte / 2.0
        first = fits[min(fits)]  # the smallest split: where any split fits
        if first.shape == best.shape and np.count_nonzero(first) <= DENSE_SHARE * first.size:
            few = np.flatnonzero(first)  # few shapes: gathered
            at = np.unravel_index(few, best.shape)

            def pick(v: np.ndarray) -> np.ndarray:
                v = np.broadcast_to(v, best.shape)
                return v[at]
            p_f, k_f, kp_f = pick(p), pick(k), pick(k_pad)
            top = best.reshape(-1)[few]
            for x, c in fits.items():
                u = p_f * c.reshape(-1)[few] * _k_split(k_f, kp_f, x, sms)
                if partial_macs > 0:
                    u /= 1.0 + u * (x * partial_macs / k_f)
                np.maximum(top, u, out=top)
            best.reshape(-1)[few] = top
            return
        u = np.empty(best.shape)
        for x, c in fits.items():
            np.multiply(p, _k_split(k, k_pad, x, sms), out=u)
            u *= c
            if partial_macs > 0:  # u / (1 + u charge): its partials written and read back
                np.divide(u, 1.0 + u * (x * partial_macs / k), out=u)
            np.maximum(best, u, out=best)

    def fraction(self, rows: Mapping[str, Any] | pd.DataFrame) -> np.ndarray:
        """Fraction of peak per row (rows without FLOPs get 1; they take no compute time)."""
        w = per_launch(rows, "flops")
        dims = _dims(rows["m"], rows["n"], rows["k"], rows["batch"])  # (batch 0: one GEMM)
        first, inverse = _distinct_rows(dims)
        if first is None:
            util = self._stacked(dims)
        else:  # rows of one shape (a layer's dgrad and forward GEMMs, say) timed once
            util = self._stacked([x[first] if x.ndim and len(x) > 1 else x
                                  for x in dims])[inverse]
        f = self.max_fraction * util * alignment(dims[0], dims[1], dims[2],
                                                 self.element_bytes)
        if self.epilogue and self.split_k_flop_per_byte > 0 and "bytes_written" in rows:
            f = f / (1.0 + f * self._epilogue_charge(rows, w))
        return np.where(w > 0, np.maximum(f, 1e-12), 1.0)

    def _epilogue_charge(self, rows: Mapping[str, Any] | pd.DataFrame,
                         flops: np.ndarray) -> np.ndarray:
        """Epilogue time / main-loop time at the whole peak: bytes written / FLOPs x the
        format's ridge (peak / bandwidth) / the streaming fraction (module docstring)."""
        written = per_launch(rows, "bytes_written")
        ridge = self.split_k_flop_per_byte / self.stream_fraction
        return np.divide(written * ridge, flops, out=np.zeros(np.broadcast_shapes(
            written.shape, np.shape(flops))), where=np.asarray(flops) > 0)

    def _stacked(self, dims: list[np.ndarray]) -> np.ndarray:
        """`_utilization` of stacked (rows, configurations...) shapes, the rows whose tile
        counts do not vary with the configurations (M, N and batch fixed per row, as a weight
        gradient's, whose K is the tokens) taken apart: their candidates are compared once
        per row instead of once per configuration."""
        m, n, k, b = dims
        rows = max(len(x) if x.ndim else 0 for x in dims)
        if m.ndim < 2 or rows < 2:
            return self._utilization(m, n, k, b)
        fixed = np.ones(rows, dtype=bool)
        for x in (m, n, b):
            if x.ndim < 2 or x[0].size == 1:
                continue  # one value per row
            if len(x) < rows:  # one array for every row, varying with the configurations
                return self._utilization(m, n, k, b)
            flat = x.reshape(rows, -1)
            fixed &= flat.min(axis=1) == flat.max(axis=1)
        if not fixed.any() or (fixed.all() and all(x[0].size == 1 for x in (m, n, b))):
            return self._utilization(m, n, k, b)
        at = (slice(None),) + (slice(0, 1),) * (m.ndim - 1)

        def part(x: np.ndarray, sel: np.ndarray, one: bool) -> np.ndarray:
            x = x[sel] if x.ndim >= 2 and len(x) == rows else x
            return x[at] if one and x.ndim >= 2 else x
        full = np.broadcast_shapes(*(x.shape for x in dims))
        out = np.empty(full)
        for sel, one in ((fixed, True), (~fixed, False)):
            if sel.any():
                out[sel] = self._utilization(part(m, sel, one), part(n, sel, one),
                                             part(k, sel, False), part(b, sel, one))
        return out


def _k_split(k: np.ndarray, k_pad: np.ndarray, x: int, sms: float) -> np.ndarray:
    """Ks of a split x: the K share of K cut into x slices (each padded K / x rounded up)
    times the x / SMs one-wave share's factor."""
    return k / (x * _ceil_div(k_pad, x)) * (x / sms)


def _dims(*values: Any) -> list[np.ndarray]:
    """GEMM dimensions as floats of at least 1 (a 0, as a plain GEMM's batch, counts 1)."""
    return [np.maximum(np.asarray(x, dtype=float), 1.0) for x in values]


def _distinct_rows(dims: list[np.ndarray]) -> tuple[list[int] | None, np.ndarray | None]:
    """For stacked (rows, configurations...) GEMM shape arrays: the first row of each
    distinct (M, N, K, batch) and every row's index among those, or (None, None) where no
    two rows are alike or the arrays are not stacked rows (a plain op table's 1-D columns)."""
    n = max(len(x) if x.ndim else 0 for x in dims)
    if n < 2 or max(x.ndim for x in dims) < 2:
        return None, None
    rows = [[x if not x.ndim else x[i] if len(x) > 1 else x[0] for x in dims]
            for i in range(n)]
    first: list[int] = []
    seen: dict[tuple[Any, ...], list[int]] = {}
    inverse = np.empty(n, dtype=np.intp)
    for i, row in enumerate(rows):  # a cheap key first, equality to confirm
        key = tuple((r.shape, float(r.flat[0]), float(r.flat[-1])) for r in row)
        for j in seen.get(key, ()):
            if all(np.array_equal(a, b) for a, b in zip(row, rows[first[j]], strict=True)):
                inverse[i] = j
                break
        else:
            seen.setdefault(key, []).append(len(first))
            inverse[i] = len(first)
            first.append(i)
    return (None, None) if len(first) == n else (first, inverse)


@functools.lru_cache(maxsize=256)
def _for_format(model: TileWaveGemmEfficiency, fmt: str) -> TileWaveGemmEfficiency:
    return model._for_format(fmt)


def operand_intensity(device: Device) -> float:
    """2 x (16-bit tensor FLOP/clock per SM) / (L2 bytes/clock per SM): the FLOPs per operand
    element a tile must do to be fed from L2; 0 where the device lacks a figure."""
    fmt = next((f for f in (NumberFormat.FP16, NumberFormat.BF16) if device.has(f)), None)
    if (fmt is None or device.boost_clock is None or device.l2_bytes_per_clock is None):
        return 0.0
    return 2.0 * device.peak_flops(fmt) / (device.boost_clock * device.l2_bytes_per_clock)


def for_device(device: Device) -> TileWaveGemmEfficiency | None:
    """The first-principles GEMM model of a GPU from its catalog figures (SM count, tensor
    instruction K, L2 bandwidth, attainable fraction); None where the device has no SM count
    (TPUs: a few large systolic arrays, not waves of tiles over many SMs; or not
    published)."""
    if device.kind is not DeviceKind.GPU or device.sm_count is None:
        return None
    cited = tuple((f.value, v, device.sources[f"gemm_fractions.{f.value}"])
                  for f, v in device.gemm_fractions.items())
    parts = [f"tile/wave quantization over {device.sm_count} SMs/CUs (NVIDIA Matrix "
             f"Multiplication Background guide, section 3)", _ASSUMED_CAP]
    if cited:
        parts.append("cited caps for " + ", ".join(f for f, _, _ in cited))
    intensity = operand_intensity(device)
    parts.append(f"L2 operand feed {intensity:.1f} FLOP/element" if intensity > 0
                 else "no published L2 bandwidth: tile reuse not limiting")
    ridges = tuple((f.value, device.peak_flops(f) / device.memory_bandwidth)
                   for f in device.formats if f is not NumberFormat.INT8)
    sixteen = next((r for f, r in ridges if f in ("fp16", "bf16")), 0.0)
    parts.append("split-K reduction charged (parallel split-K: fp32 partials written and "
                 "read at the memory bandwidth)")
    mma_k = device.mma_tile[2] if device.mma_tile is not None else 1
    model = TileWaveGemmEfficiency(sm_count=device.sm_count, max_fraction=ASSUMED_FRACTION,
                                   mma_k=mma_k, operand_intensity=intensity,
                                   format_fractions=cited, split_k_flop_per_byte=sixteen,
                                   format_ridges=ridges, epilogue=True,
                                   stream_fraction=device.stream_bandwidth_fraction or 1.0,
                                   source="; ".join(parts))
    if not device.gemm_shapes:
        return model
    caps = []
    for fmt, measured, why in cited:
        shape = device.gemm_shapes.get(NumberFormat(fmt))
        if shape is None:
            caps.append((fmt, measured, why))
            continue
        cap = _main_loop_cap(model, fmt, measured, shape)
        caps.append((fmt, cap, f"{why}; main-loop cap {cap:.3f}: the model gives {measured:g} "
                               f"at the measured {'x'.join(map(str, shape))}"))
    return replace(model, format_fractions=tuple(caps))


def _main_loop_cap(model: TileWaveGemmEfficiency, fmt: str, measured: float,
                   shape: tuple[int, int, int]) -> float:
    """The main-loop cap behind a fraction `measured` on the GEMM `shape` (module docstring,
    "Cited caps"): measured / (1 - measured x e), e the epilogue charge of that shape, at
    most 1."""
    m, n, k = shape
    at = model.for_format(fmt)
    ridge = at.split_k_flop_per_byte / at.stream_fraction
    charge = OUTPUT_BYTES.get(fmt, 2) * float(m) * n * ridge / (2.0 * m * n * k)
    if measured * charge >= 1.0:
        return 1.0
    return min(1.0, measured / (1.0 - measured * charge))


__all__ = ["ALIGNED_BYTES", "ASSUMED_FRACTION", "ELEMENT_BYTES", "GUIDE_TILES", "PARTIAL_BYTES",
           "SPLITS", "TileWaveGemmEfficiency", "alignment", "for_device", "operand_intensity"]
