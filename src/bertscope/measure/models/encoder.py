"""Reference PyTorch pretraining models for the encoder family: BERT, RoBERTa, ALBERT.

Written to be read in one sitting and profiled: every op the analytic model counts runs
inside a submodule whose qualified name says its `Sublayer` (`layers.module_sublayer`), e.g.

    embeddings.{word,position,token_type,norm,drop,project}   embedding
    layers.{i}.attn.{q,k,v}                                    Q, K, V projections
    layers.{i}.attn.score / .softmax / .drop / .context        Q K^T * scale + mask, ...
    layers.{i}.attn.out, layers.{i}.attn_norm.{drop,norm}      output proj, add & norm
    layers.{i}.ffn.{fc1,act,fc2}, layers.{i}.ffn_norm.{drop,norm}
    mlm.{dense,act,norm,decoder}   nsp.{pooler,act,classifier}   loss

The math follows Hugging Face's eager implementations op for op (BertForPreTraining,
RobertaForMaskedLM, AlbertForPreTraining in transformers 5.x), so with the same weights the
losses agree to float rounding; `hf_weights.load_hf_state_dict` copies those weights in.
Two places follow the original TF code (google-research/bert, google-research/albert)
instead of HF: ALBERT's FFN output has a dropout before its residual add (HF defines it but
never calls it), and ALBERT's SOP classifier has no dropout on the pooled output (HF adds
one). Both are no-ops with dropout off.

ALBERT shares one layer across depth (Lan et al. 2020, section 3.1): `layers` holds one
module, called `num_layers` times; a profiler tells the calls apart by counting them.
"""


from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from bertscope.config import Attention, Checkpoint, Family, ModelConfig, RunConfig
from bertscope.errors import BertscopeError
from bertscope.measure.models.layers import (
    DROPOUT_PROB,
    IGNORE_INDEX,
    INIT_STD,
    Context,
    FusedCore,
    Score,
    dropout_layer,
    make_activation,
)


def pad_id(cfg: ModelConfig) -> int:
    """Padding token id: RoBERTa's is 1 (position_offset - 1), BERT's and ALBERT's 0."""
    return cfg.position_offset - 1 if cfg.family is Family.ROBERTA else 0


def layer_norm_eps(cfg: ModelConfig) -> float:
    """LayerNorm epsilon of the published configs: 1e-5 for RoBERTa, 1e-12 otherwise."""
    return 1e-5 if cfg.family is Family.ROBERTA else 1e-12



class Embeddings(nn.Module):
    """Word + token type + position embeddings, LayerNorm, dropout (ALBERT: then E -> h)."""

    def __init__(self, cfg: ModelConfig, dropout: float) -> None:
        super().__init__()
        e, self.pad = cfg.emb, pad_id(cfg)
        self.roberta = cfg.family is Family.ROBERTA
        self.word = nn.Embedding(cfg.vocab_size, e, padding_idx=self.pad)
        self.position = nn.Embedding(cfg.max_positions, e,
                                     padding_idx=self.pad if self.roberta else None)
        self.token_type = nn.Embedding(cfg.type_vocab_size, e)
        self.norm = nn.LayerNorm(e, eps=layer_norm_eps(cfg))
        self.drop = dropout_layer(dropout)
        albert = cfg.family.factorized_embedding  # HF's ALBERT projects even when E == h
        self.project = nn.Linear(e, cfg.hidden) if albert or e != cfg.hidden else None
        self.register_buffer("position_ids", torch.arange(cfg.max_positions)[None],
                             persistent=False)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        T = input_ids.size(1)
        if self.roberta:
            # fairseq's make_positions: non-pad tokens count up from pad + 1, pads stay pad
            keep = input_ids.ne(self.pad).int()
            pos = (torch.cumsum(keep, dim=1).type_as(keep) * keep).long() + self.pad  # (B, T)
        else:
            pos = self.position_ids[:, :T]  # (1, T)
        x = self.word(input_ids) + self.token_type(token_type_ids)  # (B, T, E)
        x = self.drop(self.norm(x + self.position(pos)))
        return self.project(x) if self.project is not None else x  # (B, T, h)



