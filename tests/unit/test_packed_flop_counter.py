"""The variable-length attention FLOPs against an independent count: torch's FlopCounterMode
over scaled_dot_product_attention (its math backend, which FlopCounterMode sees as batched
GEMMs) run once per sequence, and once over the whole row under a block-diagonal mask."""

from __future__ import annotations

import pytest

from bertscope.analytic import build
from bertscope.config import Family, ModelConfig, RunConfig

torch = pytest.importorskip("torch")

LENGTHS = (64, 128, 320)
M = ModelConfig(name="tiny512", family=Family.BERT, num_layers=1, hidden=128, heads=2,
                intermediate=512, vocab_size=100, max_positions=512)
H, D = 2, 64


def _counted(lengths: tuple[int, ...], *, block_diagonal: bool) -> int:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        if block_diagonal:  # one packed row, sequences attending only within themselves
            s = sum(lengths)
            mask = torch.full((s, s), float("-inf"))
            start = 0
            for n in lengths:
                mask[start:start + n, start:start + n] = 0
                start += n
            q, k, v = (torch.randn(1, H, s, D) for _ in range(3))
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:  # one call per sequence: what a variable-length kernel computes
            for n in lengths:
                q, k, v = (torch.randn(1, H, n, D) for _ in range(3))
                F.scaled_dot_product_attention(q, k, v)
    return fc.get_total_flops()


def _forward(attention: str) -> dict[str, float]:
    df = build(M, RunConfig(batch=1, seq=512, attention=attention, packing="packed",
                            seq_lengths="64+128+320", dropout=False)).df
    fwd = df[(df["layer"] == 0) & (df["phase"].astype(str) == "forward")]
    return dict(zip(fwd["name"], fwd["flops"], strict=True))


def test_varlen_kernel_products_equal_per_sequence_sdpa() -> None:
    e = H * sum(n * n for n in LENGTHS)
    # the row adds scale, mask and softmax on chip (1 + 1 + 5 per score, dropout off)
    assert _forward("sdpa")["attention"] - 7 * e == _counted(LENGTHS, block_diagonal=False)


def test_eager_packed_products_equal_the_masked_dense_row() -> None:
    rows = _forward("eager")
    assert rows["score"] + rows["context"] == _counted(LENGTHS, block_diagonal=True)


def test_profile_refuses_real_lengths() -> None:
    """The reference models train on full rows: measuring them as unpadded would mislead."""
    from bertscope.errors import BertscopeError
    from bertscope.measure.profile import profile

    with pytest.raises(BertscopeError, match="--seq-lengths is not measured"):
        profile(M, RunConfig(batch=1, seq=64, seq_lengths="32"), iters=1, warmup=0)
