"""Shared fixtures: tiny configs that keep CI fast on 2 cores."""

from __future__ import annotations

import pytest

from bertscope.config import Activation, Family, ModelConfig


def tiny(family: Family = Family.BERT, **kw: object) -> ModelConfig:
    """A tiny model of the given family (2 layers, hidden 64, 4 heads, vocab 500)."""
    base: dict[str, object] = dict(name=f"tiny-{family}", family=family, num_layers=2, hidden=64,
                                   heads=4, intermediate=256, vocab_size=500, max_positions=64)
    if family is Family.ROBERTA:
        base.update(max_positions=66, type_vocab_size=1, position_offset=2)
    if family is Family.ALBERT:
        base.update(num_layers=3, embedding_size=32, share_layers=True,
                    activation=Activation.GELU_NEW)
    base.update(kw)
    return ModelConfig(**base)  # type: ignore[arg-type]


@pytest.fixture(params=list(Family), ids=lambda f: f.value)
def tiny_model(request: pytest.FixtureRequest) -> ModelConfig:
    """One tiny model per family."""
    return tiny(request.param)


@pytest.fixture(autouse=True)
def _runs_store(tmp_path_factory, monkeypatch):
    """Every test records into a store of its own, never the user's data folder."""
    monkeypatch.setenv("BERTSCOPE_STORE", str(tmp_path_factory.mktemp("store") / "runs.sqlite"))
