"""The claims ledger: pure checks, claims that fail when their metric moves, the stage, the graph, the gallery."""

from __future__ import annotations

import copy
import json
import shutil
from functools import partial

import pytest

# skips, rather than breaks, collection where plotly is absent (a bare GPU machine's `pytest -m gpu`): the
# project's plotting module draws the μPC figures with it
pytest.importorskip("plotly")

from pipeline import checks, claims, graph, registry
from pipeline.config import PROFILES, load_params, parse_params, read_tree
from pipeline.contract import Claim
from pipeline.gallery import build_manifest, gallery_html
from pipeline.io import read_json, write_json
from pipeline.paths import metrics_path, rel, study_dir
from pipeline.studies.imprint.claims import CLAIMS as IMPRINT_CLAIMS
from pipeline.tracking import records as run_records
from pipeline.writer.figures import figure_data
from tests.conftest import ROOT

# ----------------------------------------------------------------------------- pure checks


def test_thresholds_and_missing_values():
    assert checks.at_least(3, threshold=3) == (True, 3.0)
    assert checks.at_least(2.9, threshold=3)[0] is False
    assert checks.at_most(None, threshold=3) == (False, None)
    assert checks.at_least(float("nan"), threshold=0)[0] is False
    assert checks.within(0.5, lo=0, hi=1)[0] and not checks.within(1.5, lo=0, hi=1)[0]
    ok, diff = checks.close_to(0.0204066, target=0.0204067, tol=1e-6)
    assert ok and diff == pytest.approx(-1e-7)
    assert not checks.close_to(0.0205, target=0.0204067, tol=1e-6)[0]
    assert checks.equal(1024, 1024)[0] and not checks.equal(935, 1024)[0]


def test_orderings_and_ratios():
    assert checks.exceeds(0.95, 0.81, margin=0.02) == (True, pytest.approx(0.14))
    assert not checks.exceeds(0.82, 0.81, margin=0.02)[0]
    assert not checks.exceeds(1, 1)[0]  # strict
    assert checks.ratio_at_least(2.3, 1.1, ratio=2)[0] and not checks.ratio_at_least(2.0, 1.1, ratio=2)[0]
    assert checks.ratio_at_least(1, 0, ratio=1) == (False, None)
    ok, drops = checks.drop_exceeds(45.9, 43.0, 45.9, 45.7)
    assert ok and drops == {"drop_a": pytest.approx(2.9), "drop_b": pytest.approx(0.2)}
    assert not checks.drop_exceeds(45.9, 45.8, 45.9, 45.7)[0]


def test_sizes_and_crossings():
    assert checks.size_at_most([[1.0, 0.1]], n=1) == (True, 1)
    assert not checks.size_at_most([[1.0, 0.1], [0.1, 0.1]], n=1)[0]
    assert checks.size_at_least([3], n=1)[0] and not checks.size_at_least([], n=1)[0]
    assert checks.crossed(1190) == (True, 1190.0)
    assert not checks.crossed(None)[0]
    assert not checks.crossed(1190, by=1000)[0]


def test_coordinates_and_trend_over_grids():
    assert checks.coordinates("mnist/relu/H=8") == {"0": "mnist", "1": "relu", "H": 8.0}
    assert checks.coordinates("N8_H2", "_") == {"N": 8.0, "H": 2.0}
    acc = {"mnist/relu/H=2": 40.0, "mnist/relu/H=4": 12.0, "mnist/tanh/H=2": 65.0, "mnist/tanh/H=4": 51.0}
    ok, measured = checks.trend(acc, axis="H", direction="down")
    assert ok and measured["mnist/relu"] == {"H=2": 40.0, "H=4": 12.0}
    assert not checks.trend({**acc, "mnist/tanh/H=4": 66.0}, axis="H", direction="down")[0]
    kappa = {"N2_H2": 10.0, "N2_H8": 68.0, "N8_H2": 20.0, "N8_H8": 230.0}
    assert checks.trend(kappa, axis="H", direction="up", sep="_")[0]
    assert checks.trend(kappa, axis="H", direction="up", sep="_", factor=3)[0]
    assert not checks.trend(kappa, axis="H", direction="up", sep="_", factor=10)[0]  # 68/10 < 10
    wavy = {"H=1": 1.0, "H=2": 3.0, "H=4": 2.0}
    assert checks.trend(wavy, axis="H", direction="up")[0] and not checks.trend(wavy, axis="H", direction="up",
                                                                                  monotone=True)[0]
    assert not checks.trend({"H=2": 1.0}, axis="H", direction="up")[0]  # one point is no trend
    with pytest.raises(ValueError):
        checks.trend(acc, axis="H", direction="sideways")


