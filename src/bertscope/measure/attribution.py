"""Attribute every op of a torch.profiler capture to layer, sublayer, category and phase.

How:
- **Module scopes.** Forward hooks on the model's modules open a `record_function` named
  `bertscope::<layer>::<sublayer>` around each module that starts a sublayer, so every
  forward op (and every op rerun by activation checkpointing) sits inside its scope.
  Encoder layers are numbered by call order (forward: 0, 1, ...; recompute in backward:
  L-1, L-2, ...), which also tells apart the L calls of ALBERT's one shared layer.
- **Phases.** The training loop wraps forward, backward and the optimizer step in
  `bertscope.phase::<phase>` scopes; ops inside a module scope during backward are
  `recompute`.
- **Backward.** Autograd runs each node as `autograd::engine::evaluate_function: XBackward0`
  with the sequence number of the forward op that created it; the node inherits that op's
  layer and sublayer. Inside Linear backward nodes, a GEMM whose reduction size K equals the
  forward op's row count is the weight gradient, otherwise the data gradient.
- **Categories** come from the one ordered pattern table (`taxonomy.Classifier`).

Rows are the ops directly inside a scope (their inclusive time, so nested ATen calls are not
counted twice); a backward node's own overhead is folded into its largest row.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from bertscope.optable import Op
from bertscope.taxonomy import Category, Classifier, Phase, Sublayer

SCOPE = "bertscope::"
PHASE = "bertscope.phase::"
ITER = "bertscope.iter::"
ATTN_CORE = "attn_core"
"""Scope marker for modules that run the whole attention core (Hugging Face's self-attention):
their ops are split into score / softmax / context by category and order."""
_EVAL = "autograd::engine::evaluate_function: "
_LINEAR_BWD = ("AddmmBackward0", "MmBackward0", "LinearBackward0")
_WEIGHT_GRAD_NODES = ("EmbeddingBackward0", "torch::autograd::AccumulateGrad")

SublayerOf = Callable[[str], Sublayer | str]
"""Module path -> its sublayer (or ATTN_CORE), `Sublayer.OTHER` for no scope of its own."""


@dataclass
class _State:
    phase: Phase = Phase.FORWARD
    layer: int = -1
    fwd_calls: int = 0
    bwd_calls: int = 0
    stack: list[Any] = field(default_factory=list)


class ScopeHooks:
    """Forward hooks that open a profiler scope per sublayer module and number the layers.

    `layer_modules` are the modules that run as encoder layers (one shared module for
    ALBERT); `num_layers` is how many layer calls one forward pass makes.
    """

    def __init__(self, model: nn.Module, sublayer_of: SublayerOf,
                 layer_modules: Iterable[nn.Module], num_layers: int) -> None:
        self.state = _State()
        self.num_layers = num_layers
        self._handles: list[Any] = []
        layers = set(map(id, layer_modules))
        layer_names = {n for n, m in model.named_modules() if id(m) in layers}
        for mod in layers_of(model, layers):
            self._handles.append(mod.register_forward_pre_hook(self._enter_layer))
        for name, mod in model.named_modules():
            sub = sublayer_of(name)
            if sub == Sublayer.OTHER or sublayer_of(name.rpartition(".")[0]) == sub:
                continue  # no scope of its own, or the parent already opened this one
            in_layer = any(name.startswith(f"{ln}.") for ln in layer_names)
            tag = str(sub)
            self._handles.append(mod.register_forward_pre_hook(
                lambda _m, _a, tag=tag, in_layer=in_layer: self._open(tag, in_layer)))
            self._handles.append(mod.register_forward_hook(
                lambda _m, _a, _o: self._close(), always_call=True))

    def _enter_layer(self, _mod: nn.Module, _args: Any) -> None:
        s = self.state
        if s.phase is Phase.FORWARD:
            s.layer, s.fwd_calls = s.fwd_calls % self.num_layers, s.fwd_calls + 1
        else:  # recompute in backward runs the layers last to first
            s.layer = self.num_layers - 1 - s.bwd_calls % self.num_layers
            s.bwd_calls += 1

    def _open(self, tag: str, in_layer: bool) -> None:
        rf = torch.autograd.profiler.record_function(
            f"{SCOPE}{self.state.layer if in_layer else -1}::{tag}")
        rf.__enter__()
        self.state.stack.append(rf)

    def _close(self) -> None:
        if self.state.stack:
            self.state.stack.pop().__exit__(None, None, None)

    def set_phase(self, phase: Phase) -> None:
        """Tell the hooks which phase runs next (resets the layer counters at forward)."""
        self.state.phase = phase
        if phase is Phase.FORWARD:
            self.state.fwd_calls = 0
        elif phase is Phase.BACKWARD:
            self.state.bwd_calls = 0

    def remove(self) -> None:
        """Remove every hook."""
        for h in self._handles:
            h.remove()
        self._handles.clear()


def layers_of(model: nn.Module, ids: set[int]) -> list[nn.Module]:
    """The modules of `model` whose id is in `ids` (each once)."""
    seen: dict[int, nn.Module] = {}
    for m in model.modules():
        if id(m) in ids:
            seen.setdefault(id(m), m)
    return list(seen.values())


# --- reading the capture ------------------------------------------------------------------

_SCOPE_RE = re.compile(rf"^{re.escape(SCOPE)}(-?\d+)::(\w+)$")


@dataclass(frozen=True, slots=True)
class _Where:
    layer: int
    sublayer: Sublayer
    core: int | None = None
    """Id of an attention-core scope whose ops are split by category and order."""


_NOWHERE = _Where(-1, Sublayer.OTHER)


def _numel(shape: Any) -> int:
    return math.prod(shape) if isinstance(shape, (list, tuple)) and shape else 0


def gemm_shape(name: str, shapes: list[Any]) -> tuple[int, int, int, int]:
    """(M, N, K, batch) of a GEMM-like ATen op from its recorded input shapes."""
    s = [x for x in shapes if isinstance(x, list) and x]
    try:
        if name.endswith(("::addmm", "::_addmm_activation")):
            (m, k), (_, n) = s[-2], s[-1]
            return m, n, k, 1
        if name.endswith("::mm"):
            (m, k), (_, n) = s[0], s[1]
            return m, n, k, 1
        if name.endswith("::linear"):
            x, w = s[0], s[1]
            return math.prod(x[:-1]), w[0], w[1], 1
        if name.endswith(("::bmm", "::baddbmm")):
            a, b = s[-2], s[-1]
            return a[-2], b[-1], a[-1], a[0]
        if name.endswith("::matmul"):
            a, b = s[0], s[1]
            if len(a) <= 2 and len(b) <= 2:
                return (a[0] if len(a) == 2 else 1), b[-1], a[-1], 1
            return a[-2], b[-1], a[-1], math.prod(a[:-2]) or math.prod(b[:-2])
    except (IndexError, ValueError, TypeError):
        pass
    return 0, 0, 0, 0


def _flops(evt: Any) -> float:
    total = float(getattr(evt, "flops", 0) or 0)
    return total + sum(_flops(c) for c in evt.cpu_children)


def _seqs(evt: Any) -> Iterable[tuple[int, Any]]:
    seq = getattr(evt, "sequence_nr", -1)
    if seq is not None and seq >= 0:
        yield seq, evt
    for c in evt.cpu_children:
        yield from _seqs(c)


@dataclass
class Attributor:
    """Turns profiler events, walked in time order, into op-table rows accumulated over the
    measured iterations."""

    classify: Classifier
    use_device_time: bool = False
    rows: dict[tuple[Any, ...], list[float]] = field(default_factory=dict)
    _seq: dict[int, tuple[_Where, Any]] = field(default_factory=dict)
    _core_gemms: dict[int, int] = field(default_factory=dict)
    _last: _Where = _NOWHERE

    def time_us(self, evt: Any) -> float:
        """Inclusive time of an event: kernel time on a device, else CPU time (us)."""
        return float(evt.device_time_total if self.use_device_time else evt.cpu_time_total)

    def walk(self, evt: Any, phase: Phase = Phase.FORWARD, where: _Where | None = None) -> float:
        """Emit rows for `evt` and below; returns the time emitted (us)."""
        name = evt.name
        if name.startswith(PHASE):
            ph = Phase(name[len(PHASE):])
            return sum(self.walk(c, ph, None) for c in evt.cpu_children)
        m = _SCOPE_RE.match(name)
        if m:
            layer, tag = int(m.group(1)), m.group(2)
            inner = (_Where(layer, Sublayer.ATTN_SCORE, core=id(evt)) if tag == ATTN_CORE
                     else _Where(layer, Sublayer(tag)))
            ph = Phase.RECOMPUTE if phase.is_backward or phase is Phase.RECOMPUTE else phase
            return sum(self.walk(c, ph, inner) for c in evt.cpu_children)
        if name.startswith(_EVAL):
            return self._backward_node(evt)
        if name.startswith("Optimizer."):
            return sum(self.walk(c, Phase.OPTIMIZER, where) for c in evt.cpu_children)
        if name.startswith(ITER):
            return sum(self.walk(c, phase, where) for c in evt.cpu_children)
        return self._add(evt, phase, where or _NOWHERE)[1]

    def _backward_node(self, evt: Any) -> float:
        node = evt.name[len(_EVAL):]
        hit = self._seq.get(evt.sequence_nr)
        # nodes without a forward op (AccumulateGrad of a parameter) run right after the node
        # that produced the parameter's gradient: they inherit its place
        where, fwd = hit if hit is not None else (self._last, None)
        self._last = where
        fwd_shape = _fwd_shape(fwd) if fwd is not None else None
        gemms = 0
        emitted: list[tuple[tuple[Any, ...], float]] = []
        children = []
        for c in evt.cpu_children:
            children += c.cpu_children if c.name == node else [c]
        total = 0.0
        recomputed = False
        for c in children:
            if c.name.startswith(SCOPE) or c.name.startswith(_EVAL):
                # checkpointing: unpacking a saved tensor reran the forward inside this node
                recomputed |= c.name.startswith(SCOPE)
                total += self.walk(c, Phase.BACKWARD, None)
                continue
            phase = _backward_phase(node, c.name, c, fwd_shape, self.classify, gemms)
            gemms += self.classify(c.name).is_gemm
            key, t = self._add(c, phase, where)
            emitted.append((key, t))
            total += t
        rest = self.time_us(evt) - total
        if rest <= 0 or recomputed:  # a recompute's Python gaps stay framework time
            return total
        if emitted:  # the node's own dispatch overhead goes to its largest op
            self.rows[max(emitted, key=lambda kt: kt[1])[0]][2] += rest
        else:  # a node that ran no ATen op of its own
            key = (node, where.layer, where.sublayer, Category.OTHER, Phase.BACKWARD,
                   0, 0, 0, 0, 0)
            self._accumulate(key, 0.0, rest)
        return total + rest

    def _add(self, evt: Any, phase: Phase, where: _Where) -> tuple[tuple[Any, ...], float]:
        name = evt.name
        cat = self.classify(name)
        shapes = list(getattr(evt, "input_shapes", None) or [])
        m = n = k = b = 0
        if cat.is_gemm:
            m, n, k, b = gemm_shape(name, shapes)
            if b == 1 and cat is Category.BATCHED_GEMM:
                cat = Category.GEMM
        elements = 0 if cat.is_gemm else _numel(shapes[0] if shapes else None)
        sub = self._sublayer(where, cat)
        if phase is Phase.OPTIMIZER:
            sub = Sublayer.OPTIMIZER
            if cat is Category.ELEMENTWISE:
                cat = Category.OPTIMIZER
        elif sub is Sublayer.OTHER and cat is Category.LOSS:
            sub = Sublayer.LOSS
        if phase in (Phase.FORWARD, Phase.RECOMPUTE):  # backward nodes will look these up
            for seq, e in _seqs(evt):
                self._seq[seq] = (_Where(where.layer, sub), e)
        key = (name, where.layer, sub, cat, phase, m, n, k, b, elements)
        t = self.time_us(evt)
        self._accumulate(key, _flops(evt), t)
        return key, t

    def _sublayer(self, where: _Where, cat: Category) -> Sublayer:
        """The row's sublayer; an attention-core scope is split into score (first GEMM and
        the scaling/masking before softmax), softmax (+ dropout) and context (second GEMM)."""
        if where.core is None:
            return where.sublayer
        if cat in (Category.SOFTMAX, Category.DROPOUT):
            return Sublayer.ATTN_SOFTMAX
        nth = self._core_gemms.get(where.core, 0)
        if cat.is_gemm:
            self._core_gemms[where.core] = nth + 1
            return Sublayer.ATTN_SCORE if nth == 0 else Sublayer.ATTN_CONTEXT
        return Sublayer.ATTN_SCORE if nth <= 1 else Sublayer.ATTN_CONTEXT

    def _accumulate(self, key: tuple[Any, ...], flops: float, t: float) -> None:
        acc = self.rows.setdefault(key, [0.0, 0.0, 0.0])
        acc[0] += 1
        acc[1] += flops
        acc[2] += t

    def ops(self, iterations: int) -> list[Op]:
        """Rows averaged per iteration: count, FLOPs and time per training iteration."""
        out = []
        for (name, layer, sub, cat, phase, m, n, k, b, el), (cnt, fl, t) in self.rows.items():
            out.append(Op(name, layer, sub, cat, phase, m=m, n=n, k=k, batch=b, elements=el,
                          count=max(1, round(cnt / iterations)), flops=fl / iterations,
                          time_s=t * 1e-6 / iterations))
        return out


def _fwd_shape(fwd_evt: Any) -> tuple[int, int, int] | None:
    """(rows T, in features K, out features N) of the forward GEMM behind a Linear node."""
    m, n, k, _ = gemm_shape(fwd_evt.name, list(getattr(fwd_evt, "input_shapes", None) or []))
    return (m, k, n) if m else None


def _backward_phase(node: str, op: str, evt: Any, fwd: tuple[int, int, int] | None,
                    classify: Classifier, nth_gemm: int) -> Phase:
    """Data- or weight-gradient phase of one op inside backward node `node`.

    In a Linear node (forward X[T, K] @ W^T[K, N]) the data gradient is dY[T, N] @ W[N, K]
    and the weight gradient X^T[K, T] @ dY[T, N] (or dY^T[N, T] @ X[T, K], the layout
    autograd picks for a transposed weight); when the shapes cannot tell them apart,
    autograd's order does (derivatives.yaml computes mat1's gradient first)."""
    if node in _WEIGHT_GRAD_NODES or op in _WEIGHT_GRAD_NODES:
        return Phase.BACKWARD_WEIGHT
    if node in _LINEAR_BWD:
        cat = classify(op)
        if cat is Category.REDUCTION:
            return Phase.BACKWARD_WEIGHT  # the bias gradient
        if cat.is_gemm:
            m, n, k, _ = gemm_shape(op, list(getattr(evt, "input_shapes", None) or []))
            if fwd is not None:
                t, k_in, n_out = fwd
                dgrad = (m, k, n) == (t, n_out, k_in)
                wgrad = k == t and {m, n} == {k_in, n_out}  # dW or dW^T, as autograd picks
                if dgrad != wgrad:
                    return Phase.BACKWARD_WEIGHT if wgrad else Phase.BACKWARD_DATA
            return Phase.BACKWARD_DATA if nth_gemm == 0 else Phase.BACKWARD_WEIGHT
    if node.startswith("NativeLayerNormBackward"):
        return Phase.BACKWARD  # one kernel computes data and weight gradients
    return Phase.BACKWARD_DATA


__all__ = ["ATTN_CORE", "ITER", "PHASE", "SCOPE", "Attributor", "ScopeHooks", "gemm_shape"]
