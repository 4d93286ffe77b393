"""The GEMM-like ATen ops whose recorded input shapes size a GEMM: one registry.

In the style of torch's `torch/utils/flop_counter.py`: `GEMM_OPS` maps each ATen op name to
a small pure function from the op's input shapes to its GEMM shape (M, N, K, batch); the
functions are registered with `@gemm_op(...)`, so the set of ops is the registry's keys and
nothing else. The trace reader keeps input shapes for these ops (`has_gemm_shape`) and the
attribution sizes them (`gemm_shape`), both from this one table.

An op name matches its registered ATen name in any namespace (`aten::mm`, and `x::mm` with the
same op name), as the reader and attribution have always matched them (by the `::mm` suffix).
Which *category* an op is (GEMM, batched GEMM) is the pattern table's answer
(`Category.is_gemm`), not this registry's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

GemmShape = tuple[int, int, int, int]
"""(M, N, K, batch) of a GEMM: batch products of an M x K by a K x N matrix."""
ShapeFn = Callable[[list[Any]], GemmShape]
"""An op's input shapes (its tensor inputs', scalars and empty shapes dropped) -> GemmShape."""

NO_GEMM: GemmShape = (0, 0, 0, 0)
"""The shape of an op the registry cannot size (not registered, or shapes it cannot read)."""

GEMM_OPS: dict[str, ShapeFn] = {}
"""ATen op name -> its shape function; filled by `@gemm_op`."""

_BY_OP_NAME: dict[str, ShapeFn] = {}
"""The same functions keyed by op name without its namespace (`mm`), derived from
`GEMM_OPS` as it is filled: the lookup for a name in any namespace."""


def gemm_op(*names: str) -> Callable[[ShapeFn], ShapeFn]:
    """Register a shape function for the ATen ops `names` (decorator)."""
    def register(fn: ShapeFn) -> ShapeFn:
        for name in names:
            if name in GEMM_OPS:
                raise ValueError(f"{name} registered twice")
            GEMM_OPS[name] = fn
            _BY_OP_NAME[name.rpartition("::")[2]] = fn
        return fn

    return register


@gemm_op("aten::mm")
def mm_shapes(s: list[Any]) -> GemmShape:
    """mm(A[M, K], B[K, N])."""
    (m, k), (_, n) = s[0], s[1]
    return m, n, k, 1


@gemm_op("aten::addmm", "aten::_addmm_activation")
def addmm_shapes(s: list[Any]) -> GemmShape:
    """addmm(bias, A[M, K], B[K, N]): the last two tensors (the bias may be absent)."""
    (m, k), (_, n) = s[-2], s[-1]
    return m, n, k, 1


@gemm_op("aten::linear")
def linear_shapes(s: list[Any]) -> GemmShape:
    """linear(X[..., K], W[N, K], bias): every leading dimension of X is a row."""
    x, w = s[0], s[1]
    return math.prod(x[:-1]), w[0], w[1], 1


@gemm_op("aten::bmm", "aten::baddbmm")
def bmm_shapes(s: list[Any]) -> GemmShape:
    """bmm(A[b, M, K], B[b, K, N]); baddbmm's input first (the last two tensors)."""
    a, b = s[-2], s[-1]
    return a[-2], b[-1], a[-1], a[0]


@gemm_op("aten::matmul")
def matmul_shapes(s: list[Any]) -> GemmShape:
    """matmul(A, B): a plain GEMM for 1-D/2-D operands, else batched over A's (or B's)
    leading dimensions."""
    a, b = s[0], s[1]
    if len(a) <= 2 and len(b) <= 2:
        return (a[0] if len(a) == 2 else 1), b[-1], a[-1], 1
    return a[-2], b[-1], a[-1], math.prod(a[:-2]) or math.prod(b[:-2])


def shape_fn(name: str) -> ShapeFn | None:
    """The registered shape function of an op name (any namespace), else None."""
    fn = GEMM_OPS.get(name)
    if fn is None:
        _, sep, op = name.rpartition("::")
        if sep:
            fn = _BY_OP_NAME.get(op)
    return fn


def has_gemm_shape(name: str) -> bool:
    """Whether the registry sizes this op (so a reader must keep its input shapes)."""
    return shape_fn(name) is not None


def gemm_shape(name: str, shapes: list[Any]) -> GemmShape:
    """(M, N, K, batch) of a GEMM-like ATen op from its recorded input shapes; (0, 0, 0, 0)
    for an op the registry does not hold or shapes its function cannot read."""
    fn = shape_fn(name)
    if fn is None:
        return NO_GEMM
    try:
        return fn([x for x in shapes if isinstance(x, list) and x])
    except (IndexError, ValueError, TypeError):
        return NO_GEMM


__all__ = ["GEMM_OPS", "NO_GEMM", "GemmShape", "ShapeFn", "addmm_shapes", "bmm_shapes",
           "gemm_op", "gemm_shape", "has_gemm_shape", "linear_shapes", "matmul_shapes",
           "mm_shapes", "shape_fn"]
