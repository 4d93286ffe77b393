"""BERT (Devlin et al. 2019): a post-norm encoder with learned positions, biased linears
and LayerNorm, pretrained with a masked-LM head and next-sentence prediction on the pooled
[CLS] (Hugging Face BertForPreTraining)."""

from __future__ import annotations

from bertscope.families.spec import Architecture, FamilySpec, Positions

SPEC = FamilySpec(
    name="bert",
    model_types=("bert",),
    architecture=Architecture.ENCODER,
    pre_norm=False,
    rms_norm=False,
    positions=Positions.LEARNED,
    bias=True,
    fused_qkv=False,
    mlm_head=True,
    pooler_head=True,
    dropout=True,
    factorized_embedding=False,
    # uncased WordPiece [PAD] [UNK] [CLS] [SEP] [MASK] (bert-base-uncased vocab.txt)
    special_ids=(0, 100, 101, 102, 103),
    producer="bertscope.analytic.encoder:encoder_blocks",
    layout="bertscope.analytic.params:encoder_layout",
    config_reader="bertscope.hf_config:read_encoder",
    reference="bertscope.measure.models.encoder:build_encoder",
    reference_layer="bertscope.measure.models.encoder:EncoderLayer",
    reference_sublayer="bertscope.measure.models.layers:encoder_sublayer",
    batch="bertscope.measure.data:encoder_inputs",
    hf_class="BertForPreTraining",
    hf_config="bertscope.measure.hf_weights:hf_config",
    hf_patterns="bertscope.measure.hf_patterns:ENCODER",
    hf_layers=r"encoder\.layer\.\d+$",
    hf_sentence_label="next_sentence_label",
)
"""BERT's spec."""

__all__ = ["SPEC"]