class SelfAttention(nn.Module):
    """Multi-head self-attention with separate Q, K, V projections; the core as explicit ops
    (eager) or one fused call (`sdpa`)."""

    def __init__(self, cfg: ModelConfig, dropout: float, sdpa: bool = False) -> None:
        super().__init__()
        h, self.nh = cfg.hidden, cfg.heads
        self.q, self.k, self.v = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.sdpa = sdpa
        if sdpa:
            self.core = FusedCore(dropout)
        else:
            self.score = Score(cfg.head_dim)
            self.softmax = nn.Softmax(dim=-1)
            self.drop = dropout_layer(dropout)
            self.context = Context()
        self.out = nn.Linear(h, h)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape  # (B, T, h)
        q = self.q(x).view(B, T, self.nh, -1).transpose(1, 2)  # (B, nh, T, hs)
        k = self.k(x).view(B, T, self.nh, -1).transpose(1, 2)  # (B, nh, T, hs)
        v = self.v(x).view(B, T, self.nh, -1).transpose(1, 2)  # (B, nh, T, hs)
        if self.sdpa:
            return self.out(self.core(q, k, v, mask))  # (B, T, h)
        p = self.drop(self.softmax(self.score(q, k, mask)))  # (B, nh, T, T)
        return self.out(self.context(p, v))  # (B, T, h)


