"""A sweep's grid: typed axes, checked once, split into groups that share a row structure.

Every axis is a config field under its own name: the model dimensions (`MODEL_AXES`, the
`ModelConfig` fields `num_layers`, `hidden`, `heads`, `intermediate`, `vocab_size`), every
`RunConfig` field (read from the dataclass when a grid is made, so a field added to the run
config is an axis with no change here), the layout sizes `dp`, `tp`, `pp` and `zero`
(`job.Layout`'s), and the hardware what-ifs (`KNOB_AXES`, `perf.Knobs`'). The grid is the
Cartesian product of its axes.

Run fields of enum or bool type (precision, optimizer, checkpoint, dropout, masked-LM-only,
attention, fusion) change which rows an iteration has: each combination is a `Group`, whose
`run` is a real `RunConfig`. So do micro-batches > 1 (gradient-accumulation rows) and, in
masked-LM-only runs, sequences > 1 (the MLM gather). Inside a group the numeric axes (the
model dimensions and the integer run fields: batch, seq, micro-batches, decoder-seq) span an
N-d array: each axis's values lie along its own dimension, so a formula that reads batch and
seq only is evaluated on a (1, .., nb, ns, 1, ..) array and broadcasts to the rest
(`ModelView`, `RunView`: `ModelConfig` and `RunConfig` with their swept fields as such arrays;
the analytic producer runs on them unchanged). Devices and hardware knobs multiply every group.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import math
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

import bertscope.config as config
from bertscope.config import (
    MODEL_LIMITS,
    Architecture,
    Family,
    ModelConfig,
    Positions,
)
from bertscope.errors import MAX_SIZE, BertscopeError, as_values, shown
from bertscope.job import Job, Layout
from bertscope.packing import min_seq, real_tokens
from bertscope.perf.efficiency import DeviceProfile
from bertscope.perf.roofline import Knobs, select_peaks
from bertscope.sweep.tokens import Axis, TokenSpace

MODEL_AXES: tuple[str, ...] = ("num_layers", "hidden", "heads", "intermediate", "vocab_size")
"""`ModelConfig` dimensions a sweep may vary (None on the grid: each base model's own)."""
LAYOUT_SIZES: tuple[str, ...] = ("dp", "tp", "pp")
"""Distributed layout sizes (with `zero`, the stage): any above 1 makes a multi-device point."""
LAYOUT_AXES: tuple[str, ...] = (*LAYOUT_SIZES, "zero")
"""`job.Layout` fields a sweep may vary: data-, tensor- and pipeline-parallel sizes, ZeRO."""
KNOB_AXES: tuple[str, ...] = ("gemm_peak", "bandwidth", "overhead", "memory")
"""Hardware what-ifs: multipliers of each device's figures (`perf.Knobs`)."""
_LIMITS = {**{a: MODEL_LIMITS[a] for a in MODEL_AXES}, "batch": 2**31, "seq": 2**24,
           "micro_batches": 2**20, "decoder_seq": 2**24, "dp": 2**20, "tp": 2**20,
           "pp": 2**20}
_INT_LIMIT = 2**31
"""The largest value of an integer axis not in `_LIMITS` (a run field added later)."""


@dataclasses.dataclass(frozen=True, slots=True)
class RunAxis:
    """A `RunConfig` field as a sweep axis: its name, default, type and help."""

    name: str
    default: Any
    kind: type
    """The field's type: int, bool, float, str or an enum class (`None` stripped)."""
    optional: bool
    """The field may be None (e.g. `decoder_seq`: None means `seq`)."""
    help: str
    """The field's help (`config.setting`)."""
    flag: str
    """Its command-line name: the `setting` flag, or the name with dashes."""

    @property
    def numeric(self) -> bool:
        """An integer field: its values lie along a dimension of a group's array."""
        return self.kind is int


def run_axes() -> tuple[RunAxis, ...]:
    """Every `RunConfig` field as an axis, in declaration order, read from the class now (so
    a subclass put in its place, as a test does, brings its fields)."""
    cls = config.RunConfig
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        kind, optional = _base_type(hints[f.name])
        out.append(RunAxis(f.name, f.default, kind, optional, f.metadata.get("help", ""),
                           f.metadata.get("flag") or f.name.replace("_", "-")))
    return tuple(out)


def _base_type(hint: Any) -> tuple[type, bool]:
    """(the type, whether None is allowed) of a field annotation such as `int | None`."""
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            raise BertscopeError(f"run field type {hint} cannot be a sweep axis")
        return rest[0], True
    return hint, False


def axis_names() -> tuple[str, ...]:
    """Every axis a grid accepts: model dimensions, run fields, layout, knobs."""
    return (*MODEL_AXES, *(a.name for a in run_axes()), *LAYOUT_AXES, *KNOB_AXES)


def _ints(name: str, values: Sequence[Any]) -> tuple[int, ...]:
    out = tuple(dict.fromkeys(values))  # order kept, repeats dropped
    if not out:
        raise BertscopeError(f"axis {name} is empty; give at least one value")
    limit = _LIMITS.get(name, _INT_LIMIT)
    for v in out:
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
            raise BertscopeError(f"axis {name}: values must be positive integers, got "
                                 f"{shown(v)}")
        if v > limit:
            raise BertscopeError(f"axis {name}: {v} exceeds the supported maximum {limit:,}")
    return tuple(int(v) for v in out)


def _nonempty(name: str, values: Sequence[Any]) -> tuple[Any, ...]:
    out = tuple(dict.fromkeys(values))
    if not out:
        raise BertscopeError(f"axis {name} is empty; give at least one value")
    return out


def _run_values(axis: RunAxis, values: Sequence[Any], seq: int = 128) -> tuple[Any, ...]:
    """A run axis's values checked and normalized as `RunConfig` does it (enum names become
    members; a bad value is refused with the config's own message), each in a run of
    sequence `seq` (the grid's longest: real sequence lengths must fit it)."""
    given = _nonempty(axis.name, values)
    if axis.optional and given == (None,):
        return given
    if axis.numeric:
        given = _ints(axis.name, given)
    elif axis.kind is bool and not all(isinstance(v, bool) for v in given):
        raise BertscopeError(f"axis {axis.name}: values must be true or false (bools), got "
                             f"{shown(list(given))}")
    out = []
    for v in given:
        try:
            out.append(getattr(config.RunConfig(**{"seq": seq, axis.name: v}), axis.name))
        except BertscopeError as e:
            raise BertscopeError(f"axis {axis.name}: {e}") from None
    return tuple(dict.fromkeys(out))


class Grid:
    """The axes of a sweep; every value checked on construction (`Grid(models=..., devices=...,
    batch=(8, 16), precision=("bf16",), ...)`; `axis_names()` lists the axes). Model
    dimensions left None take each base model's own (`intermediate`, when only `hidden` is
    swept, keeps the model's ratio of the two); run fields left out take `RunConfig`'s
    defaults; layout sizes 1 and ZeRO 0; knobs 1."""

    __slots__ = ("axes", "devices", "models", "num_axes", "pinned", "run", "structural")

    def __init__(self, *, models: Sequence[ModelConfig], devices: Sequence[DeviceProfile],
                 **axes: Sequence[Any] | None) -> None:
        run = run_axes()
        known = (*MODEL_AXES, *(a.name for a in run), *LAYOUT_AXES, *KNOB_AXES)
        unknown = sorted(set(axes) - set(known))
        if unknown:
            close = difflib.get_close_matches(unknown[0], known, n=1, cutoff=0.6)
            # the closest axis when there is one; the whole list (long) only when there is not
            hint = f"; did you mean {close[0]}?" if close else f"; axes: {', '.join(known)}"
            raise BertscopeError(f"unknown sweep axis {', '.join(u[:40] for u in unknown[:3])}"
                                 f"{hint}")
        # one value or a list for every argument: a string is one value, `batch=8` is [8]
        axes = {k: None if v is None else as_values(v, f"axis {k}") for k, v in axes.items()}
        self.models: tuple[ModelConfig, ...] = _nonempty("models", as_values(models, "models"))
        self.devices: tuple[DeviceProfile, ...] = _nonempty("devices",
                                                             as_values(devices, "devices"))
        self.run: tuple[RunAxis, ...] = run
        """The run config's fields as axes (read when the grid was made)."""
        self.num_axes: tuple[str, ...] = (*MODEL_AXES, *(a.name for a in run if a.numeric))
        """The numeric axes, in the order of a group's N-d array."""
        self.structural: tuple[str, ...] = tuple(a.name for a in run if not a.numeric)
        """Run fields that change which rows an iteration has: each combination a `Group`."""
        got: dict[str, tuple[Any, ...] | None] = {}
        for name in MODEL_AXES:
            values = axes.get(name)
            got[name] = None if values is None else _ints(name, tuple(values))
        for a in run:  # seq (numeric) before the real lengths that must fit it
            values = axes.get(a.name)
            longest = max(got["seq"]) if got.get("seq") else 128
            got[a.name] = _run_values(a, (a.default,) if values is None else tuple(values),
                                      seq=longest)
        self.axes: Mapping[str, tuple[Any, ...] | None] = got
        """Every axis's values (None: a model dimension each model keeps)."""
        self._check_models()
        def given(name: str, default: tuple[Any, ...]) -> tuple[Any, ...]:
            values = axes.get(name)
            return default if values is None else tuple(values)

        self.pinned: tuple[str, ...] = tuple(a for a in LAYOUT_AXES if axes.get(a) is not None)
        """The layout axes given (the others take a recipe's layout defaults where they
        apply: `sweep.multi`)."""
        for name in LAYOUT_SIZES:
            got[name] = _ints(name, given(name, (1,)))
        zeros = _nonempty("zero", given("zero", (0,)))
        if not all(isinstance(z, int | np.integer) and not isinstance(z, bool)
                   and 0 <= z <= 3 for z in zeros):
            raise BertscopeError(f"axis zero: stages are 0, 1, 2 or 3, got {shown(list(zeros))}")
        got["zero"] = tuple(int(z) for z in zeros)
        for name in KNOB_AXES:
            values = _nonempty(name, given(name, (1.0,)))
            for v in values:
                Knobs(**{name: v})  # the one check of a multiplier
            got[name] = tuple(float(v) for v in values)
        if self.size > MAX_SIZE:
            raise BertscopeError(f"the grid has {self.size:.3g} configurations, beyond "
                                 f"{MAX_SIZE:,}; narrow an axis")

    def _check_models(self) -> None:
        """Run settings some model cannot take at all (`RunConfig.check`'s rules that do not
        depend on the sequence: those skip configurations instead)."""
        if True in self.axes.get("masked_lm_only", ()):
            no_mlm = [m.name for m in self.models if not m.has_mlm_head]
            if no_mlm:
                raise BertscopeError(f"masked_lm_only applies to models with a masked-LM "
                                     f"head (BERT, RoBERTa, ALBERT), not {', '.join(no_mlm)}")
        if any(self.axes.get("seq_lengths", ("",))):
            other = [m.name for m in self.models if m.family is Family.VIT
                     or m.family.architecture is Architecture.ENCODER_DECODER]
            if other:
                raise BertscopeError(f"seq_lengths applies to encoder and decoder-only "
                                     f"language models, not {', '.join(other)}")
        if self.axes.get("decoder_seq", (None,)) != (None,):
            other = [m.name for m in self.models
                     if m.family.architecture is not Architecture.ENCODER_DECODER]
            if other:
                raise BertscopeError(f"decoder_seq applies to encoder-decoder models (T5), "
                                     f"not {', '.join(other)}")

    def refusal(self) -> str:
        """Why a grid whose every configuration was skipped cannot run, in one line: its
        first configuration checked as one job is (the model's sizes, the run against the
        model, the layout, the device's precision: the rules the engine's skips stand for)."""
        first = {name: values[0] for name, values in self.axes.items() if values is not None}
        model = self.models[0]
        sizes = {a: first[a] for a in MODEL_AXES if a in first}
        if "hidden" in sizes and "intermediate" not in sizes:  # keeps the model's ratio
            sizes["intermediate"] = round(sizes["hidden"] * model.intermediate / model.hidden)
        try:
            model = dataclasses.replace(model, **sizes) if sizes else model
            run = config.RunConfig(**{a.name: first[a.name] for a in self.run})
            Job(model=model, run=run, layout=Layout(**{k: first[k] for k in LAYOUT_AXES}))
            select_peaks(self.devices[0].device, run.precision)
        except BertscopeError as e:
            return f"the first one: {e}"
        return ("each needs sizes its model can take, a sequence within its positions, a "
                "layout that fits and a precision its device has")

    def __getitem__(self, name: str) -> tuple[Any, ...] | None:
        """An axis's values (`grid["batch"]`)."""
        return self.axes[name]

    @property
    def size(self) -> int:
        """Configurations in the grid (before those a model cannot run are skipped)."""
        n = len(self.models) * len(self.devices)
        for values in self.axes.values():
            n *= len(values) if values is not None else 1
        return n

    def knob_sets(self) -> list[Knobs]:
        """Every combination of the knob axes."""
        return [Knobs(**dict(zip(KNOB_AXES, c, strict=True)))
                for c in itertools.product(*(self.axes[k] for k in KNOB_AXES))]

    def layouts(self) -> list[tuple[int, ...]]:
        """Every (dp, tp, pp, zero) combination."""
        return list(itertools.product(*(self.axes[k] for k in LAYOUT_AXES)))

    def groups(self) -> Iterator[Group]:
        """The grid split into groups that share one row structure."""
        ratio = self.axes["intermediate"] is None and self.axes["hidden"] is not None
        for model in self.models:
            values = {name: _array(self.axes[name], model, name) for name in self.num_axes}
            for combo in itertools.product(*(self.axes[n] for n in self.structural)):
                run = config.RunConfig(seq=max(self.axes["seq"]),  # the lengths fit it
                                       **dict(zip(self.structural, combo, strict=True)))
                for part in _splits(values, run.masked_lm_only):
                    yield Group(model=model, run=run, values=part, axes=self.num_axes,
                                intermediate_follows_hidden=ratio)


def _array(values: tuple[Any, ...] | None, model: ModelConfig, name: str) -> np.ndarray:
    """A numeric axis's values as floats: a model dimension left None is the model's own; a
    run field left None (`decoder_seq`) is NaN."""
    if values is None:
        return np.asarray([getattr(model, name)], dtype=float)
    return np.asarray([np.nan if v is None else v for v in values], dtype=float)


def _splits(values: dict[str, np.ndarray], masked: bool) -> Iterator[dict[str, np.ndarray]]:
    """The axis values split where the row structure changes: micro-batches 1 vs more, and
    (masked-LM-only) sequence 1 vs longer."""
    micro = values["micro_batches"]
    seq = values["seq"]
    for mpart in (micro[micro == 1], micro[micro > 1]):
        if not mpart.size:
            continue
        sparts = (seq[seq == 1], seq[seq > 1]) if masked else (seq,)
        for spart in sparts:
            if spart.size:
                yield {**values, "micro_batches": mpart, "seq": spart}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Group:
    """Configurations sharing one row structure: a base model, a run config holding the
    structural settings (its numeric fields at their defaults: those vary in `values`), and
    the numeric axes' values (floats: products stay exact to 2^53 and never overflow)."""

    model: ModelConfig
    run: config.RunConfig
    values: dict[str, np.ndarray] = dataclasses.field(repr=False)
    axes: tuple[str, ...]
    """The numeric axes, in the order of the group's array dimensions."""
    intermediate_follows_hidden: bool = False
    """The feed-forward size follows hidden at the base model's ratio (hidden swept,
    intermediate not)."""

    @property
    def shape(self) -> tuple[int, ...]:
        """The group's N-d array shape (one dimension per numeric axis)."""
        return tuple(len(self.values[a]) for a in self.axes)

    @property
    def size(self) -> int:
        """Configurations in the group (per device and knob set)."""
        return math.prod(self.shape)

    def axis(self, name: str) -> np.ndarray:
        """An axis's values shaped to broadcast along its own dimension."""
        shape = [1] * len(self.axes)
        shape[self.axes.index(name)] = -1
        return self.values[name].reshape(shape)

    def swept(self, name: str) -> bool:
        """Whether an optional run field holds values here (not None: NaN in `values`)."""
        return not np.isnan(self.values[name]).all()

    def column(self, name: str) -> np.ndarray:
        """A numeric axis as the configurations see it, over the group's full shape (the
        feed-forward size follows hidden when `intermediate_follows_hidden`)."""
        values = ModelView(self).intermediate if name == "intermediate" else self.axis(name)
        return np.broadcast_to(values, self.shape)

    def views(self, *, tokens: bool = False) -> tuple[ModelView, RunView]:
        """The model and run configs of the group, size fields as broadcasting arrays (with
        `tokens`, batch and seq as `sweep.tokens.Axis` values: `RunView`)."""
        return ModelView(self), RunView(self, tokens=tokens)

    def valid(self) -> np.ndarray:
        """Configurations a model can run (heads divide hidden, the sequence fits the
        positions), as a boolean array of the group's shape."""
        m, run = self.views()
        base = self.model
        ok = m.intermediate >= 1
        if base.head_size is None:
            ok = ok & (m.hidden % m.heads == 0)
        ok = ok & (m.heads % m.kv_groups == 0)
        if base.family is Family.VIT:
            ok = ok & (run.seq == m.max_positions)
        elif base.family.positions is not Positions.RELATIVE:
            ok = ok & (run.seq <= m.max_positions - m.position_offset)
        ok = ok & (run.seq >= min_seq(run))  # the real lengths (packed: a row's) fit seq
        return np.broadcast_to(ok, self.shape)


class ModelView:
    """`ModelConfig` for a group: every field of the base model, the swept dimensions
    (`MODEL_AXES`) as arrays over the group's axes, and the derived sizes the producers read
    computed on those arrays."""

    def __init__(self, g: Group) -> None:
        base = g.model
        for f in dataclasses.fields(base):
            setattr(self, f.name, getattr(base, f.name))
        self.max_positions = float(base.max_positions)
        self.type_vocab_size = float(base.type_vocab_size)
        for name in MODEL_AXES:
            setattr(self, name, g.axis(name))
        if g.intermediate_follows_hidden:
            self.intermediate = np.round(g.axis("hidden") * base.intermediate / base.hidden)
        self.emb = float(base.embedding_size) if base.embedding_size is not None else self.hidden
        self.head_dim = self.hidden // self.heads if base.head_size is None else base.head_size
        self.has_pooler_head = base.has_pooler_head
        self.has_mlm_head = base.has_mlm_head
        # grouped-query attention keeps the base model's query heads per key/value head
        self.kv_groups = base.kv_groups
        self.kv_head_count = self.heads // self.kv_groups
        self.patches = base.patches
        self.decoder_layer_count = (0 if not base.decoder_layer_count else self.num_layers
                                    if base.decoder_layers is None
                                    else float(base.decoder_layers))
        self.stack_layers = self.num_layers + self.decoder_layer_count
        self.max_seq = self.max_positions - base.position_offset


class RunView:
    """`RunConfig` for a group: every field of the group's run config, the numeric ones as
    arrays over the group's axes (an optional one the grid does not sweep keeps the run
    config's value). With `tokens`, batch and seq are `sweep.tokens.Axis`
    values, so that rows reading only their product are computed on its distinct values
    (where that pays: `TokenSpace.of`)."""

    def __init__(self, g: Group, *, tokens: bool = False) -> None:
        for f in dataclasses.fields(g.run):
            setattr(self, f.name, getattr(g.run, f.name))
        for name in g.axes[len(MODEL_AXES):]:  # an optional field left unswept keeps the
            # group's run config's value: None, or its recipe's (`vocab_multiple`)
            setattr(self, name, g.axis(name) if g.swept(name) else getattr(g.run, name))
        space = TokenSpace.of(self.batch, self.seq) if tokens else None
        self.space = space
        if space is not None:
            self.batch, self.seq = Axis(self.batch, "batch", space), Axis(self.seq, "seq", space)

    @property
    def tokens(self) -> Any:
        """Real tokens per optimizer step: batch x seq x micro-batches, or with real
        sequence lengths their sum (`packing.real_tokens`)."""
        return real_tokens(self) * self.micro_batches

    @property
    def target_seq(self) -> Any:
        """The decoder's tokens per sequence of an encoder-decoder run (`decoder_seq`, or
        `seq`)."""
        return self.decoder_seq if self.decoder_seq is not None else self.seq


__all__ = ["KNOB_AXES", "LAYOUT_AXES", "LAYOUT_SIZES", "MODEL_AXES", "Grid", "Group",
           "ModelView", "RunAxis", "RunView", "axis_names", "run_axes"]
