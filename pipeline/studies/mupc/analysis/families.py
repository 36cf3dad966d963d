"""The figure families F1–F6, F26–F27 (spec §2–§4), one entry each: what a render unit is.

An entry names the train unit the family draws (its one data dep), the params keys it reads (its params
deps) and the function of ``figures.py`` that draws it; the render stages follow from this table. Adding a
figure is one entry here plus that function. Pure data: the study's declaration imports it.
"""

from __future__ import annotations

from dataclasses import dataclass

# what the grids of the headline numbers (extract) and of the figures (render) are read from
HESSIAN_GRID = ("hessian.families", "hessian.acts", "hessian.activity_decays", "hessian.seeds", "hessian.widths",
                "hessian.depths")
FWD_GRID = ("fwd_pass.acts", "fwd_pass.optims", "fwd_pass.variants", "fwd_pass.widths", "fwd_pass.depths")
FWD_PLOT = (*FWD_GRID, "fwd_pass.plot_ts", "fwd_pass.slice_depth", "fwd_pass.slice_widths")


@dataclass(frozen=True)
class FigureFamily:
    source: str  # the train unit it draws
    draw: str  # the function of figures.py: (reader, cfg, source) -> list[Figure]
    keys: tuple[str, ...]  # the params keys it reads


FAMILIES: dict[str, FigureFamily] = {
    "F1": FigureFamily("hessian_init", "render_f1", HESSIAN_GRID),  # spectra of H_z across N and H
    "F2": FigureFamily("hessian_init", "render_f2", HESSIAN_GRID),  # λmax, λmin, κ phase diagrams
    "F3": FigureFamily("hessian_init", "render_f3", HESSIAN_GRID),  # spectra of D, O, H_theory (linear)
    "F4": FigureFamily("hessian_init", "render_f4", HESSIAN_GRID),  # extremes of D, O, H_theory (linear)
    "F5": FigureFamily("fwd_pass", "render_f5", FWD_PLOT),  # forward-pass norms during training
    "F6": FigureFamily("fwd_pass", "render_f6", (*FWD_PLOT, "fwd_pass.checks")),  # norms at init
    "F26": FigureFamily("theory_grid", "render_f26", ("theory_grid.param_lrs", "theory_grid.color_max",
                                                      "theory_grid.widths", "theory_grid.depths",
                                                      "theory_grid.plot_iters")),  # ℒ/F* across N and H
    "F27": FigureFamily("theory_width", "render_f27", ("theory_width.acts", "theory_width.params",
                                                       "theory_width.widths", "theory_width.depth",
                                                       "theory_width.plot_widths")),  # ℒ, F* across width
}