class AddNorm(nn.Module):
    """Post-LN residual: LayerNorm(residual + dropout(y))."""

    def __init__(self, cfg: ModelConfig, dropout: float) -> None:
        super().__init__()
        self.drop = dropout_layer(dropout)
        self.norm = nn.LayerNorm(cfg.hidden, eps=layer_norm_eps(cfg))

    def forward(self, y: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.norm(self.drop(y) + residual)


class FeedForward(nn.Module):
    """fc2(act(fc1(x))): h -> intermediate -> h."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.hidden, cfg.intermediate)
        self.act = make_activation(cfg.activation)
        self.fc2 = nn.Linear(cfg.intermediate, cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))  # (B, T, h), via (B, T, intermediate)


class EncoderLayer(nn.Module):
    """One post-LN Transformer encoder layer (Vaswani et al. 2017; Devlin et al. 2019)."""

    def __init__(self, cfg: ModelConfig, dropout: float, sdpa: bool = False) -> None:
        super().__init__()
        self.attn = SelfAttention(cfg, dropout, sdpa)
        self.attn_norm = AddNorm(cfg, dropout)
        self.ffn = FeedForward(cfg)
        self.ffn_norm = AddNorm(cfg, dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.attn_norm(self.attn(x, mask), x)  # (B, T, h)
        return self.ffn_norm(self.ffn(x), x)  # (B, T, h)


class MLMHead(nn.Module):
    """Transform (dense, activation, LayerNorm) then the vocabulary decoder.

    The decoder's weight is the word embedding matrix (tied); its bias is its own.
    ALBERT's transform maps h -> E so the decoder is E -> V.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        e = cfg.emb
        self.dense = nn.Linear(cfg.hidden, e)
        # RoBERTa's head always uses exact GELU (fairseq's RobertaLMHead); the others hidden_act
        self.act = nn.GELU() if cfg.family is Family.ROBERTA else make_activation(cfg.activation)
        self.norm = nn.LayerNorm(e, eps=layer_norm_eps(cfg))
        self.decoder = nn.Linear(e, cfg.vocab_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.norm(self.act(self.dense(x))))  # (..., V)


class NSPHead(nn.Module):
    """Pooler (dense + tanh on [CLS]) and a 2-way classifier: NSP for BERT, SOP for ALBERT."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.pooler = nn.Linear(cfg.hidden, cfg.hidden)
        self.act = nn.Tanh()
        self.classifier = nn.Linear(cfg.hidden, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.act(self.pooler(x[:, 0])))  # (B, 2)


class PretrainingLoss(nn.Module):
    """MLM cross-entropy (mean over predicted positions) + NSP/SOP cross-entropy."""

    def forward(self, mlm_logits: torch.Tensor, mlm_labels: torch.Tensor,
                nsp_logits: torch.Tensor | None, nsp_labels: torch.Tensor | None,
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        mlm = F.cross_entropy(mlm_logits.view(-1, mlm_logits.size(-1)), mlm_labels.view(-1),
                              ignore_index=IGNORE_INDEX)
        if nsp_logits is None or nsp_labels is None:
            return mlm, None
        return mlm, F.cross_entropy(nsp_logits, nsp_labels.view(-1))


class PretrainingOutput(NamedTuple):
    """What one forward pass returns; `loss` is what backward starts from."""

    loss: torch.Tensor
    mlm_loss: torch.Tensor
    nsp_loss: torch.Tensor | None
    mlm_logits: torch.Tensor
    """(B, T, V), or (masked positions, V) with `masked_lm_only`."""
    nsp_logits: torch.Tensor | None


class EncoderForPretraining(nn.Module):
    """BERT (MLM + NSP), RoBERTa (MLM) or ALBERT (MLM + SOP) with its pretraining loss.

    `dropout` is the hidden and attention dropout probability (0 launches no dropout op);
    `checkpointing` recomputes each encoder layer in backward (non-reentrant
    torch.utils.checkpoint, RNG state preserved, so dropout masks repeat);
    `masked_lm_only` runs the MLM head on the labelled positions only (NVIDIA's BERT).
    """

    def __init__(self, cfg: ModelConfig, *, dropout: float = DROPOUT_PROB,
                 checkpointing: bool = False, masked_lm_only: bool = False,
                 sdpa: bool = False) -> None:
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise BertscopeError(f"dropout must be in [0, 1), got {dropout!r}")
        self.cfg, self.checkpointing, self.masked_lm_only = cfg, checkpointing, masked_lm_only
        self.embeddings = Embeddings(cfg, dropout)
        n = 1 if cfg.share_layers else cfg.num_layers
        self.layers = nn.ModuleList(EncoderLayer(cfg, dropout, sdpa) for _ in range(n))
        self.mlm = MLMHead(cfg)
        self.nsp = NSPHead(cfg) if cfg.has_pooler_head else None
        self.loss = PretrainingLoss()
        self.apply(self._init_weights)
        self.mlm.decoder.weight = self.embeddings.word.weight  # tied (Press & Wolf 2017)

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=INIT_STD)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=INIT_STD)
            if m.padding_idx is not None:
                nn.init.zeros_(m.weight[m.padding_idx])
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def layer(self, i: int) -> EncoderLayer:
        """The module that runs as encoder layer `i` (ALBERT: always the shared one)."""
        return self.layers[0 if self.cfg.share_layers else i]

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                mlm_labels: torch.Tensor | None = None,
                nsp_labels: torch.Tensor | None = None) -> PretrainingOutput:
        """Pretraining forward; all inputs (B, T) except `nsp_labels` (B,)."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if mlm_labels is None:
            raise BertscopeError("mlm_labels is required (use -100 for unpredicted positions)")
        x = self.embeddings(input_ids, token_type_ids)  # (B, T, h)
        mask = self._additive_mask(attention_mask, input_ids, x)  # (B, 1, 1, T)
        for i in range(self.cfg.num_layers):
            layer = self.layer(i)
            if self.checkpointing and torch.is_grad_enabled():
                x = checkpoint(layer, x, mask, use_reentrant=False)
            else:
                x = layer(x, mask)
        labels, y = mlm_labels, x
        if self.masked_lm_only:
            rows = (mlm_labels.view(-1) != IGNORE_INDEX).nonzero().squeeze(1)  # (M,)
            y, labels = x.view(-1, x.size(-1)).index_select(0, rows), mlm_labels.view(-1)[rows]
        mlm_logits = self.mlm(y)  # (B, T, V) or (M, V)
        nsp_logits = self.nsp(x) if self.nsp is not None else None  # (B, 2)
        mlm_loss, nsp_loss = self.loss(mlm_logits, labels, nsp_logits, nsp_labels)
        loss = mlm_loss if nsp_loss is None else mlm_loss + nsp_loss
        return PretrainingOutput(loss, mlm_loss, nsp_loss, mlm_logits, nsp_logits)

    @staticmethod
    def _additive_mask(attention_mask: torch.Tensor | None, input_ids: torch.Tensor,
                       x: torch.Tensor) -> torch.Tensor:
        # 0 where attended, the dtype's min where masked; in the dtype scores have (autocast's)
        dev = x.device.type
        dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else x.dtype
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        keep = attention_mask[:, None, None, :].to(dtype)  # (B, 1, 1, T)
        return (1.0 - keep) * torch.finfo(dtype).min


def build_encoder(model: ModelConfig, run: RunConfig) -> EncoderForPretraining:
    """The reference encoder (BERT, RoBERTa, ALBERT) for a run: dropout, checkpointing, MLM
    rows and the attention kernels from `run`."""
    return EncoderForPretraining(model, dropout=DROPOUT_PROB if run.dropout else 0.0,
                                 checkpointing=(run.checkpoint is Checkpoint.FULL),
                                 masked_lm_only=run.masked_lm_only,
                                 sdpa=run.attention is Attention.SDPA)


__all__ = [
    "AddNorm",
    "EncoderForPretraining",
    "EncoderLayer",
    "FeedForward",
    "PretrainingOutput",
    "SelfAttention",
    "build_encoder",
    "layer_norm_eps",
    "pad_id",
]
