"""LAMB (You et al. 2020, "Large Batch Optimization for Deep Learning: Training BERT in
76 minutes", ICLR, Algorithm 2) with torch._foreach_* ops, and an optimizer factory.

torch ships no LAMB. Per parameter tensor w with gradient g, at step t:

    m = b1 m + (1 - b1) g                 v = b2 v + (1 - b2) g^2
    m_hat = m / (1 - b1^t)                v_hat = v / (1 - b2^t)
    u = m_hat / (sqrt(v_hat) + eps) + weight_decay * w
    r = ||w|| / ||u||   (1 where either norm is 0; phi is the identity)
    w = w - lr * r * u

The update is layer-wise: one trust ratio per tensor, as in NVIDIA's BERT LAMB.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from bertscope.config import Optimizer
from bertscope.errors import BertscopeError


class Lamb(torch.optim.Optimizer):
    """LAMB, Algorithm 2 of You et al. 2020, one multi-tensor (`_foreach`) pass per group.

    All parameters of a group must be on one device.
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.01) -> None:
        if lr < 0 or eps < 0 or weight_decay < 0:
            raise BertscopeError(f"LAMB: lr, eps and weight_decay must be >= 0, "
                                 f"got {lr}, {eps}, {weight_decay}")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise BertscopeError(f"LAMB: betas must be in [0, 1), got {betas}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One update of every parameter that has a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                self._update(group, params)
        return loss

    def _update(self, group: dict[str, Any], params: list[torch.Tensor]) -> None:
        b1, b2 = group["betas"]
        if any(p.grad.is_sparse for p in params):
            raise BertscopeError("LAMB does not support sparse gradients")
        grads = [p.grad for p in params]
        ms, vs, steps = [], [], []
        for p in params:
            state = self.state[p]
            if not state:
                state["step"] = 0
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["step"] += 1
            ms.append(state["exp_avg"])
            vs.append(state["exp_avg_sq"])
            steps.append(state["step"])
        torch._foreach_lerp_(ms, grads, 1 - b1)  # m = b1 m + (1 - b1) g
        torch._foreach_mul_(vs, b2)
        torch._foreach_addcmul_(vs, grads, grads, value=1 - b2)  # v = b2 v + (1 - b2) g^2
        u = torch._foreach_div(ms, [1 - b1**t for t in steps])  # m_hat
        denom = torch._foreach_div(vs, [1 - b2**t for t in steps])  # v_hat
        torch._foreach_sqrt_(denom)
        torch._foreach_add_(denom, group["eps"])
        torch._foreach_div_(u, denom)  # m_hat / (sqrt(v_hat) + eps)
        if group["weight_decay"]:
            torch._foreach_add_(u, params, alpha=group["weight_decay"])
        w_norm = torch.stack(torch._foreach_norm(params))  # (n,)
        u_norm = torch.stack(torch._foreach_norm(u))  # (n,)
        ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm,
                            torch.ones_like(w_norm))
        torch._foreach_mul_(u, list(ratio.unbind(0)))
        torch._foreach_add_(params, u, alpha=-group["lr"])


def make_optimizer(kind: Optimizer, params: Iterable[Any], *, lr: float = 1e-3,
                   weight_decay: float = 0.01) -> torch.optim.Optimizer:
    """The optimizer of a run: SGD (momentum 0.9), Adam, AdamW or LAMB.

    `weight_decay` applies to AdamW (decoupled, Loshchilov & Hutter 2019) and LAMB; SGD
    and Adam get none (Adam's would be L2 in the gradient, which BERT does not use).
    torch picks its own Adam/AdamW/SGD implementation (foreach on CUDA).
    """
    kind = Optimizer(kind)
    match kind:
        case Optimizer.SGD:
            return torch.optim.SGD(params, lr=lr, momentum=0.9)
        case Optimizer.ADAM:
            return torch.optim.Adam(params, lr=lr)
        case Optimizer.ADAMW:
            return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
        case Optimizer.LAMB:
            return Lamb(params, lr=lr, weight_decay=weight_decay)
    raise BertscopeError(f"unknown optimizer {kind!r}")


__all__ = ["Lamb", "make_optimizer"]
