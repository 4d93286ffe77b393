"""Reference PyTorch causal-LM models for the decoder families: GPT-2 (and the GPT-3 sizes)
and Llama. Every op the analytic model (`analytic/decoder.py`) counts runs inside a submodule
whose qualified name says its `Sublayer` (`decoder_sublayer`):

    embeddings.{word,position,drop}                 embedding
    rotary                                          rotary cos/sin tables (Llama)
    layers.{i}.attn_norm, layers.{i}.attn_res       add & norm of the attention block
    layers.{i}.attn.{qkv | q,k,v}                   Q, K, V projections (GPT-2 fused)
    layers.{i}.attn.rotary                          rotary applied to Q and K
    layers.{i}.attn.{repeat,score}                  repeat_kv, Q K^T / sqrt(d) + causal mask
    layers.{i}.attn.{softmax,drop} / .context       probabilities, P V
    layers.{i}.attn.core                            one sdpa call (`Attention.SDPA`)
    layers.{i}.attn.out                             output projection
    layers.{i}.ffn_norm, layers.{i}.ffn_res         add & norm of the feed-forward block
    layers.{i}.ffn.{gate,fc1,act,fc2}               gate / up, activation (x up), down
    final_norm, lm_head, loss

The math follows Hugging Face's eager GPT2LMHeadModel and LlamaForCausalLM (transformers 5):
pre-norm residual blocks, a 4-D additive causal mask, GPT-2's attention scaled by 1/sqrt(d)
and dropout 0.1 in three places (embeddings, attention probabilities, residual branches),
Llama's RMSNorm (fp32 inside), rotary embeddings from an fp32 inverse-frequency product,
grouped K/V copied to the query heads, SwiGLU and no dropout; the loss is the next-token
cross-entropy over every position (the last label is padding, as HF pads the shifted labels).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from bertscope.config import Architecture, Attention, Checkpoint, ModelConfig, Positions, RunConfig
from bertscope.errors import BertscopeError
from bertscope.measure.models.layers import (
    DROPOUT_PROB,
    INIT_STD,
    Context,
    Residual,
    Score,
    dropout_layer,
    make_activation,
    path_sublayer,
)
from bertscope.taxonomy import Sublayer

IGNORE_INDEX = -100
"""Label of the padded last position."""
ROPE_THETA = 10_000.0
"""Llama-2's rotary base (`rope_theta`); Llama-3 uses 500,000: the FLOPs do not depend on it."""


def _norm(cfg: ModelConfig) -> nn.Module:
    if cfg.family.rms_norm:
        return RMSNorm(cfg.hidden)
    return nn.LayerNorm(cfg.hidden, eps=1e-5)


class RMSNorm(nn.Module):
    """y = w * x / sqrt(mean(x^2) + eps), computed in fp32 (HF's LlamaRMSNorm)."""

    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # torch's rms_norm (one aten::rms_norm op, classified rmsnorm) on the fp32 input, as
        # HF writes it out: x * rsqrt(mean(x^2) + eps)
        y = F.rms_norm(x.to(torch.float32), (x.size(-1),), eps=self.eps)
        return self.weight * y.to(x.dtype)


class Embeddings(nn.Module):
    """Token embedding; GPT-2 adds learned positions and dropout."""

    def __init__(self, cfg: ModelConfig, dropout: float) -> None:
        super().__init__()
        self.word = nn.Embedding(cfg.vocab_size, cfg.hidden)
        self.learned = cfg.family.positions is Positions.LEARNED  # GPT-2's table
        if self.learned:
            self.position = nn.Embedding(cfg.max_positions, cfg.hidden)
            self.drop = dropout_layer(dropout)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.word(ids)  # (B, T, h)
        if self.learned:
            pos = torch.arange(ids.size(1), device=ids.device)[None]  # (1, T)
            x = self.drop(x + self.position(pos))
        return x


