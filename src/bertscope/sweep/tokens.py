"""Rows that read the batch and the sequence length only through their product, evaluated on
the distinct products.

Most rows of a training iteration (every projection and FFN GEMM, layernorms, dropouts,
residual adds, the loss) are functions of the tokens in a micro-batch, t = b s, and of the
model's sizes; only the attention core (s x s scores), the position embeddings and the like
read b and s apart. On a (batch x seq) grid many configurations share a t (b 1..512 x s
1..256: 42,803 distinct products of 131,072), so such rows are timed on the distinct ones.

Which rows qualify is decided by the arithmetic itself, exactly, not by guessing: `RunView`
hands the producer its batch and seq as `Axis` values, and their product is a `TokenArray`
holding one value per distinct t (on the batch dimension; the seq dimension 1) and the map
back (`TokenSpace.inverse`). A ufunc of token arrays and *neutral* operands (numbers, arrays
constant along batch and seq: the model's sizes, micro-batches) is computed on the distinct
values and stays a token array; anything else (a token array meets b, s or an array varying
along them, a non-ufunc numpy function, a reduction, `np.asarray`) sees the full array
(`TokenArray.__array__` expands it), so a result is a token array only where it is a function
of t: the values are those of the plain arithmetic either way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

WORTH = 0.8
"""Token arrays are used where the distinct products are at most this share of b x s."""


@dataclass(frozen=True, eq=False)
class TokenSpace:
    """A piece's distinct b x s products: `values` (u,), `inverse` (b x s,: the index of each
    (b, s) pair's product in `values`, b major), the piece's batch and seq lengths, and
    where batch and seq lie among the `nd` dimensions of the group's array (its numeric axes,
    `grid.Grid.num_axes`)."""

    values: np.ndarray
    inverse: np.ndarray
    batch: int
    seq: int
    batch_dim: int
    seq_dim: int
    nd: int

    @staticmethod
    def of(batch: np.ndarray, seq: np.ndarray) -> TokenSpace | None:
        """The space of two axes' products, or None where it would not pay (`WORTH`). The
        axes are a group's (each along its own dimension of the same number of dimensions)
        or two plain vectors (dimensions 0 and 1)."""
        ba, sa = np.asarray(batch), np.asarray(seq)
        b, s = ba.reshape(-1), sa.reshape(-1)
        if len(b) < 2 or len(s) < 2:
            return None
        values, inverse = np.unique(np.multiply.outer(b, s), return_inverse=True)
        if len(values) > WORTH * len(b) * len(s):
            return None
        if ba.ndim == sa.ndim == 1:
            dims = (0, 1, 2)
        else:
            dims = (int(np.argmax(ba.shape)), int(np.argmax(sa.shape)), max(ba.ndim, sa.ndim))
        return TokenSpace(values, inverse.reshape(-1), len(b), len(s), *dims)

    @property
    def size(self) -> int:
        """Distinct products."""
        return len(self.values)

    def shape(self, full: Sequence[int]) -> tuple[int, ...]:
        """A full shape's token-space counterpart: u on the batch dimension, 1 on seq."""
        out = list(full)
        out[self.batch_dim], out[self.seq_dim] = self.size, 1
        return tuple(out)

    def expand(self, data: np.ndarray) -> np.ndarray:
        """Token-space values (`nd` dimensions, u or 1 on batch, 1 on seq) over the full
        grid."""
        data = np.asarray(data)
        bd, sd = self.batch_dim, self.seq_dim
        if data.shape[bd] == 1:
            return data
        got = np.take(data, self.inverse, axis=bd)
        sh = data.shape
        return got.reshape(*sh[:bd], self.batch, self.seq, *sh[sd + 1:])

    def varies(self, x: Any) -> bool:
        """Whether an operand varies along the batch or seq dimension."""
        shape = np.shape(x)
        if len(shape) > self.nd:
            return True
        pad = (1,) * (self.nd - len(shape)) + tuple(shape)
        return pad[self.batch_dim] != 1 or pad[self.seq_dim] != 1


def plain(x: Any) -> Any:
    """`x` with every `Axis` and `TokenArray` in it (nested in tuples, lists and dicts)
    replaced by its full-grid array."""
    if isinstance(x, Axis | TokenArray):
        return np.asarray(x)
    if isinstance(x, tuple | list):
        return type(x)(plain(v) for v in x)
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    return x


