"""RoBERTa (Liu et al. 2019): BERT's layers, one token type, positions offset past the
padding id, pretrained with the masked-LM head only (Hugging Face RobertaForMaskedLM)."""

from __future__ import annotations

from dataclasses import replace

from bertscope.families.bert import SPEC as BERT

SPEC = replace(BERT, name="roberta", model_types=("roberta",), pooler_head=False,
               special_ids=(0, 1, 2, 3, 50264),  # BPE <s> <pad> </s> <unk> <mask>
               hf_class="RobertaForMaskedLM", hf_sentence_label=None)
"""RoBERTa's spec: BERT's, without the sentence-level head."""

__all__ = ["SPEC"]
