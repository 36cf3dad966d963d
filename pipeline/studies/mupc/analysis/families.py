"""The figure families F1–F6, F26–F27 (spec §2–§4), one entry each: what a render unit is.

An entry names the train unit the family draws (its one data dep), the params keys it reads (its params
deps) and the function of ``figures.py`` that draws it (given a reader of that unit's files, the config and the
unit's name by ``figures.render``); the render stage follows from this table. Adding a figure is one entry here
plus that function. Pure data: the study's declaration imports it.
"""

from __future__ import annotations

from typing import Any

from pipeline.contract import FigureEntry

# what the grids of the headline numbers (extract) and of the figures (render) are read from
HESSIAN_GRID = ("hessian.groups", "hessian.acts", "hessian.activity_decays", "hessian.seeds", "hessian.widths",
                "hessian.depths")
FWD_GRID = ("fwd_pass.acts", "fwd_pass.optims", "fwd_pass.variants", "fwd_pass.widths", "fwd_pass.depths")
FWD_PLOT = (*FWD_GRID, "fwd_pass.plot_ts", "fwd_pass.slice_depth", "fwd_pass.slice_widths")


def _family(draw: str, source: str, keys: tuple[str, ...], *, plotly_images: bool = True) -> FigureEntry:
    """A family drawn from one train unit's files, through ``figures.render``: plotly figures whose PNG and PDF
    kaleido writes, but for the phase diagrams (F2, F4, F26), matplotlib as the notebook draws them (``imshow``)."""
    return FigureEntry(draw, {"source": source}, keys, run="render", plotly_images=plotly_images)


FAMILIES: dict[str, FigureEntry] = {
    "F1": _family("render_f1", "hessian_init", HESSIAN_GRID),  # spectra of H_z across N and H
    "F2": _family("render_f2", "hessian_init", HESSIAN_GRID, plotly_images=False),  # λmax, λmin, κ phase diagrams
    "F3": _family("render_f3", "hessian_init", HESSIAN_GRID),  # spectra of D, O, H_theory (linear)
    "F4": _family("render_f4", "hessian_init", HESSIAN_GRID,  # extremes of D, O, H_theory (linear)
                  plotly_images=False),
    "F5": _family("render_f5", "fwd_pass", FWD_PLOT),  # forward-pass norms during training
    "F6": _family("render_f6", "fwd_pass", (*FWD_PLOT, "fwd_pass.checks")),  # norms at init
    "F26": _family("render_f26", "theory_grid",  # ℒ/F* across N and H
                   ("theory_grid.param_lrs", "theory_grid.color_max", "theory_grid.widths", "theory_grid.depths",
                    "theory_grid.plot_iters"), plotly_images=False),
    "F27": _family("render_f27", "theory_width",  # ℒ, F* across width
                   ("theory_width.acts", "theory_width.params", "theory_width.widths", "theory_width.depth",
                    "theory_width.plot_widths")),
}


def figure_table(cfg: Any) -> dict[str, FigureEntry]:
    """The render stage's figure table: the families whose train unit the profile builds."""
    return {f: e for f, e in FAMILIES.items() if set(e.reads()) <= set(cfg.train_units)}
