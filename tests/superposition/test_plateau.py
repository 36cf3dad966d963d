"""The plateau-then-drop detector on synthetic curves."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.studies.superposition.plateau import detect_plateaus, flat_starts

KW = {"tol": 1e-3, "window": 1000, "min_drop": 3e-3, "drop_window": 3000}


def step_curve(n: int = 20000, at: int = 6000, level: float = 0.0183, after: float = 0.0180) -> np.ndarray:
    e = np.arange(n, dtype=float)
    fast = 0.002 * np.exp(-e / 300)  # initial descent onto the plateau
    drop = (level - after) / (1 + np.exp(-(e - at - 400) / 100))  # smooth fall after `at`
    return level + fast - drop


def test_finds_plateau_and_drop() -> None:
    hits = detect_plateaus(step_curve(), **KW)
    assert len(hits) == 1
    h = hits[0]
    assert h.loss == pytest.approx(0.0183, rel=1e-3)
    assert 1400 < h.start_epoch < 3500  # flat within tol of the whole stretch (incl. the drop onset)
    assert 5800 < h.end_epoch < 6300
    assert h.end_epoch < h.drop_epoch < h.end_epoch + 3000
    assert h.loss_after < 0.0183 * (1 - 3e-3)
    assert h.length == h.end_epoch - h.start_epoch + 1 >= 1000


def test_monotone_convergence_is_not_a_plateau() -> None:
    e = np.arange(50000, dtype=float)
    assert detect_plateaus(0.018 + 0.002 * np.exp(-e / 2000), **KW) == []
    assert detect_plateaus(0.018 + 0.002 / (1 + e / 100), **KW) == []  # slow power-law tail


def test_too_short_flat_stretch_is_ignored() -> None:
    curve = step_curve(at=1900)  # flat only ~400 epochs before the drop
    assert detect_plateaus(curve, **KW) == []
    assert len(detect_plateaus(curve, **{**KW, "window": 300})) == 1


def test_small_drop_is_ignored() -> None:
    assert detect_plateaus(step_curve(after=0.01829), **KW) == []  # 0.05 % < min_drop


def test_noise_within_and_beyond_tolerance() -> None:
    rng = np.random.default_rng(0)
    base = step_curve()
    small = base * (1 + 5e-5 * rng.standard_normal(base.size))  # range ~4e-4 < tol
    hits = detect_plateaus(small, **KW)
    assert len(hits) == 1 and hits[0].loss == pytest.approx(0.0183, rel=1e-3)
    loud = base * (1 + 5e-3 * rng.standard_normal(base.size))
    assert detect_plateaus(loud, **KW) == []


def test_two_plateaus() -> None:
    n = 30000
    e = np.arange(n, dtype=float)
    c = 0.0185 - 0.0002 / (1 + np.exp(-(e - 8000) / 80)) - 0.0003 / (1 + np.exp(-(e - 18000) / 80))
    hits = detect_plateaus(c, **KW)
    assert [round(h.loss, 5) for h in hits] == [0.0185, 0.0183]
    assert hits[0].end_epoch < 8000 < hits[1].start_epoch < hits[1].end_epoch < 18000


def test_edge_cases() -> None:
    assert detect_plateaus([], **KW) == []
    assert detect_plateaus(np.full(500, 0.02), **KW) == []  # shorter than the window
    assert detect_plateaus(np.full(20000, 0.02), **KW) == []  # flat to the end: no drop
    assert detect_plateaus(np.zeros(5000), **KW) == []  # zero loss: flat, cannot drop
    c = step_curve()
    c[4000] = np.nan  # a NaN ends the analysed prefix before the drop
    assert detect_plateaus(c, **KW) == []
    c = step_curve()
    c[15000:] = np.inf
    assert len(detect_plateaus(c, **KW)) == 1
    for bad in ({"tol": 0.0}, {"window": 1}, {"min_drop": 1.0}, {"drop_window": 0}):
        with pytest.raises(ValueError):
            detect_plateaus(step_curve(), **{**KW, **bad})


def test_flat_starts_brute_force() -> None:
    rng = np.random.default_rng(1)
    y = np.cumsum(rng.standard_normal(300)) * 0.01
    got = flat_starts(y, 0.05)
    for e in range(len(y)):
        s = next(s for s in range(e + 1) if y[s : e + 1].max() - y[s : e + 1].min() <= 0.05)
        assert got[e] == s
