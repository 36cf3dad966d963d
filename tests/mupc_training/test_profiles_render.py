"""Every profile extracts and renders every family: the gpu_medium and paper sections resolved from the
repository's params, their sweeps expanded exactly as the train units list them, and F7–F25, F28 measured and
drawn from synthetic runs
of those grids (a few evaluations per run, so only the grids' shape is at stake: which depths, epochs,
seeds and learning rates the families pair up across sweeps)."""

from __future__ import annotations

import copy

import pytest

# skips, rather than breaks, collection where plotly is absent (a bare GPU machine's `pytest -m gpu`): the
# project's plotting module draws the μPC figures with it
pytest.importorskip("plotly")

from pipeline.config import load_section, read_tree
from pipeline.plotting import plt
from pipeline.studies.mupc.training.config import TrainingParams
from pipeline.studies.mupc.training.extract import extract_family
from pipeline.studies.mupc.training.families import FAMILIES
from pipeline.studies.mupc.training.figures import render_family
from pipeline.studies.mupc.training.sweep_expansion import expand
from pipeline.studies.mupc.training.sweep_reader import Sweeps
from tests.conftest import ROOT
from tests.mupc_training.figures_synth import arrays_short

SECTION = "mupc_training"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def resolved(profile: str) -> TrainingParams:
    """The repository's section resolved for ``profile`` (clean variants off: they draw the same runs)."""
    raw = copy.deepcopy(read_tree(ROOT)[SECTION])
    raw["figures"]["clean_variants"] = False
    return load_section(TrainingParams, {SECTION: raw}, SECTION, profile)


def synthetic(cfg: TrainingParams) -> Sweeps:
    return Sweeps(expand=lambda sweep: expand(cfg, sweep), load=lambda sweep, rc: arrays_short(rc))


@pytest.fixture(scope="module", params=["gpu_medium", "paper"])
def profile_cfg(request) -> tuple[str, TrainingParams]:
    return request.param, resolved(request.param)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_profile_renders_the_family(profile_cfg, family):
    profile, cfg = profile_cfg
    sweeps = synthetic(cfg)
    head = extract_family(cfg.figures, profile, family, sweeps)
    figs = render_family(cfg.figures, family, sweeps, head.get("selected_lrs", {}))
    assert figs and all(f.family == family for f in figs)
    assert head["family"] == family and head["profile"] == profile
