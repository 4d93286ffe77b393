"""Seeded synthetic batches of every family: the shapes and label layout of their
pretraining data, random content, no downloads. A family's spec names its batch maker
(`encoder_inputs`, `causal_lm_inputs`, `seq2seq_inputs`, `image_inputs`).

- **Encoders** (BERT, RoBERTa, ALBERT): token ids drawn uniformly from the vocabulary
  minus the family's special ids; each sequence is a pair (token type 0 for the first half,
  1 for the second; all 0 where the model has one token type); nothing is padded.
  ceil(15% of seq) positions per sequence carry MLM labels (Devlin et al. 2019, section
  3.1), the rest -100, and their inputs become [MASK] where the vocabulary has it; NSP/SOP
  labels are fair coin flips.
- **Decoders** (GPT-2, Llama): uniform token ids below the vocabulary size, the labels the
  inputs themselves (the model shifts them).
- **T5** (span corruption, Raffel et al. 2020, section 3.1.4): `seq` input ids and
  `target_seq` label ids per sequence, drawn uniformly from the vocabulary above T5's
  special ids (pad 0, eos 1, unk 2); no padding. The decoder's inputs are the labels shifted
  right (the model does it, as Hugging Face's `_shift_right`).
- **XLNet** (permutation LM, `permutation_lm_batch`): uniform ids, two segments, a random
  factorization order per sequence with its last seq // K positions predicted.
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
from bertscope.errors import BertscopeError

MLM_PERCENT = 15
"""Share of positions, in percent, that carry an MLM label."""



def masked_per_sequence(seq: int) -> int:
    """Labelled positions per sequence: ceil(15% of seq)."""
    return -(-seq * MLM_PERCENT // 100)


@dataclass(kw_only=True, slots=True, frozen=True)
class PretrainingBatch:
    """One micro-batch: every tensor (B, T) int64 except `nsp_labels` (B,)."""

    input_ids: torch.Tensor
    token_type_ids: torch.Tensor
    """0 for the first half of each sequence, 1 for the second (0 with one token type)."""
    attention_mask: torch.Tensor
    """All ones: no padding."""
    mlm_labels: torch.Tensor
    """Original token id at labelled positions, -100 elsewhere."""
    nsp_labels: torch.Tensor
    """NSP (BERT) or SOP (ALBERT) class, 0 or 1; unused by RoBERTa."""

    def to(self, device: torch.device | str) -> PretrainingBatch:
        """The same batch on `device`."""
        return replace(self, **{f.name: getattr(self, f.name).to(device) for f in fields(self)})

    def model_inputs(self) -> dict[str, torch.Tensor]:
        """Keyword arguments of `EncoderForPretraining.forward`."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def hf_inputs(self, family: Family) -> dict[str, Any]:
        """Keyword arguments of the matching HF model (BertForPreTraining,
        RobertaForMaskedLM, AlbertForPreTraining): the sentence-level labels under the
        family's keyword (`FamilySpec.hf_sentence_label`), none without one."""
        out: dict[str, Any] = {"input_ids": self.input_ids,
                               "token_type_ids": self.token_type_ids,
                               "attention_mask": self.attention_mask, "labels": self.mlm_labels}
        label = family.spec.hf_sentence_label
        if label is not None:
            out[label] = self.nsp_labels
        return out


