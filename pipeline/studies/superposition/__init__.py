"""superposition: toy model of superposition with untied weights (seed 002), every seed of a variant batched.

train@<variant>    all seeds of one variant (untied / tied) in one batched run: per-epoch losses, snapshots
extract@<variant>  per-seed final and epoch-1 loss -> reports/metrics/superposition_extract@<variant>.json
extract@summary    plateau-then-drop detection on every seed -> reports/metrics/superposition_extract@summary.json
render@<variant>   feature geometry, W_U·W_E heat maps and the slider HTML of the figure seeds
render@summary     loss curves of every seed with the detected plateaus
"""

from pipeline.contract import FigureEntry, Stage, Study, Units
from pipeline.studies.superposition.config import SUMMARY, Superposition

TRAIN_KEYS = ("f", "n", "lr", "lr_schedule", "lr_decay_total", "lr_decay_steps", "device", "dtype", "threads",
              "variants.{unit}", "train")
STAND_IN = ("train.epochs", "train.seeds")  # the smoke profile's captions name them


def variants(cfg: Superposition) -> list[str]:
    return list(cfg.variants)


def summary(cfg: Superposition) -> list[str]:
    return [SUMMARY]


def trained(cfg: Superposition, unit: str) -> list[tuple[str, str]]:
    """A variant's own train unit."""
    return [("train", unit)]


def every_variant(cfg: Superposition, unit: str) -> list[tuple[str, str]]:
    return [("train", v) for v in cfg.variants]


def summary_keys(cfg: Superposition, unit: str) -> list[str]:
    """The detector and what each row of the summary table names: the schedule and whether a variant is tied."""
    return ["plateau", "train.epochs", "lr", "lr_schedule", *(f"variants.{v}.tied" for v in cfg.variants)]


def figure_table(cfg: Superposition) -> dict[str, FigureEntry]:
    """The render units: each variant's geometry and heat maps (plotly, their PNG and PDF by kaleido) and slider
    (HTML alone); the summary's loss curves of every variant with the plateaus its extract detected (matplotlib)."""
    table = {v: FigureEntry("render", {"variant": v}, ("variants.{unit}", "render.figure_seeds", "render.panel_epochs",
                                                        "render.html_frames", *STAND_IN), plotly_images=True)
             for v in cfg.variants}
    return table | {SUMMARY: FigureEntry("render_summary", {"variants": tuple(cfg.variants)},
                                         ("render.zoom_epochs", *STAND_IN), extract=True)}


STUDY = Study(
    name="superposition",
    title="Toy model of superposition (untied)",
    claims="pipeline.studies.superposition.claims",
    schema=Superposition,
    stages=(
        Stage("train", entry="pipeline.studies.superposition.train", units=variants,
               params=TRAIN_KEYS, cost="pipeline.studies.superposition.cost:train_cost",
               probe="pipeline.studies.superposition.probe"),
        Stage("extract", entry="pipeline.studies.superposition.extract", metrics=True, tables=("runs.csv",), groups=(
            Units(variants, ("variants.{unit}", "f", "n", "lr", "lr_schedule"), trained),  # its table names them
            Units(summary, summary_keys, every_variant, run="extract_summary"),
        )),
        Stage("render", entry="pipeline.studies.superposition.figures", figure_table=figure_table),
    ),
)
