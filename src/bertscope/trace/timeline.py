"""Device-timeline primitives shared by the per-rank analyses: disjoint interval sets (union,
overlap, length) and the launch links (which runtime call launched each device event)."""

from __future__ import annotations

import numpy as np

from bertscope.trace.events import Events, Kind


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into disjoint sorted ones (starts, ends)."""
    if not len(starts):
        return starts, ends
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], np.maximum.accumulate(ends[o])
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > e[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], e[last]


def overlap(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    """Total length covered by both of two disjoint interval sets."""
    if not len(a[0]) or not len(b[0]):
        return 0.0
    x = np.concatenate([a[0], a[1], b[0], b[1]])
    da = np.concatenate([np.ones(len(a[0])), -np.ones(len(a[1])), np.zeros(2 * len(b[0]))])
    db = np.concatenate([np.zeros(2 * len(a[0])), np.ones(len(b[0])), -np.ones(len(b[1]))])
    o = np.lexsort((da + db, x))  # at equal positions, ends (-1) before starts (+1)
    x, ca, cb = x[o], np.cumsum(da[o]), np.cumsum(db[o])
    both = (ca[:-1] > 0) & (cb[:-1] > 0)
    return float(np.sum(np.diff(x)[both]))


def length(iv: tuple[np.ndarray, np.ndarray]) -> float:
    """Total length of a disjoint interval set."""
    return float(np.sum(iv[1] - iv[0]))


def launched_by(ev: Events, dev: np.ndarray) -> np.ndarray:
    """Event index of the runtime call (cudaLaunchKernel, cudaMemcpyAsync, ...) that launched
    each device event in `dev` (-1: none found): by `correlation` arg, else by the `ac2g` flow
    whose ends sit at the two events' start times."""
    corr = ev.corr[dev].copy()
    rt = np.flatnonzero(ev.kind == Kind.RUNTIME)
    rt_corr = ev.corr[rt].copy()
    s_ts, s_id, f_ts, f_id = ev.flows
    if len(f_ts) and (corr < 0).any():  # no correlation arg: the ac2g flow links them
        by_ts = dict(zip(f_ts.tolist(), f_id.tolist(), strict=True))
        for j in np.flatnonzero(corr < 0).tolist():
            corr[j] = by_ts.get(float(ev.ts[dev[j]]), -1)
    if len(s_ts) and (rt_corr < 0).any():
        by_ts = dict(zip(s_ts.tolist(), s_id.tolist(), strict=True))
        for j in np.flatnonzero(rt_corr < 0).tolist():
            rt_corr[j] = by_ts.get(float(ev.ts[rt[j]]), -1)
    ok = rt_corr >= 0
    rt, rt_corr = rt[ok], rt_corr[ok]
    srt = np.argsort(rt_corr, kind="stable")
    rt, rt_corr = rt[srt], rt_corr[srt]
    out = np.full(len(dev), -1, dtype=np.int64)
    if not len(rt):
        return out
    j = np.clip(np.searchsorted(rt_corr, corr), 0, len(rt) - 1)
    hit = (corr >= 0) & (rt_corr[j] == corr)
    out[hit] = rt[j[hit]]
    return out


__all__ = ["launched_by", "length", "overlap", "union"]
