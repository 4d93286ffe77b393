"""Building blocks shared by the reference models (`encoder`, `decoder`, `t5`, `vit`):
activations, dropout that launches nothing when off, the eager attention core's modules,
the residual add, and the module path -> sublayer maps the profiler attributes by."""

from __future__ import annotations

import math

import torch
from torch import nn

from bertscope.config import Activation
from bertscope.errors import BertscopeError, parse_enum
from bertscope.taxonomy import Sublayer

DROPOUT_PROB = 0.1
"""Hidden and attention dropout when a run has dropout on (BERT, RoBERTa, ALBERT v1)."""
INIT_STD = 0.02
"""Normal init std of weights (`initializer_range` in every published config)."""
IGNORE_INDEX = -100
"""MLM label of positions that are not predicted."""


class NewGELU(nn.Module):
    """GELU, tanh approximation, as Google's BERT/ALBERT code and HF's `gelu_new` write it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                           * (x + 0.044715 * torch.pow(x, 3.0))))


class FastGELU(nn.Module):
    """GELU, tanh approximation with the constants folded (HF's `gelu_fast`)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))


def make_activation(act: Activation | str) -> nn.Module:
    """The activation module for a config's `activation` (gelu is exact, erf-based)."""
    match parse_enum(Activation, act, "activation"):
        case Activation.GELU:
            return nn.GELU()
        case Activation.GELU_NEW:
            return NewGELU()
        case Activation.GELU_FAST:
            return FastGELU()
        case Activation.GELU_PYTORCH_TANH:
            return nn.GELU(approximate="tanh")
        case Activation.RELU:
            return nn.ReLU()
        case Activation.SILU:
            return nn.SiLU()
    raise BertscopeError(f"no activation module for {act!r}")


def dropout_layer(p: float) -> nn.Module:
    """nn.Dropout(p), or nn.Identity with dropout off: no op is launched at all (not a p=0
    dropout kernel)."""
    return nn.Dropout(p) if p > 0 else nn.Identity()

class Score(nn.Module):
    """Attention scores Q K^T / sqrt(hs) + additive mask (Vaswani et al. 2017, eq. 1)."""

    def __init__(self, head_dim: int) -> None:
        super().__init__()
        self.scale = head_dim**-0.5

    def forward(self, q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # q, k (B, nh, T, hs); mask (B, 1, 1, T) -> (B, nh, T, T)
        return torch.matmul(q, k.transpose(2, 3)) * self.scale + mask


class Context(nn.Module):
    """Attention-weighted values P V, heads merged back."""

    def forward(self, p: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        B, nh, T, hs = v.shape
        y = torch.matmul(p, v)  # (B, nh, T, hs)
        return y.transpose(1, 2).contiguous().view(B, T, nh * hs)  # (B, T, h)


class FusedCore(nn.Module):
    """The attention core in one call, torch's scaled_dot_product_attention (flash /
    memory-efficient kernels; `Attention.SDPA` in the analytic model), heads merged back."""

    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.p = dropout

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        B, nh, T, hs = v.shape
        y = nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.p if self.training else 0.0)
        return y.transpose(1, 2).contiguous().view(B, T, nh * hs)  # (B, T, h)



class Residual(nn.Module):
    """residual + dropout(y) (pre-norm layers: GPT-2, ViT, T5)."""

    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.drop = dropout_layer(dropout)

    def forward(self, y: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return residual + self.drop(y)


# --- attribution: module path -> Sublayer --------------------------------------------

_TOP_SUBLAYER: dict[str, Sublayer] = {
    "embeddings": Sublayer.EMBEDDING,
    "mlm": Sublayer.MLM_HEAD,
    "nsp": Sublayer.NSP_HEAD,
    "loss": Sublayer.LOSS,
    "patch": Sublayer.PATCH_EMBED,
    "final_norm": Sublayer.FINAL_NORM,
    "classifier": Sublayer.CLS_HEAD,
    "enc_final": Sublayer.FINAL_NORM,  # T5's two stacks
    "dec_final": Sublayer.FINAL_NORM,
    "lm_head": Sublayer.LM_HEAD,
}
LAYER_SUBLAYER: dict[str, Sublayer] = {
    "attn.q": Sublayer.QKV,
    "attn.k": Sublayer.QKV,
    "attn.v": Sublayer.QKV,
    "attn.score": Sublayer.ATTN_SCORE,
    "attn.softmax": Sublayer.ATTN_SOFTMAX,
    "attn.drop": Sublayer.ATTN_SOFTMAX,  # dropout on probabilities, as the analytic model
    "attn.context": Sublayer.ATTN_CONTEXT,
    "attn.core": Sublayer.ATTN_FUSED,
    "attn.out": Sublayer.ATTN_OUTPUT,
    "attn_norm": Sublayer.ATTN_ADD_NORM,
    "ffn.fc1": Sublayer.FFN1,
    "ffn.act": Sublayer.FFN_ACT,
    "ffn.fc2": Sublayer.FFN2,
    "ffn_norm": Sublayer.FFN_ADD_NORM,
    "attn_res": Sublayer.ATTN_ADD_NORM,  # pre-LN layers (ViT): dropout + residual add
    "ffn_res": Sublayer.FFN_ADD_NORM,
    # T5 (models/t5.py): relative bias, cross-attention, gated feed-forward
    "bias": Sublayer.REL_POS_BIAS,
    "mask": Sublayer.ATTN_SCORE,  # the decoder's causal mask
    **{f"cross.{n}": Sublayer.CROSS_QKV for n in "qkv"},
    **{f"cross.{n}": Sublayer.CROSS_CORE for n in ("score", "softmax", "drop", "context")},
    "cross.out": Sublayer.CROSS_OUTPUT,
    "cross_norm": Sublayer.CROSS_ADD_NORM,
    "cross_res": Sublayer.CROSS_ADD_NORM,
    "ffn.gate": Sublayer.FFN_GATE,
    "ffn.mul": Sublayer.FFN_ACT,
    "ffn.drop": Sublayer.FFN_ACT,
}
"""Module path inside `layers.{i}` -> sublayer; a path's longest listed prefix decides."""


def module_sublayer(name: str) -> Sublayer:
    """The sublayer of a module path of `EncoderForPretraining` (`layers.3.attn.q` -> qkv).

    Parent modules with no work of their own (`layers.3`, `layers.3.attn`) and the model
    itself (`""`, the attention mask) are `Sublayer.OTHER`.
    """
    return path_sublayer(name, _TOP_SUBLAYER, LAYER_SUBLAYER)


def path_sublayer(name: str, top: dict[str, Sublayer], layer: dict[str, Sublayer]) -> Sublayer:
    """The sublayer of a reference model's module path: `top` maps the first component
    outside the stack, `layer` the path inside `layers.{i}` (its longest listed prefix);
    anything else is `Sublayer.OTHER`."""
    parts = name.split(".") if name else []
    if not parts:
        return Sublayer.OTHER
    if parts[0] != "layers":
        return top.get(parts[0], Sublayer.OTHER)
    for end in range(len(parts), 2, -1):
        sub = layer.get(".".join(parts[2:end]))
        if sub is not None:
            return sub
    return Sublayer.OTHER


def layer_index(name: str) -> int | None:
    """The encoder layer a module path lies in (`layers.3.ffn.fc1` -> 3), else None.

    For ALBERT this is the shared module's index (0); count its calls for the depth.
    """
    parts = name.split(".")
    return int(parts[1]) if len(parts) > 1 and parts[0] == "layers" else None



def encoder_sublayer(name: str) -> Sublayer:
    """`module_sublayer`, with the attention module's own ops (splitting and merging heads)
    counted with the Q/K/V projections (the encoders and ViT)."""
    parts = name.split(".")
    if len(parts) == 3 and parts[0] == "layers" and parts[2] == "attn":
        return Sublayer.QKV
    return module_sublayer(name)


__all__ = [
    "DROPOUT_PROB",
    "IGNORE_INDEX",
    "INIT_STD",
    "LAYER_SUBLAYER",
    "Context",
    "FastGELU",
    "FusedCore",
    "NewGELU",
    "Residual",
    "Score",
    "dropout_layer",
    "encoder_sublayer",
    "layer_index",
    "make_activation",
    "module_sublayer",
    "path_sublayer",
]
