"""Plateau-then-drop detection on a loss curve.

A *plateau* is a stretch of at least ``window`` epochs over which the loss stays flat within a relative
tolerance: max/min of the loss over the whole stretch ≤ 1 + ``tol`` (a range of log-loss ≤
log(1 + tol)). It counts only if a *drop* follows: within ``drop_window`` epochs after the stretch the
loss falls to ≤ (1 − ``min_drop``) × the stretch's lowest loss. A flat tail that never drops (slow
convergence to the end of training) is therefore not a plateau.

For every epoch e the longest flat stretch ending at e is found with two monotone queues (O(n)); the
ends e whose stretch is long enough and is followed by a drop form runs, and each run gives one
plateau: the longest of the run's flat stretches (the whole flat region before the loss falls away),
so the reported stretch does not depend on ``drop_window`` once the drop is within reach.

Epochs are 1-based as in the seed's loss list: epoch e's loss is ``losses[e - 1]``, measured before
that epoch's update. Only the finite prefix of a curve is analysed (a NaN ends the search).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class PlateauHit:
    start_epoch: int  # first epoch of the flat stretch (1-based)
    end_epoch: int  # last epoch of the flat stretch
    loss: float  # median loss over the stretch
    drop_epoch: int  # first epoch after the stretch with loss ≤ (1 − min_drop) × the stretch's minimum
    loss_after: float  # lowest loss within drop_window epochs after the stretch

    @property
    def length(self) -> int:
        return self.end_epoch - self.start_epoch + 1

    def as_dict(self) -> dict:
        return {**asdict(self), "length": self.length}


def flat_starts(y: np.ndarray, ltol: float) -> np.ndarray:
    """For each index e, the smallest s with max(y[s..e]) − min(y[s..e]) ≤ ltol."""
    starts = np.empty(len(y), dtype=np.int64)
    qmax: deque[int] = deque()
    qmin: deque[int] = deque()
    s = 0
    for e, v in enumerate(y.tolist()):
        while qmax and y[qmax[-1]] <= v:
            qmax.pop()
        qmax.append(e)
        while qmin and y[qmin[-1]] >= v:
            qmin.pop()
        qmin.append(e)
        while y[qmax[0]] - y[qmin[0]] > ltol:
            s += 1
            if qmax[0] < s:
                qmax.popleft()
            if qmin[0] < s:
                qmin.popleft()
        starts[e] = s
    return starts


def _future_min(y: np.ndarray, width: int) -> np.ndarray:
    """fm[e] = min(y[e+1 : e+1+width]) (inf where empty)."""
    n = len(y)
    out = np.full(n, np.inf)
    q: deque[int] = deque()
    for e in range(n - 1, -1, -1):  # window (e, e + width]
        j = e + 1
        if j < n:
            while q and y[q[-1]] >= y[j]:
                q.pop()
            q.append(j)
        while q and q[0] > e + width:
            q.popleft()
        if q:
            out[e] = y[q[0]]
    return out


def detect_plateaus(losses: np.ndarray | list[float], *, tol: float, window: int, min_drop: float,
                    drop_window: int) -> list[PlateauHit]:
    """All plateau-then-drop events of one loss curve, in order (see the module docstring)."""
    if not (tol > 0 and window >= 2 and 0 < min_drop < 1 and drop_window >= 1):
        raise ValueError(f"bad detector settings tol={tol} window={window} min_drop={min_drop} "
                         f"drop_window={drop_window}")
    x = np.asarray(losses, dtype=np.float64).ravel()
    bad = np.flatnonzero(~np.isfinite(x))
    if len(bad):
        x = x[: bad[0]]
    if len(x) < window + 1:
        return []
    y = np.log(np.maximum(x, np.finfo(np.float64).tiny))
    starts = flat_starts(y, math.log1p(tol))
    # running minimum of each stretch: min over y[starts[e] .. e]; computed with a sparse-free scan
    stretch_min = _stretch_min(y, starts)
    fmin = _future_min(y, drop_window)
    need = math.log1p(-min_drop)
    length = np.arange(len(y)) - starts + 1
    cand = (length >= window) & (fmin <= stretch_min + need)
    hits: list[PlateauHit] = []
    idx = np.flatnonzero(cand)
    if not len(idx):
        return hits
    runs = np.split(idx, np.flatnonzero(np.diff(idx) > 1) + 1)
    for run in runs:
        lengths = run - starts[run]
        e = int(run[np.flatnonzero(lengths == lengths.max())[-1]])  # the longest stretch (latest on ties)
        s = int(starts[e])
        seg = x[s : e + 1]
        after = x[e + 1 : e + 1 + drop_window]
        thresh = seg.min() * (1 - min_drop)
        below = np.flatnonzero(after <= thresh)
        drop_at = e + 1 + int(below[0]) if len(below) else e + 1
        hits.append(PlateauHit(start_epoch=s + 1, end_epoch=e + 1, loss=float(np.median(seg)),
                               drop_epoch=drop_at + 1, loss_after=float(after.min())))
    return hits


def _stretch_min(y: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """min(y[starts[e] .. e]) for each e (starts non-decreasing): a sliding-window minimum."""
    out = np.empty(len(y))
    q: deque[int] = deque()
    for e in range(len(y)):
        while q and y[q[-1]] >= y[e]:
            q.pop()
        q.append(e)
        while q[0] < starts[e]:
            q.popleft()
        out[e] = y[q[0]]
    return out