def test_each_select_at_and_cellwise():
    runs = {"seed_pi_256": {"max": 55}, "seed_pi_1024": {"max": 294}, "seed_random_1024": {"max": 1024}}
    below = partial(checks.at, key="max", check=partial(checks.at_most, threshold=784))
    assert checks.each(runs, keys=r"seed_pi_\d+", check=below) == (True, {"seed_pi_256": 55.0, "seed_pi_1024": 294.0})
    assert not checks.each(runs, check=below)[0]  # random is full rank
    assert not checks.each(runs, keys=r"off_.*", check=below)[0]  # nothing to check never holds
    assert checks.select({"N1": 3.0, "N2": 2.0, "N1_res": 9.0}, keys=r"N\d+",
                         check=partial(checks.trend, axis="N", direction="down", sep="_"))[0]
    assert checks.at({"a": 1}, key="b", check=below) == (False, None)
    assert checks.cellwise({"x": 1.0, "y": 2.0}, {"x": 2.0, "y": 3.0, "z": 0.0})[0]
    assert not checks.cellwise({"x": 1.0, "y": 4.0}, {"x": 2.0, "y": 3.0})[0]
    assert checks.cellwise({"x": 5.0}, {"x": 2.0}, relation="greater")[0]
    assert not checks.cellwise({}, {"x": 2.0})[0]
    fig1 = {"relu/H=2": {"mupc": 42.9, "pc": 8.6}, "relu/H=8": {"mupc": 30.0, "pc": 9.7}}
    assert checks.each_exceeds(fig1, a="mupc", b="pc")[0]
    assert not checks.each_exceeds({**fig1, "relu/H=4": {"mupc": 9.0, "pc": 11.7}}, a="mupc", b="pc")[0]
    assert checks.agree(570, 560, rel=0.1)[0] and not checks.agree(570, 300, rel=0.1)[0]


def test_describe_names_the_check_and_its_parameters():
    c = partial(checks.each, keys=r"x", check=partial(checks.at_most, threshold=784))
    assert checks.describe(c) == "each(keys='x', check=at_most(threshold=784))"


# ----------------------------------------------------------------------------- declared claims

IMPRINT_METRICS = {
    "profile": "smoke",
    "glyph": {"shape": "rectangles", "spectral_norm_scaled": 45.8624},
    "runs": {
        "glyph-adam": {"test_acc_epoch0": 0.1135, "test_acc_epoch1": 0.90, "final_test_acc": 0.9599,
                       "final_train_acc": 0.977, "first_batch_loss": 3.125,
                       "spectral_norm_initial": 45.9, "spectral_norm_final": 45.76, "glyph_contrast_retained": 1.01},
        "glyph-muon": {"test_acc_epoch0": 0.1135, "test_acc_epoch1": 0.95, "final_test_acc": 0.9705,
                       "final_train_acc": 0.991, "first_batch_loss": 3.125,
                       "spectral_norm_initial": 45.9, "spectral_norm_final": 43.5, "glyph_contrast_retained": 0.80},
        "random-adam": {"test_acc_epoch0": 0.1046, "test_acc_epoch1": 0.93, "final_test_acc": 0.9747,
                        "final_train_acc": 0.988, "first_batch_loss": 2.297,
                        "spectral_norm_initial": 1.12, "spectral_norm_final": 2.3},
        "random-muon": {"test_acc_epoch0": 0.1046, "test_acc_epoch1": 0.97, "final_test_acc": 0.9765,
                        "final_train_acc": 0.996, "first_batch_loss": 2.297,
                        "spectral_norm_initial": 1.12, "spectral_norm_final": 3.7},
    },
}


