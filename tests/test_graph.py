"""The generated pipeline graph: current, exact code deps, params of the active profile only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from pipeline import graph, registry
from pipeline.config import PROFILES, load_params, params_file, parse_params, read_tree
from tests.conftest import ROOT

WRITERS = {"pipeline.io", "pipeline.paths", "pipeline.stage", "pipeline.writer", "pipeline.tracking",
           "pipeline.provenance", "pipeline.registry", "pipeline.graph", "pipeline.gallery"}  # packages: all of them


def test_committed_dvc_yaml_files_are_what_make_dag_writes():
    params = load_params(ROOT)
    wanted = graph.render_files(params)
    units = {graph.dvc_file(n, stage.kind, u) for n in registry.names() for stage in registry.load(n).stages
             for u in stage.units(registry.config(registry.load(n), params))}
    assert set(wanted) == {"dvc.yaml", *units}
    for path, text in wanted.items():
        assert (ROOT / path).read_text() == text, f"{path} is stale: run `make dag` and commit it"
    assert graph.stale_files(ROOT, wanted) == []


def _committed() -> dict:
    """Every stage of the committed dvc.yaml files, by DVC name."""
    return graph.committed(ROOT)


def _deps(stage: str) -> set[str]:
    return set(_committed()[stage]["deps"])


def test_each_unit_has_its_own_file_run_from_the_root():
    """A unit's stage sits in graph/<study>/<kind>/<unit>/dvc.yaml (its dvc.lock its own), run from the root,
    named <study>_<kind>@<unit> like its MLflow run and metrics file."""
    params = load_params(ROOT)
    for name in registry.names():
        study = registry.load(name)
        for stage in study.stages:
            for unit in stage.units(registry.config(study, params)):
                body = yaml.safe_load((ROOT / graph.dvc_file(name, stage.kind, unit)).read_text())["stages"]
                assert body == {f"{name}_{stage.kind}": {"foreach": [unit], "do": body[f"{name}_{stage.kind}"]["do"]}}
                do = body[f"{name}_{stage.kind}"]["do"]
                assert do["wdir"] == "../../../.." and f" {name} {unit} " in do["cmd"] and "${" not in str(do)
        assert graph.target(f"{name}_render@x") == f"graph/{name}/render/x/dvc.yaml:{name}_render@x"
        assert graph.target(f"{name}_render") == f"graph/{name}/render"  # a stage: its folder, with -R
    assert set(yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]) == {"download", "claims", "gallery"}
    assert graph.target("gallery") == "gallery" and graph.study_of("download@mnist") is None


def test_no_stage_lists_a_dep_or_a_params_key_twice():
    """Each stage lists exactly what it reads, each once: no padded foreach fields."""
    for name, stage in _committed().items():
        deps = stage.get("do", stage)["deps"]
        assert len(deps) == len(set(deps)), name
        for entry in stage.get("do", stage).get("params", []):
            keys = next(iter(entry.values())) if isinstance(entry, dict) else [entry]
            assert len(keys) == len(set(keys)), name


def test_make_dag_removes_the_file_of_a_unit_that_is_gone(tmp_path):
    wanted = {"dvc.yaml": "", "graph/s/train/kept/dvc.yaml": ""}
    (tmp_path / "dvc.yaml").write_text(graph.GENERATED)
    for name, text in {"kept": graph.GENERATED, "gone": graph.GENERATED, "hand": "stages: {}\n"}.items():
        (tmp_path / "graph" / "s" / "train" / name).mkdir(parents=True)
        (tmp_path / "graph" / "s" / "train" / name / "dvc.yaml").write_text(text)
    assert graph.stale_files(tmp_path, wanted) == ["graph/s/train/gone/dvc.yaml"]  # never a hand-written file


def test_code_deps_split_training_from_figures():
    train, render = _deps("imprint_train@glyph-adam"), _deps("imprint_render@glyph")
    assert {"pipeline/studies/imprint/train.py", "pipeline/studies/imprint/training.py",
            "pipeline/studies/imprint/muon.py", "pipeline/studies/imprint/glyph.py", "pipeline/stage.py",
            "pipeline/config.py", "pipeline/writer/__init__.py", "pipeline/io.py", "stages/train.py"} <= train
    assert not {"pipeline/studies/imprint/figures.py", "pipeline/plotting.py", "pipeline/writer/figures.py"} & train
    assert {"pipeline/studies/imprint/figures.py", "pipeline/plotting.py", "pipeline/writer/figures.py",
            "stages/render.py"} <= render
    assert not {"pipeline/studies/imprint/training.py", "pipeline/studies/imprint/muon.py"} & render
    for deps in (train, render):
        foreign = [d for d in deps if d.startswith("pipeline/studies/") and "/imprint/" not in d]
        assert foreign == ["pipeline/studies/__init__.py"], "a stage depends on another study's code"


def test_closure_follows_from_imports_and_parent_packages():
    mods = graph.closure("pipeline.studies.imprint.train")
    assert {"pipeline", "pipeline.studies", "pipeline.studies.imprint", "pipeline.studies.imprint.glyph",
            "pipeline.contract", "pipeline.data", "pipeline.tvcompat"} <= mods
    assert "pipeline.studies.imprint.figures" not in mods


@pytest.mark.parametrize("profile", PROFILES)
def test_params_deps_name_only_the_active_profile(profile):
    raw = read_tree(ROOT)
    params = parse_params({**raw, "profile": profile})
    text = yaml.safe_dump(graph.stages(params))
    others = [p for p in PROFILES if p != profile]
    for other in others:
        assert f".profiles.{other}" not in text, f"a stage lists a key of inactive profile {other}"
    for name, stage in graph.stages(params).items():
        do = stage.get("do", stage)
        assert f"--profile {profile}" in do["cmd"] or name in ("download", "gallery")


def test_every_listed_param_exists_in_the_file_dvc_reads_it_from():
    """A key DVC cannot find in its file stops `dvc repro`; and each study's keys come from its own file."""
    stages = _committed()
    files: dict[str, dict] = {}

    def exists(file: str, key: str) -> bool:
        if file not in files:
            files[file] = yaml.safe_load((ROOT / file).read_text())
        node = files[file]
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    read_from = set()
    for name, stage in stages.items():
        do = stage.get("do", stage)
        for entry in do.get("params", []):
            file, listed = next(iter(entry.items())) if isinstance(entry, dict) else ("params.yaml", [entry])
            read_from.add(file)
            for key in listed:
                keys = {key.replace("${item}", i) for i in stage["foreach"]} if "${item}" in key else {key}
                assert all(exists(file, k) and params_file(k) == file for k in keys), f"{name}: {file} {keys}"
    assert read_from == {"params.yaml", *(f"params/{n}.yaml" for n in registry.names())}


