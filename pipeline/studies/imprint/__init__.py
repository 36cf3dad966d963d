"""imprint: a glyph stamped into an MLP's init, trained with Adam and with Muon (seed 000).

train@<run>       one (init, optimiser) run: W2 per epoch, accuracy and spectral-norm curves
extract@<summary> final numbers of the listed runs -> reports/metrics/imprint_extract@<summary>.json
render@<figure>   the seed's composite figure for one init (and, for the glyph, its single panels)
"""

from pipeline.contract import Family, Study
from pipeline.studies.imprint.config import ImprintParams

TRAIN_KEYS = ("glyph", "glyph_scale", "init_seed", "compile", "lr", "momentum", "ns_steps", "batch_size",
              "test_batch_size", "mean", "std", "precision", "ns_precision", "epochs", "n_train", "n_test",
              "torch_threads", "runs.{unit}")

STUDY = Study(
    name="imprint",
    title="Glyph imprint: Adam vs Muon",
    claims="pipeline.studies.imprint.claims",
    schema=ImprintParams,
    families=(
        Family("train", entry="pipeline.studies.imprint.train", units=lambda cfg: list(cfg.runs),
               params=TRAIN_KEYS, datasets=lambda cfg, unit: ("mnist",)),
        Family("extract", entry="pipeline.studies.imprint.extract", units=lambda cfg: list(cfg.summary),
               params=("glyph", "glyph_scale", "summary.{unit}"), metrics=True,
               reads=lambda cfg, unit: [("train", r) for r in cfg.summary[unit].runs]),
        Family("render", entry="pipeline.studies.imprint.figures", units=lambda cfg: list(cfg.figures),
               params=("figures.{unit}",),
               reads=lambda cfg, unit: [("train", cfg.figures[unit].adam), ("train", cfg.figures[unit].muon)]),
    ),
)