SPREAD_METRICS = {"profile": "smoke", "gap": {"min": 0.05, "median": 0.12, "max": 0.38},
                  "adam": {"min": 0.56, "median": 0.83, "max": 0.89}}
FIXTURES = {"imprint_extract@final": IMPRINT_METRICS, "imprint_extract@seed_spread": SPREAD_METRICS}


def _imprint(claim_id: str) -> Claim:
    return next(c for c in IMPRINT_CLAIMS if c.id == claim_id)


def _row(claim: Claim, metrics: dict) -> dict:
    """The claim evaluated on ``metrics`` as imprint_extract@final (and the spread fixture)."""
    return claims.evaluate(claim, "imprint", "paper", {**FIXTURES, "imprint_extract@final": metrics}.get)


@pytest.mark.parametrize("claim", IMPRINT_CLAIMS, ids=lambda c: c.id)
def test_every_imprint_claim_holds_on_the_fixture(claim):
    row = _row(claim, IMPRINT_METRICS)
    assert row["status"] == "holds", row


@pytest.mark.parametrize(("claim_id", "path", "value"), [
    ("muon_leads_epoch1_glyph", ("glyph-muon", "test_acc_epoch1"), 0.82),
    ("glyph_survives_adam", ("glyph-adam", "glyph_contrast_retained"), 0.5),
    ("glyph_fades_under_muon", ("glyph-muon", "glyph_contrast_retained"), 1.05),
    # fading more, but by less than the seed's 3.1 % (Adam keeps 1.01): a 0.99-vs-1.00 result breaks it
    ("glyph_fades_under_muon", ("glyph-muon", "glyph_contrast_retained"), 0.99),
    ("glyph_norm_falls_more_under_muon", ("glyph-muon", "spectral_norm_final"), 45.85),
    ("random_norm_doubles_muon", ("random-muon", "spectral_norm_final"), 2.0),
    # the seed's level after 10 epochs, less 0.7 points: 95.88 %
    ("final_accuracy_seed_level", ("glyph-adam", "final_test_acc"), 0.9585),
    ("final_accuracy_seed_level", ("random-muon", "final_test_acc"), 0.9453),  # smoke's glyph+Adam after 3 epochs
    # Adam's ‖W2‖₂ within 1.3 % of its start, either way: Muon's fall (−3.5 of 45.9) or a rise breaks it
    ("adam_norm_barely_moves", ("glyph-adam", "spectral_norm_final"), 42.4),
    ("adam_norm_barely_moves", ("glyph-adam", "spectral_norm_final"), 46.6),
    ("accuracy_at_chance_before_training", ("glyph-muon", "test_acc_epoch0"), 0.30),
    ("accuracy_at_chance_before_training", ("random-adam", "test_acc_epoch0"), 0.02),
])
def test_a_claim_fails_when_its_metric_is_perturbed(claim_id, path, value):
    claim = _imprint(claim_id)
    assert _row(claim, IMPRINT_METRICS)["holds"] is True
    moved = copy.deepcopy(IMPRINT_METRICS)
    moved["runs"][path[0]][path[1]] = value
    row = _row(claim, moved)
    assert row["status"] == "fails" and row["holds"] is False and row["surprise"]


def test_the_seed_spread_claim_fails_when_one_seed_has_adam_ahead():
    claim = _imprint("muon_leads_on_every_init_seed")
    assert _row(claim, IMPRINT_METRICS)["holds"] is True
    FIXTURES["imprint_extract@seed_spread"] = {"gap": {"min": -0.01}}
    try:
        assert _row(claim, IMPRINT_METRICS)["status"] == "fails"
    finally:
        FIXTURES["imprint_extract@seed_spread"] = SPREAD_METRICS


def test_a_claim_whose_metric_is_missing_is_not_measured():
    moved = copy.deepcopy(IMPRINT_METRICS)
    del moved["runs"]["glyph-muon"]["glyph_contrast_retained"]
    row = _row(_imprint("glyph_fades_under_muon"), moved)
    assert row["status"] == "not measured" and row["holds"] is None and row["surprise"]
    assert row["missing"] == ["imprint_extract@final/runs/glyph-muon/glyph_contrast_retained"]
    absent = claims.evaluate(_imprint("glyph_survives_adam"), "imprint", "smoke", lambda stage: None)
    assert "stage not run under this profile" in absent["missing"][0]


