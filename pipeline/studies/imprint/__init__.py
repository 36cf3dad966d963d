"""imprint: a glyph stamped into an MLP's init, trained with Adam and with Muon (seed 000).

train@<run>         one (init, optimiser) run: W2 per epoch, accuracy and spectral-norm curves
train@seed_spread   the glyph init from several init seeds, Adam and Muon, epoch-1 test accuracy
extract@<summary>   final numbers of the listed runs -> reports/metrics/imprint_extract@<summary>.json
extract@seed_spread the Adam/Muon epoch-1 gap per init seed -> reports/metrics/imprint_extract@seed_spread.json
render@<figure>     the seed's composite figure for one init (and, for the glyph, its single panels)
render@seed_spread  epoch-1 test accuracy per init seed, Adam and Muon
"""

from pipeline.contract import Family, Study
from pipeline.studies.imprint.config import SPREAD, ImprintParams

SHARED_KEYS = ("glyph", "glyph_scale", "ns_compile", "lr", "momentum", "ns_steps", "batch_size", "test_batch_size",
               "mean", "std", "precision", "ns_precision", "n_train", "n_test", "torch_threads")
TRAIN_KEYS = (*SHARED_KEYS, "init_seed", "compile", "epochs", "runs.{unit}")


def _train_keys(cfg: ImprintParams, unit: str) -> tuple[str, ...]:
    return (*SHARED_KEYS, "compile", "spread") if unit == SPREAD else TRAIN_KEYS


def _extract_reads(cfg: ImprintParams, unit: str) -> list[tuple[str, str]]:
    return [("train", SPREAD)] if unit == SPREAD else [("train", r) for r in cfg.summary[unit].runs]


def _render_reads(cfg: ImprintParams, unit: str) -> list[tuple[str, str]]:
    if unit == SPREAD:
        return [("train", SPREAD)]
    return [("train", cfg.figures[unit].adam), ("train", cfg.figures[unit].muon)]


STUDY = Study(
    name="imprint",
    title="Glyph imprint: Adam vs Muon",
    claims="pipeline.studies.imprint.claims",
    schema=ImprintParams,
    families=(
        Family("train", entry="pipeline.studies.imprint.train", units=lambda cfg: [*cfg.runs, *cfg.spread_units()],
               params=_train_keys, datasets=lambda cfg, unit: ("mnist",),
               cost="pipeline.studies.imprint.cost:train_cost", probe="pipeline.studies.imprint.probe"),
        Family("extract", entry="pipeline.studies.imprint.extract",
               units=lambda cfg: [*cfg.summary, *cfg.spread_units()],
               params=lambda cfg, unit: ("spread",) if unit == SPREAD else ("glyph", "glyph_scale", "summary.{unit}"),
               metrics=True, reads=_extract_reads, tables=("runs.csv",)),
        Family("render", entry="pipeline.studies.imprint.figures",
               units=lambda cfg: [*cfg.figures, *cfg.spread_units()],
               params=lambda cfg, unit: ("spread",) if unit == SPREAD else ("figures.{unit}",), reads=_render_reads),
    ),
)
