"""The figure families F7–F25 (spec §6) and the project's F28, one entry each: what an extract unit and its
render unit are.

Everything about a family follows from its entry: its extract and render units (``extract@F<k>`` computes
its numbers, ``render@F<k>`` draws them), the sweeps it reads (their DVC deps, given to its functions by
role), the ``figures`` options it reads (its params deps besides ``chance`` and ``selection``), the function
of ``headlines.py`` that computes its headline numbers and the function of ``figures.py`` that draws it.
Adding a figure is one entry here plus those two functions. Pure data: the study's declaration imports
it, so no stage loads the plotting code through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.contract import FigureEntry

CLEAN = ("clean_variants",)


def family(draw: str, sweeps: Mapping[str, str | tuple[str, ...]], args: Mapping[str, Any] | None = None,
            options: tuple[str, ...] = CLEAN, **kw: Any) -> FigureEntry:
    """A family whose sweeps are its sources, reading the ``figures`` options ``options``; its render reads its
    extract's numbers and hands ``draw`` the sweeps and ``args`` (``figures.render``), which draws plotly figures
    whose PNG and PDF kaleido writes."""
    return FigureEntry(draw, sweeps, tuple(f"figures.{o}" for o in options), dict(args or {}), extract=True,
                       run="render", plotly_images=True, **kw)


def _sp(sweep: str, *, lr_sweep: bool = True, best: bool = True) -> FigureEntry:
    """An SP family; both figures read the sweep's table lrs (the lr sweep compares its pick with them)."""
    return family("render_sp", {"sweep": sweep}, {"sweep_fig": lr_sweep, "best_fig": best},
                   (*CLEAN, f"best_lrs.{sweep}"))


MUPC = (*CLEAN, "best_lrs.mupc")

FAMILIES: dict[str, FigureEntry] = {
    "F7": _sp("S1", best=False),  # SP GD: test acc per act lr, per (ds, act, H)
    "F8": _sp("S1", lr_sweep=False),  # SP GD best lr: acc and κ across H
    "F9": _sp("S2"),  # SP Adam on activities
    "F10": _sp("S3"),  # SP with skips
    "F11": _sp("S4"),  # orthogonal init
    "F12": family("mupc_cond", {"sweep": "S9"}, options=MUPC),  # μPC κ during training across H
    "F13": family("mupc_lr_sweep", {"sweep": "S6"}, options=MUPC),  # μPC activity-lr sweep
    "F14": family("mupc_best", {"sweep": "S7"}, {"over": "N"}, MUPC,
                   derived=("mupc_best_final_acc_per_N", "best_final_acc")),  # best lr across width
    "F15": family("mupc_best", {"sweep": "S6"}, {"over": "H"}, MUPC,
                   derived=("mupc_best_final_acc_per_H", "best_final_acc")),  # best lr across depth
    "F16": family("mupc_long", {"sweep": "S10"},  # 128-layer μPC, MNIST, 5 epochs
                   {"fill_empty": True, "seed_file": "pcn_results/mupc_128_MNIST_acc_5_epochs.pdf"}),
    "F17": family("mupc_long", {"sweep": "S11"},  # 128-layer μPC, F-MNIST, 15 epochs
                   {"fill_empty": False, "seed_file": "pcn_results/mupc_128_Fashion_acc_15_epochs.pdf"}),
    "F18": family("mupc_vs_pc", {"mupc": "S6", "pc": "S12", "bp": "B2"},  # paper Fig. 1 right
                   options=(*MUPC, "best_lrs.S12", "best_lrs.bp", "chance_cells"),
                   derived=("fig1_final_acc", "final_acc")),
    "F19": family("deep_comparison", {"mupc": ("S10", "S11"), "bp": "B2"},  # deepest net, both datasets
                   options=(*CLEAN, "best_lrs.bp", "max_seeds_128")),
    "F20": family("sp_baseline", {"sweep": "S12"}, options=(*CLEAN, "best_lrs.S12", "chance_cells")),
    "F21": family("bp_sweep", {"sweep": "B1"}),  # BP Depth-μP lr sweep
    "F22": family("activity_decay", {"sweep": "S5"}, options=()),  # max test acc vs activity decay
    "F23": family("transfer_contours", {"sweep": "S7"}, {"over": "N"}, MUPC,  # transfer across width
                   derived=("transfer_width", "transfer")),
    "F24": family("transfer_contours", {"sweep": "S6"}, {"over": "H"}, MUPC,  # transfer across depth
                   derived=("transfer_depth", "transfer")),
    "F25": family("transfer_contours", {"sweep": "S8"}, {"over": None}, MUPC),  # F-MNIST loss and acc contours
    # the project's addition (no notebook figure): standard PC's final accuracy over the lr grid at the deepest H
    "F28": family("pc_any_lr", {"sweep": "S13"}, options=()),
}
