"""mupc_training: the μPC training sweeps (spec §5) and the figures drawn from them (spec §6).

train@<sweep>    S1–S13 (PC), B1–B2 (BP): every run of the sweep, resumable run by run
extract@F<k>     F7–F25's and F28's headline numbers (headlines.py), from exactly the sweeps the family reads ->
                 headline.json and reports/metrics/mupc_training_extract@F<k>.json (what the claims read)
render@F<k>      F7–F25, F28 (one entry each in families.py): draws the same sweeps at the lrs its extract selected
"""

from pipeline.contract import Stage, Study
from pipeline.studies.mupc.training.config import TrainingParams
from pipeline.studies.mupc.training.families import FAMILIES

# What every sweep reads besides its own grid (hessian_dense_max_n: only sweeps that monitor H_z;
# dtype: only sweeps without a dtype of their own).
TRAIN_KEYS = ("data", "allow_tf32", "threads", "max_stack", "cuda_graphs", "engine", "train_loss_log_every")
RENDER_KEYS = ("figures.chance", "figures.selection")


def train_keys(cfg: TrainingParams, unit: str) -> list[str]:
    hessian = ["hessian_dense_max_n"] if cfg.sweeps[unit].metrics == "hessian" else []
    dtype = ["dtype"] if cfg.sweeps[unit].dtype is None else []
    return ["sweeps.{unit}", *TRAIN_KEYS, *dtype, *hessian]


def figure_keys(cfg: TrainingParams, unit: str) -> list[str]:
    """What every family's render reads besides its entry's options: chance, the selection rule, its restriction."""
    restricted = ["figures.restrict.{unit}"] if unit in cfg.figures.restrict else []
    return [*RENDER_KEYS, *restricted]


def family_keys(cfg: TrainingParams, unit: str) -> list[str]:
    """What a family's extract reads: the same keys as its render."""
    return [*figure_keys(cfg, unit), *FAMILIES[unit].keys]


STUDY = Study(
    name="mupc_training",
    title="μPC: training sweeps and their figures",
    claims="pipeline.studies.mupc.training.claims",
    schema=TrainingParams,
    stages=(
        Stage("train", entry="pipeline.studies.mupc.training.train", units=lambda cfg: list(cfg.sweep_ids),
               params=train_keys, datasets=lambda cfg, unit: cfg.sweeps[unit].datasets(), resumable=True,
               tables=("runs.csv",), cost="pipeline.studies.mupc.training.cost:train_cost",
               precision="pipeline.studies.mupc.training.sweep_expansion:unit_precision",
               probe="pipeline.studies.mupc.training.probe"),
        Stage("extract", entry="pipeline.studies.mupc.training.extract", units=lambda cfg: list(FAMILIES),
               params=family_keys, metrics=True,
               reads=lambda cfg, unit: [("train", s) for s in FAMILIES[unit].reads()]),
        Stage("render", entry="pipeline.studies.mupc.training.figures", figure_table=lambda cfg: FAMILIES,
               params=figure_keys),
    ),
)