def test_expectations_per_profile_carry_reasons():
    claim = _imprint("random_norm_doubles_adam")
    assert not claim.expected("smoke") and claim.expected("paper")
    row = claims.evaluate(claim, "imprint", "smoke", lambda stage: IMPRINT_METRICS)
    assert row["expected"] is False and row["reason"] and row["status"] == "holds" and row["surprise"]


def _all_render_units(study) -> set[str]:
    raw = read_tree(ROOT)
    render = study.stage("render")
    out: set[str] = set()
    for profile in PROFILES:
        params = parse_params({**raw, "profile": profile})
        out.update(render.units(registry.config(study, params)))
    return out


def _all_metric_stages(study) -> set[str]:
    raw = read_tree(ROOT)
    return set().union(*(claims.published(parse_params({**raw, "profile": p})) for p in PROFILES))


@pytest.mark.parametrize("name", registry.names())
def test_every_study_declares_claims_on_its_own_published_metrics(name):
    study = registry.load(name)
    declared = claims.study_claims(study)
    assert declared, f"{name} declares no claims"
    stages, units = _all_metric_stages(study), _all_render_units(study)
    for c in declared:
        assert c.sentence and c.seed_figure and c.figures, c.id
        for read in c.reads:
            assert read[0] in stages, f"{name}/{c.id} reads {read[0]}, which no profile publishes"
        assert set(c.figures) <= units, f"{name}/{c.id} links figures {c.figures}; render units: {sorted(units)}"
        for profile, reason in c.fails_on.items():
            assert profile in PROFILES and reason.strip(), (c.id, profile)


# The headline keys of mupc_analysis_extract@analysis_metrics that each analysis family draws (its render
# publishes no metrics of its own): the group under the train unit, then the key's prefix.
ANALYSIS_OWN = {"F1": ("hessian_init", "lambda_min/"), "F2": ("hessian_init", "kappa/"),
                "F3": ("hessian_init", "H_theory_kappa/"), "F4": ("hessian_init", "kappa/"),
                "F5": ("fwd_pass", "rms_t0_"), "F6": ("fwd_pass", "spectral_"),
                "F26": ("theory_grid", "ratio_t0/"), "F27": ("theory_width", "ratio_t0/")}


def reads_own_metrics(study: str, family: str, claim: Claim) -> bool:
    """The claim reads the metrics of its own figure family: the family's extract metrics
    (mupc_training_extract@F<k>), or for mupc_analysis the headline keys the family draws."""
    if study == "mupc_training":
        return any(read[0] == f"mupc_training_extract@{family}" for read in claim.reads)
    unit, prefix = ANALYSIS_OWN[family]
    return any(len(read) >= 2 and read[1] == unit and (len(read) == 2 or read[2].startswith(prefix))
               for read in claim.reads)


@pytest.mark.parametrize(("study", "family"), [("mupc_analysis", f) for f in ANALYSIS_OWN]
                         + [("mupc_training", f"F{k}") for k in (*range(7, 26), 28)])
def test_every_mupc_figure_family_has_a_finding_on_its_own_metrics(study, family):
    """Every figure family F1–F28 of the two mupc studies (F28: the project's own) states at least one *finding*
    (not a sanity check) that reads the numbers of that family's own figure: a claim that reads another family
    and links to this one does not count. The families in :data:`NO_FINDING` state a sanity check instead."""
    kinds = ("sanity",) if family in NO_FINDING.get(study, {}) else ("finding",)
    own = [c for c in claims.study_claims(registry.load(study))
           if c.role in kinds and family in c.figures and reads_own_metrics(study, family, c)]
    assert own, f"{study}/{family} has no {kinds[0]} on its own metrics"


# Families whose figure shows no finding the paper states: what their claims read holds at initialisation.
NO_FINDING = {"mupc_training": {
    "F12": "μPC's κ over training (S9): the paper and the spec state nothing about it (the spec's 'κ rising over "
           "training' is SP's, F8–F11); κ at init growing with depth holds before training, a sanity check"}}


