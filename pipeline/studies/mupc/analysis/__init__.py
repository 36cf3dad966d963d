"""mupc_analysis: the μPC activity Hessian at init, forward-pass norms and equilibrium-energy theory.

train@<unit>        hessian_init (resumable, cell by cell), fwd_pass, theory_grid, theory_width
extract@analysis_metrics  headline numbers -> reports/metrics/mupc_analysis_extract@analysis_metrics.json
render@<family>     F1–F4 (hessian_init), F5–F6 (fwd_pass), F26 (theory_grid), F27 (theory_width): families.py
"""

from collections.abc import Callable

from pipeline.contract import Stage, Study, Units
from pipeline.studies.mupc.analysis.config import MupcAnalysisParams
from pipeline.studies.mupc.analysis.families import FWD_GRID, HESSIAN_GRID, figure_table

EXTRACT_KEYS = ("train_units", *HESSIAN_GRID, *FWD_GRID, "fwd_pass.lr", "fwd_pass.seed",  # its runs table names them
                "theory_grid.param_lrs", "theory_grid.widths", "theory_grid.depths", "theory_grid.iters",
                "theory_grid.seed", "theory_width.acts", "theory_width.params", "theory_width.widths",
                "theory_width.depth", "theory_width.param_lr", "theory_width.iters", "theory_width.seed")

COST = "pipeline.studies.mupc.analysis.cost"


def train_unit(name: str) -> Callable[[MupcAnalysisParams], list[str]]:
    """The train unit ``name`` where the profile's ``train_units`` list it."""
    return lambda cfg: [name] if name in cfg.train_units else []


def mnist(cfg: MupcAnalysisParams, unit: str) -> tuple[str, ...]:
    return ("mnist",)


STUDY = Study(
    name="mupc_analysis",
    title="μPC: activity Hessian at init, forward pass, equilibrium-energy theory",
    claims="pipeline.studies.mupc.analysis.claims",
    schema=MupcAnalysisParams,
    stages=(
        Stage("train", entry="pipeline.studies.mupc.analysis.train", resumable=True,
               probe="pipeline.studies.mupc.analysis.probe", groups=(
                   Units(train_unit("hessian_init"), ("threads", "legacy_noskip_branch_scale", "hessian"),
                         run="train_hessian", cost=f"{COST}:hessian_cost"),
                   Units(train_unit("fwd_pass"), ("threads", "fwd_pass"), datasets=mnist, run="train_fwd",
                         cost=f"{COST}:fwd_cost"),
                   Units(train_unit("theory_grid"), ("threads", "theory_grid"), datasets=mnist,
                         run="train_theory_grid", cost=f"{COST}:theory_grid_cost"),
                   Units(train_unit("theory_width"), ("threads", "theory_width"), datasets=mnist,
                         run="train_theory_width", cost=f"{COST}:theory_width_cost"),
               )),
        Stage("extract", entry="pipeline.studies.mupc.analysis.extract", units=lambda cfg: ["analysis_metrics"],
               params=EXTRACT_KEYS, metrics=True, tables=("runs.csv",),
               reads=lambda cfg, unit: [("train", u) for u in cfg.train_units]),
        Stage("render", entry="pipeline.studies.mupc.analysis.figures", figure_table=figure_table),  # families.py
    ),
)
