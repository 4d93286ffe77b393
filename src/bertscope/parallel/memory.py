"""Memory per device under tensor, pipeline and data parallelism, ZeRO and recomputation.

Every function takes numbers or numpy arrays (broadcast together), so a layout search costs all
layouts at once.

**Parameters per device.** Megatron-LM's split (Shoeybi et al. 2019, section 3): Q, K, V and
FFN1 are column-parallel (weights and biases split t ways), the attention output projection
and FFN2 are row-parallel (weights split, biases replicated), layernorms are replicated; the
word embedding and the MLM decoder bias are split by vocabulary. Pipeline stage 0 holds the
embeddings, the last stage the heads plus a copy of the tied word embedding (p > 1); each stage
holds L/p layers (ALBERT: one shared layer per stage).

**Static memory** (Rajbhandari et al., ZeRO, SC 2020, section 5 and Figure 1), with Psi
parameters per device, N_d data-parallel devices, w bytes per working weight and per gradient
(2 in mixed precision, 4 in fp32) and K bytes of optimizer state per parameter (fp32 master 4
in mixed precision, plus 4 per optimizer state: K = 12 for mixed-precision Adam):

    stage 0 (DDP)               (w + w + K) Psi                e.g. 2Psi + 2Psi + 12Psi
    stage 1 (P_os)              w Psi + w Psi + K Psi / N_d     2Psi + 2Psi + 12Psi/N_d
    stage 2 (P_os+g)            w Psi + (w + K) Psi / N_d       2Psi + 14Psi/N_d
    stage 3 (P_os+g+p)          (w + w + K) Psi / N_d           16Psi/N_d
                                + w Psi_layer (1 - 1/N_d)       one layer gathered at a time

**Activations per layer** (Korthikanti et al., Reducing Activation Recomputation in Large
Transformer Models, 2022, Table 2; 16-bit activations, 1-byte dropout masks, FFN = 4h, s
sequence, b micro-batch, h hidden, a heads, t tensor-parallel size):

    no parallelism                           sbh (34 + 5as/h)
    tensor parallel                          sbh (10 + 24/t + 5as/(ht))
    tensor + sequence parallel               sbh/t (34 + 5as/h)
    tensor parallel + selective recompute    sbh (10 + 24/t)
    tensor + sequence parallel + selective   sbh (34/t)
    full recomputation                       2sbh (2sbh/t with sequence parallelism, which
                                             keeps each layer's input sharded)

**Segment memory** (Transformer-XL, XLNet; `analytic.memory.segment_memory_bytes`): the
previous segment's hidden states, mem_len x hidden per sequence per layer, carried between
iterations. Per device it follows the layout (`segment_memory_per_device`): a pipeline stage
holds its own layers' memory (L/p layers); a data-parallel rank the memory of its own
sequences, every micro-batch slot's (global batch / dp: one memory per micro-batch, as the
authors' train.py keeps one per batch_chunk); tensor parallelism replicates it (it is each
layer's input, which every tensor-parallel rank holds whole), unless sequence parallelism
shards the layer input by position, when each rank keeps mem_len / t positions of it:

    layers / p x global batch / dp x mem_len x hidden x act_bytes (/ t with sequence parallel)

`layer_activation_bytes` computes the general form for any activation size, FFN size and
dropout setting, term by term as the paper derives it; with the paper's assumptions it is the
table above (tested).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bertscope.analytic.families import padded_vocabulary
from bertscope.analytic.memory import segment_memory_bytes
from bertscope.analytic.params import ParamGroup, group_layout
from bertscope.config import Checkpoint, ModelConfig, Optimizer, Precision, RunConfig
from bertscope.errors import BertscopeError, parse_enum
from bertscope.job import ZeroStage
from bertscope.parallel.collectives import ArrayLike

MASTER_BYTES = 4
"""An fp32 master weight (mixed precision) or optimizer-state element."""
MASK_BYTES = 1
"""A dropout-mask element (torch.bool), as Korthikanti et al. assume."""


CHECKPOINTS: tuple[Checkpoint, ...] = tuple(Checkpoint)
"""Checkpoint modes in code order (0 none, 1 selective, 2 full)."""

NONE_CODE = Checkpoint.NONE.code
"""Code of no recomputation in arrays of layouts."""
SELECTIVE_CODE = Checkpoint.SELECTIVE.code
"""Code of selective recomputation in arrays of layouts."""
FULL_CODE = Checkpoint.FULL.code
"""Code of full recomputation in arrays of layouts."""


# -- parameters ------------------------------------------------------------------------------
def _per_device(groups: list[ParamGroup], tp: ArrayLike) -> np.ndarray:
    """Parameters of `groups` on one of `tp` tensor-parallel devices: each group's `split`
    divided t ways, the rest whole."""
    t = np.asarray(tp, dtype=float)
    return sum((g.split / t + (g.params - g.split) for g in groups), np.zeros_like(t))


def layer_params_per_device(m: ModelConfig, tp: ArrayLike) -> np.ndarray:
    """Parameters of one layer on one of `tp` tensor-parallel devices (the mean over the
    stacks' layers when they differ): the layout's split parameters divided t ways (encoder:
    Q, K, V, output and FFN weights, Q/K/V/FFN1 biases, 4h^2 + 2hf + 3h + f), the rest whole
    (output-projection and FFN2 biases, two layernorms: 6h)."""
    g = group_layout(m)
    total = sum(g.stack_layers(st, m.num_layers) for st in g.stacks)
    return sum(g.stack_layers(st, m.num_layers) * _per_device([st.group], tp)
               for st in g.stacks) / total


def embedding_params_per_device(m: ModelConfig, tp: ArrayLike) -> np.ndarray:
    """Parameters of the groups before the stack on one device of pipeline stage 0 (the word
    table split by vocabulary; position/token-type tables, norms, ALBERT's projection
    whole)."""
    return _per_device(group_layout(m).before, tp)


def head_params_per_device(m: ModelConfig, tp: ArrayLike, pp: ArrayLike) -> np.ndarray:
    """Parameters of the groups after the stack on one device of the last pipeline stage (a
    vocabulary-parallel head or bias split, transforms, norms, pooler and classifier whole);
    with pp > 1 and a head tied to the word table, a copy of that table split by vocabulary
    (Megatron-LM keeps one on the last stage)."""
    t = np.asarray(tp, dtype=float)
    tied = m.vocab_size * m.emb if m.tie_word_embeddings else 0
    tied_copy = np.where(np.asarray(pp) > 1, tied / t, 0.0)
    return _per_device(group_layout(m).after, tp) + tied_copy


def stage_params(m: ModelConfig, tp: ArrayLike, pp: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """(first stage, last stage) parameters per device. With pp = 1 both are the whole model
    on one tensor-parallel device."""
    p = np.asarray(pp, dtype=float)
    layers = 1.0 if m.share_layers else m.stack_layers / p
    body = layers * layer_params_per_device(m, tp)
    emb = embedding_params_per_device(m, tp)
    head = head_params_per_device(m, tp, pp)
    single = p == 1
    first = body + emb + np.where(single, head, 0.0)
    last = body + head + np.where(single, emb, 0.0)
    return first, last


def padded_stage_params(m: ModelConfig, run: RunConfig, tp: ArrayLike,
                        pp: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """`stage_params` of `m` with its vocabulary padded as `run` pads it for each layout's
    tensor-parallel size (`families.padded_vocabulary`: Megatron's 128 x tp)."""
    t, p = np.broadcast_arrays(np.asarray(tp, dtype=np.int64), np.asarray(pp))
    first, last = np.zeros(t.shape), np.zeros(t.shape)
    for size in np.unique(t):
        at = t == size
        first[at], last[at] = stage_params(padded_vocabulary(m, run, int(size)), t[at], p[at])
    return first, last


# -- static memory -----------------------------------------------------------------------------
def bytes_per_param(precision: Precision, optimizer: Optimizer,
                    grad_bytes: int | None = None) -> tuple[int, int, int]:
    """(working weight, gradient, optimizer state K) bytes per parameter. `grad_bytes`: the
    gradient's when it is not the working precision's (fp32 main gradients beside 16-bit
    weights: `analytic.memory.gradient_bytes` of the run; Megatron's bf16 runs hold 2 + 4 +
    12 = 18 bytes per parameter, 6 + 12/d with the distributed optimizer, Megatron Core user
    guide, "Distributed Optimizer")."""
    w = precision.act_bytes
    k = (MASTER_BYTES if precision.mixed else 0) + MASTER_BYTES * optimizer.states
    return w, w if grad_bytes is None else grad_bytes, k


def zero_static_bytes(params: ArrayLike, dp: ArrayLike, stage: ArrayLike, *,
                      precision: Precision, optimizer: Optimizer,
                      layer_params: ArrayLike = 0.0,
                      grad_bytes: int | None = None) -> dict[str, np.ndarray]:
    """Weights, gradients and optimizer states per device for ZeRO `stage` (0-3) over `dp`
    data-parallel devices (formulas in the module docstring). `layer_params` is the largest
    unit ZeRO-3 gathers at once (one layer's parameters on this device); `grad_bytes` as
    `bytes_per_param` takes it."""
    psi, n, z = (np.asarray(x, dtype=float) for x in (params, dp, stage))
    if np.any((z < ZeroStage.NONE) | (z > ZeroStage.PARAMETERS)):
        raise BertscopeError("ZeRO stage must be 0, 1, 2 or 3")
    w, g, k = bytes_per_param(precision, optimizer, grad_bytes)
    weights = np.where(z >= ZeroStage.PARAMETERS,
                       w * psi / n + w * np.asarray(layer_params) * (1 - 1 / n), w * psi)
    grads = np.where(z >= ZeroStage.GRADIENTS, g * psi / n, g * psi)
    states = np.where(z >= ZeroStage.OPTIMIZER, k * psi / n, k * psi)
    return {"weights": weights, "gradients": grads, "optimizer_states": states}


# -- activations -------------------------------------------------------------------------------
def layer_activation_bytes(*, seq: ArrayLike, micro_batch: ArrayLike, hidden: int, heads: int,
                           intermediate: int, tp: ArrayLike = 1, sp: ArrayLike = False,
                           checkpoint: Checkpoint | str | np.ndarray = Checkpoint.NONE,
                           act_bytes: int = 2, dropout: bool = True) -> np.ndarray:
    """Bytes one encoder layer keeps for backward per micro-batch on one device (Korthikanti
    et al. 2022, section 4; Table 2 under their assumptions, see the module docstring).

    Term by term (e = act_bytes, 1-byte masks, f = intermediate):
    - replicated across tensor-parallel ranks unless sequence parallel: the QKV input e, two
      layernorm inputs 2e, the FFN1 input e, two hidden-dropout masks 2 (sbh (4e + 2));
    - split t ways: Q and K 2e, V e, the output projection's input e (sbh 4e), the GELU and
      FFN2 inputs (2e sbf);
    - the attention core, split t ways: softmax output e, dropout mask 1, dropout output e
      (a s^2 b (2e + 1)), or just the softmax output without dropout.
    `checkpoint` may be an array of modes or of their codes (`checkpoint_codes`)."""
    s, b = np.asarray(seq, dtype=float), np.asarray(micro_batch, dtype=float)
    t, spa = np.asarray(tp, dtype=float), np.asarray(sp, dtype=bool)
    e, mask = float(act_bytes), float(MASK_BYTES) if dropout else 0.0
    sbh = s * b * hidden
    replicated = sbh * (4 * e + 2 * mask)
    split = sbh * 4 * e + 2 * e * s * b * intermediate
    attention = heads * s * s * b * (2 * e + mask if dropout else e)
    kept_repl = np.where(spa, replicated / t, replicated)
    none = kept_repl + split / t + attention / t
    selective = kept_repl + split / t
    full = np.where(spa, e * sbh / t, e * sbh)
    code = checkpoint_codes(checkpoint)
    return np.where(code == FULL_CODE, full, np.where(code == SELECTIVE_CODE, selective, none))


def segment_memory_per_device(m: ModelConfig, *, sequences: ArrayLike, pp: ArrayLike = 1,
                              tp: ArrayLike = 1, sp: ArrayLike = False,
                              act_bytes: int = 2) -> np.ndarray:
    """Bytes of the segment memory on one device (module docstring): the layers of one of
    `pp` pipeline stages, for the `sequences` a data-parallel rank runs per step (micro-batch
    x micro-batches), whole on every one of `tp` tensor-parallel ranks, or a 1/t share of the
    positions each with sequence parallelism (`sp`). 0 for models without memory."""
    t, spa = np.asarray(tp, dtype=float), np.asarray(sp, dtype=bool)
    layers = m.num_layers / np.asarray(pp, dtype=float)
    whole = segment_memory_bytes(m, sequences=np.asarray(sequences, dtype=float),
                                 act_bytes=act_bytes, layers=layers)
    return whole / np.where(spa, t, 1.0)


def recompute_working_bytes(*, seq: ArrayLike, micro_batch: ArrayLike, hidden: int, heads: int,
                            intermediate: int, tp: ArrayLike = 1, sp: ArrayLike = False,
                            checkpoint: Checkpoint | str | np.ndarray = Checkpoint.NONE,
                            act_bytes: int = 2, dropout: bool = True) -> np.ndarray:
    """Activations live again while one layer is recomputed in backward: a whole layer's
    (full recomputation) or its attention core's (selective); none without recomputation."""
    kw: dict[str, Any] = dict(seq=seq, micro_batch=micro_batch, hidden=hidden, heads=heads,
                              intermediate=intermediate, tp=tp, sp=sp, act_bytes=act_bytes,
                              dropout=dropout)
    none = layer_activation_bytes(checkpoint=Checkpoint.NONE, **kw)
    selective = layer_activation_bytes(checkpoint=Checkpoint.SELECTIVE, **kw)
    code = checkpoint_codes(checkpoint)
    return np.where(code == FULL_CODE, none,
                    np.where(code == SELECTIVE_CODE, none - selective, 0.0))


def checkpoint_codes(checkpoint: Checkpoint | str | np.ndarray) -> np.ndarray:
    """Integer codes of checkpoint modes (0 none, 1 selective, 2 full), the form the array
    functions take: a `Checkpoint`, a name, or an array of either (integers pass through)."""
    if isinstance(checkpoint, str):
        return np.asarray(_checkpoint(checkpoint).code)
    arr = np.asarray(checkpoint)
    if arr.dtype.kind in "iu":
        return arr
    return np.asarray([_checkpoint(c).code for c in arr.ravel()]).reshape(arr.shape)


def _checkpoint(value: Any) -> Checkpoint:
    return parse_enum(Checkpoint, value, "checkpoint mode")


__all__ = [
    "CHECKPOINTS",
    "FULL_CODE",
    "MASK_BYTES",
    "MASTER_BYTES",
    "NONE_CODE",
    "SELECTIVE_CODE",
    "Checkpoint",
    "ZeroStage",
    "bytes_per_param",
    "checkpoint_codes",
    "embedding_params_per_device",
    "head_params_per_device",
    "layer_activation_bytes",
    "layer_params_per_device",
    "padded_stage_params",
    "recompute_working_bytes",
    "segment_memory_per_device",
    "stage_params",
    "zero_static_bytes",
]
