"""The tests a claim can apply to the metrics it reads: small pure functions, no I/O.

Each takes the values a :class:`~pipeline.contract.Claim` reads (positionally, in its ``reads``
order) and keyword parameters bound with :func:`functools.partial`, and returns
``(holds, measured)``: whether the claim holds, and the number(s) the verdict turned on (a margin,
a ratio, the offending cells). A value that is missing or not a finite number never holds.

Grids are published as mappings whose keys name their coordinates, ``"mnist/relu/H=8"`` or
``"N8_H2"``; :func:`trend` and :func:`cellwise` read those coordinates from the keys.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

Verdict = tuple[bool, Any]
Check = Callable[..., Verdict]


def number(x: Any) -> float | None:
    """``x`` as a finite float, else None (missing, NaN, text)."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x) if math.isfinite(x) else None


def describe(check: Check) -> str:
    """``name(k=v, …)`` of a check bound with :func:`functools.partial`, for the ledger."""
    if isinstance(check, partial):
        args = [repr(a) for a in check.args] + [f"{k}={_short(v)}" for k, v in check.keywords.items()]
        return f"{describe(check.func)}({', '.join(args)})"
    return getattr(check, "__name__", repr(check))


def _short(v: Any) -> str:
    return describe(v) if callable(v) else repr(v)


# ----------------------------------------------------------------------------- thresholds


def at_least(x: Any, *, threshold: float) -> Verdict:
    """x ≥ threshold; measured: x."""
    v = number(x)
    return (v is not None and v >= threshold), v


def at_most(x: Any, *, threshold: float) -> Verdict:
    """x ≤ threshold; measured: x."""
    v = number(x)
    return (v is not None and v <= threshold), v


def within(x: Any, *, lo: float, hi: float) -> Verdict:
    """lo ≤ x ≤ hi; measured: x."""
    v = number(x)
    return (v is not None and lo <= v <= hi), v


def close_to(x: Any, *, target: float, tol: float) -> Verdict:
    """|x − target| ≤ tol; measured: x − target."""
    v = number(x)
    if v is None:
        return False, None
    return abs(v - target) <= tol, v - target


def equal(a: Any, b: Any) -> Verdict:
    """a == b (integers, labels); measured: (a, b)."""
    return (a is not None and a == b), [a, b]


# ----------------------------------------------------------------------------- orderings, ratios


def exceeds(a: Any, b: Any, *, margin: float = 0.0) -> Verdict:
    """a − b > margin (margin 0: a strictly above b); measured: a − b."""
    x, y = number(a), number(b)
    if x is None or y is None:
        return False, None
    return x - y > margin, x - y


def ratio_at_least(a: Any, b: Any, *, ratio: float) -> Verdict:
    """a / b ≥ ratio (b > 0); measured: a / b."""
    x, y = number(a), number(b)
    if x is None or y is None or y <= 0:
        return False, None
    return x / y >= ratio, x / y


def drop_exceeds(a_before: Any, a_after: Any, b_before: Any, b_after: Any, *, margin: float = 0.0) -> Verdict:
    """(a_before − a_after) − (b_before − b_after) > margin: a fell by more than b; measured: both drops."""
    vals = [number(v) for v in (a_before, a_after, b_before, b_after)]
    if any(v is None for v in vals):
        return False, None
    da, db = vals[0] - vals[1], vals[2] - vals[3]
    return da - db > margin, {"drop_a": da, "drop_b": db}


def size_at_most(seq: Any, *, n: int) -> Verdict:
    """len(seq) ≤ n (e.g. the distinct optima of a transfer sweep); measured: len(seq)."""
    if not isinstance(seq, Sequence | Mapping):
        return False, None
    return len(seq) <= n, len(seq)


def size_at_least(seq: Any, *, n: int) -> Verdict:
    """len(seq) ≥ n (e.g. the seeds that show a plateau); measured: len(seq)."""
    if not isinstance(seq, Sequence | Mapping):
        return False, None
    return len(seq) >= n, len(seq)


def crossed(first_iteration: Any, *, by: float | None = None) -> Verdict:
    """A curve crossed its line: the first crossing iteration exists (and is ≤ ``by``); measured: it."""
    v = number(first_iteration)
    return (v is not None and (by is None or v <= by)), v


# ----------------------------------------------------------------------------- grids and groups


def each(mapping: Any, *, check: Check, keys: str | None = None) -> Verdict:
    """``check`` holds for every value of a mapping (or item of a list) whose key fully matches the
    regular expression ``keys`` (all when None), and at least one is checked; measured: each
    checked key's measurement."""
    items = mapping.items() if isinstance(mapping, Mapping) else enumerate(mapping or [])
    picked = [(str(k), v) for k, v in items if keys is None or re.fullmatch(keys, str(k))]
    results = {k: check(v) for k, v in picked}
    return (bool(results) and all(ok for ok, _ in results.values())), {k: m for k, (_, m) in results.items()}


def select(mapping: Any, *, keys: str, check: Check) -> Verdict:
    """``check`` applied to the sub-mapping of the keys that fully match the regular expression ``keys``."""
    if not isinstance(mapping, Mapping):
        return False, None
    return check({k: v for k, v in mapping.items() if re.fullmatch(keys, str(k))})


