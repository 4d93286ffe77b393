"""Seeded synthetic batches beyond the encoders' (`data.py`): T5's sequence-to-sequence pairs
and ViT's images, with the shapes of their pretraining data and random content.

- **T5** (span corruption, Raffel et al. 2020, section 3.1.4): `seq` input ids and
  `target_seq` label ids per sequence, drawn uniformly from the vocabulary above T5's
  special ids (pad 0, eos 1, unk 2); no padding. The decoder's inputs are the labels shifted
  right (the model does it, as Hugging Face's `_shift_right`).
- **ViT** (image classification): standard-normal pixels (already normalized images) of
  `channels x image_size x image_size` and uniform class labels.

The same seed gives the same batch on every machine (numpy's PCG64, not a device RNG).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import torch

from bertscope.config import Family, ModelConfig, RunConfig
from bertscope.measure.data import PretrainingBatch, synthetic_batch

T5_SPECIAL_IDS = 3
"""T5's SentencePiece ids below this are special (pad 0, eos 1, unk 2)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Seq2SeqBatch:
    """One T5 micro-batch: `input_ids` (B, S) and `labels` (B, S_t), int64."""

    input_ids: torch.Tensor
    labels: torch.Tensor

    def to(self, device: torch.device | str) -> Seq2SeqBatch:
        """The same batch on `device`."""
        return replace(self, **{f.name: getattr(self, f.name).to(device) for f in fields(self)})

    def model_inputs(self) -> dict[str, torch.Tensor]:
        """Keyword arguments of the reference model's and of T5ForConditionalGeneration's
        forward."""
        return {"input_ids": self.input_ids, "labels": self.labels}

    def hf_inputs(self, family: Family) -> dict[str, Any]:
        """Keyword arguments of T5ForConditionalGeneration."""
        return self.model_inputs()


@dataclass(kw_only=True, slots=True, frozen=True)
class ImageBatch:
    """One ViT micro-batch: `pixel_values` (B, C, H, W) float32 and `labels` (B,) int64."""

    pixel_values: torch.Tensor
    labels: torch.Tensor

    def to(self, device: torch.device | str) -> ImageBatch:
        """The same batch on `device`."""
        return replace(self, **{f.name: getattr(self, f.name).to(device) for f in fields(self)})

    def model_inputs(self) -> dict[str, torch.Tensor]:
        """Keyword arguments of the reference model's and ViTForImageClassification's
        forward."""
        return {"pixel_values": self.pixel_values, "labels": self.labels}

    def hf_inputs(self, family: Family) -> dict[str, Any]:
        """Keyword arguments of ViTForImageClassification."""
        return self.model_inputs()


Batch = PretrainingBatch | Seq2SeqBatch | ImageBatch
"""A micro-batch of any family."""


def family_batch(cfg: ModelConfig, run: RunConfig, *, seed: int = 0,
                 device: torch.device | str = "cpu") -> Batch:
    """A deterministic random micro-batch of `run`'s shape for `cfg`'s family."""
    rng = np.random.default_rng(seed)
    if cfg.family is Family.T5:
        def ids(length: int) -> torch.Tensor:
            a = rng.integers(T5_SPECIAL_IDS, cfg.vocab_size, size=(run.batch, length))
            return torch.from_numpy(a.astype(np.int64)).to(device)

        return Seq2SeqBatch(input_ids=ids(run.seq), labels=ids(run.target_seq))
    if cfg.family is Family.VIT:
        shape = (run.batch, cfg.channels, cfg.image_size, cfg.image_size)
        pixels = torch.from_numpy(rng.standard_normal(shape, dtype=np.float32)).to(device)
        labels = torch.from_numpy(rng.integers(0, cfg.vocab_size, size=run.batch)).to(device)
        return ImageBatch(pixel_values=pixels, labels=labels.long())
    return synthetic_batch(cfg, batch=run.batch, seq=run.seq, seed=seed, device=device)


__all__ = ["Batch", "ImageBatch", "Seq2SeqBatch", "family_batch"]