@pytest.mark.parametrize("name", ["imprint", "superposition", "zero_init"])
def test_every_render_unit_of_the_other_studies_has_a_finding(name):
    study = registry.load(name)
    linked = {f for c in claims.study_claims(study) if c.role == "finding" for f in c.figures}
    assert _all_render_units(study) <= linked, sorted(_all_render_units(study) - linked)


def test_claim_roles_are_declared_and_checked():
    every = [c for _, cs in claims.all_claims() for c in cs]
    assert {c.role for c in every} == {"finding", "sanity"}
    with pytest.raises(ValueError, match="role = 'theorem' is not allowed"):
        Claim("x", "fig", "s", (("a_extract@b", "k"),), checks.at_least, role="theorem")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Claim("x", "fig", "s", (("a_extract@b", "k"),), checks.at_least)  # type: ignore[call-arg]


# ----------------------------------------------------------------------------- the stage


@pytest.fixture()
def fixture_root(tmp_path, monkeypatch):
    """A workspace holding the params files and the imprint metrics only (every other claim: not measured)."""
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    shutil.copytree(ROOT / "params", tmp_path / "params")
    monkeypatch.setenv("TRAINSCAPE_ROOT", str(tmp_path))
    monkeypatch.setenv("TRAINSCAPE_TRACKING", "off")
    for stage, metrics in FIXTURES.items():
        write_json(metrics_path(stage), metrics)
    return tmp_path


def test_claims_stage_writes_the_ledger_from_metric_files(fixture_root, capsys):
    params = load_params()
    assert claims.run(params) == 0
    ledger = read_json(fixture_root / "reports" / "claims.json")
    rows = {r["id"]: r for r in ledger["claims"]}
    assert rows["imprint/muon_leads_epoch1_glyph"]["status"] == "holds"
    assert rows["imprint/muon_leads_epoch1_glyph"]["measured"] == pytest.approx(0.05)  # 0.95 - 0.90
    assert rows["imprint/muon_leads_epoch1_glyph"]["reads"][0]["value"] == 0.95
    assert rows["zero_init/random_full_rank"]["status"] == "not measured"
    assert ledger["summary"]["profile"] == params.profile
    assert "zero_init/random_full_rank" in ledger["summary"]["expected_but_not_holding"]
    assert {r["profile"] for r in ledger["claims"]} == {params.profile}
    err = capsys.readouterr().err
    assert "EXPECTED TO HOLD ON" in err and "zero_init/random_full_rank" in err
    assert claims.run(params, strict=True) == 1



def test_two_runs_on_the_same_inputs_write_the_same_claims_json(fixture_root, monkeypatch):
    """claims.json is a DVC output: no run key in it, neither the stage's own nor a source's (a forced rerun
    of a source keeps its bytes and gets a new key); both go to the claims stage's run record."""
    monkeypatch.delenv("TRAINSCAPE_TRACKING")  # journal: every execution gets a run key
    source = "imprint_extract@final"
    meta = {"stage": source, "profile": "smoke"}
    write_json(study_dir("imprint", "extract", "final") / "meta.json", meta)
    params = load_params()
    written, records = [], []
    for key in ("a" * 32, "b" * 32):  # the source rerun between the two claims runs
        run_records.record(source, meta, {"run_key": key})
        assert claims.run(params) == 0
        written.append((fixture_root / "reports" / "claims.json").read_bytes())
        records.append(run_records.lookup("claims", json.loads(written[-1])))
    assert written[0] == written[1]
    assert "run_key" not in json.loads(written[0])["summary"] and b"a" * 32 not in written[0]
    first, second = records
    assert first["run_key"] and second["run_key"] and first["run_key"] != second["run_key"]
    assert second["sources"][source] == "b" * 32 and second["mlflow_experiment"] == "claims"