def each_exceeds(mapping: Any, *, a: str, b: str, margin: float = 0.0) -> Verdict:
    """For every entry (a mapping), entry[a] − entry[b] > margin; measured: the margins per entry."""
    if not isinstance(mapping, Mapping) or not mapping:
        return False, None
    margins = {}
    ok = True
    for key, entry in mapping.items():
        holds, m = exceeds(entry.get(a) if isinstance(entry, Mapping) else None,
                           entry.get(b) if isinstance(entry, Mapping) else None, margin=margin)
        margins[str(key)] = m
        ok &= holds
    return ok, margins


def coordinates(key: str, sep: str = "/") -> dict[str, float | str]:
    """``"mnist/relu/H=8"`` → {0: 'mnist', 1: 'relu', 'H': 8.0}; ``"N8_H2"`` (sep '_') → {'N': 8, 'H': 2}."""
    out: dict[str, float | str] = {}
    for i, part in enumerate(key.split(sep)):
        m = re.fullmatch(r"([A-Za-z]\w*?)=?(-?\d+(?:\.\d+)?)", part)
        if m:
            out[m.group(1)] = float(m.group(2))
        else:
            out[str(i)] = part
    return out


def groups(mapping: Mapping[str, Any], axis: str, sep: str = "/") -> dict[str, list[tuple[float, Any]]]:
    """Cells grouped by every coordinate but ``axis``, each group's (axis value, cell) sorted by it."""
    out: dict[str, list[tuple[float, Any]]] = {}
    for key, val in mapping.items():
        c = coordinates(str(key), sep)
        if axis not in c:
            continue
        rest = sep.join(f"{k}={v}" if not k.isdigit() else str(v) for k, v in c.items() if k != axis)
        out.setdefault(rest, []).append((float(c[axis]), val))
    return {k: sorted(v, key=lambda t: t[0]) for k, v in out.items()}


def trend(mapping: Any, *, axis: str, direction: str, sep: str = "/", factor: float = 1.0,
          monotone: bool = False) -> Verdict:
    """Along ``axis`` the cells rise (``direction='up'``: last > factor·first) or fall (``'down'``:
    factor·last < first) in every group of the other coordinates; ``monotone``: every step, not
    just the two ends. Measured: per group, the values along the axis."""
    if direction not in ("up", "down"):
        raise ValueError(f"direction {direction!r}; allowed: 'up', 'down'")
    if not isinstance(mapping, Mapping):
        return False, None
    grouped = groups(mapping, axis, sep)
    ok = bool(grouped)
    measured = {}
    for name, cells in grouped.items():
        vals = [number(v) for _, v in cells]
        measured[name] = {f"{axis}={x:g}": v for (x, _), v in zip(cells, vals)}
        if len(vals) < 2 or any(v is None for v in vals):
            ok = False
            continue
        pairs = list(zip(vals, vals[1:])) if monotone else [(vals[0], vals[-1])]
        if direction == "up":
            ok &= all(b > factor * a for a, b in pairs)
        else:
            ok &= all(b * factor < a for a, b in pairs)
    return ok, measured


def cellwise(a: Any, b: Any, *, relation: str = "less", share: float = 1.0) -> Verdict:
    """Every cell present in both mappings (with ``share`` < 1, at least that share of them) satisfies
    a[cell] < b[cell] (``relation='less'``) or a > b ('greater'); a cell without both numbers fails. Measured:
    the cells and their (a, b)."""
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        return False, None
    common = [k for k in a if k in b]
    cmp = (lambda x, y: x < y) if relation == "less" else (lambda x, y: x > y)
    cells, held = {}, 0
    for k in common:
        x, y = number(a[k]), number(b[k])
        cells[k] = [x, y]
        held += x is not None and y is not None and cmp(x, y)
    return bool(common) and held >= share * len(common), cells


def spread_at_most(mapping: Any, *, rel: float) -> Verdict:
    """(max − min) / max of a mapping's values ≤ rel (values agree); measured: that spread."""
    vals = [number(v) for v in (mapping.values() if isinstance(mapping, Mapping) else mapping or [])]
    if not vals or any(v is None for v in vals) or max(vals) <= 0:
        return False, None
    s = (max(vals) - min(vals)) / max(vals)
    return s <= rel, s


def at(mapping: Any, *, key: str, check: Check) -> Verdict:
    """``check`` applied to ``mapping[key]`` (a field of one cell, e.g. a run's final rank)."""
    if not isinstance(mapping, Mapping) or key not in mapping:
        return False, None
    return check(mapping[key])


def each_at(key: str, check: Check) -> Check:
    """``check`` the value at ``key`` of every entry of a mapping (per seed, per run): the composition
    ``each(check=at(key=…, check=…))``, returned as that partial so the ledger describes it the same way."""
    return partial(each, check=partial(at, key=key, check=check))


def agree(a: Any, b: Any, *, rel: float) -> Verdict:
    """|a − b| / max(|a|, |b|) ≤ rel: two curves end at the same level; measured: that spread."""
    x, y = number(a), number(b)
    if x is None or y is None or max(abs(x), abs(y)) == 0:
        return False, None
    s = abs(x - y) / max(abs(x), abs(y))
    return s <= rel, s
