"""Hugging Face models as profiling targets: build a family's transformers model from a
config (no download) and map its module paths to the op-table sublayers (transformers is an
optional extra). What differs per family is its spec's (`FamilySpec.hf_class`,
`hf_config`, `hf_patterns`, `hf_layers`); the pattern tables are in `hf_patterns.py`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from torch import nn

from bertscope.config import Checkpoint, ModelConfig, RunConfig
from bertscope.errors import BertscopeError
from bertscope.families import resolve
from bertscope.measure.attribution import Patterns
from bertscope.measure.models.layers import DROPOUT_PROB
from bertscope.requirements import require
from bertscope.taxonomy import Sublayer


def hf_sublayer(m: ModelConfig) -> Callable[[str], Sublayer | str]:
    """A module-path -> sublayer function for the Hugging Face model of `m`'s family: the
    first of its patterns that matches the path, else its parent's."""
    if m.family.spec.hf_patterns is None:
        raise BertscopeError(f"transformers has no {m.family.spec.name} model to map")
    patterns: Patterns = resolve(m.family.spec.hf_patterns)

    def sublayer_of(name: str) -> Sublayer | str:
        if not name:
            return Sublayer.OTHER
        for pattern, sub in patterns:
            if pattern.search(name):
                return sub
        parent = name.rpartition(".")[0]
        return sublayer_of(parent) if parent else Sublayer.OTHER

    return sublayer_of


def hf_layers(m: ModelConfig, model: nn.Module) -> list[nn.Module]:
    """The modules of `model` (the Hugging Face model of `m`'s family) that run as its
    layers (ALBERT: its one shared layer; T5: the encoder's blocks, then the decoder's)."""
    if m.family.spec.hf_layers is None:
        raise BertscopeError(f"transformers has no {m.family.spec.name} model to map")
    layer = re.compile(m.family.spec.hf_layers)
    return [mod for name, mod in model.named_modules() if layer.search(name)]


def build_hf_model(m: ModelConfig, run: RunConfig) -> nn.Module:
    """The transformers model of `m`'s family (its spec's `hf_class`), randomly initialised
    (no download), eager attention, dropout and checkpointing as `run` says."""
    require("--hf (Hugging Face models)", "transformers")
    import transformers

    if run.masked_lm_only:
        raise BertscopeError("Hugging Face models compute MLM logits on every position; "
                             "drop --masked-lm-only with --hf")
    spec = m.family.spec
    if spec.hf_class is None or spec.hf_config is None:
        raise BertscopeError(f"transformers has no {spec.name} model; profile the reference "
                             f"model (drop --hf)")
    cfg = resolve(spec.hf_config)(m, dropout=DROPOUT_PROB if run.dropout else 0.0)
    model = getattr(transformers, spec.hf_class)(cfg)
    if spec.hf_loss_type is not None:  # a class whose name does not say its loss
        model.loss_type = spec.hf_loss_type
    return _checkpointed(model) if (run.checkpoint is Checkpoint.FULL) else model


def _checkpointed(model: nn.Module) -> nn.Module:
    """`model` with Hugging Face's activation checkpointing of every layer turned on."""
    enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5
    kwargs = {"use_reentrant": False}
    try:
        if enable is not None:
            enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    except ValueError as e:
        raise BertscopeError(f"--checkpointing with --hf: {e}; profile the reference "
                             f"model (drop --hf) instead") from None
    return model


__all__ = ["build_hf_model", "hf_layers", "hf_sublayer"]
