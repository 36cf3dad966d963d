"""Aggregation rules of the seed notebook's training cells (spec §5.4), as pure functions.

Everything here reproduces the notebook's numbers exactly, including its accidents:

* :func:`compute_metric_stats` truncates every seed's series to the *shortest* one (so an
  early-stopped seed shortens the whole curve), then takes the per-index mean and the population
  (ddof = 0) standard deviation;
* :func:`compute_cond_num` is ``|max(eigs)| / |min(eigs)|`` per stored row; a row the run never
  reached is all zeros in the reference (quirk Q6) and gives ``0/0 = NaN``;
* the failed-run fills are applied cell by cell exactly where the notebook applies them;
* the transfer contours use Python's built-in ``min``/``max`` inside a ``try`` (an empty array leaves
  the pre-filled 0; a NaN *first* element propagates, a later NaN is skipped), then the mean over
  seeds, then ``log10`` (a mean of 0 → −∞).

The "clean" variants the spec recommends are separate functions (names end in ``_clean``) and are
always labelled as such in titles and captions: pad early-stopped runs with chance accuracy to the
expected length instead of truncating the other seeds, and mask non-finite/empty contour cells.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

CHANCE = 10.0  # % accuracy the notebook substitutes for failed runs
_MIN_ITER_START = 100000  # the reference's get_min_iter starts from this (series are capped at it)


# ----------------------------------------------------------------------------- series statistics


def min_len(series: Sequence[Sequence[float]]) -> int:
    """Length of the shortest series (the reference starts its search at 100000)."""
    n = _MIN_ITER_START
    for s in series:
        n = min(n, len(s))
    return n


def compute_metric_stats(series: Sequence[Sequence[float]]) -> tuple[np.ndarray, np.ndarray]:
    """Truncate every seed to the shortest series; per-index mean and population std."""
    if len(series) == 0:
        raise ValueError("compute_metric_stats needs at least one series")
    n = min_len(series)
    mat = np.zeros((len(series), n))
    for i, s in enumerate(series):
        mat[i, :] = np.asarray(s, dtype=float)[:n]
    return mat.mean(axis=0), mat.std(axis=0)


def pad_series(s: Sequence[float], n: int, fill: float = CHANCE) -> np.ndarray:
    """``s`` cut or padded with ``fill`` to length ``n`` (clean variant)."""
    a = np.asarray(s, dtype=float)[:n]
    return np.concatenate([a, np.full(n - len(a), fill)])


def compute_metric_stats_clean(series: Sequence[Sequence[float]], n: int,
                               fill: float = CHANCE) -> tuple[np.ndarray, np.ndarray]:
    """Clean variant: pad every seed with ``fill`` to the expected length ``n`` (no truncation)."""
    if len(series) == 0:
        raise ValueError("compute_metric_stats_clean needs at least one series")
    mat = np.stack([pad_series(s, n, fill) for s in series]) if n > 0 else np.zeros((len(series), 0))
    return mat.mean(axis=0), mat.std(axis=0)


# ----------------------------------------------------------------------------- condition numbers


def compute_cond_num(eigs: Sequence[float]) -> float:
    """``|max(eigs)| / |min(eigs)|`` (built-in max/min as in the reference); all-zero row → NaN."""
    hi, lo = np.float64(max(eigs)), np.float64(min(eigs))
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.abs(hi) / np.abs(lo))


def cond_nums_notebook(lambda_min: Sequence[float], lambda_max: Sequence[float], n_rows: int) -> np.ndarray:
    """κ per stored row as the notebook sees it: the reference keeps a fixed (n_rows) array whose
    unreached rows are 0, so rows past an early stop give NaN. Our runs store only reached rows."""
    out = np.full(n_rows, np.nan)
    k = min(n_rows, len(lambda_min))
    for r in range(k):
        out[r] = compute_cond_num([lambda_min[r], lambda_max[r]])
    return out


# ----------------------------------------------------------------------------- x axes


def acc_steps(n: int, test_every: int) -> np.ndarray:
    """Training iteration of accuracy index t: (t+1)·test_every."""
    return (np.arange(n) + 1) * test_every


def cond_steps(n: int, test_every: int) -> np.ndarray:
    """Training iteration of condition-number row t: t·test_every (row 0 = initialisation)."""
    return np.arange(n) * test_every


# ----------------------------------------------------------------------------- failed-run fills


def fill_empty(test_accs: Sequence[float], chance: float = CHANCE) -> np.ndarray:
    """μPC lr sweep and 5-epoch MNIST cells: an empty ``test_accs`` becomes ``[chance]``."""
    a = np.asarray(test_accs, dtype=float)
    return np.array([chance]) if len(a) == 0 else a


def fill_bp_short(test_accs: Sequence[float], chance: float = CHANCE) -> np.ndarray:
    """BP lr sweep cell: ``len(test_accs) <= 1`` becomes ``[chance] * 3``."""
    a = np.asarray(test_accs, dtype=float)
    return a if len(a) > 1 else np.full(3, chance)


def is_chance_cell(act: str, H: int, cells: dict[str, list[int]]) -> bool:
    """SP-baseline / μPC-vs-PC cells drawn as chance without loading (params list the (act, H))."""
    return int(H) in [int(h) for h in cells.get(act, [])]


def notebook_chance_cells(paper_hs: Sequence[int]) -> dict[str, list[int]]:
    """The notebook's rule ``(H >= 64 and act != tanh) or (H == 32 and act == linear)`` on a grid."""
    return {act: [h for h in paper_hs if (h >= 64 and act != "tanh") or (h == 32 and act == "linear")]
            for act in ("linear", "tanh", "relu")}


def chance_curve(n: int = 3, chance: float = CHANCE) -> np.ndarray:
    return np.full(n, chance)


