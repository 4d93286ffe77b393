"""The reference PyTorch T5 for span-corruption pretraining (Raffel et al. 2020), written to
be profiled: every op the analytic model (`analytic/t5.py`) counts runs inside a submodule
whose path says its `Sublayer` (`models.module_sublayer`). Both stacks' layers are one list,
numbered as the analytic model numbers them (encoder 0 .. L_enc - 1, then the decoder):

    embeddings.{shared,drop,shift}       token lookup of either stack, dropout, shift right
    layers.{i}.bias                      relative position bias (each stack's first layer)
    layers.{i}.attn_norm / .attn.{q,k,v,score,softmax,drop,context,out} / .attn_res
    layers.{i}.cross_norm / .cross.{...} / .cross_res        (decoder layers)
    layers.{i}.ffn_norm / .ffn.{gate,fc1,act,mul,drop,fc2} / .ffn_res
    enc_final, dec_final (RMSNorm + dropout)   lm_head   loss

The math follows Hugging Face's T5ForConditionalGeneration (transformers 5.x, eager) op for
op; `load_hf_t5` copies its weights in. v1.1's untied head is its own matrix here (as
published); transformers 5.x ties it, so after loading both hold the same values.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from bertscope.config import Attention, Checkpoint, ModelConfig, RunConfig
from bertscope.errors import BertscopeError
from bertscope.measure.models.layers import (
    DROPOUT_PROB,
    Residual,
    dropout_layer,
    encoder_sublayer,
    make_activation,
)
from bertscope.taxonomy import Sublayer

MAX_DISTANCE = 128
"""T5's `relative_attention_max_distance`: relative positions beyond it share a bucket."""
EPS = 1e-6
"""T5's `layer_norm_epsilon`."""
IGNORE_INDEX = -100


class RMSNorm(nn.Module):
    """T5LayerNorm: x / sqrt(mean(x^2) + eps) * weight, in fp32, no mean, no bias."""

    def __init__(self, h: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + EPS)
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            x = x.to(self.weight.dtype)
        return self.weight * x


def relative_bucket(rel: torch.Tensor, bidirectional: bool, buckets: int) -> torch.Tensor:
    """T5's bucket of each relative position (key minus query): exact below buckets / 4 (or
    / 2 one-sided), logarithmic up to MAX_DISTANCE (HF's `_relative_position_bucket`)."""
    out = torch.zeros_like(rel)
    if bidirectional:
        buckets //= 2
        out = out + (rel > 0).to(torch.long) * buckets
        rel = torch.abs(rel)
    else:
        rel = -torch.min(rel, torch.zeros_like(rel))
    exact = buckets // 2
    large = exact + (torch.log(rel.float() / exact) / math.log(MAX_DISTANCE / exact)
                     * (buckets - exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, buckets - 1))
    return out + torch.where(rel < exact, rel, large)


class RelativeBias(nn.Module):
    """The (1, heads, s, s) position bias a stack's first layer computes once."""

    def __init__(self, cfg: ModelConfig, bidirectional: bool) -> None:
        super().__init__()
        self.bidirectional = bidirectional
        self.table = nn.Embedding(cfg.relative_buckets, cfg.heads)

    def forward(self, s: int, device: torch.device) -> torch.Tensor:
        pos = torch.arange(s, dtype=torch.long, device=device)
        bucket = relative_bucket(pos[None, :] - pos[:, None], self.bidirectional,
                                 self.table.num_embeddings)
        return self.table(bucket).permute(2, 0, 1).unsqueeze(0)  # (1, nh, s, s)


class CausalMask(nn.Module):
    """The decoder's additive (1, 1, s, s) causal mask: the dtype's min above the diagonal."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.shape[1]
        full = torch.full((s, s), torch.finfo(x.dtype).min, device=x.device)
        return full.triu(1)[None, None]


class BiasedScore(nn.Module):
    """Q K^T + position bias (+ additive mask): T5 does not scale its scores."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None,
                mask: torch.Tensor | None) -> torch.Tensor:
        scores = torch.matmul(q, k.transpose(2, 3))  # (B, nh, S, S_kv)
        if bias is not None:
            scores = scores + bias
        return scores + mask if mask is not None else scores


