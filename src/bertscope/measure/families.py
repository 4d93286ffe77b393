"""Which reference PyTorch model measures each family, how its module paths map to
sublayers, which modules are its layers, and what one micro-batch of synthetic inputs is.

The profiler reaches every family through `measured(family)`; a family is measured once it is
registered here (its analytic producer is registered in `analytic.families`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from bertscope.config import Family, ModelConfig, RunConfig
from bertscope.errors import BertscopeError
from bertscope.measure.attribution import SublayerOf
from bertscope.measure.data import synthetic_batch
from bertscope.measure.models import EncoderLayer, build_model, module_sublayer
from bertscope.measure.models_decoder import (
    DecoderLayer,
    build_decoder,
    decoder_inputs,
    decoder_sublayer,
)
from bertscope.taxonomy import Sublayer

Inputs = Callable[[ModelConfig, RunConfig, int, torch.device, bool], dict[str, Any]]
"""(model, run, seed, device, for a Hugging Face model) -> forward keyword arguments."""


@dataclass(frozen=True, slots=True)
class MeasuredFamily:
    """How one family is measured with its reference model."""

    build: Callable[[ModelConfig, RunConfig], nn.Module]
    """The reference model for a run."""
    sublayer_of: SublayerOf
    """Module path -> sublayer."""
    layer_type: type[nn.Module]
    """The class of its layers (the profiler numbers their calls)."""
    inputs: Inputs
    """One micro-batch of synthetic inputs."""


def encoder_sublayer(name: str) -> Sublayer:
    """`models.module_sublayer`, with the attention module's own ops (splitting and merging
    heads) counted with the Q/K/V projections."""
    parts = name.split(".")
    if len(parts) == 3 and parts[0] == "layers" and parts[2] == "attn":
        return Sublayer.QKV
    return module_sublayer(name)


def _encoder_inputs(m: ModelConfig, run: RunConfig, seed: int, device: torch.device,
                    hf: bool) -> dict[str, Any]:
    b = synthetic_batch(m, batch=run.batch, seq=run.seq, seed=seed, device=device)
    return b.hf_inputs(m.family) if hf else b.model_inputs()


def token_ids(m: ModelConfig, batch: int, seq: int, seed: int,
              device: torch.device) -> torch.Tensor:
    """Seeded uniform random (batch, seq) token ids below the vocabulary size."""
    if seq > m.max_seq:
        raise BertscopeError(f"seq {seq} exceeds {m.name}'s {m.max_seq} positions")
    ids = np.random.default_rng(seed).integers(0, m.vocab_size, size=(batch, seq))
    return torch.from_numpy(ids.astype(np.int64)).to(device)


def _decoder_inputs(m: ModelConfig, run: RunConfig, seed: int, device: torch.device,
                    hf: bool) -> dict[str, Any]:
    return decoder_inputs(token_ids(m, run.batch, run.seq, seed, device))


_ENCODER = MeasuredFamily(build_model, encoder_sublayer, EncoderLayer, _encoder_inputs)
_DECODER = MeasuredFamily(build_decoder, decoder_sublayer, DecoderLayer, _decoder_inputs)

MEASURED: dict[Family, MeasuredFamily] = {
    Family.BERT: _ENCODER,
    Family.ROBERTA: _ENCODER,
    Family.ALBERT: _ENCODER,
    Family.GPT2: _DECODER,
    Family.LLAMA: _DECODER,
}
"""Family -> how it is measured."""


def measured(m: ModelConfig) -> MeasuredFamily:
    """How `m`'s family is measured (refused in one line when it has no reference model)."""
    fam = MEASURED.get(m.family)
    if fam is None:
        raise BertscopeError(f"model {m.name!r}: family {m.family.value!r} has no reference "
                             f"PyTorch model yet; measured: "
                             f"{', '.join(f.value for f in MEASURED)}")
    return fam


__all__ = ["MEASURED", "MeasuredFamily", "encoder_sublayer", "measured", "token_ids"]
