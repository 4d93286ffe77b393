"""The reference PyTorch Transformer-XL (Dai et al. 2019), written after the authors'
`pytorch/mem_transformer.py` (kimiyoung/transformer-xl: `MemTransformerLM` with
`RelPartialLearnableDecoderLayer`, `AdaptiveEmbedding`, `ProjectedAdaptiveLogSoftmax`;
post-norm), batch-first. Every op the analytic model (`analytic/transformer_xl.py`) counts
runs inside a submodule whose qualified name says its `Sublayer` (`txl_sublayer`):

    embeddings                                      adaptive input (lookups, projections)
    positions                                       sinusoid table of the key distances
    layers.{i}.memory, layers.{i}.update            [memory; h], the next memory's copy
    layers.{i}.qkv                                  Q, K, V of all k = mem + seg positions
    layers.{i}.r_net, layers.{i}.attn.pos           W_r r; (q + r_r) r^T and the shift
    layers.{i}.attn.score                           (q + r_w) k^T
    layers.{i}.attn.{softmax,drop}, .context        probabilities, P V
    layers.{i}.out                                  output projection
    layers.{i}.attn_res / ffn_res                   dropout, residual add, LayerNorm
    layers.{i}.ffn.{fc1,act,drop,fc2}               ReLU feed-forward
    lm_head, loss                                   adaptive softmax: logits, log-softmax

The memory is carried across forward calls (each training iteration is the next segment):
`mems` holds each layer's last `mem_len` input states, detached, zeros before the first.
The adaptive softmax's loss is the authors' (log p = log p_head(cluster) + log p_tail(word))
written as one cross-entropy per cluster, the tail tokens' head target being their cluster's
logit; the sum over tokens divided by their number.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from bertscope.analytic.transformer_xl import cluster_tokens, cluster_widths
from bertscope.config import Checkpoint, ModelConfig, RunConfig
from bertscope.measure.models.layers import (
    DROPOUT_PROB,
    INIT_STD,
    dropout_layer,
    make_activation,
    path_sublayer,
)
from bertscope.taxonomy import Sublayer


class AdaptiveInput(nn.Module):
    """Adaptive input (Baevski & Auli 2019): one table (div_val 1) or one table and one
    projection to h per cluster, then x sqrt(h)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.h, self.ends = cfg.hidden, cfg.cluster_ends
        widths = cluster_widths(cfg)
        if cfg.div_val == 1:
            self.tables = nn.ModuleList([nn.Embedding(cfg.vocab_size, cfg.hidden)])
            self.projs = nn.ParameterList()
        else:
            self.tables = nn.ModuleList(nn.Embedding(hi - lo, w) for lo, hi, w in
                                        zip(self.ends, self.ends[1:], widths, strict=False))
            self.projs = nn.ParameterList(nn.Parameter(torch.empty(cfg.hidden, w))
                                          for w in widths)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if not len(self.projs):
            return self.tables[0](ids) * math.sqrt(self.h)
        flat = ids.reshape(-1)
        out = torch.zeros(flat.numel(), self.h, device=ids.device,
                          dtype=self.projs[0].dtype)
        for i, (lo, hi) in enumerate(zip(self.ends, self.ends[1:], strict=False)):
            idx = ((flat >= lo) & (flat < hi)).nonzero().squeeze(1)
            if idx.numel() == 0:
                continue
            y = F.linear(self.tables[i](flat.index_select(0, idx) - lo), self.projs[i])
            out = out.index_copy(0, idx, y.to(out.dtype))
        return out.view(*ids.shape, self.h) * math.sqrt(self.h)


class PositionTable(nn.Module):
    """Sinusoid embeddings of the key distances k-1 ... 0 (k, h), then dropout."""

    def __init__(self, h: int, dropout: float) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1 / 10000 ** (torch.arange(0.0, h, 2.0) / h),
                             persistent=False)
        self.drop = dropout_layer(dropout)

    def forward(self, k: int) -> torch.Tensor:
        pos = torch.arange(k - 1, -1, -1.0, device=self.inv_freq.device)
        x = torch.outer(pos, self.inv_freq)
        return self.drop(torch.cat([x.sin(), x.cos()], -1))


