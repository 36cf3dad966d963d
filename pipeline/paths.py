"""Every path derives from the repository root (``DVC_ROOT`` inside DVC experiments)."""

from __future__ import annotations

import functools
import os
from pathlib import Path


def repo_root() -> Path:
    """The workspace root: ``TRAINSCAPE_ROOT``, else the folder above this package.

    Outputs always go to the workspace the code runs in (for queued ``dvc exp`` runs, a temporary
    copy); only the MLflow store follows ``DVC_ROOT`` to the real repository (see tracking).
    """
    env = os.environ.get("TRAINSCAPE_ROOT") or None
    return _resolved_root(env, None if env is None or os.path.isabs(env) else os.getcwd())


@functools.lru_cache(maxsize=16)
def _resolved_root(env: str | None, cwd: str | None) -> Path:
    """:func:`repo_root` resolved once per setting (graphs and manifests ask for it thousands of times)."""
    return Path(env).resolve() if env else Path(__file__).resolve().parent.parent


def store_root() -> Path:
    """Where the MLflow store lives: ``DVC_ROOT`` (the real repository, also for queued experiments)."""
    return Path(os.environ["DVC_ROOT"]).resolve() if os.environ.get("DVC_ROOT") else repo_root()


def data_dir(dataset: str) -> Path:
    return repo_root() / "artifacts" / "data" / dataset


def stage_name(study: str, kind: str, unit: str) -> str:
    """``<study>_<kind>@<unit>``: the DVC stage, its MLflow run, the ``dvc.stage`` tag and the sidecar's
    ``stage``; its folder is :func:`study_dir` (train, extract) or ``figures_dir(study)/unit`` (render)."""
    return f"{study}_{kind}@{unit}"


STUDY_DVC_DIR = "graph"  # graph/<study>/<kind>/<unit>/dvc.yaml, with DVC's dvc.lock beside it


def dvc_dir(study: str, kind: str | None = None, unit: str | None = None) -> str:
    """``graph/<study>[/<kind>[/<unit>]]``: where a study's (a stage's, a unit's) stage files sit."""
    return "/".join([STUDY_DVC_DIR, study, *(p for p in (kind, unit) if p)])


def dvc_file(study: str | None, kind: str | None = None, unit: str | None = None) -> str:
    """The ``dvc.yaml`` holding one unit's stage, ``graph/<study>/<kind>/<unit>/dvc.yaml`` (it mirrors
    ``artifacts/<study>/<kind>/<unit>``); ``None``: the framework's stages, at the root.

    One file per unit, so that each stage lists exactly what it reads (a ``foreach`` over units of
    different shapes had to pad its items) and its ``dvc.lock`` is its own (DVC rewrites a stage's whole
    lock file after the stage runs: with every stage in one lock that was a third of a smoke build)."""
    if study is None:
        return "dvc.yaml"
    if kind is None or unit is None:
        raise ValueError(f"dvc_file({study!r}, {kind!r}, {unit!r}): a study's stage file is one unit's")
    return f"{dvc_dir(study, kind, unit)}/dvc.yaml"


def dvc_target(study: str, kind: str, unit: str) -> str:
    """What ``dvc repro`` / ``dvc status`` take for one unit's stage."""
    return f"{dvc_file(study, kind, unit)}:{stage_name(study, kind, unit)}"


def study_dir(study: str, kind: str, unit: str) -> Path:
    """``artifacts/<study>/<kind>/<unit>``: one stage's own output folder."""
    return repo_root() / "artifacts" / study / kind / unit


def figures_dir(study: str) -> Path:
    return repo_root() / "reports" / "figures" / study


def sidecar_path(study: str, render_unit: str) -> Path:
    """``reports/figures/<study>/<unit>.figures.json``: what a render unit published, for the report."""
    return figures_dir(study) / f"{render_unit}.figures.json"


def metrics_path(stage: str) -> Path:
    """``reports/metrics/<stage>.json``: the metrics a stage publishes, named after the stage."""
    return repo_root() / "reports" / "metrics" / f"{stage}.json"


def rel(path: Path) -> str:
    """A path relative to the repository root, with forward slashes (for manifests)."""
    return Path(path).resolve().relative_to(repo_root()).as_posix()
