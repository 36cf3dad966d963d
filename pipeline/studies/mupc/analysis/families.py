"""The figure families F1–F6, F26–F27 (spec §2–§4), one entry each: what a render unit is.

An entry names the train unit the family draws (its one data dep), the params keys it reads (its params
deps) and the function of ``figures.py`` that draws it; the render stages follow from this table. Adding a
figure is one entry here plus that function. Pure data: the study's declaration imports it.
"""

from __future__ import annotations

from pipeline.contract import FigureEntry

# what the grids of the headline numbers (extract) and of the figures (render) are read from
HESSIAN_GRID = ("hessian.groups", "hessian.acts", "hessian.activity_decays", "hessian.seeds", "hessian.widths",
                "hessian.depths")
FWD_GRID = ("fwd_pass.acts", "fwd_pass.optims", "fwd_pass.variants", "fwd_pass.widths", "fwd_pass.depths")
FWD_PLOT = (*FWD_GRID, "fwd_pass.plot_ts", "fwd_pass.slice_depth", "fwd_pass.slice_widths")

FAMILIES: dict[str, FigureEntry] = {
    "F1": FigureEntry("render_f1", {"source": "hessian_init"}, HESSIAN_GRID),  # spectra of H_z across N and H
    "F2": FigureEntry("render_f2", {"source": "hessian_init"}, HESSIAN_GRID),  # λmax, λmin, κ phase diagrams
    "F3": FigureEntry("render_f3", {"source": "hessian_init"}, HESSIAN_GRID),  # spectra of D, O, H_theory (linear)
    "F4": FigureEntry("render_f4", {"source": "hessian_init"}, HESSIAN_GRID),  # extremes of D, O, H_theory (linear)
    "F5": FigureEntry("render_f5", {"source": "fwd_pass"}, FWD_PLOT),  # forward-pass norms during training
    "F6": FigureEntry("render_f6", {"source": "fwd_pass"}, (*FWD_PLOT, "fwd_pass.checks")),  # norms at init
    "F26": FigureEntry("render_f26", {"source": "theory_grid"},  # ℒ/F* across N and H
                        ("theory_grid.param_lrs", "theory_grid.color_max", "theory_grid.widths", "theory_grid.depths",
                         "theory_grid.plot_iters")),
    "F27": FigureEntry("render_f27", {"source": "theory_width"},  # ℒ, F* across width
                        ("theory_width.acts", "theory_width.params", "theory_width.widths", "theory_width.depth",
                         "theory_width.plot_widths")),
}
