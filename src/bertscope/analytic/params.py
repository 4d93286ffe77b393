"""Parameter counts of the encoder family, group by group, as Hugging Face builds the models.

Groups are the optimizer's parameter groups in the op table: `embedding`, one per encoder
layer (one in all for ALBERT's shared layer), `pooler`, and `heads` (pretraining heads).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bertscope.config import ModelConfig
from bertscope.families import resolve


@dataclass(frozen=True, slots=True)
class ParamGroup:
    """Parameters of one part of the model: element count and number of tensors."""

    name: str
    layer: int
    """Layer index; -1 for groups outside the layer stacks."""
    params: int
    tensors: int
    split: int = 0
    """Of `params`, those Megatron-LM's tensor parallelism divides among the ranks (column-
    and row-parallel weights, column-parallel biases, vocabulary-parallel tables); the rest
    (norms, row-parallel biases, position tables) every rank keeps whole."""


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
    if m.family.factorized_embedding:
        n += linear(e, m.hidden)  # embedding_hidden_mapping_in
    return n


def head_params(m: ModelConfig) -> int:
    """Pretraining heads beyond the pooler: MLM transform, layernorm, decoder bias (the
    decoder weight is tied to the word embeddings), and the NSP/SOP classifier."""
    h, e, v = m.hidden, m.emb, m.vocab_size
    d = e if m.family.factorized_embedding else h  # ALBERT's head transforms h -> E
    mlm = linear(h, d) + 2 * d + v
    cls = linear(h, 2) if m.has_pooler_head else 0
    return mlm + cls


@dataclass(frozen=True, slots=True)
class StackGroup:
    """The parameter group of one layer of a stack, written once for the stack's first layer,
    with how it repeats."""

    group: ParamGroup
    """The first layer's group (its `layer` is the stack's first layer index)."""
    per_layer: bool = True
    """One group per layer (not for ALBERT's shared layer)."""
    layers: int | None = None
    """Layers of the stack (None: the model's `num_layers`)."""


@dataclass(frozen=True, slots=True)
class GroupLayout:
    """The parameter groups as written once: those before the layer stacks, each stack's
    layer group (one stack for encoders and decoders; T5's encoder and decoder), those after."""

    before: list[ParamGroup]
    stacks: list[StackGroup]
    after: list[ParamGroup]

    def stack_layers(self, stack: StackGroup, num_layers: int) -> int:
        """Groups the stack lays out: its layers, or 1 for a shared layer."""
        if not stack.per_layer:
            return 1
        return num_layers if stack.layers is None else stack.layers


ParamLayout = Callable[[ModelConfig, bool], GroupLayout]
"""(model, pretraining) -> its parameter groups as written once: a family's parameter
layout (`FamilySpec.layout`)."""


def group_layout(m: ModelConfig, *, pretraining: bool = True) -> GroupLayout:
    """The model's parameter groups, each written once (`param_groups` lays them out), from
    its family's layout (its spec's `layout`). `pretraining=False` gives the bare model as
    Hugging Face's base class builds it (BertModel with its pooler, GPT2Model, ...)."""
    fn: ParamLayout = resolve(m.family.spec.layout)
    return fn(m, pretraining)


def encoder_layout(m: ModelConfig, pretraining: bool = True) -> GroupLayout:
    """BERT, RoBERTa and ALBERT: embeddings, the encoder layer (shared in ALBERT), the pooler
    and the pretraining heads, as Hugging Face's BertModel/RobertaModel/AlbertModel and their
    pretraining classes build them."""
    h, f = m.hidden, m.intermediate
    before = [ParamGroup("embedding", -1, embedding_params(m),
                         3 + 2 + (2 if m.family.factorized_embedding else 0),
                         split=m.vocab_size * m.emb)]  # the word table, by vocabulary
    after = []
    if not pretraining or m.has_pooler_head:
        after.append(ParamGroup("pooler", -1, linear(m.hidden, m.hidden), 2))
    if pretraining:  # the MLM decoder's bias, by vocabulary
        after.append(ParamGroup("heads", -1, head_params(m),
                                5 + (2 if m.has_pooler_head else 0), split=m.vocab_size))
    # Q, K, V, output and FFN weights; Q/K/V/FFN1 biases (the output and FFN2 biases, added
    # after the all-reduce, and the layernorms are whole on every rank)
    layer = ParamGroup("layer", 0, layer_params(m), 16, split=4 * h * h + 2 * h * f + 3 * h + f)
    return GroupLayout(before, [StackGroup(layer, per_layer=not m.share_layers)], after)


def param_groups(m: ModelConfig, *, pretraining: bool = True) -> list[ParamGroup]:
    """The model's parameter groups: `embedding`, one per encoder layer (one for ALBERT's
    shared layer), `pooler` (BERT and ALBERT, or the bare encoder), `heads`."""
    g = group_layout(m, pretraining=pretraining)
    layers = []
    for st in g.stacks:
        grp = st.group
        layers += [grp] + [ParamGroup(grp.name, grp.layer + i, grp.params, grp.tensors)
                           for i in range(1, g.stack_layers(st, m.num_layers))]
    return [*g.before, *layers, *g.after]


def parameter_count(m: ModelConfig, *, pretraining: bool = True) -> int:
    """Unique trainable parameters (shared ALBERT weights and tied decoder counted once)."""
    g = group_layout(m, pretraining=pretraining)
    stacks = sum(g.stack_layers(st, m.num_layers) * st.group.params for st in g.stacks)
    return sum(x.params for x in g.before) + stacks + sum(x.params for x in g.after)


__all__ = ["GroupLayout", "ParamGroup", "ParamLayout", "StackGroup", "encoder_layout",
           "group_layout", "param_groups", "parameter_count"]