def synthetic_batch(cfg: ModelConfig, *, batch: int, seq: int, seed: int = 0,
                    device: torch.device | str = "cpu") -> PretrainingBatch:
    """A deterministic random pretraining batch for `cfg` (see the module docstring)."""
    if batch <= 0 or seq <= 0:
        raise BertscopeError(f"batch and seq must be positive, got {batch} and {seq}")
    if seq > cfg.max_seq:
        raise BertscopeError(f"seq {seq} exceeds {cfg.name}'s {cfg.max_seq} positions")
    specials = cfg.family.spec.special_ids
    if not specials:
        raise BertscopeError(f"{cfg.name}: masked-LM batches are for the encoder families "
                             f"(BERT, RoBERTa, ALBERT), not {cfg.family.value}")
    special = [i for i in specials if i < cfg.vocab_size]
    allowed = np.setdiff1d(np.arange(cfg.vocab_size), special)
    if allowed.size == 0:
        raise BertscopeError(f"vocab_size {cfg.vocab_size} leaves no non-special token ids")
    rng = np.random.default_rng(seed)
    ids = allowed[rng.integers(0, allowed.size, size=(batch, seq))]
    types = np.zeros((batch, seq), dtype=np.int64)
    if cfg.type_vocab_size > 1:
        types[:, seq // 2:] = 1
    k = masked_per_sequence(seq)
    # k distinct positions per row: the first k of a random permutation
    pos = np.argsort(rng.random((batch, seq)), axis=1)[:, :k]  # (B, k)
    rows = np.arange(batch)[:, None]
    labels = np.full((batch, seq), -100, dtype=np.int64)
    labels[rows, pos] = ids[rows, pos]
    mask_id = specials[-1]
    inputs = ids.copy()
    if mask_id < cfg.vocab_size:
        inputs[rows, pos] = mask_id
    nsp = rng.integers(0, 2, size=batch)

    def t(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(device)

    return PretrainingBatch(input_ids=t(inputs), token_type_ids=t(types),
                            attention_mask=t(np.ones((batch, seq))), mlm_labels=t(labels),
                            nsp_labels=t(nsp))


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


Batch = PretrainingBatch | Seq2SeqBatch | ImageBatch
"""A micro-batch of any family."""


def seq2seq_batch(cfg: ModelConfig, run: RunConfig, *, seed: int = 0,
                  device: torch.device | str = "cpu") -> Seq2SeqBatch:
    """A deterministic random T5 micro-batch of `run`'s shape: `seq` input and `target_seq`
    label ids above the special ids."""
    rng = np.random.default_rng(seed)

    def ids(length: int) -> torch.Tensor:
        a = rng.integers(T5_SPECIAL_IDS, cfg.vocab_size, size=(run.batch, length))
        return torch.from_numpy(a.astype(np.int64)).to(device)

    return Seq2SeqBatch(input_ids=ids(run.seq), labels=ids(run.target_seq))


def image_batch(cfg: ModelConfig, run: RunConfig, *, seed: int = 0,
                device: torch.device | str = "cpu") -> ImageBatch:
    """A deterministic random ViT micro-batch of `run`'s batch: standard-normal pixels and
    uniform class labels."""
    rng = np.random.default_rng(seed)
    shape = (run.batch, cfg.channels, cfg.image_size, cfg.image_size)
    pixels = torch.from_numpy(rng.standard_normal(shape, dtype=np.float32)).to(device)
    labels = torch.from_numpy(rng.integers(0, cfg.vocab_size, size=run.batch)).to(device)
    return ImageBatch(pixel_values=pixels, labels=labels.long())


def token_ids(m: ModelConfig, batch: int, seq: int, seed: int,
              device: torch.device) -> torch.Tensor:
    """Seeded uniform random (batch, seq) token ids below the vocabulary size."""
    if seq > m.max_seq:
        raise BertscopeError(f"seq {seq} exceeds {m.name}'s {m.max_seq} positions")
    ids = np.random.default_rng(seed).integers(0, m.vocab_size, size=(batch, seq))
    return torch.from_numpy(ids.astype(np.int64)).to(device)


def permutation_lm_batch(m: ModelConfig, run: RunConfig, *, seed: int = 0,
                         device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """A deterministic random XLNet micro-batch (Yang et al. 2019, section 2.3): uniform
    token ids, segment ids 0 then 1 (halves), one random factorization order per sequence
    whose last P = seq // K positions are predicted. A position may not see a predicted one
    at or after it in the order (`perm_mask` 1: non-predicted positions see each other);
    `target_mapping` (b, P, s) one-hot picks the predicted positions in order, `labels`
    their token ids."""
    rng = np.random.default_rng(seed)
    b, s = run.batch, run.seq
    p = s // m.partial_prediction
    ids = rng.integers(0, m.vocab_size, size=(b, s))
    order = np.stack([rng.permutation(s) for _ in range(b)])  # order[i, r]: r-th position
    rank = np.argsort(order, axis=1)  # rank[i, j]: where position j comes in the order
    target = rank >= s - p
    perm = target[:, None, :] & (rank[:, None, :] >= rank[:, :, None])
    mapping = np.zeros((b, p, s), dtype=np.float32)
    rows = np.arange(b)[:, None]
    mapping[rows, np.arange(p)[None, :], order[:, s - p:]] = 1.0
    types = (np.arange(s) >= s // 2).astype(np.int64)[None, :].repeat(b, axis=0)

    def t(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a)).to(device=device, dtype=dtype)

    return {"input_ids": t(ids, torch.long), "perm_mask": t(perm, torch.float32),
            "target_mapping": t(mapping, torch.float32),
            "token_type_ids": t(types, torch.long),
            "labels": t(np.take_along_axis(ids, order[:, s - p:], axis=1), torch.long)}


# --- batch makers: (model, run, seed, device, for a Hugging Face model) -> forward kwargs --


def encoder_inputs(m: ModelConfig, run: RunConfig, seed: int, device: torch.device,
                   hf: bool) -> dict[str, Any]:
    """One encoder pretraining micro-batch, as the reference model's or (`hf`) the Hugging
    Face model's keyword arguments."""
    b = synthetic_batch(m, batch=run.batch, seq=run.seq, seed=seed, device=device)
    return b.hf_inputs(m.family) if hf else b.model_inputs()


def causal_lm_inputs(m: ModelConfig, run: RunConfig, seed: int, device: torch.device,
                     hf: bool) -> dict[str, Any]:
    """One causal-LM micro-batch: `DecoderForCausalLM`'s and Hugging Face's causal-LM
    classes' keyword arguments (the labels are the inputs)."""
    ids = token_ids(m, run.batch, run.seq, seed, device)
    return {"input_ids": ids, "labels": ids}


def seq2seq_inputs(m: ModelConfig, run: RunConfig, seed: int, device: torch.device,
                   hf: bool) -> dict[str, Any]:
    """One T5 micro-batch (`seq2seq_batch`): the reference model and
    T5ForConditionalGeneration take the same keywords."""
    return seq2seq_batch(m, run, seed=seed, device=device).model_inputs()


def image_inputs(m: ModelConfig, run: RunConfig, seed: int, device: torch.device,
                 hf: bool) -> dict[str, Any]:
    """One ViT micro-batch (`image_batch`): the reference model and
    ViTForImageClassification take the same keywords."""
    return image_batch(m, run, seed=seed, device=device).model_inputs()


def permutation_lm_inputs(m: ModelConfig, run: RunConfig, seed: int, device: torch.device,
                          hf: bool) -> dict[str, Any]:
    """One XLNet micro-batch (`permutation_lm_batch`). The reference model carries its own
    memory; Hugging Face's XLNetLMHeadModel is given one (`mems`: standard-normal (mem_len,
    b, h) states per layer, seeded) and asked to return the next (`use_mems`)."""
    kw: dict[str, Any] = permutation_lm_batch(m, run, seed=seed, device=device)
    if hf and m.mem_len:
        rng = np.random.default_rng(seed + 1)
        kw["mems"] = [torch.from_numpy(rng.standard_normal((m.mem_len, run.batch, m.hidden),
                                                           dtype=np.float32)).to(device)
                      for _ in range(m.num_layers)]
        kw["use_mems"] = True
    return kw


__all__ = [
    "Batch",
    "ImageBatch",
    "PretrainingBatch",
    "Seq2SeqBatch",
    "causal_lm_inputs",
    "encoder_inputs",
    "image_batch",
    "image_inputs",
    "masked_per_sequence",
    "permutation_lm_batch",
    "permutation_lm_inputs",
    "seq2seq_batch",
    "seq2seq_inputs",
    "synthetic_batch",
    "token_ids",
]
