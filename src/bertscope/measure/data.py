"""Seeded synthetic pretraining batches: the shapes and label layout of real BERT data,
random content, no downloads.

Token ids are drawn uniformly from the vocabulary minus the family's special ids; each
sequence is a pair (token type 0 for the first half, 1 for the second; all 0 where the
model has one token type); nothing is padded. ceil(15% of seq) positions per sequence
carry MLM labels (Devlin et al. 2019, section 3.1), the rest -100, and their inputs become
[MASK] where the vocabulary has it; NSP/SOP labels are fair coin flips. The same seed
gives the same batch on every machine (numpy's PCG64, not a device RNG).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import torch

from bertscope.config import Family, ModelConfig
from bertscope.errors import BertscopeError

MLM_PERCENT = 15
"""Share of positions, in percent, that carry an MLM label."""

# Vocabulary ids the data never draws: BERT's uncased WordPiece [PAD] [UNK] [CLS] [SEP]
# [MASK]; RoBERTa's BPE <s> <pad> </s> <unk> <mask>; ALBERT's SentencePiece <pad> <unk>
# [CLS] [SEP] [MASK]. The last of each is the mask token.
SPECIAL_IDS: dict[Family, tuple[int, ...]] = {
    Family.BERT: (0, 100, 101, 102, 103),
    Family.ROBERTA: (0, 1, 2, 3, 50264),
    Family.ALBERT: (0, 1, 2, 3, 4),
}


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
        RobertaForMaskedLM, AlbertForPreTraining)."""
        out: dict[str, Any] = {"input_ids": self.input_ids,
                               "token_type_ids": self.token_type_ids,
                               "attention_mask": self.attention_mask, "labels": self.mlm_labels}
        if family is Family.BERT:
            out["next_sentence_label"] = self.nsp_labels
        elif family is Family.ALBERT:
            out["sentence_order_label"] = self.nsp_labels
        return out


def synthetic_batch(cfg: ModelConfig, *, batch: int, seq: int, seed: int = 0,
                    device: torch.device | str = "cpu") -> PretrainingBatch:
    """A deterministic random pretraining batch for `cfg` (see the module docstring)."""
    if batch <= 0 or seq <= 0:
        raise BertscopeError(f"batch and seq must be positive, got {batch} and {seq}")
    if seq > cfg.max_seq:
        raise BertscopeError(f"seq {seq} exceeds {cfg.name}'s {cfg.max_seq} positions")
    special = [i for i in SPECIAL_IDS[cfg.family] if i < cfg.vocab_size]
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
    mask_id = SPECIAL_IDS[cfg.family][-1]
    inputs = ids.copy()
    if mask_id < cfg.vocab_size:
        inputs[rows, pos] = mask_id
    nsp = rng.integers(0, 2, size=batch)

    def t(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(device)

    return PretrainingBatch(input_ids=t(inputs), token_type_ids=t(types),
                            attention_mask=t(np.ones((batch, seq))), mlm_labels=t(labels),
                            nsp_labels=t(nsp))


__all__ = ["SPECIAL_IDS", "PretrainingBatch", "masked_per_sequence", "synthetic_batch"]