def test_strict_passes_when_every_expected_claim_holds(fixture_root, monkeypatch):
    only = registry.load("imprint")
    monkeypatch.setattr(claims, "all_claims", lambda: [(only, claims.study_claims(only))])
    params = load_params()
    assert claims.run(params, strict=True) == 0
    moved = copy.deepcopy(IMPRINT_METRICS)
    moved["runs"]["glyph-muon"]["test_acc_epoch1"] = 0.5
    write_json(metrics_path("imprint_extract@final"), moved)
    assert claims.run(params, strict=True) == 1
    assert claims.run(params) == 0  # a failing claim is data, not a crash


def test_stage_cli_strict_flag_and_env(fixture_root, monkeypatch):
    from stages.claims import main

    assert main([]) == 0
    assert main(["--strict"]) == 1
    monkeypatch.setenv(claims.STRICT_ENV, "1")
    assert main([]) == 1
    assert main(["--profile", "paper" if load_params().profile != "paper" else "smoke"]) == 2


def test_a_slice_checks_only_its_studies_built_claims(fixture_root, monkeypatch):
    """--study / --built: the ledger of a slice of the pipeline (the imprint metrics alone) holds under
    --strict; a study with no metrics built checks nothing, which --strict refuses."""
    from stages.claims import main

    assert main(["--strict"]) == 1  # every other study's claims are not measured
    assert main(["--strict", "--study", "imprint", "--built"]) == 0
    ledger = read_json(fixture_root / "reports" / "claims.json")
    assert {r["study"] for r in ledger["claims"]} == {"imprint"} and len(ledger["claims"]) == len(IMPRINT_CLAIMS)
    assert main(["--strict", "--study", "zero_init", "--built"]) == 1  # nothing built: nothing checked
    assert main(["--study", "zero_init", "--built"]) == 0
    assert main(["--study", "nonsense"]) == 2
    assert main(["--strict", "--study", "imprint", "--built", "--role", "sanity"]) == 0
    assert [r["claim"] for r in read_json(fixture_root / "reports" / "claims.json")["claims"]] == [
        "glyph_raises_first_loss", "glyph_init_loss_like_seed", "accuracy_at_chance_before_training",
        "glyph_norm_reference"]
    moved = copy.deepcopy(IMPRINT_METRICS)
    moved["runs"]["glyph-adam"]["glyph_contrast_retained"] = 0.5
    write_json(metrics_path("imprint_extract@final"), moved)
    assert main(["--strict", "--study", "imprint", "--built"]) == 1


# ----------------------------------------------------------------------------- graph


def test_claims_stage_deps_are_its_code_and_exactly_the_metrics_it_reads():
    params = load_params(ROOT)
    stages = graph.stages(params)
    deps = stages["claims"]["deps"]
    metric_deps = {d for d in deps if d.startswith("reports/metrics/")}
    assert metric_deps == {rel(metrics_path(s)) for s in claims.read_stages(params)}
    written = {next(iter(m)) for s in stages.values() for m in s.get("metrics", [])}
    assert metric_deps <= written, "the claims stage depends on a metrics file no stage writes"
    assert "reports/claims.json" in stages["gallery"]["deps"]
    code = {d for d in deps if d.endswith(".py")}
    assert {"pipeline/claims.py", "pipeline/checks.py", "stages/claims.py",
            "pipeline/studies/imprint/claims.py"} <= code
    assert not any(d.endswith(("/train.py", "/figures.py", "/extract.py")) for d in code)


def test_editing_a_claim_reruns_no_training_or_rendering():
    for name, stage in graph.committed(ROOT).items():
        if name != "claims":
            assert not [d for d in stage.get("do", stage)["deps"] if d.endswith("claims.py")], name


# ----------------------------------------------------------------------------- gallery and provenance


def _entry(study: str, fid: str, unit: str, family: str | None = None) -> dict:
    return {"id": f"{study}/{fid}", "study": study, "family": family, "files": [f"reports/figures/{study}/{fid}.png"],
            "params_hash": "p" * 64, "git_commit": "c" * 40, "run_key": None, "data_sha256": {},
            "profile": "smoke", "seed_figure": "fig", "caption": "cap", "render_stage": f"{study}_render@{unit}"}


