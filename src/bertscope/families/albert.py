"""ALBERT (Lan et al. 2020): BERT's layers with a factorized embedding and one layer shared
across depth, pretrained with a masked-LM head and sentence-order prediction (Hugging Face
AlbertForPreTraining)."""

from __future__ import annotations

from dataclasses import replace

from bertscope.families.bert import SPEC as BERT

SPEC = replace(BERT, name="albert", model_types=("albert",), factorized_embedding=True,
               special_ids=(0, 1, 2, 3, 4),  # SentencePiece <pad> <unk> [CLS] [SEP] [MASK]
               hf_class="AlbertForPreTraining", hf_layers=r"albert_layers\.\d+$",
               hf_sentence_label="sentence_order_label")
"""ALBERT's spec: BERT's, with a factorized embedding, its own Hugging Face class and layer
paths."""

__all__ = ["SPEC"]
