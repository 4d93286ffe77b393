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

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from bertscope.taxonomy import Phase, Sublayer

# the reading half is torch-free, shared with the trace reader; GEMM shapes from the registry
from bertscope.trace.attribute import ATTN_CORE, ITER, PHASE, SCOPE, Attributor
from bertscope.trace.gemm_ops import gemm_shape

SublayerOf = Callable[[str], Sublayer | str]
"""Module path -> its sublayer (or ATTN_CORE), `Sublayer.OTHER` for no scope of its own."""

Patterns = list[tuple[re.Pattern[str], Sublayer | str]]
"""Module-path regexes -> sublayer (or ATTN_CORE), first match wins (a Hugging Face model's)."""


def compile_patterns(rows: list[tuple[str, Sublayer | str]]) -> Patterns:
    """`Patterns` from (regex, sublayer) rows."""
    return [(re.compile(p), s) for p, s in rows]


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


__all__ = ["ATTN_CORE", "ITER", "PHASE", "SCOPE", "Attributor", "ScopeHooks", "gemm_shape"]