def test_gallery_shows_the_ledger_and_a_contents_bar():
    manifest = build_manifest([{"figures": [_entry("imprint", "glyph", "glyph"),
                                            _entry("imprint", "glyph_panels", "glyph"),
                                            _entry("mupc_training", "F18_mupc_vs_pc", "F18", "F18")]}])
    row = _row(_imprint("muon_leads_epoch1_glyph"), IMPRINT_METRICS)
    bad = {**_row(_imprint("glyph_survives_adam"), IMPRINT_METRICS), "status": "fails", "holds": False}
    ledger = {"summary": claims.summarise([row, bad], "paper"), "claims": [row, bad]}
    page = gallery_html(manifest, ledger=ledger)
    assert "Claims ledger (profile paper)" in page
    # the page opens on the figures: the ledger's one-line summary, then the cards, then the full ledger
    assert page.index("class='summary'>1 of 2 claims hold, 1 fail") < page.index("class='card'")
    assert page.index("<a href='#claims'>The full claims ledger</a>") < page.index("class='card'")
    assert page.index("class='card'") < page.index("Claims ledger (profile paper)")
    assert "<code>imprint/muon_leads_epoch1_glyph</code>" in page
    assert "<a href='#imprint--glyph'>glyph</a>" in page and "id='imprint--glyph'" in page
    assert "<tr class='surprise'><td><code>imprint/glyph_survives_adam" in page
    assert "<nav class='contents'>" in page and "glyph&nbsp;(2)" in page and "F18&nbsp;(1)" in page
    assert "Claims ledger" not in gallery_html(manifest)


def test_ledger_and_gallery_count_and_show_findings_and_sanity_checks_apart():
    finding = _row(_imprint("muon_leads_epoch1_glyph"), IMPRINT_METRICS)
    sanity = _row(_imprint("glyph_norm_reference"), IMPRINT_METRICS)
    bad = {**_row(_imprint("glyph_survives_adam"), IMPRINT_METRICS), "status": "fails", "holds": False}
    assert (finding["role"], sanity["role"], bad["role"]) == ("finding", "sanity", "finding")
    summary = claims.summarise([finding, sanity, bad], "paper")
    assert summary["claims"] == 3 and summary["holds"] == 2
    assert summary["by_role"]["finding"]["claims"] == 2 and summary["by_role"]["finding"]["holds"] == 1
    assert summary["by_role"]["finding"]["expected_but_not_holding"] == ["imprint/glyph_survives_adam"]
    assert summary["by_role"]["sanity"] == {**summary["by_role"]["sanity"], "claims": 1, "holds": 1,
                                            "expected_but_not_holding": []}
    manifest = build_manifest([{"figures": [_entry("imprint", "glyph", "glyph")]}])
    page = gallery_html(manifest, ledger={"summary": summary, "claims": [sanity, finding, bad]})
    f_at, s_at = page.index("<h3 id='claims-finding'>Findings</h3>"), page.index("<h3 id='claims-sanity'>Sanity")
    assert f_at < page.index("imprint/muon_leads_epoch1_glyph</code>") < s_at
    assert s_at < page.index("imprint/glyph_norm_reference</code>")
    assert "1 of 2 findings hold" in page and "1 of 1 sanity checks hold" in page


def test_a_figure_lists_only_the_datasets_of_the_units_it_read():
    render = {"data_sha256": {}}
    hessian = {"data_sha256": {}}  # train@hessian_init reads no dataset
    sweep = {"data_sha256": {"mnist/train.gz": "a", "fashion_mnist/train.gz": "b"}}
    assert figure_data(render, [hessian]) == {}
    assert figure_data(render, [sweep]) == {"fashion_mnist/train.gz": "b", "mnist/train.gz": "a"}
    assert figure_data({"data_sha256": {"mnist/t": "x"}}, []) == {"mnist/t": "x"}


def test_ledger_is_json_serialisable_with_nested_measurements():
    first = claims.study_claims(registry.load("zero_init"))[0]  # partial identity stays below 784
    row = claims.evaluate(first, "zero_init", "smoke",
                          lambda s: {"runs": {"seed_pi_256": {"max_rank_w3_minus_i": 55},
                                              "off_pi_1024": {"max_rank_w3_minus_i": 900}}})
    assert row["status"] == "fails" and json.loads(json.dumps(row))["measured"]["off_pi_1024"] == 900.0
