"""RoBERTa (Liu et al. 2019): BERT's layers, one token type, positions offset past the
padding id, pretrained with the masked-LM head only (Hugging Face RobertaForMaskedLM)."""

from __future__ import annotations

from dataclasses import replace

from bertscope.families.bert import SPEC as BERT

SPEC = replace(BERT, name="roberta", model_types=("roberta",), pooler_head=False,
               hf_class="RobertaForMaskedLM")
"""RoBERTa's spec: BERT's, without the sentence-level head."""

__all__ = ["SPEC"]
