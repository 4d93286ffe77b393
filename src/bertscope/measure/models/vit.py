"""The reference PyTorch Vision Transformer for image classification (Dosovitskiy et al.
2021), written to be profiled: every op the analytic model (`analytic/vit.py`) counts runs
inside a submodule whose path says its `Sublayer` (`models.module_sublayer`):

    patch.{proj}              patch embedding: the pixels unfolded into patches, one GEMM
                              (the stride-p convolution), the class token concatenated
    embeddings                position add, dropout
    layers.{i}.attn_norm      LayerNorm before attention     (attn_add_norm)
    layers.{i}.attn.{q,k,v}   ... .score / .softmax / .drop / .context / .out, as BERT's
    layers.{i}.attn_res       dropout + residual add         (attn_add_norm)
    layers.{i}.ffn_norm, .ffn.{fc1,act,fc2}, .ffn_res
    final_norm   classifier   loss

The math follows Hugging Face's ViTForImageClassification (transformers 5.x, eager
attention) op for op, with the patch convolution written as the GEMM it is (the same
weights: HF's (h, c, p, p) kernel is this (h, c p^2) matrix); `load_hf_vit` copies an HF
model's weights in, and the losses and gradients then agree to float rounding (tested).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from bertscope.config import Attention, Checkpoint, ModelConfig, RunConfig
from bertscope.measure.models.encoder import (
    EncoderForPretraining,
    FeedForward,
    SelfAttention,
    layer_norm_eps,
)
from bertscope.measure.models.layers import (
    DROPOUT_PROB,
    INIT_STD,
    Residual,  # x + dropout(y), as GPT-2's layers
    Score,
    dropout_layer,
)


class PatchEmbedding(nn.Module):
    """(B, C, H, W) pixels -> (B, 1 + n, h): unfold into n = (H/p)(W/p) patches of C p^2
    values (channel, row, column: the convolution kernel's order), project them, put the
    class token first."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.p = cfg.patch_size
        self.proj = nn.Linear(cfg.channels * self.p ** 2, cfg.hidden)
        self.cls = nn.Parameter(torch.zeros(1, 1, cfg.hidden))

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        B, C, H, W = pixels.shape
        p = self.p
        x = pixels.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
        x = self.proj(x.reshape(B, (H // p) * (W // p), C * p * p))  # (B, n, h)
        return torch.cat((self.cls.expand(B, -1, -1), x), dim=1)  # (B, 1 + n, h)


class PositionEmbedding(nn.Module):
    """x + the learned (1 + n, h) position table, then dropout."""

    def __init__(self, cfg: ModelConfig, dropout: float) -> None:
        super().__init__()
        self.position = nn.Parameter(torch.zeros(1, cfg.max_positions, cfg.hidden))
        self.drop = dropout_layer(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(x + self.position)


class UnmaskedScore(Score):
    """Q K^T / sqrt(hs): a ViT attends every patch, so no mask is added."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None
                ) -> torch.Tensor:
        return torch.matmul(q, k.transpose(2, 3)) * self.scale  # (B, nh, T, T)


class ViTLayer(nn.Module):
    """One pre-LayerNorm encoder layer (HF's ViTLayer)."""

    def __init__(self, cfg: ModelConfig, dropout: float, sdpa: bool = False) -> None:
        super().__init__()
        eps = layer_norm_eps(cfg)
        self.attn_norm = nn.LayerNorm(cfg.hidden, eps=eps)
        self.attn = SelfAttention(cfg, dropout, sdpa)
        if not sdpa:
            self.attn.score = UnmaskedScore(cfg.head_dim)
        self.attn_res = Residual(dropout)
        self.ffn_norm = nn.LayerNorm(cfg.hidden, eps=eps)
        self.ffn = FeedForward(cfg)
        self.ffn_res = Residual(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attn_res(self.attn(self.attn_norm(x), None), x)  # (B, T, h)
        return self.ffn_res(self.ffn(self.ffn_norm(x)), x)  # (B, T, h)


class ClassifierHead(nn.Module):
    """The class token's final state -> class logits."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden, cfg.vocab_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense(x[:, 0])  # (B, classes)


class ClassificationLoss(nn.Module):
    """Softmax cross-entropy over the classes."""

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float(), labels)


class ClassificationOutput(NamedTuple):
    loss: torch.Tensor
    logits: torch.Tensor


class ViTForClassification(nn.Module):
    """Patch embedding, L pre-LN layers, final LayerNorm, classifier on the class token."""

    def __init__(self, cfg: ModelConfig, *, dropout: float = 0.1,
                 checkpointing: bool = False, sdpa: bool = False) -> None:
        super().__init__()
        self.cfg, self.checkpointing = cfg, checkpointing
        self.patch = PatchEmbedding(cfg)
        self.embeddings = PositionEmbedding(cfg, dropout)
        self.layers = nn.ModuleList(ViTLayer(cfg, dropout, sdpa) for _ in range(cfg.num_layers))
        self.final_norm = nn.LayerNorm(cfg.hidden, eps=layer_norm_eps(cfg))
        self.classifier = ClassifierHead(cfg)
        self.loss = ClassificationLoss()
        self.apply(EncoderForPretraining._init_weights)  # normal(0.02) weights, zero biases
        nn.init.normal_(self.patch.cls, std=INIT_STD)
        nn.init.normal_(self.embeddings.position, std=INIT_STD)

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor
                ) -> ClassificationOutput:
        x = self.embeddings(self.patch(pixel_values))  # (B, 1 + n, h)
        for layer in self.layers:
            x = checkpoint(layer, x, use_reentrant=False) if self.checkpointing else layer(x)
        logits = self.classifier(self.final_norm(x))
        return ClassificationOutput(self.loss(logits, labels), logits)


def load_hf_vit(model: ViTForClassification, hf: nn.Module) -> None:
    """Copy a Hugging Face ViTForImageClassification's weights into `model` (same sizes)."""
    src = hf.state_dict()
    p = model.cfg.patch_size
    out = {"patch.cls": src["vit.embeddings.cls_token"],
           "embeddings.position": src["vit.embeddings.position_embeddings"],
           "patch.proj.weight": src["vit.embeddings.patch_embeddings.projection.weight"]
           .reshape(model.cfg.hidden, model.cfg.channels * p * p),
           "patch.proj.bias": src["vit.embeddings.patch_embeddings.projection.bias"],
           "final_norm.weight": src["vit.layernorm.weight"],
           "final_norm.bias": src["vit.layernorm.bias"],
           "classifier.dense.weight": src["classifier.weight"],
           "classifier.dense.bias": src["classifier.bias"]}
    names = {"layernorm_before": "attn_norm", "attention.q_proj": "attn.q",
             "attention.k_proj": "attn.k", "attention.v_proj": "attn.v",
             "attention.o_proj": "attn.out", "layernorm_after": "ffn_norm",
             "mlp.fc1": "ffn.fc1", "mlp.fc2": "ffn.fc2"}
    for i in range(model.cfg.num_layers):
        for theirs, ours in names.items():
            for w in ("weight", "bias"):
                out[f"layers.{i}.{ours}.{w}"] = src[f"vit.layers.{i}.{theirs}.{w}"]
    model.load_state_dict(out)


def build_vit(model: ModelConfig, run: RunConfig) -> ViTForClassification:
    """The reference ViT for a run: dropout, checkpointing and the attention kernels from
    `run`."""
    return ViTForClassification(model, dropout=DROPOUT_PROB if run.dropout else 0.0,
                                checkpointing=(run.checkpoint is Checkpoint.FULL),
                                sdpa=run.attention is Attention.SDPA)


__all__ = ["ClassificationOutput", "ViTForClassification", "ViTLayer", "build_vit", "load_hf_vit"]
