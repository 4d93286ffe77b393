"""Two stored runs side by side: per category, per sublayer group, per op join key.

Op rows are joined by `perf.fit.KEYS` (layer, sublayer, phase, kind, category), the keys
validation joins measured and predicted rows by: a measured run against a predicted one gives
the per-op prediction error (B relative to A).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from bertscope.perf.fit import KEYS, join_keys
from bertscope.taxonomy import Sublayer


def _by(df: pd.DataFrame, key: Any) -> pd.Series:
    s = df.groupby(key, observed=True)["time_s"].sum()
    return s


def _side(a: pd.Series, b: pd.Series) -> pd.DataFrame:
    out = pd.concat([a.rename("a_s"), b.rename("b_s")], axis=1).fillna(0.0)
    out["delta_s"] = out["b_s"] - out["a_s"]
    ta, tb = out["a_s"].sum(), out["b_s"].sum()
    out["a_share"] = out["a_s"] / ta if ta > 0 else 0.0
    out["b_share"] = out["b_s"] / tb if tb > 0 else 0.0
    out["delta_pp"] = 100 * (out["b_share"] - out["a_share"])
    return out.sort_values("a_s", ascending=False)


def compare_ops(a: pd.DataFrame, b: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per category, per sublayer group and per join key: time in A and B, the difference,
    shares and (per key) B's relative error against A."""
    a = a.dropna(subset=["time_s"])
    b = b.dropna(subset=["time_s"])
    group = lambda df: df["sublayer"].map(lambda s: Sublayer(s).group.value)  # noqa: E731
    keys = _side(_by(join_keys(a), KEYS), _by(join_keys(b), KEYS))
    keys["error"] = (keys["b_s"] - keys["a_s"]) / keys["a_s"].where(keys["a_s"] > 0)
    return {"category": _side(_by(a, "category"), _by(b, "category")),
            "group": _side(_by(a, group(a)), _by(b, group(b))),
            "keys": keys.reset_index()}


__all__ = ["compare_ops"]
