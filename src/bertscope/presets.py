"""Model presets: the published checkpoints' sizes by name, and `get_model` (a preset name
or a Hugging Face config.json path)."""

from __future__ import annotations

import difflib
import itertools
import math
import os
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from bertscope.config import Activation, Family, ModelConfig
from bertscope.errors import BertscopeError, shown
from bertscope.hf_config import from_hf_config


def _bert(name: str, layers: int, hidden: int, heads: int) -> ModelConfig:
    return ModelConfig(name=name, family=Family.BERT, num_layers=layers, hidden=hidden,
                       heads=heads, intermediate=4 * hidden, vocab_size=30522,
                       max_positions=512)


def _roberta(name: str, layers: int, hidden: int, heads: int) -> ModelConfig:
    return ModelConfig(name=name, family=Family.ROBERTA, num_layers=layers, hidden=hidden,
                       heads=heads, intermediate=4 * hidden, vocab_size=50265,
                       max_positions=514, type_vocab_size=1, position_offset=2)


def _albert(name: str, layers: int, hidden: int, heads: int) -> ModelConfig:
    return ModelConfig(name=name, family=Family.ALBERT, num_layers=layers, hidden=hidden,
                       heads=heads, intermediate=4 * hidden, vocab_size=30000,
                       max_positions=512, embedding_size=128, share_layers=True,
                       activation=Activation.GELU_NEW)

def _gpt(name: str, layers: int, hidden: int, heads: int, positions: int = 1024) -> ModelConfig:
    return ModelConfig(name=name, family=Family.GPT2, num_layers=layers, hidden=hidden,
                       heads=heads, intermediate=4 * hidden, vocab_size=50257,
                       max_positions=positions, type_vocab_size=1,
                       activation=Activation.GELU_NEW)


def _llama(name: str, layers: int, hidden: int, heads: int, kv: int, ffn: int, vocab: int,
           positions: int) -> ModelConfig:
    return ModelConfig(name=name, family=Family.LLAMA, num_layers=layers, hidden=hidden,
                       heads=heads, kv_heads=kv, intermediate=ffn, vocab_size=vocab,
                       max_positions=positions, type_vocab_size=1, gated_ffn=True,
                       tie_word_embeddings=False, activation=Activation.SILU)


DECODER_PRESETS = (
    # openai-community/gpt2, gpt2-medium, gpt2-large, gpt2-xl config.json
    _gpt("gpt2", 12, 768, 12),
    _gpt("gpt2-medium", 24, 1024, 16),
    _gpt("gpt2-large", 36, 1280, 20),
    _gpt("gpt2-xl", 48, 1600, 25),
    # Brown et al. 2020, Table 2.1 (n_layers, d_model, d_head; context 2048, GPT-2's BPE
    # vocabulary). Heads are d_model / d_head: the table's 24 heads of 128 for GPT-3 XL do not
    # tile its d_model 2048, and its 13B d_model "5140" is 40 heads of 128 = 5120. Dense
    # attention in every layer (the paper alternates dense and locally banded sparse layers).
    _gpt("gpt3-small", 12, 768, 12, 2048),
    _gpt("gpt3-medium", 24, 1024, 16, 2048),
    _gpt("gpt3-large", 24, 1536, 16, 2048),
    _gpt("gpt3-xl", 24, 2048, 16, 2048),
    _gpt("gpt3-2.7b", 32, 2560, 32, 2048),
    _gpt("gpt3-6.7b", 32, 4096, 32, 2048),
    _gpt("gpt3-13b", 40, 5120, 40, 2048),
    _gpt("gpt3-175b", 96, 12288, 96, 2048),
    # meta-llama/Llama-2-{7b,13b,70b}-hf and Meta-Llama-3-{8B,70B} config.json
    _llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
    _llama("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096),
    _llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096),
    _llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
    _llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
)


def _t5(name: str, layers: int, hidden: int, heads: int, ffn: int, d_kv: int, *,
        v1_1: bool = False) -> ModelConfig:
    return ModelConfig(name=name, family=Family.T5, num_layers=layers, hidden=hidden,
                       heads=heads, head_size=d_kv, intermediate=ffn, vocab_size=32128,
                       max_positions=512, type_vocab_size=1, gated_ffn=v1_1,
                       tie_word_embeddings=not v1_1,
                       activation=Activation.GELU_NEW if v1_1 else Activation.RELU)


