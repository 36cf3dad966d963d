"""Where the analysis train units put each configuration, and the order configurations come in.

Shared by the train, extract and render stages (no torch here, so a figure edit reruns no training
and a training edit reruns the figures only through the data they read).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from pipeline.studies.mupc.analysis.config import FwdPassParams, HessianParams
from pipeline.studies.mupc.engine.runs import fmt_num

# fwd_pass.npz holds one ``<metric>_per_N_L`` array per metric, shape [5 layers, checks, widths, depths]
FWD_METRICS = ("avg_activity_l1", "avg_activity_l2", "param_l2_norms", "param_spectral_norms")


def hessian_configs(hp: HessianParams) -> list[dict[str, Any]]:
    """Every (act, skips, init, param, decay, seed) configuration of the Hessian grid, in a fixed order."""
    out = []
    for group in hp.groups:
        for init in group.inits:
            for skips in group.skips:
                for act in hp.acts:
                    for decay in hp.activity_decays:
                        for seed in hp.seeds:
                            out.append({"act": act, "skips": skips, "init": init, "param": group.param,
                                        "activity_decay": decay, "seed": seed})
    return out


def hessian_key(c: dict[str, Any]) -> str:
    """Notebook-style folder: {act}/{skips|no_skips}/{init}_weight_init/{param}_param/activity_decay_{c}/{seed}."""
    return (f"{c['act']}/{'skips' if c['skips'] else 'no_skips'}/{c['init']}_weight_init/{c['param']}_param/"
            f"activity_decay_{fmt_num(c['activity_decay'])}/{c['seed']}")


def cell_dir(c: dict[str, Any], N: int, H: int) -> str:
    """The folder of one (config, N, H) cell: ``cell.json`` (settings, numbers) and ``cell.npz``."""
    return f"{hessian_key(c)}/width_{N}/{H}_n_hidden"


def fwd_key(act: str, optim: str, variant: str) -> str:
    return f"{act}/{optim}/{variant}"


# fwd_pass's variants: name -> (param, weight init, skips)
FWD_VARIANTS = {
    "sp_no_skips": ("sp", "standard", False),
    "sp_skips": ("sp", "standard", True),
    "depth_mup_no_skips": ("depth_mup", "standard_gauss", False),
    "depth_mup_skips": ("depth_mup", "standard_gauss", True),
    "orthogonal": ("orthogonal", "orthogonal", False),
}


def fwd_gain(init: str, act: str) -> float:
    """The orthogonal init's gain: 1.05 for tanh (the reference's), 1 otherwise."""
    return 1.05 if (init == "orthogonal" and act == "tanh") else 1.0


def fwd_draws(fp: FwdPassParams) -> list[tuple[tuple[str, float, int, int], list[tuple[str, str]]]]:
    """fwd_pass's cells grouped by the initial weights they share, in the order the unit computes them:
    ``((init, gain, N, L), [(variant, act), …])``. Every cell draws the unit's one seed, so the cells of one
    init, gain and shape start from the same weights, drawn once (the two SP variants' six cells share one
    draw; the draws were a third of the unit's planned work at N = 1,024 when every cell drew its own)."""
    out = []
    for N, L in itertools.product(fp.widths, fp.depths):
        groups: dict[tuple[str, float, int, int], list[tuple[str, str]]] = {}
        for variant in fp.variants:
            init = FWD_VARIANTS[variant][1]
            for act in fp.acts:
                groups.setdefault((init, fwd_gain(init, act), N, L), []).append((variant, act))
        out += list(groups.items())
    return out


def theory_key(act: str, param: str, N: int, H: int) -> str:
    return f"{act}/{param}/width_{N}/{H}_n_hidden"


def is_slice(N: int, H: int, hp: HessianParams) -> bool:
    """Whether the Hessian cell (N, H) gets its full spectrum (a slice of the grid, or every cell)."""
    return hp.full_spectra == "all" or max(hp.widths) == N or max(hp.depths) == H


def spectrum_routes(hp: HessianParams, device: str) -> dict[tuple[int, int, int], str]:
    """The route of each full spectrum above ``dense_max_n``, by (config index, N, H) in the grid's order:
    ``backend_on(device)``, except that on a dense_torch device every cell whose running share crosses a whole
    number goes to ``banded`` on the host (``host_share``: 0.5 sends every second one), so the split is the same
    on every run of the same params and device."""
    base, share, k = hp.backend_on(device), hp.host_share, 0
    routes: dict[tuple[int, int, int], str] = {}
    for i, _ in enumerate(hessian_configs(hp)):
        for N, H in itertools.product(hp.widths, hp.depths):
            n = N * H
            if not is_slice(N, H, hp) or n <= hp.dense_max_n:
                continue
            host = base == "dense_torch" and math.floor((k + 1) * share) > math.floor(k * share)
            routes[(i, N, H)] = "banded" if host else base
            k += 1
    return routes
