"""What `profile` keeps alive while it trains: nothing of a forward pass but what backward
needs, and nothing of a walked capture once the next profiled iteration starts. Each is a
reference that outlives its use and moves a later iteration's tensors onto fresh pages
(bench/bench_study_cost.py measures the process's peak); here the references themselves
are checked, with weak references and the garbage collector's list of objects."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

from bertscope.config import RunConfig
from tests.conftest import tiny

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.autograd.profiler_util import FunctionEvent  # noqa: E402

from bertscope.measure import profile as prof_mod  # noqa: E402
from bertscope.measure.profile import profile  # noqa: E402


class _Watch(nn.Module):
    """Runs the model and asks, when backward starts (the loss's gradient hook), whether the
    forward output's logits are still alive."""

    def __init__(self, inner: nn.Module, seen: list[bool]) -> None:
        super().__init__()
        self.inner, self.seen = inner, seen

    def forward(self, **batch: Any) -> Any:
        out = self.inner(**batch)
        logits = weakref.ref(out.mlm_logits)
        out.loss.register_hook(lambda g: self.seen.append(logits() is not None) or g)
        return out


def test_logits_are_freed_before_backward() -> None:
    """The forward output holds the logits (batch x seq x vocabulary); the loss's graph
    does not need them (log-softmax keeps its own output), so none is alive when backward
    starts: in every iteration, warm-up and profiled alike."""
    seen: list[bool] = []
    profile(tiny(), RunConfig(batch=2, seq=16), iters=2, warmup=1,
            wrap=lambda model: _Watch(model, seen))
    assert len(seen) >= 3  # 1 warm-up + 2 measured iterations (+ settling ones)
    assert not any(seen), seen


def test_no_walked_event_is_alive_when_a_profiled_iteration_starts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each capture is walked as the next starts; its FunctionEvent tree (parents and
    children refer to each other) must be collected before the next iteration, not
    whenever Python's collector next runs. Counted at the start of every iteration: the
    first profiled one finds none, and so does every later one."""
    counts: list[int] = []
    step = prof_mod._Trainer.step

    def counting(self: Any) -> None:
        # type(), not isinstance: isinstance reads __class__, which on torch's deprecated
        # module attributes (torch.distributed.reduce_op) warns
        counts.append(sum(issubclass(type(o), FunctionEvent) for o in gc.get_objects()))
        step(self)

    monkeypatch.setattr(prof_mod._Trainer, "step", counting)
    gc.disable()  # no collection but the profiler's own: a stray one would hide a leak
    try:
        profile(tiny(), RunConfig(batch=2, seq=16), iters=3, warmup=1)
    finally:
        gc.enable()
    assert len(counts) >= 4  # 1 warm-up + 3 measured
    assert counts == [0] * len(counts), counts