def _vit(name: str, layers: int, hidden: int, heads: int, patch: int = 16) -> ModelConfig:
    return ModelConfig(name=name, family=Family.VIT, num_layers=layers, hidden=hidden,
                       heads=heads, intermediate=4 * hidden, vocab_size=1000,
                       max_positions=(224 // patch) ** 2 + 1, type_vocab_size=1,
                       patch_size=patch, tie_word_embeddings=False)


def _xlnet(name: str, layers: int, hidden: int, heads: int) -> ModelConfig:
    return ModelConfig(name=name, family=Family.XLNET, num_layers=layers, hidden=hidden,
                       heads=heads, intermediate=4 * hidden, vocab_size=32000,
                       max_positions=512, type_vocab_size=2, mem_len=384)
EULER_GAMMA = 0.5772156649015329
"""The Euler-Mascheroni constant: H_n = ln n + gamma + O(1/n)."""


def zipf_shares(vocab: int, cutoffs: tuple[int, ...]) -> tuple[float, ...]:
    """The share of tokens each tail cluster of an adaptive softmax gets when word ranks
    follow Zipf's law with exponent 1 (the frequency of the r-th most frequent word is
    proportional to 1/r; Zipf 1949, the law Grave et al. 2017 build the adaptive softmax on):
    cluster [l, r) gets (H_r - H_l) / H_V ~ ln(r / l) / (ln V + gamma). An assumption about
    the data, not a measurement: real corpora put more of their tokens in the head."""
    ends = (*cutoffs, vocab)
    return tuple(round(math.log(hi / lo) / (math.log(vocab) + EULER_GAMMA), 4)
                 for lo, hi in itertools.pairwise(ends))


def _txl(name: str, layers: int, hidden: int, heads: int, d_head: int, ffn: int, vocab: int,
         cutoffs: tuple[int, ...], mem: int, *, div_val: int = 1,
         tie_projs: bool = True) -> ModelConfig:
    return ModelConfig(name=name, family=Family.TRANSFORMER_XL, num_layers=layers,
                       hidden=hidden, heads=heads, head_size=d_head, intermediate=ffn,
                       vocab_size=vocab, max_positions=mem, type_vocab_size=1, mem_len=mem,
                       cutoffs=cutoffs, div_val=div_val, tie_projs=tie_projs,
                       cluster_shares=zipf_shares(vocab, cutoffs),
                       activation=Activation.RELU)


WT103 = (267735, (20000, 40000, 200000))
"""WikiText-103's vocabulary and the adaptive cutoffs the authors' data_utils.py sets for it
(kimiyoung/transformer-xl `tf/data_utils.py`, `Corpus`: [0, 20000, 40000, 200000] + V)."""
LM1B = (793470, (60000, 100000, 640000))
"""One Billion Word: the authors' 1b_word_vocab.txt vocabulary and their cutoffs for it
(the same `Corpus`: [0, 60000, 100000, 640000] + V)."""
ENWIK8 = 204
"""enwik8's symbols (bytes seen in the corpus): one softmax, no cutoffs."""

TXL_PRESETS = (
    # Dai et al. 2019 as trained by the authors' scripts (kimiyoung/transformer-xl):
    # pytorch/run_wt103_base.sh: 16 layers, d 410, 10 heads of 41, d_inner 2100,
    # tgt_len = mem_len = 150, adaptive softmax with div_val 1
    _txl("txl-wt103-base", 16, 410, 10, 41, 2100, *WT103, 150),
    # pytorch/run_wt103_large.sh: 18 layers, d 1024, 16 heads of 64, d_inner 4096,
    # tgt_len = mem_len = 384, div_val 4 (tail projections tied: train.py's tie_projs)
    _txl("txl-wt103-large", 18, 1024, 16, 64, 4096, *WT103, 384, div_val=4),
    # pytorch/run_enwik8_base.sh: 12 layers, d 512, 8 heads of 64, d_inner 2048,
    # tgt_len = mem_len = 512
    _txl("txl-enwik8-base", 12, 512, 8, 64, 2048, ENWIK8, (), 512),
    # tf/scripts/enwik8_tpu.sh: 24 layers, d 1024, 8 heads of 128, d_inner 3072,
    # tgt_len = mem_len = 768
    _txl("txl-enwik8-large", 24, 1024, 8, 128, 3072, ENWIK8, (), 768),
    # tf/scripts/lm1b_base_gpu.sh: 18 layers, d 1024, 8 heads of 128, d_inner 4096,
    # tgt_len = mem_len = 256, div_val 4, untied projections (proj_share_all_but_first=False)
    _txl("txl-lm1b-base", 18, 1024, 8, 128, 4096, *LM1B, 256, div_val=4, tie_projs=False),
    # tf/scripts/lm1b_large_tpu.sh: 24 layers, d 1280, 16 heads of 80, d_inner 8192,
    # tgt_len = mem_len = 32, div_val 4, untied projections
    _txl("txl-lm1b-large", 24, 1280, 16, 80, 8192, *LM1B, 32, div_val=4, tie_projs=False),
)
"""Transformer-XL's published sizes. `max_positions` records the training segment (relative
positions bound no length); the training segment length is `--seq` (the scripts'
tgt_len)."""


OTHER_PRESETS = (
    # google-t5/t5-{small,base,large,3b,11b} and google/t5-v1_1-{small,...,xxl} config.json
    _t5("t5-small", 6, 512, 8, 2048, 64),
    _t5("t5-base", 12, 768, 12, 3072, 64),
    _t5("t5-large", 24, 1024, 16, 4096, 64),
    _t5("t5-3b", 24, 1024, 32, 16384, 128),
    _t5("t5-11b", 24, 1024, 128, 65536, 128),
    _t5("t5-v1_1-small", 8, 512, 6, 1024, 64, v1_1=True),
    _t5("t5-v1_1-base", 12, 768, 12, 2048, 64, v1_1=True),
    _t5("t5-v1_1-large", 24, 1024, 16, 2816, 64, v1_1=True),
    _t5("t5-v1_1-xl", 24, 2048, 32, 5120, 64, v1_1=True),
    _t5("t5-v1_1-xxl", 24, 4096, 64, 10240, 64, v1_1=True),
    # google/vit-base-patch16-224, vit-large-patch16-224 (1000 ImageNet classes) and
    # vit-huge-patch14-224-in21k's sizes with the same 1000-class head
    _vit("vit-base", 12, 768, 12),
    _vit("vit-large", 24, 1024, 16),
    _vit("vit-huge", 32, 1280, 16, patch=14),
    # xlnet/xlnet-{base,large}-cased config.json (d_inner 4h, vocab 32000, untie_r); the
    # pretraining memory: mem_len 384 for 512-token segments (zihangdai/xlnet README's
    # pretraining command: --seq_len=512 --reuse_len=256 --mem_len=384 --num_predict=85, i.e.
    # K = 6, Yang et al. 2019, Appendix A.3)
    _xlnet("xlnet-base", 12, 768, 12),
    _xlnet("xlnet-large", 24, 1024, 16),
)


# The published checkpoints' config.json values (google-research/bert README for the
# compact models: bert_uncased_L-{2,4,4,8}_H-{128,256,512,512}; bert-base/large-uncased;
# FacebookAI/roberta-*; albert/albert-*-v2).
PRESETS: dict[str, ModelConfig] = {
    m.name: m
    for m in (
        _bert("bert-tiny", 2, 128, 2),
        _bert("bert-mini", 4, 256, 4),
        _bert("bert-small", 4, 512, 8),
        _bert("bert-medium", 8, 512, 8),
        _bert("bert-base", 12, 768, 12),
        _bert("bert-large", 24, 1024, 16),
        _roberta("roberta-base", 12, 768, 12),
        _roberta("roberta-large", 24, 1024, 16),
        _albert("albert-base-v2", 12, 768, 12),
        _albert("albert-large-v2", 24, 1024, 16),
        _albert("albert-xlarge-v2", 24, 2048, 16),
        _albert("albert-xxlarge-v2", 12, 4096, 64),
        *DECODER_PRESETS,
        *OTHER_PRESETS,
        *TXL_PRESETS,
    )
}



def get_model(name_or_path: str | Path | ModelConfig) -> ModelConfig:
    """A preset by name, or a Hugging Face config.json by path (a `ModelConfig` as is).

    Unknown names raise with the closest preset names suggested; anything but a string, a
    path or a ModelConfig (a list, None, a number) is refused in one line.
    """
    if isinstance(name_or_path, ModelConfig):
        return name_or_path
    if not isinstance(name_or_path, str | os.PathLike):
        raise BertscopeError(f"model: expected a preset name, a config.json path or a "
                             f"ModelConfig, got {type(name_or_path).__name__} "
                             f"{shown(name_or_path)}")
    key = os.fspath(name_or_path)
    if not isinstance(key, str):  # a bytes path
        raise BertscopeError(f"model: expected a preset name or a path as text, got "
                             f"{shown(key)}")
    if key in PRESETS:
        return PRESETS[key]
    p = Path(key)
    try:
        on_disk = p.suffix == ".json" or "/" in key or p.is_dir() or p.exists()
    except (OSError, ValueError):  # a name too long for a path, a NUL byte
        on_disk = False
    if on_disk:
        return from_hf_config(p)
    close = difflib.get_close_matches(key[:200], list(PRESETS), n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else "see `bertscope models`"
    raise BertscopeError(f"unknown model {shown(key)}; {hint}")


def with_changes(model: ModelConfig, **changes: Any) -> ModelConfig:
    """A copy of `model` with some sizes changed (validated again)."""
    known = {f.name for f in fields(model)}
    bad = sorted(set(changes) - known)
    if bad:
        raise BertscopeError(f"unknown model field(s) {', '.join(bad)}")
    return replace(model, **changes)




__all__ = ["PRESETS", "TXL_PRESETS", "get_model", "with_changes", "zipf_shares"]
