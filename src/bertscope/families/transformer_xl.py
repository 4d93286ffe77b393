"""Transformer-XL (Dai et al. 2019): a post-norm causal decoder with segment-level recurrence
(each layer attends over `mem_len` cached hidden states of the previous segment, without
gradients through them), relative positional encodings (a sinusoid table of the key
positions projected in every layer, the r_w / r_r biases and the relative shift), ReLU
feed-forward layers and an adaptive input and adaptive softmax over large vocabularies
(Baevski & Auli 2019; Grave et al. 2017).

The layout is the authors' PyTorch code (github.com/kimiyoung/transformer-xl,
`pytorch/mem_transformer.py`: `RelPartialLearnableDecoderLayer`, `AdaptiveEmbedding`,
`ProjectedAdaptiveLogSoftmax`), post-norm as its default `pre_lnorm=False`. Hugging Face
transformers 5 no longer has the model, so there is no `--hf` and no config.json reader.
"""

from __future__ import annotations

from bertscope.families.spec import Architecture, FamilySpec, Positions

SPEC = FamilySpec(
    name="transformer-xl",
    model_types=(),
    architecture=Architecture.DECODER,
    pre_norm=False,
    rms_norm=False,
    positions=Positions.RELATIVE,
    bias=True,
    fused_qkv=True,
    mlm_head=False,
    pooler_head=False,
    dropout=True,
    factorized_embedding=False,
    producer="bertscope.analytic.transformer_xl:txl_blocks",
    layout="bertscope.analytic.transformer_xl:txl_layout",
    config_reader=None,
    reference="bertscope.measure.models.transformer_xl:build_txl",
    reference_layer="bertscope.measure.models.transformer_xl:TxlLayer",
    reference_sublayer="bertscope.measure.models.transformer_xl:txl_sublayer",
    batch="bertscope.measure.models.transformer_xl:txl_inputs",
    hf_class=None,
    hf_config=None,
    hf_patterns=None,
    hf_layers=None,
)
"""Transformer-XL's spec."""

__all__ = ["SPEC"]
