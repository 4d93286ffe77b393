"""Model families, one spec each (`FamilySpec`), in one registry (`SPECS`).

Each module of this package is one family: its layout properties (encoder or decoder,
norm placement and kind, positions, biases), its analytic producer and parameter layout,
its reference PyTorch model and synthetic batch, its Hugging Face class, config reader and
module patterns. `bertscope.family.Family` is built from `SPECS`, and every consumer asks
the spec (`spec(model.family)`), never which family it holds.

Adding a family is a new module here plus its tests:
1. `families/<name>.py` with its `SPEC` (a `FamilySpec`), listed in `_MODULES`; `Family`
   gains the member `<NAME>` from it.
2. The code its spec names: a producer and parameter layout under `analytic/`, a config.json
   reader in `hf_config.py`, a reference model under `measure/models/`, a batch maker in
   `measure/data.py`, a pattern table in `measure/hf_patterns.py` (and its published sizes
   in `presets.py`, if any).
3. Its row in `tests/unit/test_families.py` (properties from the paper or the Hugging Face
   config) and tests of its producer and reference model against Hugging Face's.
"""

from __future__ import annotations

from bertscope.errors import BertscopeError
from bertscope.families import (
    albert,
    bert,
    gpt2,
    llama,
    roberta,
    t5,
    transformer_xl,
    vit,
    xlnet,
)
from bertscope.families.spec import Architecture, FamilySpec, Positions, resolve

_MODULES = (bert, roberta, albert, gpt2, llama, t5, vit, xlnet, transformer_xl)
"""The families, in the order `Family` lists them."""

SPECS: dict[str, FamilySpec] = {mod.SPEC.name: mod.SPEC for mod in _MODULES}
"""Family name -> its spec."""


def spec(family: str) -> FamilySpec:
    """The spec of a family (a `Family` or its name); unknown names refused in one line."""
    s = SPECS.get(str(family))
    if s is None:
        raise BertscopeError(f"unknown model family {str(family)!r}; known: "
                             f"{', '.join(SPECS)}")
    return s


def by_model_type(model_type: str) -> FamilySpec:
    """The spec whose config.json reader takes a Hugging Face `model_type` (refused in one
    line when none does)."""
    for s in SPECS.values():
        if model_type in s.model_types:
            return s
    raise BertscopeError(f"model_type {model_type!r} is not supported; supported: "
                         f"{', '.join(model_types())}")


def model_types() -> list[str]:
    """Every Hugging Face `model_type` some family reads."""
    return [t for s in SPECS.values() for t in s.model_types]


__all__ = ["SPECS", "Architecture", "FamilySpec", "Positions", "by_model_type", "model_types",
           "resolve", "spec"]