class _Wrapped(NDArrayOperatorsMixin):
    """Shared protocol: numpy functions and attributes other than ufuncs see the full array."""

    __slots__ = ()

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        return func(*plain(args), **plain(kwargs))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # numpy's protocol probes (__array_interface__, ...)
            raise AttributeError(name)
        return getattr(np.asarray(self), name)

    def __getitem__(self, key: Any) -> Any:
        return np.asarray(self)[key]

    def __len__(self) -> int:
        return len(np.asarray(self))

    def __bool__(self) -> bool:
        return bool(np.asarray(self))

    def __int__(self) -> int:
        return int(np.asarray(self))

    def __float__(self) -> float:
        return float(np.asarray(self))

    def __index__(self) -> int:
        return int(np.asarray(self))

    # augmented assignment rebinds (x += y is x = x + y): the producer reads plain numbers
    # the same way, so nothing may depend on an in-place update
    def __iadd__(self, other: Any) -> Any:
        return self + other

    def __isub__(self, other: Any) -> Any:
        return self - other

    def __imul__(self, other: Any) -> Any:
        return self * other

    def __itruediv__(self, other: Any) -> Any:
        return self / other

    def __ifloordiv__(self, other: Any) -> Any:
        return self // other


class Axis(_Wrapped):
    """The batch or seq axis of a piece as the producer sees it: its product with the other
    is a `TokenArray`; any other arithmetic is that of the plain axis array."""

    __slots__ = ("data", "role", "space")

    def __init__(self, data: np.ndarray, role: str, space: TokenSpace) -> None:
        self.data, self.role, self.space = data, role, space

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.data if dtype is None else self.data.astype(dtype)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if (ufunc is np.multiply and method == "__call__" and not kwargs and len(inputs) == 2
                and all(isinstance(x, Axis) for x in inputs)
                and {x.role for x in inputs} == {"batch", "seq"}
                and inputs[0].space is inputs[1].space):
            space = self.space
            shape = [1] * space.nd
            shape[space.batch_dim] = space.size
            dtype = np.result_type(inputs[0].data, inputs[1].data)
            return TokenArray(space.values.astype(dtype).reshape(shape), space)
        return getattr(ufunc, method)(*plain(inputs), **plain(kwargs))


class TokenArray(_Wrapped):
    """A value that is a function of the tokens per micro-batch (and of axes constant along
    batch and seq), held on the distinct products: `data` has u on the batch dimension and 1
    on seq. `np.asarray` gives it over the full grid."""

    __slots__ = ("data", "space")

    def __init__(self, data: np.ndarray, space: TokenSpace) -> None:
        self.data, self.space = data, space

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        full = self.space.expand(self.data)
        return full if dtype is None else full.astype(dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        """The full grid shape the value broadcasts to (as the plain array's)."""
        sh = list(self.data.shape)
        sp = self.space
        if sh[sp.batch_dim] != 1:
            sh[sp.batch_dim], sh[sp.seq_dim] = sp.batch, sp.seq
        return tuple(sh)

    @property
    def ndim(self) -> int:
        """Dimensions (those of a group's array)."""
        return self.data.ndim

    @property
    def dtype(self) -> np.dtype:
        """The values' dtype."""
        return self.data.dtype

    @property
    def size(self) -> int:
        """Elements over the full grid."""
        return math.prod(self.shape)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        compact = method == "__call__" and not kwargs
        args = []
        for x in inputs:
            if not compact:
                break
            if isinstance(x, TokenArray) and x.space is self.space:
                args.append(x.data)
            elif isinstance(x, Axis | TokenArray) or self.space.varies(x):
                compact = False
            else:
                args.append(x)
        if not compact:
            return getattr(ufunc, method)(*plain(inputs), **plain(kwargs))
        out = ufunc(*args)
        if isinstance(out, tuple):
            return tuple(TokenArray(o, self.space) for o in out)
        return TokenArray(out, self.space)


def compact(x: Any) -> tuple[Any, bool]:
    """A row field for the engine: (token-space values, True) for a token array, else (the
    plain value, False)."""
    if isinstance(x, TokenArray):
        return x.data, True
    if isinstance(x, Axis):
        return x.data, False
    return x, False


__all__ = ["WORTH", "Axis", "TokenArray", "TokenSpace", "compact", "plain"]
