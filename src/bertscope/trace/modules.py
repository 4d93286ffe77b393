"""Module paths -> layer index and sublayer, from the table in `bertscope/data/modules.toml`.

A trace recorded with modules (`with_modules`/`with_stack`) has an `nn.Module: <Class>_<id>`
event around each module call; record_function annotations name scopes too. The attribution
(`attribute.py`) walks them as nested scopes and writes each op's place as the chain of
calls around it (`BertLayer#3/BertAttention#0/BertSelfAttention#0/Linear#1|`, see the table's
header); this module answers, from data only, which sublayer a place is and whether a scope
is a layer of the stack.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

from bertscope.bounded import loads_toml
from bertscope.errors import BertscopeError, expect, parse_enum
from bertscope.taxonomy import Category, Regex, Sublayer

MODULE_PREFIX = "nn.Module: "
"""Name prefix of torch.profiler's module-call events (python_function category)."""
ATTN_CORE = "attn_core"
"""The table's marker for a whole attention core (split into score, softmax, context)."""
_ID = re.compile(r"_(\d+)$")


@dataclass(frozen=True, slots=True)
class ModulePlace:
    """What the table says of a place: its sublayer, and for an attention core the key of
    the call whose ops are split into score / softmax / context (None otherwise)."""

    sublayer: Sublayer
    core: str | None = None


@dataclass(frozen=True, slots=True)
class _Row:
    regex: Regex
    sublayer: Sublayer | None
    """None: an attention core (`ATTN_CORE`)."""


class ModuleMap:
    """The module table: layer classes and the ordered place -> sublayer rows."""

    def __init__(self, rows: tuple[_Row, ...], layer_class: Regex, dotted: Regex,
                 kinds: tuple[tuple[Regex, Category], ...] = ()) -> None:
        self.rows = rows
        self.layer_class = layer_class
        self.dotted = dotted
        self.kinds = kinds
        self._cache: dict[str, ModulePlace | None] = {}
        self._kind: dict[str, Category | None] = {}

    def place(self, where: str) -> ModulePlace | None:
        """The sublayer of an op at `where` (path "|" last child); None when no row matches."""
        if where in self._cache:
            return self._cache[where]
        out = None
        for row in self.rows:
            m = row.regex.search(where)
            if m is None:
                continue
            if row.sublayer is None:
                core = where[:m.end("core")] if "core" in row.regex.groupindex else where
                out = ModulePlace(Sublayer.ATTN_SCORE, core)
            else:
                out = ModulePlace(row.sublayer)
            break
        self._cache[where] = out
        return out

    def kind(self, cls: str) -> Category | None:
        """The category of the elementwise, reduction and copy ops a module of class `cls`
        runs itself (`[[kind]]` rows), else None."""
        if cls not in self._kind:
            self._kind[cls] = next((c for r, c in self.kinds if r.search(cls)), None)
        return self._kind[cls]

    def is_layer(self, cls: str) -> bool:
        """Whether calls of module class `cls` are the stack's layers."""
        return self.layer_class.search(cls) is not None

    def dotted_layer(self, name: str) -> int | None:
        """The layer index a record_function name like `bert.encoder.layer.3.attention`
        gives, else None."""
        m = self.dotted.search(name)
        return int(m.group(1)) if m else None


def module_class(name: str) -> tuple[str, str] | None:
    """(display name, class) of an `nn.Module: BertLayer_3` event: ("BertLayer_3",
    "BertLayer"); None for any other name."""
    if not name.startswith(MODULE_PREFIX):
        return None
    display = name[len(MODULE_PREFIX):]
    return display, _ID.sub("", display)


def _parse(text: str, origin: str) -> ModuleMap:
    doc = loads_toml(text, origin)
    layers = doc.get("layer")
    rows = doc.get("module")
    if not isinstance(layers, list) or len(layers) != 1 or not isinstance(rows, list):
        raise BertscopeError(f"{origin}: expected one [[layer]] table and [[module]] rows")
    out = []
    for i, row in enumerate(rows, 1):
        where = f"{origin}: module {i}"
        regex, sub = expect(row, "regex", str, where), expect(row, "sublayer", str, where)
        expect(row, "note", str, where, "")
        out.append(_Row(Regex(regex),
                        None if sub == ATTN_CORE else parse_enum(Sublayer, sub, "sublayer",
                                                                 where)))
    kinds = []
    for i, row in enumerate(doc.get("kind", []), 1):
        where = f"{origin}: kind {i}"
        expect(row, "note", str, where, "")
        kinds.append((Regex(expect(row, "class", str, where)),
                      parse_enum(Category, expect(row, "category", str, where), "category",
                                 where)))
    where = f"{origin}: layer"
    return ModuleMap(tuple(out), Regex(expect(layers[0], "class", str, where)),
                     Regex(expect(layers[0], "dotted", str, where)), tuple(kinds))


@cache
def builtin_modules() -> ModuleMap:
    """The built-in module table (`bertscope/data/modules.toml`; its regexes compiled where
    first reached, every one checked by tests/unit/test_trace_patterns.py)."""
    text = (files("bertscope") / "data" / "modules.toml").read_text(encoding="utf-8")
    return _parse(text, "modules.toml")


__all__ = ["ATTN_CORE", "MODULE_PREFIX", "ModuleMap", "ModulePlace", "builtin_modules",
           "module_class"]
