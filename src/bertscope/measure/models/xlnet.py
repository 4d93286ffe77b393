"""The reference PyTorch XLNet for permutation-LM pretraining (Yang et al. 2019), written to be
profiled: every op the analytic model (`analytic/xlnet.py`) counts runs inside a submodule
whose path says its `Sublayer`. Tensors are time-major, (positions, batch, ...), as Hugging
Face's XLNetModel runs them:

    embeddings.{word,drop}  inputs (segment matrix, masks)  rel_pos (encodings, dropout)
    layers.{i}.memory                        [mem; h] for K and V          (memory)
    layers.{i}.attn.{q,k,v,r,o}              projections                   (qkv, rel_pos, ...)
    layers.{i}.content.{score,pos,seg,softmax,drop,context}   content stream core
    layers.{i}.query.{map_in,score,pos,seg,softmax,drop,context,map_out}   query stream
    layers.{i}.{attn_norm,query_norm}        dropout, residual, LayerNorm
    layers.{i}.ffn.{fc1,act,drop,fc2} / .ffn_norm   (both streams)
    layers.{i}.cache                         the next segment's memory (no gradient)
    head.{drop,dense}  loss

The memory is carried across iterations: each forward caches every layer's last `mem_len`
input positions (detached) for the next (zeros before the first). The math follows
XLNetLMHeadModel (transformers' modeling_xlnet.py, `bi` attention, untied biases) op for op;
`load_hf_xlnet` copies its weights in (its (h, n, d) projection tensors as Linear weights).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from bertscope.config import Attention as AttentionKind
from bertscope.config import Checkpoint, ModelConfig, RunConfig
from bertscope.errors import BertscopeError
from bertscope.measure.models.layers import (
    DROPOUT_PROB,
    IGNORE_INDEX,
    INIT_STD,
    dropout_layer,
    make_activation,
    path_sublayer,
)
from bertscope.taxonomy import Sublayer

EPS = 1e-12
"""XLNet's `layer_norm_eps`."""
NEG = 1e30
"""What Hugging Face subtracts from masked fp32 scores."""


class RelativeEncoding(nn.Module):
    """Sinusoidal encodings of the distances K .. -s + 1 (m + 2s of them), broadcast over
    the batch and dropped out: (R, b, h)."""

    def __init__(self, h: int, dropout: float) -> None:
        super().__init__()
        self.h, self.drop = h, dropout_layer(dropout)

    def forward(self, s: int, kl: int, b: int, device: torch.device) -> torch.Tensor:
        freq = torch.arange(0, self.h, 2.0, dtype=torch.float, device=device)
        inv = 1 / torch.pow(10000, freq / self.h)
        pos = torch.arange(kl, -s, -1.0, device=device)
        angle = pos[:, None] * inv[None, :]  # HF's einsum("i,d->id"): one product each
        emb = torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)[:, None, :]
        return self.drop(emb.expand(-1, b, -1))


