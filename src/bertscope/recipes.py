"""Training recipes: the software stacks people train with, as data files of defaults.

A recipe names a stack (`Recipe`) and its file `bertscope/data/recipes/<name>.toml` says what
that stack does, one cited choice per key:

    [run]        defaults of the run fields a recipe may set (`RunConfig` fields declared with
                 `setting(..., recipe=True)`: attention, fusion, weight_cast,
                 fused_accumulation); every such field is listed in every file
    [layout]     defaults of layout fields (`job.Layout`: sequence_parallel, zero, schedule,
                 ...), applied only where they apply to a job's layout (`job.Job.build`)

The recipe is a job field (`RunConfig.recipe`): a run field the user leaves unset (None) takes
its recipe's value, one the user gives keeps it (`--recipe megatron --attention eager` runs
eager attention). This module only reads and shapes the files (tables and scalar values);
which keys exist and what values they take is checked by the classes that own the fields
(`config.RunConfig` for [run], `job.Layout` for [layout]), each error naming the file and key.
"""

from __future__ import annotations

import difflib
import functools
import typing
from dataclasses import fields
from enum import StrEnum
from importlib.resources import files
from pathlib import Path
from typing import Any

from bertscope.bounded import loads_toml
from bertscope.errors import BertscopeError, parse_enum, shown


class Recipe(StrEnum):
    """A training stack whose defaults a job takes (`data/recipes/<value>.toml`)."""

    EAGER = "eager"
    """Hugging Face-style eager PyTorch with torch.autocast: the model as `profile` measures
    it (the default; every number without a recipe is this one's)."""
    FUSED = "fused"
    """NVIDIA's BERT recipe (DeepLearningExamples PyTorch BERT with apex): fused layer norm,
    bias-GELU and LAMB/Adam kernels, apex AMP O2 (16-bit model, fp32 master weights copied
    once per step)."""
    MEGATRON = "megatron"
    """Megatron-Core with Transformer Engine: flash attention, 16-bit weights kept beside fp32
    main parameters and gradients, gradient accumulation fused into the weight-gradient GEMM,
    distributed optimizer, sequence parallelism, interleaved pipeline schedule."""


SECTIONS = ("run", "layout")
"""The tables a recipe file may have."""

_ROOT: Any = files("bertscope") / "data" / "recipes"
"""Where the recipe files are (a test may point it elsewhere and clear `load`'s cache)."""


def recipe_path(recipe: Recipe) -> Any:
    """The file of `recipe` (a path-like object; `str()` of it is shown in errors)."""
    return _ROOT / f"{Recipe(recipe).value}.toml"


@functools.cache
def load(recipe: Recipe) -> dict[str, dict[str, Any]]:
    """The recipe file's tables {"run": {...}, "layout": {...}} (a table left out is empty),
    every value a bool, int or string; anything else in the file is refused in one line
    naming the file and the key."""
    path = recipe_path(recipe)
    where = _name(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise BertscopeError(f"{where}: cannot read the recipe file ({e.strerror or e})"
                             ) from None
    doc = loads_toml(text, where)
    unknown = [k for k in doc if k not in SECTIONS]
    if unknown:
        raise BertscopeError(f"{where}: unknown table {shown(unknown[0])}; a recipe has "
                             f"{' and '.join(f'[{s}]' for s in SECTIONS)}")
    out: dict[str, dict[str, Any]] = {}
    for section in SECTIONS:
        table = doc.get(section, {})
        if not isinstance(table, dict):
            raise BertscopeError(f"{where}: {section} must be a table ([{section}]), got "
                                 f"{shown(table)}")
        for key, value in table.items():
            if not isinstance(value, bool | int | str):
                raise BertscopeError(f"{where}: [{section}] {key} must be a bool, integer or "
                                     f"string, got {shown(value)}")
        out[section] = dict(table)
    return out


def origin(recipe: Recipe, section: str, key: str) -> str:
    """How an error names a recipe's key: "<file>: [section] key"."""
    return f"{_name(recipe_path(recipe))}: [{section}] {key}"


def _name(path: Any) -> str:
    """A recipe file's name as errors show it: the path for files on disk."""
    return str(Path(str(path)))


def field_names(cls: type) -> tuple[str, ...]:
    """The fields of the config dataclass `cls` a recipe sets (declared
    `config.setting(..., recipe=True)`)."""
    return tuple(f.name for f in fields(cls) if f.metadata.get("recipe"))


def _field_type(cls: type, name: str) -> Any:
    """A field's type, `X | None` as X (a bool or an enum for the recipe fields)."""
    hint = typing.get_type_hints(cls)[name]
    return next(a for a in typing.get_args(hint) if a is not type(None)) \
        if typing.get_args(hint) else hint


@functools.cache
def defaults(recipe: Recipe, cls: type, section: str) -> dict[str, Any]:
    """The [`section`] defaults of `recipe`'s file for the config class `cls`, each checked
    as `cls` checks the field: every recipe field present, no other key, each value valid
    (one-line errors naming the file and the key)."""
    table = load(recipe)[section]
    names = field_names(cls)
    for key in table:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise BertscopeError(f"{origin(recipe, section, key)}: not a {section} setting a "
                                 f"recipe sets{hint}; those are {', '.join(names)}")
    out: dict[str, Any] = {}
    for name in names:
        if name not in table:
            raise BertscopeError(f"{origin(recipe, section, name)}: missing; every recipe "
                                 f"gives {', '.join(names)}")
        value, kind = table[name], _field_type(cls, name)
        if kind is bool:
            if not isinstance(value, bool):
                raise BertscopeError(f"{origin(recipe, section, name)}: must be true or "
                                     f"false, got {shown(value)}")
            out[name] = value
        elif kind is int:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise BertscopeError(f"{origin(recipe, section, name)}: must be a whole "
                                     f"number >= 1, got {shown(value)}")
            out[name] = value
        else:
            try:
                out[name] = parse_enum(kind, value, name)
            except BertscopeError as e:
                raise BertscopeError(f"{origin(recipe, section, name)}: {e}") from None
    return out


__all__ = ["SECTIONS", "Recipe", "defaults", "field_names", "load", "origin", "recipe_path"]
