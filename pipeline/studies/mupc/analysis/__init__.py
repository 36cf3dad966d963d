"""mupc_analysis: the μPC activity Hessian at init, forward-pass norms and equilibrium-energy theory.

train@<unit>        hessian_init (resumable, cell by cell), fwd_pass, theory_grid, theory_width
extract@analysis_metrics  headline numbers -> reports/metrics/mupc_analysis_extract@analysis_metrics.json
render@<family>     F1–F4 (hessian_init), F5–F6 (fwd_pass), F26 (theory_grid), F27 (theory_width)
"""

from pipeline.contract import Family, Study
from pipeline.studies.mupc.analysis.config import MupcAnalysisParams

# train unit -> the keys it reads besides ``threads``
TRAIN_KEYS = {"hessian_init": ("legacy_noskip_branch_scale", "hessian"), "fwd_pass": ("fwd_pass",),
              "theory_grid": ("theory_grid",), "theory_width": ("theory_width",)}
# what the grids of the headline numbers (extract) and of the figures (render) are read from
HESSIAN_GRID = ("hessian.families", "hessian.acts", "hessian.activity_decays", "hessian.seeds", "hessian.widths",
                "hessian.depths")
FWD_GRID = ("fwd_pass.acts", "fwd_pass.optims", "fwd_pass.variants", "fwd_pass.widths", "fwd_pass.depths")
EXTRACT_KEYS = ("train_units", *HESSIAN_GRID, *FWD_GRID, "theory_grid.param_lrs", "theory_grid.widths",
                "theory_grid.depths", "theory_width.acts", "theory_width.params", "theory_width.widths",
                "theory_width.depth")
F5_KEYS = (*FWD_GRID, "fwd_pass.plot_ts", "fwd_pass.slice_depth", "fwd_pass.slice_widths")
RENDER_KEYS = {
    **dict.fromkeys(("F1", "F2", "F3", "F4"), HESSIAN_GRID),
    "F5": F5_KEYS,
    "F6": (*F5_KEYS, "fwd_pass.checks"),
    "F26": ("theory_grid.param_lrs", "theory_grid.color_max", "theory_grid.widths", "theory_grid.depths",
            "theory_grid.plot_iters"),
    "F27": ("theory_width.acts", "theory_width.params", "theory_width.widths", "theory_width.depth",
            "theory_width.plot_widths"),
}

STUDY = Study(
    name="mupc_analysis",
    title="μPC: activity Hessian at init, forward pass, equilibrium-energy theory",
    claims="pipeline.studies.mupc.analysis.claims",
    schema=MupcAnalysisParams,
    families=(
        Family("train", entry="pipeline.studies.mupc.analysis.train", units=lambda cfg: list(cfg.train_units),
               params=lambda cfg, unit: ("threads", *TRAIN_KEYS[unit]), resumable=True,
               datasets=lambda cfg, unit: () if unit == "hessian_init" else ("mnist",),
               cost="pipeline.studies.mupc.analysis.cost:train_cost", probe="pipeline.studies.mupc.analysis.probe"),
        Family("extract", entry="pipeline.studies.mupc.analysis.extract", units=lambda cfg: ["analysis_metrics"],
               params=EXTRACT_KEYS, metrics=True, tables=("runs.csv",),
               reads=lambda cfg, unit: [("train", u) for u in cfg.train_units]),
        Family("render", entry="pipeline.studies.mupc.analysis.figures", units=lambda cfg: list(cfg.render_units),
               params=lambda cfg, unit: ("render_units.{unit}", *RENDER_KEYS[unit]),
               reads=lambda cfg, unit: [("train", cfg.render_units[unit])]),
    ),
)
