"""The imprint study through the real pipeline (dvc repro on a copy), params errors, the gallery."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from pipeline.config import ConfigError, load_section, parse_params, read_tree
from pipeline.graph import bookkeeping_files, committed, targets
from pipeline.studies.imprint.config import ImprintParams
from pipeline.studies.imprint.glyph import DROID_FONT
from tests.claims_slice import strict_ledger

ROOT = Path(__file__).resolve().parents[2]
STAGES = targets("imprint_train", "imprint_extract", "imprint_render")  # not `gallery`:
# that would pull in every study
INIT = read_tree(ROOT)["imprint"]["init_seed"]  # the main runs' init: the spread's first seed
TINY = {"imprint": {"spread": {"init_seeds": [INIT, INIT + 1]},
                    "profiles": {"smoke": {"epochs": 2, "n_train": 8192, "n_test": 1024}}}}
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _raw() -> dict:
    return read_tree(ROOT)


@pytest.mark.parametrize(("edit", "needles"), [
    (lambda r: r["imprint"]["runs"].update(x={"init": "glyph", "optimizer": "sgd", "data_seed": 1}),
     ["imprint.runs.x.optimizer = 'sgd'", "'adam', 'muon'"]),
    (lambda r: r["imprint"].update(glyph="arial"), ["imprint.glyph = 'arial'", "'auto', 'droid', 'rectangles'"]),
    (lambda r: r["imprint"].update(ns_compile="yes"), ["imprint.ns_compile = 'yes'", "true/false"]),
    (lambda r: r["imprint"]["spread"].update(init_seeds=[0, 1, 1]), ["imprint.spread.init_seeds = [0, 1, 1]",
                                                                      "distinct seeds"]),
    (lambda r: r["imprint"]["spread"].update(init_seeds=[0, -1]), ["imprint.spread.init_seeds = -1",
                                                                    "[0, None]"]),
    (lambda r: r["imprint"]["spread"].update(epochs=0), ["imprint.spread.epochs = 0", "[1, 1000]"]),
    (lambda r: r["imprint"]["spread"].update(init="droid"), ["imprint.spread.init = 'droid'", "'glyph', 'random'"]),
    (lambda r: r["imprint"]["spread"].pop("data_seed"), ["imprint.spread.data_seed"]),
    (lambda r: r["imprint"]["runs"].update(seed_spread={"init": "glyph", "optimizer": "adam", "data_seed": 1}),
     ["imprint.runs = 'seed_spread'", "the spread unit"]),
    (lambda r: r["imprint"]["profiles"]["smoke"].update(precision="fp16"), ["imprint.precision = 'fp16'",
                                                                           "'bf16', 'fp32'"]),
    (lambda r: r["imprint"]["profiles"]["smoke"].update(n_train=0), ["imprint.n_train = 0", "[1, 60000]"]),
    (lambda r: r["imprint"]["profiles"].update(papr={}), ["imprint.profiles = 'papr'", "'gpu_medium'"]),
    (lambda r: r["imprint"]["figures"]["glyph"].update(muon="random-muon"),
     ["imprint.figures.glyph.muon = 'random-muon'", "same init"]),
    (lambda r: r["imprint"]["figures"]["glyph"].update(adam="nope"), ["imprint.figures.glyph.adam = 'nope'"]),
    (lambda r: r["imprint"]["summary"]["final"].update(runs=["glyph-adam", "zz"]),
     ["imprint.summary.final.runs[1] = 'zz'"]),
    (lambda r: r["imprint"].update(typo=1), ["imprint.typo is not a known key"]),
    (lambda r: r.update(profile="nonsense"), ["profile = 'nonsense'", "'smoke', 'gpu_medium', 'paper'"]),
])
def test_params_errors_name_key_value_allowed(edit, needles):
    raw = copy.deepcopy(_raw())
    load_section(ImprintParams, raw, "imprint", parse_params(raw).profile)  # the committed params are valid
    edit(raw)
    with pytest.raises(ConfigError) as err:
        load_section(ImprintParams, raw, "imprint", parse_params(raw).profile)
    for needle in needles:
        assert needle in str(err.value), str(err.value)


def _snapshot(root: Path) -> dict[str, str]:
    out = {}
    for base in ("artifacts/imprint", "reports"):
        for f in sorted((root / base).rglob("*")):
            if f.is_file():
                out[f.relative_to(root).as_posix()] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


@pytest.mark.pipeline
def test_smoke_slice_repro_noop_bad_profile_and_gallery(repo_copy):
    repo_copy.set_params(TINY)
    trace = repo_copy.path.parent / "modules.jsonl"
    repo_copy.env["TRAINSCAPE_TRACE_MODULES"] = str(trace)
    repo_copy.dvc("repro", *STAGES)
    # every stage process loaded exactly the project modules dvc.yaml lists as its code deps
    checked = repo_copy.run("python", "-m", "pipeline.graph", "--trace", str(trace))
    assert "loaded exactly its code deps" in checked.stdout
    traced = {tuple(json.loads(line)["argv"][1:3]) for line in trace.read_text().splitlines()}
    # the download stage runs too where the data cache is cold (a fresh clone), and is checked as well
    assert traced - {("mnist",)} == {("imprint", u) for u in (*_raw()["imprint"]["runs"], "final", "glyph",
                                                              "random", "seed_spread")}, traced
    # after the trace check (the ledger is no stage): a shrunk smoke (2 epochs) checks its sanity claims
    strict_ledger(repo_copy, "imprint", must_check={"glyph_norm_reference"}, role="sanity")
    repo_copy.run("python", "-m", "stages.gallery", "imprint")  # the gallery of this study alone
    root = repo_copy.path
    runs = _raw()["imprint"]["runs"]
    for key in runs:
        d = root / "artifacts/imprint/train" / key
        m = json.loads((d / "metrics.json").read_text())
        assert len(m["test_acc"]) == 3 and m["n_train"] == 8192 and m["precision"] == "fp32"
        assert m["test_acc"][0] <= 0.3 and m["test_acc"][-1] > m["test_acc"][0] + 0.1  # chance, learns
        assert (d / "arrays.npz").is_file() and json.loads((d / "meta.json").read_text())["stage"] == \
            f"imprint_train@{key}"
    metrics = json.loads((root / "reports/metrics/imprint_extract@final.json").read_text())
    assert set(metrics["runs"]) == set(runs)
    # glyph: auto draws with Droid Sans Fallback where installed, else the rectangles; the stage says which
    assert metrics["glyph"]["requested"] == "auto"
    assert metrics["glyph"]["shape"] == ("droid" if DROID_FONT.is_file() else "rectangles")
    assert metrics["glyph"]["spectral_norm_scaled"] == pytest.approx(
        45.609 if metrics["glyph"]["shape"] == "droid" else 45.862, abs=1e-3)
    meta = json.loads((root / "artifacts/imprint/train/glyph-adam/meta.json").read_text())
    assert meta["glyph"]["shape"] == metrics["glyph"]["shape"] and meta["ns_compile"] is None
    assert json.loads((root / "artifacts/imprint/train/glyph-muon/meta.json").read_text())["ns_compile"] == {
        "requested": False, "compiled": False, "fallback": None}
    spread = json.loads((root / "reports/metrics/imprint_extract@seed_spread.json").read_text())
    assert spread["init_seeds"] == [INIT, INIT + 1] and spread["precision"] == "fp32"
    # the spread's first seed is the main runs' init and data order: the same epoch-1 accuracies
    assert spread["per_seed"][str(INIT)]["adam"] == metrics["runs"]["glyph-adam"]["test_acc_epoch1"]
    assert spread["per_seed"][str(INIT)]["muon"] == metrics["runs"]["glyph-muon"]["test_acc_epoch1"]
    ga = metrics["runs"]["glyph-adam"]
    assert ga["spectral_norm_initial"] == pytest.approx(45.9, abs=0.3)
    manifest = json.loads((root / "reports/manifest.json").read_text())
    ids = {f["id"] for f in manifest["figures"]}
    assert {"imprint/glyph", "imprint/random", "imprint/glyph_panels", "imprint/seed_spread"} <= ids
    for fig in manifest["figures"]:
        for f in fig["files"]:
            assert (root / f).is_file() and (root / f).stat().st_size > 0, f
    html = [f for fig in manifest["figures"] for f in fig["files"] if f.endswith(".html")]
    assert len(html) == 2 and "plotly" in (root / html[0]).read_text()[:200000].lower()

    second = repo_copy.dvc("repro", *STAGES)
    text = second.stdout + second.stderr
    assert "up to date" in text or "didn't change" in text, text
    assert "Running stage" not in text, text

    # an edit under an inactive profile reruns nothing; an edit of a figure module only the renders
    repo_copy.set_params({"imprint": {"profiles": {"paper": {"epochs": 11}, "gpu_medium": {"lr": 0.5}}}})
    assert _stale(repo_copy) == set()
    figures_py = root / "pipeline/studies/imprint/figures.py"
    figures_original = figures_py.read_text()
    figures_py.write_text(figures_original + "# a comment\n")
    renders = {"imprint_render@glyph", "imprint_render@random", "imprint_render@seed_spread"}
    assert _stale(repo_copy) == renders
    # bookkeeping (pipeline.graph.BOOKKEEPING) reruns nothing; the study's training code reruns its training
    books = bookkeeping_files()
    assert {"pipeline/tracking/sync.py", "pipeline/plan.py", "pipeline/executor.py"} <= books
    for rel in books:
        assert (root / rel).is_file(), rel
        with open(root / rel, "a") as fh:
            fh.write("# a comment\n")
    assert _stale(repo_copy) == renders
    train_py = root / "pipeline/studies/imprint/train.py"
    original = train_py.read_text()
    train_py.write_text(original + "# a comment\n")
    trains = {s for s in committed(root) if s.startswith("imprint_train@")}
    assert trains and trains <= _stale(repo_copy)
    train_py.write_text(original)
    figures_py.write_text(figures_original)
    assert _stale(repo_copy) == set()  # with every bookkeeping file still edited: nothing to rerun

    before = _snapshot(root)
    repo_copy.set_params({"profile": "nonsense"}, regenerate=False)
    bad = repo_copy.dvc("repro", *STAGES, check=False)
    text = bad.stdout + bad.stderr
    assert bad.returncode != 0
    assert "profile = 'nonsense'" in text and "'smoke', 'gpu_medium', 'paper'" in text, text
    assert _snapshot(root) == before  # nothing produced earlier was deleted or rewritten

    assert CHROMIUM, "the gallery check needs chromium, which `make setup` installs"
    _check_gallery(root, manifest)


def _stale(repo_copy) -> set[str]:
    """Stages of the imprint slice that `dvc status` reports as changed."""
    out = json.loads(repo_copy.dvc("status", "--json", *STAGES).stdout or "{}")
    return {key.rsplit(":", 1)[-1] for key in out}


def _check_gallery(root: Path, manifest: dict) -> None:
    """The gallery loads in headless Chromium and shows every PNG of the manifest."""
    page = root / "reports/index.html"
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                           "--allow-file-access-from-files", "--virtual-time-budget=5000", "--dump-dom",
                           page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert "trainscape: figures" in dom
    for fig in manifest["figures"]:
        assert f"id=\"{fig['id']}\"" in dom, fig["id"]
        pngs = [f for f in fig["files"] if f.endswith(".png")]
        if pngs:
            assert f"../{pngs[0]}" in dom
            assert (page.parent / f"../{pngs[0]}").resolve().is_file()