class Inputs(nn.Module):
    """The (s, K, b, 2) segment matrix (whether two positions' segments differ, one-hot;
    the memory is segment 0) and the two masks (s, K, b, 1): the query stream's from the
    permutation mask, the content stream's letting each position see itself."""

    def forward(self, types: torch.Tensor, perm: torch.Tensor, mlen: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        s, b = types.shape
        cat = torch.cat([torch.zeros(mlen, b, dtype=types.dtype, device=types.device), types])
        seg = F.one_hot((types[:, None] != cat[None, :]).long(), num_classes=2).float()
        data = torch.cat([torch.zeros(s, mlen, b, device=perm.device), perm], dim=1)
        mask_g = (data[:, :, :, None] > 0).float()
        eye = torch.cat([torch.zeros(s, mlen, device=perm.device),
                         -torch.eye(s, device=perm.device)], dim=-1)
        mask_h = ((mask_g + eye[:, :, None, None]) > 0).float()
        return seg, mask_h, mask_g


class ContentScore(nn.Module):
    """(Q + r_w) K^T over the K keys: (b, n, s, K)."""

    def forward(self, q: torch.Tensor, bias: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return torch.einsum("ibnd,jbnd->bnij", q + bias, k)


class PositionScore(nn.Module):
    """(Q + r_r) R^T over the R distances, relatively shifted to the K keys (HF's
    `rel_shift_bnij`)."""

    def forward(self, q: torch.Tensor, bias: torch.Tensor, r: torch.Tensor,
                kl: int) -> torch.Tensor:
        x = torch.einsum("ibnd,jbnd->bnij", q + bias, r)
        b, n, i, j = x.shape
        x = x.reshape(b, n, j, i)[:, :, 1:, :].reshape(b, n, i, j - 1)
        return torch.index_select(x, 3, torch.arange(kl, device=x.device, dtype=torch.long))


class SegmentScore(nn.Module):
    """(Q + r_s) against the segment embedding, contracted with the segment matrix."""

    def forward(self, q: torch.Tensor, bias: torch.Tensor, seg_embed: torch.Tensor,
                seg: torch.Tensor) -> torch.Tensor:
        ef = torch.einsum("ibnd,snd->ibns", q + bias, seg_embed)
        return torch.einsum("ijbs,ibns->bnij", seg, ef)


class Softmax(nn.Module):
    """Scores summed, scaled by 1/sqrt(d), masked, softmax over the keys."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.scale = 1 / d ** 0.5

    def forward(self, ac: torch.Tensor, bd: torch.Tensor, ef: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        score = (ac + bd + ef) * self.scale
        score = score - NEG * torch.einsum("ijbn->bnij", mask)
        return F.softmax(score, dim=3)


class Context(nn.Module):
    """P V: (s, b, n, d)."""

    def forward(self, p: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bnij,jbnd->ibnd", p, v)


class TargetMap(nn.Module):
    """The query stream mapped by the constant (P, s, b) target mapping: into the s
    positions (`inward`) or back to the P predicted ones."""

    def __init__(self, inward: bool) -> None:
        super().__init__()
        self.eq = "mbnd,mlb->lbnd" if inward else "lbnd,mlb->mbnd"

    def forward(self, x: torch.Tensor, mapping: torch.Tensor) -> torch.Tensor:
        return torch.einsum(self.eq, x, mapping)


class Core(nn.Module):
    """One stream's relative attention core (`rel_attn_core`)."""

    def __init__(self, d: int, dropout: float, query: bool) -> None:
        super().__init__()
        self.score, self.pos, self.seg = ContentScore(), PositionScore(), SegmentScore()
        self.softmax, self.drop, self.context = Softmax(d), dropout_layer(dropout), Context()
        if query:
            self.map_in, self.map_out = TargetMap(True), TargetMap(False)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, r: torch.Tensor,
                seg: torch.Tensor, mask: torch.Tensor, attn: Attention,
                mapping: torch.Tensor | None = None) -> torch.Tensor:
        if mapping is not None:  # the query stream: P predicted rows into the s positions
            q = self.map_in(q, mapping)
        ac = self.score(q, attn.r_w_bias, k)
        bd = self.pos(q, attn.r_r_bias, r, k.shape[0])
        ef = self.seg(q, attn.r_s_bias, attn.seg_embed, seg)
        vec = self.context(self.drop(self.softmax(ac, bd, ef, mask)), v)
        return vec if mapping is None else self.map_out(vec, mapping)


class Attention(nn.Module):
    """The projections (Linear weights of HF's (h, n, d) tensors) and per-head biases."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        h, self.n, self.d = cfg.hidden, cfg.heads, cfg.head_dim
        self.q, self.k, self.v, self.r, self.o = (nn.Linear(h, h, bias=False)
                                                  for _ in range(5))
        self.r_r_bias, self.r_s_bias, self.r_w_bias = (
            nn.Parameter(torch.empty(self.n, self.d)) for _ in range(3))
        self.seg_embed = nn.Parameter(torch.empty(2, self.n, self.d))

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        """(positions, b, h) -> (positions, b, n, d)."""
        return x.view(*x.shape[:2], self.n, self.d)


class MemoryConcat(nn.Module):
    """[mem; h]: the previous segment's states before this one's (no gradient into them)."""

    def forward(self, mem: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return torch.cat([mem, h], dim=0)


class MemoryCache(nn.Module):
    """The next segment's memory: the last `mem_len` of [mem; h], detached."""

    def __init__(self, mem_len: int) -> None:
        super().__init__()
        self.mem_len = mem_len

    def forward(self, mem: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return torch.cat([mem, h], dim=0)[-self.mem_len:].detach()


class PostNorm(nn.Module):
    """LayerNorm(dropout(y) + x)."""

    def __init__(self, h: int, dropout: float) -> None:
        super().__init__()
        self.drop, self.norm = dropout_layer(dropout), nn.LayerNorm(h, eps=EPS)

    def forward(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.drop(y) + x)


class FeedForward(nn.Module):
    """layer_2(dropout(act(layer_1 x))), before its PostNorm."""

    def __init__(self, cfg: ModelConfig, dropout: float) -> None:
        super().__init__()
        self.fc1, self.act = nn.Linear(cfg.hidden, cfg.intermediate), make_activation(
            cfg.activation)
        self.drop, self.fc2 = dropout_layer(dropout), nn.Linear(cfg.intermediate, cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(self.act(self.fc1(x))))


class XLNetLayer(nn.Module):
    """Both streams' attention, then the feed-forward on the query stream and the content
    stream; the layer input cached as memory."""

    def __init__(self, cfg: ModelConfig, dropout: float) -> None:
        super().__init__()
        h = cfg.hidden
        self.memory, self.cache = MemoryConcat(), MemoryCache(cfg.mem_len)
        self.attn = Attention(cfg)
        self.content = Core(cfg.head_dim, dropout, query=False)
        self.query = Core(cfg.head_dim, dropout, query=True)
        self.attn_norm, self.query_norm = PostNorm(h, dropout), PostNorm(h, dropout)
        self.query_norm.norm = self.attn_norm.norm  # HF's one rel_attn.layer_norm
        self.ffn, self.ffn_norm = FeedForward(cfg, dropout), PostNorm(h, dropout)

    def forward(self, h: torch.Tensor, g: torch.Tensor, mem: torch.Tensor, r: torch.Tensor,
                seg: torch.Tensor, mask_h: torch.Tensor, mask_g: torch.Tensor,
                mapping: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a = self.attn
        cat = self.memory(mem, h)
        k, v = a.heads(a.k(cat)), a.heads(a.v(cat))
        kr = a.heads(a.r(r))
        vec_h = self.content(a.heads(a.q(h)), k, v, kr, seg, mask_h, a)
        out_h = self.attn_norm(a.o(vec_h.flatten(2)), h)
        vec_g = self.query(a.heads(a.q(g)), k, v, kr, seg, mask_g, a, mapping)
        out_g = self.query_norm(a.o(vec_g.flatten(2)), g)
        out_g = self.ffn_norm(self.ffn(out_g), out_g)
        out_h = self.ffn_norm(self.ffn(out_h), out_h)
        return out_h, out_g, self.cache(mem, h)


class Embeddings(nn.Module):
    """The word embedding and the query stream's mask embedding, each dropped out."""

    def __init__(self, cfg: ModelConfig, dropout: float) -> None:
        super().__init__()
        self.word = nn.Embedding(cfg.vocab_size, cfg.hidden)
        self.mask_emb = nn.Parameter(torch.empty(1, 1, cfg.hidden))
        self.drop = dropout_layer(dropout)

    def forward(self, ids: torch.Tensor, predicted: int) -> tuple[torch.Tensor, torch.Tensor]:
        return (self.drop(self.word(ids)),
                self.drop(self.mask_emb.expand(predicted, ids.shape[1], -1)))


class Head(nn.Module):
    """The query stream's output dropped out, batch-first, the LM head (weight tied)."""

    def __init__(self, cfg: ModelConfig, dropout: float) -> None:
        super().__init__()
        self.drop = dropout_layer(dropout)
        self.dense = nn.Linear(cfg.hidden, cfg.vocab_size)

    def forward(self, g: torch.Tensor) -> torch.Tensor:
        return self.dense(self.drop(g).permute(1, 0, 2).contiguous())


class Loss(nn.Module):
    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                               ignore_index=IGNORE_INDEX)


class PermutationLMOutput(NamedTuple):
    loss: torch.Tensor
    logits: torch.Tensor


class XLNetForPretraining(nn.Module):
    """Inputs, both streams through the layers (memory carried across calls), LM head on
    the predicted tokens, cross-entropy."""

    def __init__(self, cfg: ModelConfig, *, dropout: float = 0.1,
                 checkpointing: bool = False) -> None:
        super().__init__()
        self.cfg, self.checkpointing = cfg, checkpointing
        self.embeddings, self.inputs = Embeddings(cfg, dropout), Inputs()
        self.rel_pos = RelativeEncoding(cfg.hidden, dropout)
        self.layers = nn.ModuleList([XLNetLayer(cfg, dropout) for _ in range(cfg.num_layers)])
        self.head, self.loss = Head(cfg, dropout), Loss()
        for p in self.parameters():  # HF's init: normal(0.02) weights, LayerNorm (1, 0)
            nn.init.normal_(p, std=INIT_STD)
        for mod in self.modules():
            if isinstance(mod, nn.LayerNorm):
                nn.init.ones_(mod.weight)
                nn.init.zeros_(mod.bias)
            elif isinstance(mod, nn.Linear) and mod.bias is not None:
                nn.init.zeros_(mod.bias)
        self.head.dense.weight = self.embeddings.word.weight
        self.mems: list[torch.Tensor] | None = None

    def forward(self, input_ids: torch.Tensor, perm_mask: torch.Tensor,
                target_mapping: torch.Tensor, token_type_ids: torch.Tensor,
                labels: torch.Tensor) -> PermutationLMOutput:
        ids = input_ids.transpose(0, 1).contiguous()
        s, b = ids.shape
        mlen, h = self.cfg.mem_len, self.cfg.hidden
        if self.mems is None or self.mems[0].shape[1] != b:
            self.mems = [torch.zeros(mlen, b, h, device=ids.device)
                         for _ in range(len(self.layers))]
        seg, mask_h, mask_g = self.inputs(token_type_ids.transpose(0, 1).contiguous(),
                                          perm_mask.permute(1, 2, 0).contiguous(), mlen)
        mapping = target_mapping.permute(1, 2, 0).contiguous()
        x, g = self.embeddings(ids, mapping.shape[0])
        r = self.rel_pos(s, mlen + s, b, ids.device)
        new = []
        for layer, mem in zip(self.layers, self.mems, strict=True):
            args = (x, g, mem.to(x.dtype), r, seg, mask_h, mask_g, mapping)
            if self.checkpointing:
                x, g, m = checkpoint(layer, *args, use_reentrant=False)
            else:
                x, g, m = layer(*args)
            new.append(m)
        self.mems = new
        logits = self.head(g)
        return PermutationLMOutput(self.loss(logits, labels), logits)


def load_hf_xlnet(model: XLNetForPretraining, hf: nn.Module) -> None:
    """Copy a Hugging Face XLNetLMHeadModel's weights into `model`."""
    src, out = hf.state_dict(), {}
    h = model.cfg.hidden
    for i in range(model.cfg.num_layers):
        pre, to = f"transformer.layer.{i}", f"layers.{i}"
        for n in "qkvr":  # x (h) @ W (h, n, d): a Linear weight (n d, h)
            out[f"{to}.attn.{n}.weight"] = src[f"{pre}.rel_attn.{n}"].reshape(h, h).t()
        out[f"{to}.attn.o.weight"] = src[f"{pre}.rel_attn.o"].reshape(h, h)  # (h, n d)
        for n in ("r_r_bias", "r_s_bias", "r_w_bias", "seg_embed"):
            out[f"{to}.attn.{n}"] = src[f"{pre}.rel_attn.{n}"]
        for ours, theirs in (("attn_norm.norm", "rel_attn.layer_norm"),
                             ("query_norm.norm", "rel_attn.layer_norm"),
                             ("ffn_norm.norm", "ff.layer_norm"), ("ffn.fc1", "ff.layer_1"),
                             ("ffn.fc2", "ff.layer_2")):
            for p in ("weight", "bias"):
                out[f"{to}.{ours}.{p}"] = src[f"{pre}.{theirs}.{p}"]
    out["embeddings.word.weight"] = src["transformer.word_embedding.weight"]
    out["embeddings.mask_emb"] = src["transformer.mask_emb"]
    out["head.dense.weight"] = src["lm_loss.weight"]
    out["head.dense.bias"] = src["lm_loss.bias"]
    model.load_state_dict(out)


def build_xlnet(model: ModelConfig, run: RunConfig) -> XLNetForPretraining:
    """The reference XLNet for a run: dropout and checkpointing from `run` (eager attention
    only, as Hugging Face's: its position and segment scores are added to the scores)."""
    if run.attention is AttentionKind.SDPA:
        raise BertscopeError("the reference XLNet runs eager attention (its position and "
                             "segment scores are added to the scores); drop --attention sdpa")
    return XLNetForPretraining(model, dropout=DROPOUT_PROB if run.dropout else 0.0,
                               checkpointing=run.checkpoint is Checkpoint.FULL)


_TOP = {"embeddings": Sublayer.EMBEDDING, "inputs": Sublayer.EMBEDDING,
        "rel_pos": Sublayer.REL_POS, "head": Sublayer.LM_HEAD, "loss": Sublayer.LOSS}
_LAYER = {
    "memory": Sublayer.MEMORY, "cache": Sublayer.MEMORY,
    "attn.q": Sublayer.QKV, "attn.k": Sublayer.QKV, "attn.v": Sublayer.QKV,
    "attn.r": Sublayer.REL_POS, "attn.o": Sublayer.ATTN_OUTPUT,
    "content.score": Sublayer.ATTN_SCORE, "content.seg": Sublayer.ATTN_SCORE,
    "content.pos": Sublayer.REL_POS, "content.softmax": Sublayer.ATTN_SOFTMAX,
    "content.drop": Sublayer.ATTN_SOFTMAX, "content.context": Sublayer.ATTN_CONTEXT,
    "query": Sublayer.QUERY_STREAM, "query.pos": Sublayer.REL_POS,
    "attn_norm": Sublayer.ATTN_ADD_NORM, "query_norm": Sublayer.ATTN_ADD_NORM,
    "ffn.fc1": Sublayer.FFN1, "ffn.act": Sublayer.FFN_ACT, "ffn.drop": Sublayer.FFN_ACT,
    "ffn.fc2": Sublayer.FFN2, "ffn_norm": Sublayer.FFN_ADD_NORM,
}
"""Module path inside `layers.{i}` -> sublayer (the longest listed prefix decides)."""


def xlnet_sublayer(name: str) -> Sublayer:
    """The sublayer of a module path of `XLNetForPretraining` (`layers.3.query.pos` ->
    rel_pos); the layer's own ops (the head splits) are `other`."""
    return path_sublayer(name, _TOP, _LAYER)


__all__ = ["XLNetForPretraining", "XLNetLayer", "build_xlnet", "load_hf_xlnet",
           "xlnet_sublayer"]
