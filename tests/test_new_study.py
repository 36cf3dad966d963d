"""Adding a study is one folder plus one params section: `make dag` and `dvc repro` find the rest.

The copy keeps the framework and drops the four studies, so the repro takes seconds; the new study
touches no file of the framework.
"""

from __future__ import annotations

import json
import shutil
import sys
import textwrap

import pytest

# skips, rather than breaks, collection where MLflow is absent (a bare GPU machine's `pytest -m gpu`)
MlflowClient = pytest.importorskip("mlflow.tracking").MlflowClient

FILES = {
    "__init__.py": '''
        """tiny: fit a line to noisy points, one train unit per slope, one figure of all fits."""

        from pipeline.contract import FigureEntry, Stage, Study
        from pipeline.studies.tiny.config import TinyParams


        def figure_table(cfg: TinyParams) -> dict[str, FigureEntry]:
            return {"fits": FigureEntry("render", {"lines": tuple(cfg.slopes)}, ("slopes",))}

        STUDY = Study(
            name="tiny",
            schema=TinyParams,
            stages=(
                Stage("train", entry="pipeline.studies.tiny.train", units=lambda cfg: list(cfg.slopes),
                       params=("points", "seed", "slopes.{unit}")),
                Stage("render", entry="pipeline.studies.tiny.figures", figure_table=figure_table),
            ),
        )
        ''',
    "config.py": '''
        from dataclasses import dataclass

        from pipeline.config import bounded


        @dataclass(frozen=True)
        class TinyParams:
            points: int = bounded(2, 1000)
            seed: int
            slopes: dict[str, float]
        ''',
    "train.py": '''
        import numpy as np

        from pipeline.contract import Context, Output, Run


        def train(ctx: Context, unit: str) -> Output:
            rng = np.random.default_rng(ctx.cfg.seed)
            x = np.linspace(0.0, 1.0, ctx.cfg.points)
            y = ctx.cfg.slopes[unit] * x + 0.01 * rng.normal(size=x.size)
            slope, icpt = np.polyfit(x, y, 1)
            return Output(json={"fit.json": {"slope": float(slope), "intercept": float(icpt)}},
                          arrays={"points.npz": {"x": x, "y": y}},
                          runs=[Run(unit, {"true_slope": ctx.cfg.slopes[unit]}, metrics={"slope": float(slope)})],
                          run_metrics={"slope": float(slope)})
        ''',
    "figures.py": '''
        from pipeline.contract import Context, Figure, Output
        from pipeline.plotting import plt


        def render(ctx: Context, unit: str) -> Output:
            fig, ax = plt.subplots()
            for key in ctx.cfg.slopes:
                pts = ctx.read("train", key, "points.npz")
                ax.plot(pts["x"], pts["y"], label=f"{key}: {ctx.read('train', key, 'fit.json')['slope']:.2f}")
            ax.legend()
            return Output(figures=[Figure("fits", "noisy lines and fitted slopes", "none", mpl=fig,
                                          sources=[("train", k) for k in ctx.cfg.slopes])])
        ''',
}


@pytest.mark.pipeline
def test_a_new_study_needs_only_its_folder_and_params_file(repo_copy, mlflow_uri):
    root = repo_copy.path
    for folder in (root / "pipeline/studies").iterdir():
        if folder.is_dir():
            shutil.rmtree(folder)
    shutil.rmtree(root / "params")
    repo_copy.run("make", "-s", "dag", f"PY={sys.executable}")
    repo_copy.run("git", "add", "-A")
    repo_copy.run("git", "commit", "-q", "-m", "the framework without studies")

    study = root / "pipeline/studies/tiny"
    study.mkdir()
    for name, text in FILES.items():
        (study / name).write_text(textwrap.dedent(text).lstrip())
    (root / "params").mkdir()
    (root / "params/tiny.yaml").write_text("tiny:\n  points: 50\n  seed: 0\n  slopes: {flat: 0.0, steep: 3.0}\n"
                                           "  profiles:\n    paper: {points: 500}\n")
    out = repo_copy.run("make", "-s", "dag", f"PY={sys.executable}")
    assert "4 stages in 4 files for profile 'smoke'" in out.stdout
    units = ("train/flat", "train/steep", "render/fits")
    changed = repo_copy.run("git", "status", "--porcelain", "--untracked-files=all").stdout.split("\n")
    assert sorted(line[3:] for line in changed if line) == sorted([
        "dvc.yaml", "params/tiny.yaml", *(f"pipeline/studies/tiny/{name}" for name in FILES),
        *(f"graph/tiny/{u}/dvc.yaml" for u in units)])

    stages = repo_copy.dvc("stage", "list", "--all", "--name-only").stdout.split()
    assert sorted(stages) == sorted(["gallery", *(f"graph/tiny/{u}/dvc.yaml:tiny_{u.replace('/', '@')}"
                                                 for u in units)])
    repo_copy.dvc("repro")

    fits = {k: json.loads((root / f"artifacts/tiny/train/{k}/fit.json").read_text())["slope"]
            for k in ("flat", "steep")}
    assert fits["flat"] == pytest.approx(0.0, abs=0.05) and fits["steep"] == pytest.approx(3.0, abs=0.05)
    manifest = json.loads((root / "reports/manifest.json").read_text())
    (entry,) = manifest["figures"]
    assert entry["id"] == "tiny/fits" and entry["render_stage"] == "tiny_render@fits"
    assert entry["files"] == ["reports/figures/tiny/fits/fits.png"]  # smoke's figures.formats
    assert [s["stage"] for s in entry["sources"]] == ["tiny_train@flat", "tiny_train@steep"]

    client = MlflowClient(tracking_uri=mlflow_uri)
    exp = client.get_experiment_by_name("tiny")
    runs = client.search_runs([exp.experiment_id], filter_string="tags.`dvc.stage` = 'tiny_train@steep'")
    names = sorted(r.info.run_name for r in runs)
    assert names == ["steep", "tiny_train@steep"], names  # the stage's run and its child
    parent = next(r for r in runs if r.info.run_name == "tiny_train@steep")
    assert parent.data.params["profile"] == "smoke" and parent.data.params["points"] == "50"
    assert not any(k.startswith("profiles") for k in parent.data.params), "only resolved values are logged"
    assert parent.data.metrics["slope"] == pytest.approx(fits["steep"])
    assert entry["mlflow_run_id"] in {r.info.run_id for r in client.search_runs([exp.experiment_id])}

    # what a unit reads is what its family declares: a read beyond it stops the stage and names the declaration
    train = study / "train.py"
    train.write_text(train.read_text().replace("ctx.cfg.slopes[unit] * x", "max(ctx.cfg.slopes.values()) * x"))
    res = repo_copy.run(sys.executable, "-m", "stages.train", "tiny", "flat", "--profile", "smoke", check=False)
    assert res.returncode != 0
    assert "UndeclaredReadError: tiny_train@flat read params key 'slopes.steep', which it does not" in res.stderr
    render = study / "figures.py"
    render.write_text(render.read_text().replace("for key in ctx.cfg.slopes:", "for key in [*ctx.cfg.slopes, 'x']:"))
    res = repo_copy.run(sys.executable, "-m", "stages.render", "tiny", "fits", "--profile", "smoke", check=False)
    assert res.returncode != 0
    assert "read points.npz of train unit 'x', which it does not declare" in res.stderr