def pc_chance_like(bp_accs: Sequence[float], chance: float = CHANCE) -> np.ndarray:
    """128-layer cell: PC drawn as ``[chance] * len(BP curve)`` (per seed)."""
    return np.full(len(bp_accs), chance)


# ----------------------------------------------------------------------------- contours


def _builtin_min(x: Sequence[float]) -> float:
    return float(min(float(v) for v in x))


def _builtin_max(x: Sequence[float]) -> float:
    return float(max(float(v) for v in x))


def contour_cell(batch_train_losses: Sequence[float], test_accs: Sequence[float]) -> tuple[float, float]:
    """One (param lr, act lr, seed) cell of the transfer contours, with the notebook's ``try``:
    min loss is written first, then max accuracy; whatever raised stays 0."""
    loss, acc = 0.0, 0.0
    try:
        loss = _builtin_min(batch_train_losses)
        acc = _builtin_max(test_accs)
    except ValueError:  # empty sequence
        pass
    return loss, acc


def contour_mean(cells: np.ndarray) -> np.ndarray:
    """Mean over the seed axis (last) — NaN propagates, a 0 from a failed run is averaged in."""
    return np.asarray(cells, dtype=float).mean(axis=-1)


def log10_notebook(metric: np.ndarray) -> np.ndarray:
    """``np.log10`` as plotted (0 → −inf, NaN stays NaN)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log10(np.asarray(metric, dtype=float))


def contour_cell_clean(batch_train_losses: Sequence[float], test_accs: Sequence[float]) -> tuple[float, float]:
    """Clean variant: empty or non-finite (any NaN/inf loss) → NaN, so the cell is masked."""
    losses = np.asarray(batch_train_losses, dtype=float)
    accs = np.asarray(test_accs, dtype=float)
    loss = float(losses.min()) if len(losses) and np.isfinite(losses).all() else np.nan
    acc = float(accs.max()) if len(accs) and np.isfinite(accs).all() else np.nan
    return loss, acc


def contour_log10_clean(cells: np.ndarray) -> np.ndarray:
    """Clean variant: mean over seeds (a failed seed masks the cell), log10, non-finite → NaN."""
    m = contour_mean(cells)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.log10(m)
    z[~np.isfinite(z)] = np.nan
    return z


def argbest(z: np.ndarray, mode: str) -> tuple[int, int] | None:
    """Index (row, col) of the finite minimum (``mode='min'``) or maximum of a 2-D array."""
    z = np.asarray(z, dtype=float)
    finite = np.isfinite(z)
    if not finite.any():
        return None
    masked = np.where(finite, z, np.inf if mode == "min" else -np.inf)
    flat = int(np.argmin(masked) if mode == "min" else np.argmax(masked))
    return int(flat // z.shape[1]), int(flat % z.shape[1])


# ----------------------------------------------------------------------------- activity decay


def max_acc_per_seed(test_accs: Sequence[float], chance: float = CHANCE) -> float:
    """Activity-decay cell: per-seed max(test_accs). The notebook would raise on an empty array;
    we count such a run as chance (documented decision)."""
    return _builtin_max(test_accs) if len(test_accs) else chance


def decay_stats(max_accs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``max_accs`` [seeds, decays] → mean and population std over seeds."""
    a = np.asarray(max_accs, dtype=float)
    return a.mean(axis=0), a.std(axis=0)


# ----------------------------------------------------------------------------- lr selection


def final_acc_score(series: Sequence[Sequence[float]], chance: float = CHANCE) -> float:
    """Score of one lr cell for the computed best-lr rule: mean over seeds of the final test
    accuracy, an empty run counting as chance."""
    finals = [float(s[-1]) if len(s) else chance for s in series]
    v = float(np.mean(finals))
    return v if np.isfinite(v) else -np.inf


# ----------------------------------------------------------------------------- verdicts (claims)
#
# What the claims read is not the notebook's truncated mean: ``compute_metric_stats`` cuts every seed to the
# shortest series, so one seed without evaluations (a PC run that diverged before its first test) makes the
# cell empty (None), and one early-stopped seed collapses a long curve to its first point. The verdicts take
# each seed's own final value instead (:func:`seed_final`) and average those over the seeds that ran (no
# truncation); the figures keep the notebook's curves.


def seed_final(test_accs: Sequence[float], chance: float = CHANCE) -> float:
    """One seed's final test accuracy for a verdict: its last evaluation, whenever it stopped (a run stopped
    early, diverged or not learning, keeps the last accuracy it reached, where the notebook's curve of it
    ends too); a run without any evaluation (e.g. PC diverging before its first test) or whose last value is
    not finite counts as ``chance``, as the notebook draws PC that diverges."""
    a = np.asarray(test_accs, dtype=float)
    return float(a[-1]) if len(a) and np.isfinite(a[-1]) else float(chance)


def mean_final(finals: Sequence[float]) -> float | None:
    """Mean over seeds of their final values; None for a cell without seeds."""
    return float(np.mean(finals)) if len(finals) else None


def contour_cell_excluding(batch_train_losses: Sequence[float], test_accs: Sequence[float]) -> tuple[float, float]:
    """A transfer cell for the verdicts: a failed seed (empty or non-finite) is NaN, so
    :func:`contour_mean_excluding` leaves it out instead of averaging the notebook's 0 in."""
    return contour_cell_clean(batch_train_losses, test_accs)


def contour_mean_excluding(cells: np.ndarray) -> np.ndarray:
    """Mean over the seed axis (last) of the seeds that did not fail; NaN where every seed failed."""
    a = np.asarray(cells, dtype=float)
    ok = np.isfinite(a)
    n = ok.sum(axis=-1)
    total = np.where(ok, a, 0.0).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, total / np.maximum(n, 1), np.nan)
