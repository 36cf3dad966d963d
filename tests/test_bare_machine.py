"""``pytest -m gpu`` on a bare GPU machine (CUDA torch and the numeric stack; no MLflow, Ray, DVC, Plotly or
Kaleido) collects every GPU test: modules that need the missing packages are skipped, not collection errors."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ABSENT = ("mlflow", "ray", "dvc", "plotly", "kaleido")

# Put first on PYTHONPATH: the packages above raise ModuleNotFoundError as if not installed; then any
# sitecustomize this one shadows runs as usual.
SITECUSTOMIZE = f'''
import importlib.machinery, importlib.util, os, sys

class _Absent:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in {ABSENT!r}:
            raise ModuleNotFoundError(f"No module named {{top!r}}", name=top)
        return None

sys.meta_path.insert(0, _Absent())
_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or os.curdir) != _here])
if _spec is not None:
    _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
'''


def _gpu_files() -> set[str]:
    """Test files that carry the gpu mark, read from the source."""
    mark = "pytest.mark." + "gpu"  # spelled apart so this file does not count itself
    return {p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("*.py")
            if p.resolve() != Path(__file__).resolve() and mark in p.read_text()}


def test_gpu_tests_collect_without_mlflow_ray_dvc_plotly_kaleido(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # no outer xdist worker, addopts
    bare = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "--collect-only", "-q", "-rs", "-p", "no:cacheprovider",
           "-p", "no:xdist"]
    gpu_files = sorted(_gpu_files())
    # the whole suite without the packages, against the marked files alone with everything installed
    procs = {"bare": subprocess.Popen(cmd, cwd=ROOT, env=bare, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True),
             "full": subprocess.Popen(cmd + gpu_files, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True)}
    out = {name: p.communicate(timeout=300)[0] for name, p in procs.items()}
    for name, p in procs.items():
        assert p.returncode == 0, f"{name}: exit {p.returncode}\n{out[name][-4000:]}"
    ids = {name: re.findall(r"^(tests/\S+::\S+)$", text, re.M) for name, text in out.items()}
    assert ids["bare"] == ids["full"] and ids["bare"]
    assert {i.partition("::")[0] for i in ids["bare"]} == set(gpu_files), "a marked file without gpu tests?"
    assert "could not import" in out["bare"]  # the packages were hidden indeed