class RotaryTables(nn.Module):
    """cos and sin of positions x inverse frequencies, (T, d), in fp32."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d = cfg.head_dim
        inv = 1.0 / ROPE_THETA ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, T: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.arange(T, device=device, dtype=torch.float32)[None, None, :]  # (1, 1, T)
        with torch.autocast(device.type, enabled=False):
            freqs = (self.inv_freq[None, :, None] @ pos).transpose(1, 2)  # (1, T, d/2)
            emb = torch.cat((freqs, freqs), dim=-1)  # (1, T, d)
            return emb.cos(), emb.sin()


class Rotate(nn.Module):
    """x cos + rotate_half(x) sin (Su et al. 2021), for Q and for K."""

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos.to(x.dtype) + torch.cat((-x2, x1), dim=-1) * sin.to(x.dtype)


class Repeat(nn.Module):
    """Grouped-query attention, eager: each key/value head copied to its query heads."""

    def __init__(self, groups: int) -> None:
        super().__init__()
        self.groups = groups

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, kv, T, d = x.shape
        return x[:, :, None].expand(B, kv, self.groups, T, d).reshape(B, kv * self.groups, T, d)


class FusedCore(nn.Module):
    """The causal attention core in one scaled_dot_product_attention call."""

    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.p = dropout

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        B, nh, T, hs = q.shape
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.p if self.training else 0.0,
                                           enable_gqa=k.shape[1] != nh)
        return y.transpose(1, 2).reshape(B, T, nh * hs)


class CausalSelfAttention(nn.Module):
    """Causal self-attention: fused (GPT-2) or separate (Llama) projections."""

    def __init__(self, cfg: ModelConfig, dropout: float, sdpa: bool) -> None:
        super().__init__()
        h, d, self.nh, self.kv = cfg.hidden, cfg.head_dim, cfg.heads, cfg.kv_head_count
        self.d = d
        bias = cfg.family.bias
        self.fused = cfg.family.fused_qkv
        if self.fused:
            self.qkv = nn.Linear(h, (self.nh + 2 * self.kv) * d, bias=bias)
        else:
            self.q = nn.Linear(h, self.nh * d, bias=bias)
            self.k = nn.Linear(h, self.kv * d, bias=bias)
            self.v = nn.Linear(h, self.kv * d, bias=bias)
        self.rotary = Rotate() if cfg.family.positions is Positions.ROTARY else None
        self.sdpa = sdpa
        groups = self.nh // self.kv
        self.repeat = Repeat(groups) if groups > 1 else None
        if sdpa:
            self.core = FusedCore(dropout)
        else:
            self.score, self.softmax = Score(d), nn.Softmax(dim=-1)
            self.drop, self.context = dropout_layer(dropout), Context()
        self.out = nn.Linear(self.nh * d, h, bias=bias)

    def forward(self, x: torch.Tensor, mask: torch.Tensor,
                rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        B, T, _ = x.shape
        if self.fused:
            q, k, v = self.qkv(x).split([self.nh * self.d, self.kv * self.d, self.kv * self.d],
                                        dim=-1)
        else:
            q, k, v = self.q(x), self.k(x), self.v(x)
        q = q.view(B, T, self.nh, -1).transpose(1, 2)  # (B, nh, T, d)
        k = k.view(B, T, self.kv, -1).transpose(1, 2)  # (B, kv, T, d)
        v = v.view(B, T, self.kv, -1).transpose(1, 2)
        if self.rotary is not None and rope is not None:
            q, k = self.rotary(q, *rope), self.rotary(k, *rope)
        if self.sdpa:  # the fused kernel reads grouped K and V as they are
            return self.out(self.core(q, k, v))
        if self.repeat is not None:
            k, v = self.repeat(k), self.repeat(v)
        p = self.drop(self.softmax(self.score(q, k, mask)))
        return self.out(self.context(p, v))


class GatedAct(nn.Module):
    """act(gate) * up (SwiGLU with SiLU)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.act = make_activation(cfg.activation)

    def forward(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return self.act(gate) * up


class FeedForward(nn.Module):
    """fc2(act(fc1(x))) or, gated, fc2(act(gate(x)) * fc1(x))."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        h, f, bias = cfg.hidden, cfg.intermediate, cfg.family.bias
        self.gated = cfg.gated_ffn
        self.gate = nn.Linear(h, f, bias=bias) if self.gated else None
        self.fc1 = nn.Linear(h, f, bias=bias)
        self.act = GatedAct(cfg) if self.gated else make_activation(cfg.activation)
        self.fc2 = nn.Linear(f, h, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate is not None:
            return self.fc2(self.act(self.gate(x), self.fc1(x)))
        return self.fc2(self.act(self.fc1(x)))


class DecoderLayer(nn.Module):
    """x + attn(norm(x)), then + ffn(norm(.))."""

    def __init__(self, cfg: ModelConfig, dropout: float, sdpa: bool) -> None:
        super().__init__()
        self.attn_norm, self.attn = _norm(cfg), CausalSelfAttention(cfg, dropout, sdpa)
        self.attn_res = Residual(dropout)
        self.ffn_norm, self.ffn, self.ffn_res = _norm(cfg), FeedForward(cfg), Residual(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor,
                rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        x = self.attn_res(self.attn(self.attn_norm(x), mask, rope), x)
        return self.ffn_res(self.ffn(self.ffn_norm(x)), x)


class CausalLMLoss(nn.Module):
    """Next-token cross-entropy over every position in fp32 (the last label padded)."""

    def forward(self, logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        labels = F.pad(ids[:, 1:], (0, 1), value=IGNORE_INDEX)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), labels.reshape(-1),
                               ignore_index=IGNORE_INDEX)


class CausalLMOutput(NamedTuple):
    """What one forward pass returns; `loss` is what backward starts from."""

    loss: torch.Tensor
    logits: torch.Tensor


class DecoderForCausalLM(nn.Module):
    """GPT-2 or Llama with its causal-LM loss; `checkpointing` recomputes each layer in
    backward (non-reentrant, RNG state preserved)."""

    def __init__(self, cfg: ModelConfig, *, dropout: float = DROPOUT_PROB,
                 checkpointing: bool = False, sdpa: bool = False) -> None:
        super().__init__()
        if cfg.family.architecture is not Architecture.DECODER:
            raise BertscopeError(f"DecoderForCausalLM builds gpt2 and llama, not "
                                 f"{cfg.family.value}")
        if not cfg.family.dropout:
            dropout = 0.0  # Llama has no dropout layers
        self.cfg, self.checkpointing = cfg, checkpointing
        self._masks: dict[tuple[Any, ...], torch.Tensor] = {}
        self.embeddings = Embeddings(cfg, dropout)
        self.rotary = RotaryTables(cfg) if cfg.family.positions is Positions.ROTARY else None
        self.layers = nn.ModuleList(DecoderLayer(cfg, dropout, sdpa)
                                    for _ in range(cfg.num_layers))
        self.final_norm = _norm(cfg)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab_size, bias=False)
        self.loss = CausalLMLoss()
        self.apply(self._init_weights)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embeddings.word.weight

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=INIT_STD)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)

    def _causal_mask(self, T: int, x: torch.Tensor) -> torch.Tensor:
        """(1, 1, T, T): 0 on and below the diagonal, the dtype's min above; built once per
        length, dtype and device (not an op of every iteration)."""
        dev = x.device.type
        dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else x.dtype
        key = (T, dtype, x.device)
        if key not in self._masks:
            full = torch.full((T, T), torch.finfo(dtype).min, device=x.device, dtype=dtype)
            self._masks[key] = torch.triu(full, diagonal=1)[None, None]
        return self._masks[key]

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None,
                ) -> CausalLMOutput:
        """Causal-LM forward on (B, T) token ids (the labels are the ids themselves)."""
        T = input_ids.size(1)
        x = self.embeddings(input_ids)
        mask = self._causal_mask(T, x).expand(input_ids.size(0), 1, T, T)
        rope = self.rotary(T, x.device) if self.rotary is not None else None
        for layer in self.layers:
            if self.checkpointing and torch.is_grad_enabled():
                x = checkpoint(layer, x, mask, rope, use_reentrant=False)
            else:
                x = layer(x, mask, rope)
        logits = self.lm_head(self.final_norm(x))
        return CausalLMOutput(self.loss(logits, input_ids if labels is None else labels),
                              logits)


def build_decoder(model: ModelConfig, run: RunConfig) -> DecoderForCausalLM:
    """The reference decoder for a run (dropout, checkpointing, attention from `run`)."""
    if run.attention is Attention.FUSED_SOFTMAX:
        raise BertscopeError("profile measures eager or sdpa attention; fused-softmax is "
                             "modelled by the analytic model only")
    return DecoderForCausalLM(model, dropout=DROPOUT_PROB if run.dropout else 0.0,
                              checkpointing=(run.checkpoint is Checkpoint.FULL),
                              sdpa=run.attention is Attention.SDPA)


_TOP: dict[str, Sublayer] = {"embeddings": Sublayer.EMBEDDING, "rotary": Sublayer.ROTARY,
                             "final_norm": Sublayer.FINAL_NORM, "lm_head": Sublayer.LM_HEAD,
                             "loss": Sublayer.LOSS}
_LAYER: dict[str, Sublayer] = {
    "attn_norm": Sublayer.ATTN_ADD_NORM, "attn_res": Sublayer.ATTN_ADD_NORM,
    "attn": Sublayer.QKV,  # splitting heads and the Q/K/V views
    "attn.qkv": Sublayer.QKV, "attn.q": Sublayer.QKV, "attn.k": Sublayer.QKV,
    "attn.v": Sublayer.QKV, "attn.rotary": Sublayer.ROTARY, "attn.repeat": Sublayer.ATTN_SCORE,
    "attn.score": Sublayer.ATTN_SCORE, "attn.softmax": Sublayer.ATTN_SOFTMAX,
    "attn.drop": Sublayer.ATTN_SOFTMAX, "attn.context": Sublayer.ATTN_CONTEXT,
    "attn.core": Sublayer.ATTN_FUSED, "attn.out": Sublayer.ATTN_OUTPUT,
    "ffn_norm": Sublayer.FFN_ADD_NORM, "ffn_res": Sublayer.FFN_ADD_NORM,
    "ffn.gate": Sublayer.FFN_GATE, "ffn.fc1": Sublayer.FFN1, "ffn.act": Sublayer.FFN_ACT,
    "ffn.fc2": Sublayer.FFN2,
}


def decoder_sublayer(name: str) -> Sublayer:
    """The sublayer of a module path of `DecoderForCausalLM` (the longest listed prefix)."""
    return path_sublayer(name, _TOP, _LAYER)



__all__ = ["CausalSelfAttention", "DecoderForCausalLM", "DecoderLayer", "RMSNorm",
           "build_decoder", "decoder_sublayer"]
