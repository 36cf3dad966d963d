"""imprint: a glyph stamped into an MLP's init, trained with Adam and with Muon (seed 000).

train@<run>         one (init, optimiser) run: W2 per epoch, accuracy and spectral-norm curves
train@seed_spread   the glyph init from several init seeds, Adam and Muon, epoch-1 test accuracy
extract@<summary>   final numbers of the listed runs -> reports/metrics/imprint_extract@<summary>.json
extract@seed_spread the Adam/Muon epoch-1 gap per init seed -> reports/metrics/imprint_extract@seed_spread.json
render@<figure>     the seed's composite figure for one init (and, for the glyph, its single panels)
render@seed_spread  epoch-1 test accuracy per init seed, Adam and Muon
"""

from pipeline.contract import FigureEntry, Stage, Study, Units
from pipeline.studies.imprint.config import SPREAD, ImprintParams

SHARED_KEYS = ("glyph", "glyph_scale", "ns_compile", "lr", "momentum", "ns_steps", "batch_size", "test_batch_size",
               "mean", "std", "precision", "ns_precision", "n_train", "n_test", "torch_threads")
COST = "pipeline.studies.imprint.cost"


def mnist(cfg: ImprintParams, unit: str) -> tuple[str, ...]:
    return ("mnist",)


def spread_run(cfg: ImprintParams, unit: str) -> list[tuple[str, str]]:
    return [("train", SPREAD)]


def figure_table(cfg: ImprintParams) -> dict[str, FigureEntry]:
    """The render units: one composite per entry of ``figures`` (its Adam and Muon runs), then the seed spread."""
    table = {unit: FigureEntry("render", {"adam": spec.adam, "muon": spec.muon}, ("figures.{unit}",))
             for unit, spec in cfg.figures.items()}
    return table | {unit: FigureEntry("render_spread", {"spread": unit}, ("spread",)) for unit in cfg.spread_units()}


STUDY = Study(
    name="imprint",
    title="Glyph imprint: Adam vs Muon",
    claims="pipeline.studies.imprint.claims",
    schema=ImprintParams,
    stages=(
        Stage("train", entry="pipeline.studies.imprint.train", probe="pipeline.studies.imprint.probe", groups=(
            Units(lambda cfg: list(cfg.runs), (*SHARED_KEYS, "init_seed", "compile", "epochs", "runs.{unit}"),
                  datasets=mnist, cost=f"{COST}:train_cost"),
            Units(lambda cfg: cfg.spread_units(), (*SHARED_KEYS, "compile", "spread"), datasets=mnist,
                  run="train_spread", cost=f"{COST}:spread_cost"),
        )),
        Stage("extract", entry="pipeline.studies.imprint.extract", metrics=True, tables=("runs.csv",), groups=(
            Units(lambda cfg: list(cfg.summary), ("glyph", "glyph_scale", "summary.{unit}"),
                  reads=lambda cfg, unit: [("train", r) for r in cfg.summary[unit].runs]),
            Units(lambda cfg: cfg.spread_units(), ("spread",), spread_run, run="extract_spread"),
        )),
        Stage("render", entry="pipeline.studies.imprint.figures", figure_table=figure_table),
    ),
)
