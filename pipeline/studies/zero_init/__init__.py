"""zero_init: ZerO initialisation, Figure 3 of arXiv 2110.12661 (seed 003).

train@<run>        one (init, n_h, setting) run the profile's figures draw: rank(W3 − I) per logged step
extract@summary    final ranks and accuracies of those runs -> reports/metrics/zero_init_extract@summary.json
render@<figure>    rank(W3 − I) against iterations for the figure's runs, with the input-dimension line
"""

from pipeline.contract import FigureEntry, Stage, Study
from pipeline.studies.zero_init.config import ZeroInitParams

# what a train unit reads besides its run, its setting's bias and its setting's budget
TRAIN_KEYS = ("dataset", "lr", "batch_size", "test_batch_size", "rank_tol", "rank_on", "zero_scale",
              "input_dim_line", "init_seed", "data_seed", "cpu_threads", "runs.{unit}")


def train_keys(cfg: ZeroInitParams, unit: str) -> list[str]:
    setting = cfg.runs[unit].setting
    return [*TRAIN_KEYS, f"settings.{setting}.bias", f"settings.{setting}.step_lr", f"budgets.{setting}"]


def extract_keys(cfg: ZeroInitParams, unit: str) -> list[str]:
    """The summary's own numbers, and which runs are drawn (the trained ones)."""
    return ["input_dim_line", "rank_tol", "zero_scale", *(f"figures.{f}.runs" for f in cfg.figures)]


def figure_table(cfg: ZeroInitParams) -> dict[str, FigureEntry]:
    """The render units: one rank figure per entry of ``figures``, drawing its runs in legend order."""
    return {unit: FigureEntry("render", {"runs": tuple(spec.runs)},
                              ("figures.{unit}", "style.titles.{unit}", "style.labels", "style.profile_note",
                               "rank_tol", "lr", "batch_size", "input_dim_line", *(f"runs.{k}" for k in spec.runs)))
            for unit, spec in cfg.figures.items()}


STUDY = Study(
    name="zero_init",
    title="ZerO initialisation: rank of W3 − I during training",
    claims="pipeline.studies.zero_init.claims",
    schema=ZeroInitParams,
    stages=(
        Stage("train", entry="pipeline.studies.zero_init.train", units=lambda cfg: cfg.train_runs(),
               params=train_keys, datasets=lambda cfg, unit: (cfg.dataset,),
               cost="pipeline.studies.zero_init.cost:train_cost", probe="pipeline.studies.zero_init.probe"),
        Stage("extract", entry="pipeline.studies.zero_init.extract", units=lambda cfg: list(cfg.summaries),
               params=extract_keys, metrics=True, tables=("runs.csv",),
               reads=lambda cfg, unit: [("train", r) for r in cfg.train_runs()]),
        Stage("render", entry="pipeline.studies.zero_init.figures", figure_table=figure_table),
    ),
)
