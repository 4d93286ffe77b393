"""Parameter counts of the encoder family, group by group, as Hugging Face builds the models.

Groups are the optimizer's parameter groups in the op table: `embedding`, one per encoder
layer (one in all for ALBERT's shared layer), `pooler`, and `heads` (pretraining heads).
"""

from __future__ import annotations

from dataclasses import dataclass

from bertscope.config import Family, ModelConfig


@dataclass(frozen=True, slots=True)
class ParamGroup:
    """Parameters of one part of the model: element count and number of tensors."""

    name: str
    layer: int
    """Encoder layer index; -1 for groups outside the encoder stack."""
    params: int
    tensors: int


def linear(d_in: int, d_out: int) -> int:
    """Weight plus bias of a Linear layer."""
    return d_in * d_out + d_out


def layer_params(m: ModelConfig) -> int:
    """One encoder layer: Q, K, V, output projection, two layernorms, FFN1, FFN2."""
    h, f = m.hidden, m.intermediate
    return 4 * linear(h, h) + linear(h, f) + linear(f, h) + 2 * (2 * h)


def embedding_params(m: ModelConfig) -> int:
    """Word, position and token-type tables, layernorm; ALBERT's E -> h projection."""
    e = m.emb
    n = (m.vocab_size + m.max_positions + m.type_vocab_size) * e + 2 * e
    if m.family is Family.ALBERT:
        n += linear(e, m.hidden)  # embedding_hidden_mapping_in
    return n


def head_params(m: ModelConfig) -> int:
    """Pretraining heads beyond the pooler: MLM transform, layernorm, decoder bias (the
    decoder weight is tied to the word embeddings), and the NSP/SOP classifier."""
    h, e, v = m.hidden, m.emb, m.vocab_size
    d = e if m.family is Family.ALBERT else h  # ALBERT's head transforms h -> E
    mlm = linear(h, d) + 2 * d + v
    cls = linear(h, 2) if m.has_pooler_head else 0
    return mlm + cls


def param_groups(m: ModelConfig, *, pretraining: bool = True) -> list[ParamGroup]:
    """The model's parameter groups. `pretraining=False` gives the bare encoder as
    Hugging Face's BertModel/RobertaModel/AlbertModel builds it (with its pooler)."""
    groups = [ParamGroup("embedding", -1, embedding_params(m),
                         3 + 2 + (2 if m.family is Family.ALBERT else 0))]
    n_layer_groups = 1 if m.share_layers else m.num_layers
    groups += [ParamGroup("layer", i, layer_params(m), 16) for i in range(n_layer_groups)]
    if not pretraining or m.has_pooler_head:
        groups.append(ParamGroup("pooler", -1, linear(m.hidden, m.hidden), 2))
    if pretraining:
        groups.append(ParamGroup("heads", -1, head_params(m),
                                 5 + (2 if m.has_pooler_head else 0)))
    return groups


def parameter_count(m: ModelConfig, *, pretraining: bool = True) -> int:
    """Unique trainable parameters (shared ALBERT weights and tied decoder counted once)."""
    return sum(g.params for g in param_groups(m, pretraining=pretraining))


__all__ = ["ParamGroup", "param_groups", "parameter_count"]