class Memory(nn.Module):
    """[memory; h] along the positions: the memory is detached (no gradient)."""

    def forward(self, mem: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
        return x if mem is None else torch.cat([mem.to(x.dtype), x], 1)


class MemoryUpdate(nn.Module):
    """The next segment's memory: the last `mem_len` positions of [memory; h], copied."""

    def __init__(self, mem_len: int) -> None:
        super().__init__()
        self.mem_len = mem_len

    def forward(self, mem: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            s = x.size(1)
            if self.mem_len <= s:
                return x[:, s - self.mem_len:].detach().clone(
                    memory_format=torch.contiguous_format)
            return torch.cat([mem[:, s:].to(x.dtype), x], 1)


class AC(nn.Module):
    """Content scores (q + r_w) k^T per head: (b, a, s, k)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, r_w: torch.Tensor) -> torch.Tensor:
        return torch.matmul((q + r_w).transpose(1, 2), k.permute(0, 2, 3, 1))


class BD(nn.Module):
    """Position scores (q + r_r) r^T, r shared by the batch (batched over heads), then the
    relative shift: (b, a, s, k)."""

    def forward(self, q: torch.Tensor, r: torch.Tensor, r_r: torch.Tensor) -> torch.Tensor:
        b, s, a, d = q.shape
        k = r.size(0)
        rq = (q + r_r).permute(2, 0, 1, 3).reshape(a, b * s, d)  # (a, b s, d)
        x = torch.bmm(rq, r.view(k, a, d).permute(1, 2, 0))  # (a, b s, k)
        x = x.view(a, b, s, k).permute(1, 0, 2, 3)
        x = torch.cat([x.new_zeros(b, a, s, 1), x], -1)  # the relative shift
        return x.view(b, a, k + 1, s)[:, :, 1:].reshape(b, a, s, k)


class RelAttention(nn.Module):
    """Relative multi-head attention core: AC + BD, scaled, causal mask over [memory;
    segment], softmax, dropout, P V, heads merged."""

    def __init__(self, d: int, dropout: float) -> None:
        super().__init__()
        self.scale = d ** -0.5
        self.score, self.pos = AC(), BD()
        self.softmax, self.drop = nn.Softmax(-1), dropout_layer(dropout)
        self.context = PV()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, r: torch.Tensor,
                r_w: torch.Tensor, r_r: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        scores = (self.score(q, k, r_w) + self.pos(q, r, r_r)) * self.scale + mask
        p = self.drop(self.softmax(scores))
        return self.context(p, v)


class PV(nn.Module):
    """Context P V per head, heads merged: (b, s, a d)."""

    def forward(self, p: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b, _, s, _ = p.shape
        y = torch.matmul(p, v.transpose(1, 2))  # (b, a, s, d)
        return y.transpose(1, 2).contiguous().view(b, s, -1)


class QKV(nn.Module):
    """One projection of the k = mem + seg positions split into heads: Q of the last s
    positions (the memory's queries are computed and dropped), K and V of all k."""

    def __init__(self, h: int, a: int, d: int) -> None:
        super().__init__()
        self.a, self.d = a, d
        self.proj = nn.Linear(h, 3 * a * d, bias=False)

    def forward(self, x: torch.Tensor, s: int) -> tuple[torch.Tensor, ...]:
        b, k, _ = x.shape
        q, key, v = (t.view(b, k, self.a, self.d) for t in self.proj(x).chunk(3, -1))
        return q[:, k - s:], key, v


class Residual(nn.Module):
    """LayerNorm(x + dropout(y)) (post-norm)."""

    def __init__(self, h: int, dropout: float) -> None:
        super().__init__()
        self.drop, self.norm = dropout_layer(dropout), nn.LayerNorm(h)

    def forward(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.drop(y))


class FeedForward(nn.Module):
    """fc2(dropout(relu(fc1(x))))."""

    def __init__(self, cfg: ModelConfig, dropout: float) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.hidden, cfg.intermediate)
        self.act, self.drop = make_activation(cfg.activation), dropout_layer(dropout)
        self.fc2 = nn.Linear(cfg.intermediate, cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(self.act(self.fc1(x))))


class TxlLayer(nn.Module):
    """One Transformer-XL layer (`RelPartialLearnableDecoderLayer`, post-norm)."""

    def __init__(self, cfg: ModelConfig, dropout: float) -> None:
        super().__init__()
        i = cfg.heads * cfg.head_dim
        self.memory, self.update = Memory(), MemoryUpdate(cfg.mem_len)
        self.qkv = QKV(cfg.hidden, cfg.heads, cfg.head_dim)
        self.r_net = nn.Linear(cfg.hidden, i, bias=False)
        self.attn = RelAttention(cfg.head_dim, dropout)
        self.out = nn.Linear(i, cfg.hidden, bias=False)
        self.attn_res = Residual(cfg.hidden, dropout)
        self.ffn = FeedForward(cfg, dropout)
        self.ffn_res = Residual(cfg.hidden, dropout)

    def forward(self, x: torch.Tensor, mem: torch.Tensor | None, pos: torch.Tensor,
                r_w: torch.Tensor, r_r: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, key, v = self.qkv(self.memory(mem, x), x.size(1))  # (b, s | k, a, d)
        y = self.attn(q, key, v, self.r_net(pos), r_w, r_r, mask)
        x = self.attn_res(self.out(y), x)
        return self.ffn_res(self.ffn(x), x)


class AdaptiveSoftmax(nn.Module):
    """The adaptive softmax's logits (Grave et al. 2017 with projections): the head
    cluster's on every token, each tail cluster's on the tokens whose target is in it."""

    def __init__(self, cfg: ModelConfig, emb: AdaptiveInput) -> None:
        super().__init__()
        self.ends, nc = cfg.cluster_ends, len(cfg.cutoffs)
        widths = cluster_widths(cfg)
        tied = cfg.tie_word_embeddings
        self.tables = emb.tables if tied else nn.ModuleList(
            nn.Embedding(t.num_embeddings, t.embedding_dim) for t in emb.tables)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.cluster_weight = nn.Parameter(torch.zeros(nc, widths[0])) if nc else None
        self.cluster_bias = nn.Parameter(torch.zeros(nc)) if nc else None
        self.head_proj = (nn.Parameter(torch.empty(widths[0], cfg.hidden))
                          if cfg.div_val > 1 else None)
        self.tail_projs = nn.ParameterList(
            [] if cfg.div_val == 1 or cfg.tie_projs else
            [nn.Parameter(torch.empty(w, cfg.hidden)) for w in widths[1:]])
        self.emb = emb if cfg.tie_projs else None

    def _weight(self, i: int) -> torch.Tensor:
        if len(self.tables) == 1:
            return self.tables[0].weight[self.ends[i]:self.ends[i + 1]]
        return self.tables[i].weight

    def _tail_proj(self, i: int) -> torch.Tensor | None:
        if self.head_proj is None:
            return None
        if self.emb is not None:
            return self.emb.projs[i].t()
        return self.tail_projs[i - 1]

    def forward(self, h: torch.Tensor, target: torch.Tensor) -> list[tuple[Any, Any]]:
        """(logits, targets) of the head cluster, then of each non-empty tail cluster."""
        if self.cluster_weight is None:
            return [(F.linear(h, self.tables[0].weight, self.bias), target)]
        c0 = self.ends[1]
        weight = torch.cat([self._weight(0), self.cluster_weight])
        bias = torch.cat([self.bias[:c0], self.cluster_bias])
        x = h if self.head_proj is None else F.linear(h, self.head_proj)
        head_target = target.clone()
        out: list[tuple[Any, Any]] = [(None, None)]
        for i, (lo, hi) in enumerate(zip(self.ends[1:], self.ends[2:], strict=False), 1):
            idx = ((target >= lo) & (target < hi)).nonzero().squeeze(1)
            if idx.numel() == 0:
                continue
            head_target[idx] = c0 + i - 1
            hi_ = h.index_select(0, idx)
            proj = self._tail_proj(i)
            if proj is not None:
                hi_ = F.linear(hi_, proj)
            out.append((F.linear(hi_, self._weight(i), self.bias[lo:hi]),
                        target.index_select(0, idx) - lo))
        out[0] = (F.linear(x, weight, bias), head_target)
        return out


class AdaptiveLoss(nn.Module):
    """-sum log p over the tokens / tokens: one cross-entropy per cluster in fp32."""

    def forward(self, parts: list[tuple[Any, Any]], tokens: int) -> torch.Tensor:
        return sum(F.cross_entropy(z.float(), y, reduction="sum") for z, y in parts) / tokens


class TxlOutput(NamedTuple):
    """What one forward pass returns; `loss` is what backward starts from."""

    loss: torch.Tensor


class TransformerXL(nn.Module):
    """Transformer-XL with its memory carried across forward calls; `checkpointing`
    recomputes each layer in backward (the memory update is not rerun)."""

    def __init__(self, cfg: ModelConfig, *, dropout: float = DROPOUT_PROB,
                 checkpointing: bool = False) -> None:
        super().__init__()
        self.cfg, self.checkpointing = cfg, checkpointing
        self.embeddings = AdaptiveInput(cfg)
        self.embed_drop = dropout_layer(dropout)
        self.positions = PositionTable(cfg.hidden, dropout)
        self.r_w_bias = nn.Parameter(torch.zeros(cfg.heads, cfg.head_dim))
        self.r_r_bias = nn.Parameter(torch.zeros(cfg.heads, cfg.head_dim))
        self.layers = nn.ModuleList(TxlLayer(cfg, dropout) for _ in range(cfg.num_layers))
        self.out_drop = dropout_layer(dropout)
        self.lm_head = AdaptiveSoftmax(cfg, self.embeddings)
        self.loss = AdaptiveLoss()
        self.mems: list[torch.Tensor] | None = None
        for p in self.parameters():
            if p.dim() > 1 or p is self.r_w_bias or p is self.r_r_bias:
                nn.init.normal_(p, std=INIT_STD)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> TxlOutput:
        """Next-token loss of one (b, s) segment attending over the memory of the previous."""
        b, s = input_ids.shape
        m, h = self.cfg.mem_len, self.cfg.hidden
        x = self.embed_drop(self.embeddings(input_ids))
        if m and (self.mems is None or self.mems[0].size(0) != b):
            self.mems = [x.new_zeros(b, m, h) for _ in self.layers]
        mask = torch.triu(torch.full((s, s + m), float("-inf"), device=x.device),
                          diagonal=1 + m)
        pos = self.positions(s + m)
        new: list[torch.Tensor] = []
        for i, layer in enumerate(self.layers):
            mem = self.mems[i] if m and self.mems is not None else None
            args = (x, mem, pos, self.r_w_bias, self.r_r_bias, mask)
            y = (checkpoint(layer, *args, use_reentrant=False)
                 if self.checkpointing and torch.is_grad_enabled() else layer(*args))
            if mem is not None:
                new.append(layer.update(mem, x))
            x = y
        if m:
            self.mems = new
        parts = self.lm_head(self.out_drop(x).reshape(b * s, h), labels.reshape(-1))
        return TxlOutput(self.loss(parts, b * s))


def build_txl(model: ModelConfig, run: RunConfig) -> TransformerXL:
    """The reference Transformer-XL for a run (dropout and full checkpointing from `run`;
    the attention core runs as eager kernels whatever `run.attention` says)."""
    return TransformerXL(model, dropout=DROPOUT_PROB if run.dropout else 0.0,
                         checkpointing=run.checkpoint is Checkpoint.FULL)


def txl_inputs(m: ModelConfig, run: RunConfig, seed: int, device: torch.device,
               hf: bool) -> dict[str, Any]:
    """One seeded (b, s) segment of input ids and next-token labels whose clusters hold
    exactly the model's `cluster_shares` of the tokens (rounded), ids uniform in each."""
    rng = np.random.default_rng(seed)
    t, ends = run.batch * run.seq, m.cluster_ends

    def draw() -> torch.Tensor:
        counts = cluster_tokens(m, t)[1:]
        cluster = np.repeat(np.arange(len(ends) - 1), [t - sum(counts), *counts])
        rng.shuffle(cluster)
        lo, hi = np.asarray(ends[:-1])[cluster], np.asarray(ends[1:])[cluster]
        ids = lo + (rng.random(t) * (hi - lo)).astype(np.int64)
        return torch.from_numpy(ids.reshape(run.batch, run.seq)).to(device)

    return {"input_ids": draw(), "labels": draw()}


_TOP: dict[str, Sublayer] = {"embeddings": Sublayer.EMBEDDING,
                             "embed_drop": Sublayer.EMBEDDING, "positions": Sublayer.REL_POS,
                             "out_drop": Sublayer.LM_HEAD, "lm_head": Sublayer.LM_HEAD,
                             "loss": Sublayer.LOSS}
_LAYER: dict[str, Sublayer] = {
    "memory": Sublayer.MEMORY, "update": Sublayer.MEMORY, "qkv": Sublayer.QKV,
    "r_net": Sublayer.REL_POS, "attn": Sublayer.ATTN_SCORE,
    "attn.score": Sublayer.ATTN_SCORE, "attn.pos": Sublayer.REL_POS,
    "attn.softmax": Sublayer.ATTN_SOFTMAX, "attn.drop": Sublayer.ATTN_SOFTMAX,
    "attn.context": Sublayer.ATTN_CONTEXT,
    "out": Sublayer.ATTN_OUTPUT, "attn_res": Sublayer.ATTN_ADD_NORM,
    "ffn.fc1": Sublayer.FFN1, "ffn.act": Sublayer.FFN_ACT, "ffn.drop": Sublayer.FFN_ACT,
    "ffn.fc2": Sublayer.FFN2, "ffn_res": Sublayer.FFN_ADD_NORM,
}


def txl_sublayer(name: str) -> Sublayer:
    """The sublayer of a module path of `TransformerXL` (the longest listed prefix)."""
    return path_sublayer(name, _TOP, _LAYER)


__all__ = ["AdaptiveInput", "AdaptiveSoftmax", "TransformerXL", "TxlLayer", "build_txl",
           "txl_inputs", "txl_sublayer"]