def _project_imports(path: Path) -> list[tuple[str, bool]]:
    """(module, at top level) for every import of a project module in ``path``."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            if name.split(".")[0] in graph.PACKAGES:
                out.append((name, id(node) in top))
    return out


SOURCES = sorted(p for d in ("pipeline", "stages") for p in (ROOT / d).rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_project_imports_are_top_level(path):
    """The graph reads imports statically; one inside a function may not run, making a dep a lie."""
    inner = [m for m, top in _project_imports(path) if not top]
    assert not inner, f"{path.relative_to(ROOT)} imports {inner} inside a function"


STUDY_FILES = sorted((ROOT / "pipeline/studies").rglob("*.py"))


@pytest.mark.parametrize("path", STUDY_FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_studies_reach_neither_the_writers_nor_other_studies(path):
    rel = path.relative_to(ROOT / "pipeline/studies").parts
    own = "pipeline.studies." + rel[0]  # a study's folder (mupc's engine is shared by the mupc studies)
    for mod, _ in _project_imports(path):
        assert mod not in WRITERS and not any(mod.startswith(w + ".") for w in WRITERS), f"{path}: {mod}"
        if mod.startswith("pipeline.studies."):
            assert mod == own or mod.startswith(own + "."), f"{path} imports another study: {mod}"


def test_every_study_has_a_params_section_and_stages():
    raw = read_tree(ROOT)
    stages = _committed()
    for name in registry.names():
        assert name in raw
        for stage in registry.load(name).stages:
            assert any(s.startswith(f"{name}_{stage.kind}@") for s in stages)
    parse_params(raw, studies=registry.names())  # no section without a study


def test_no_stage_lists_a_bookkeeping_module_and_every_stage_lists_its_study_code():
    """An edit to the journal, run records, plan, executor, progress bars or warm host reruns nothing (they change no
    output); the modules that write outputs stay deps of every stage, and a study's own code stays a dep of its
    stages."""
    books = graph.bookkeeping_files()
    tracking = {f"pipeline/tracking/{m}.py" for m in ("__init__", "journal", "records", "store", "sync", "tracker")}
    assert books == {*tracking, "pipeline/plan.py", "pipeline/executor.py", "pipeline/progress.py", "pipeline/warm.py"}
    stages = graph.committed(ROOT)
    for name, stage in stages.items():
        deps = set(stage.get("deps") or stage["do"]["deps"])
        assert not deps & books, name
        if graph.study_of(name):
            assert {"pipeline/writer/__init__.py", "pipeline/stage.py", "pipeline/provenance.py"} <= deps, name
            study = graph.study_of(name)
            pkg = "pipeline/studies/mupc" if study.startswith("mupc") else f"pipeline/studies/{study}"
            assert any(d.startswith(pkg + "/") for d in deps), name
