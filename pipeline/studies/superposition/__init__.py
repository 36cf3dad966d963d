"""superposition: toy model of superposition with untied weights (seed 002), every seed of a variant batched.

train@<variant>    all seeds of one variant (untied / tied) in one batched run: per-epoch losses, snapshots
extract@<variant>  per-seed final and epoch-1 loss -> reports/metrics/superposition_extract@<variant>.json
extract@summary    plateau-then-drop detection on every seed -> reports/metrics/superposition_extract@summary.json
render@<variant>   feature geometry, W_U·W_E heat maps and the slider HTML of the figure seeds
render@summary     loss curves of every seed with the detected plateaus
"""

from collections.abc import Sequence

from pipeline.contract import Family, Study
from pipeline.studies.superposition.config import SUMMARY, Superposition

TRAIN_KEYS = ("f", "n", "lr", "lr_schedule", "lr_decay_total", "lr_decay_steps", "device", "dtype", "threads",
              "variants.{unit}", "train")


def _extract_keys(cfg: Superposition, unit: str) -> Sequence[str]:
    return ("plateau", "train.epochs", "lr_schedule") if unit == SUMMARY else ("variants.{unit}",)


def _render_keys(cfg: Superposition, unit: str) -> Sequence[str]:
    if unit == SUMMARY:
        return ("render.zoom_epochs",)
    return ("variants.{unit}", "render.figure_seeds", "render.panel_epochs", "render.html_frames")


def _trained(cfg: Superposition, unit: str) -> list[tuple[str, str]]:
    """The train units a unit reads: its own variant, or every variant for the summary."""
    return [("train", v) for v in (cfg.variants if unit == SUMMARY else [unit])]


STUDY = Study(
    name="superposition",
    title="Toy model of superposition (untied)",
    claims="pipeline.studies.superposition.claims",
    schema=Superposition,
    families=(
        Family("train", entry="pipeline.studies.superposition.train", units=lambda cfg: list(cfg.variants),
               params=TRAIN_KEYS, cost="pipeline.studies.superposition.cost:train_cost",
               probe="pipeline.studies.superposition.probe"),
        Family("extract", entry="pipeline.studies.superposition.extract", units=lambda cfg: cfg.units(),
               params=_extract_keys, reads=_trained, metrics=True, tables=("runs.csv",)),
        Family("render", entry="pipeline.studies.superposition.figures", units=lambda cfg: cfg.units(),
               params=_render_keys,
               reads=lambda cfg, unit: _trained(cfg, unit) + ([("extract", SUMMARY)] if unit == SUMMARY else [])),
    ),
)