class Context(nn.Module):
    """P V, heads merged back; queries and keys may differ in length (cross-attention)."""

    def forward(self, p: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        y = torch.matmul(p, v)  # (B, nh, T, d_kv)
        return y.transpose(1, 2).reshape(y.shape[0], y.shape[2], -1)  # (B, T, nh d_kv)


class T5Attention(nn.Module):
    """Self- or cross-attention, h -> heads x d_kv -> h, no biases."""

    def __init__(self, cfg: ModelConfig, dropout: float) -> None:
        super().__init__()
        h, i, self.nh = cfg.hidden, cfg.heads * cfg.head_dim, cfg.heads
        self.q, self.k, self.v = (nn.Linear(h, i, bias=False) for _ in range(3))
        self.score, self.softmax = BiasedScore(), nn.Softmax(dim=-1)
        self.drop, self.context = dropout_layer(dropout), Context()
        self.out = nn.Linear(i, h, bias=False)

    def forward(self, x: torch.Tensor, kv: torch.Tensor, bias: torch.Tensor | None,
                mask: torch.Tensor | None) -> torch.Tensor:
        B, T, _ = x.shape
        q = self.q(x).view(B, T, self.nh, -1).transpose(1, 2)  # (B, nh, T, d_kv)
        k = self.k(kv).view(B, kv.shape[1], self.nh, -1).transpose(1, 2)  # (B, nh, S, d_kv)
        v = self.v(kv).view(B, kv.shape[1], self.nh, -1).transpose(1, 2)
        p = self.drop(self.softmax(self.score(q, k, bias, mask)))  # (B, nh, T, S)
        return self.out(self.context(p, v))  # (B, T, h)


class GateMul(nn.Module):
    """The gated feed-forward's product act(x W_0) * (x W_1)."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * b


class T5FeedForward(nn.Module):
    """v1.0: wo(drop(relu(wi x))); v1.1: wo(drop(gelu_new(wi_0 x) * wi_1 x))."""

    def __init__(self, cfg: ModelConfig, dropout: float) -> None:
        super().__init__()
        h, f = cfg.hidden, cfg.intermediate
        self.gate = nn.Linear(h, f, bias=False) if cfg.gated_ffn else None
        self.fc1, self.act = nn.Linear(h, f, bias=False), make_activation(cfg.activation)
        self.mul = GateMul() if cfg.gated_ffn else None
        self.drop, self.fc2 = dropout_layer(dropout), nn.Linear(f, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate is not None and self.mul is not None:
            y = self.mul(self.act(self.gate(x)), self.fc1(x))
        else:
            y = self.act(self.fc1(x))
        return self.fc2(self.drop(y))


class T5Block(nn.Module):
    """One pre-norm layer: self-attention, (decoder) cross-attention, feed-forward; the
    stack's first layer holds the relative bias."""

    def __init__(self, cfg: ModelConfig, dropout: float, *, decoder: bool, first: bool) -> None:
        super().__init__()
        h = cfg.hidden
        self.bias = RelativeBias(cfg, bidirectional=not decoder) if first else None
        self.mask = CausalMask() if first and decoder else None
        self.attn_norm, self.attn = RMSNorm(h), T5Attention(cfg, dropout)
        self.attn_res = Residual(dropout)
        if decoder:
            self.cross_norm, self.cross = RMSNorm(h), T5Attention(cfg, dropout)
            self.cross_res = Residual(dropout)
        self.ffn_norm, self.ffn = RMSNorm(h), T5FeedForward(cfg, dropout)
        self.ffn_res = Residual(dropout)
        self.decoder = decoder

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None, mask: torch.Tensor | None,
                enc: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        if self.bias is not None:
            bias = self.bias(x.shape[1], x.device)
        if self.mask is not None:
            mask = self.mask(x)
        y = self.attn_norm(x)
        x = self.attn_res(self.attn(y, y, bias, mask), x)
        if self.decoder and enc is not None:
            x = self.cross_res(self.cross(self.cross_norm(x), enc, None, None), x)
        x = self.ffn_res(self.ffn(self.ffn_norm(x)), x)
        assert bias is not None
        return x, bias, mask


class T5Embeddings(nn.Module):
    """The shared table's lookup and dropout (either stack); `shift` makes the decoder's
    inputs from the labels."""

    def __init__(self, cfg: ModelConfig, dropout: float) -> None:
        super().__init__()
        self.shared = nn.Embedding(cfg.vocab_size, cfg.hidden)
        self.drop = dropout_layer(dropout)
        self.shift = ShiftRight()

    def forward(self, ids: torch.Tensor, shift: bool = False) -> torch.Tensor:
        return self.drop(self.shared(self.shift(ids) if shift else ids))


class ShiftRight(nn.Module):
    """Decoder inputs: the labels shifted right behind the start id 0, -100 as pad 0."""

    def forward(self, labels: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(labels)
        out[:, 1:] = labels[:, :-1]
        return out.masked_fill(out == IGNORE_INDEX, 0)


class FinalNorm(nn.Module):
    """A stack's final RMSNorm and dropout."""

    def __init__(self, h: int, dropout: float) -> None:
        super().__init__()
        self.norm, self.drop = RMSNorm(h), dropout_layer(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.norm(x))


class LMHead(nn.Module):
    """h -> vocabulary logits; a head tied to the table scales its input by h^-0.5."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.scale = cfg.hidden ** -0.5 if cfg.tie_word_embeddings else None
        self.dense = nn.Linear(cfg.hidden, cfg.vocab_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense(x * self.scale if self.scale is not None else x)


class Seq2SeqLoss(nn.Module):
    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                               ignore_index=IGNORE_INDEX)


class Seq2SeqOutput(NamedTuple):
    loss: torch.Tensor
    logits: torch.Tensor


class T5ForPretraining(nn.Module):
    """Encoder on the inputs, decoder on the shifted labels, LM head, cross-entropy."""

    def __init__(self, cfg: ModelConfig, *, dropout: float = 0.1,
                 checkpointing: bool = False) -> None:
        super().__init__()
        self.cfg, self.checkpointing = cfg, checkpointing
        le, ld = cfg.num_layers, cfg.decoder_layer_count
        self.embeddings = T5Embeddings(cfg, dropout)
        self.layers = nn.ModuleList(
            [T5Block(cfg, dropout, decoder=False, first=i == 0) for i in range(le)]
            + [T5Block(cfg, dropout, decoder=True, first=i == 0) for i in range(ld)])
        self.enc_final, self.dec_final = FinalNorm(cfg.hidden, dropout), FinalNorm(
            cfg.hidden, dropout)
        self.lm_head, self.loss = LMHead(cfg), Seq2SeqLoss()
        for mod in self.modules():  # Mesh TensorFlow's init, as HF's T5 (factor 1)
            if isinstance(mod, nn.Linear):
                nn.init.normal_(mod.weight, std=mod.in_features ** -0.5)
            elif isinstance(mod, nn.Embedding):
                nn.init.normal_(mod.weight, std=1.0)
        if cfg.tie_word_embeddings:
            self.lm_head.dense.weight = self.embeddings.shared.weight

    def _run(self, layer: nn.Module, *args: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        if self.checkpointing:
            return checkpoint(layer, *args, use_reentrant=False)
        return layer(*args)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> Seq2SeqOutput:
        le = self.cfg.num_layers
        x, bias, mask = self.embeddings(input_ids), None, None  # (B, S, h)
        for layer in self.layers[:le]:
            x, bias, _ = self._run(layer, x, bias, None, None)
        enc = self.enc_final(x)
        y, bias = self.embeddings(labels, shift=True), None  # (B, S_t, h)
        for layer in self.layers[le:]:
            y, bias, mask = self._run(layer, y, bias, mask, enc)
        logits = self.lm_head(self.dec_final(y))
        return Seq2SeqOutput(self.loss(logits, labels), logits)


def load_hf_t5(model: T5ForPretraining, hf: nn.Module) -> None:
    """Copy a Hugging Face T5ForConditionalGeneration's weights into `model`."""
    src, out = hf.state_dict(), {}
    le = model.cfg.num_layers
    ffn = ({"wi_0": "ffn.gate", "wi_1": "ffn.fc1"} if model.cfg.gated_ffn
           else {"wi": "ffn.fc1"})
    for i, layer in enumerate(model.layers):
        stack, j = ("decoder", i - le) if i >= le else ("encoder", i)
        pre = f"{stack}.block.{j}.layer"
        parts = {f"{pre}.0.SelfAttention.{n}": f"attn.{m}"
                 for n, m in (("q", "q"), ("k", "k"), ("v", "v"), ("o", "out"))}
        parts[f"{pre}.0.layer_norm"] = "attn_norm"
        f = 2 if stack == "decoder" else 1
        if stack == "decoder":
            parts |= {f"{pre}.1.EncDecAttention.{n}": f"cross.{m}"
                      for n, m in (("q", "q"), ("k", "k"), ("v", "v"), ("o", "out"))}
            parts[f"{pre}.1.layer_norm"] = "cross_norm"
        parts |= {f"{pre}.{f}.DenseReluDense.{n}": m for n, m in ffn.items()}
        parts[f"{pre}.{f}.DenseReluDense.wo"] = "ffn.fc2"
        parts[f"{pre}.{f}.layer_norm"] = "ffn_norm"
        if layer.bias is not None:
            parts[f"{pre}.0.SelfAttention.relative_attention_bias"] = "bias.table"
        out |= {f"layers.{i}.{m}.weight": src[f"{n}.weight"] for n, m in parts.items()}
    out["embeddings.shared.weight"] = src["shared.weight"]
    out["enc_final.norm.weight"] = src["encoder.final_layer_norm.weight"]
    out["dec_final.norm.weight"] = src["decoder.final_layer_norm.weight"]
    out["lm_head.dense.weight"] = src["lm_head.weight"]
    model.load_state_dict(out)


def build_t5(model: ModelConfig, run: RunConfig) -> T5ForPretraining:
    """The reference T5 for a run: dropout and checkpointing from `run` (eager attention
    only: its position bias is added to the scores)."""
    if run.attention is Attention.SDPA:
        raise BertscopeError("the reference T5 runs eager attention (its position bias "
                             "is added to the scores); drop --attention sdpa")
    return T5ForPretraining(model, dropout=DROPOUT_PROB if run.dropout else 0.0,
                            checkpointing=(run.checkpoint is Checkpoint.FULL))


def t5_sublayer(name: str) -> Sublayer:
    """`layers.encoder_sublayer`, with the cross-attention module's own ops (splitting its
    Q, K and V into heads, merging them back) counted with its projections."""
    parts = name.split(".")
    if len(parts) == 3 and parts[0] == "layers" and parts[2] == "cross":
        return Sublayer.CROSS_QKV
    return encoder_sublayer(name)


__all__ = ["T5Block", "T5ForPretraining", "build_t5", "load_hf_t5", "t5_sublayer"]
