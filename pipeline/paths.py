"""Every path derives from the repository root (``DVC_ROOT`` inside DVC experiments)."""

from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path:
    """The workspace root: ``TRAINSCAPE_ROOT``, else the folder above this package.

    Outputs always go to the workspace the code runs in (for queued ``dvc exp`` runs, a temporary
    copy); only the MLflow store follows ``DVC_ROOT`` to the real repository (see tracking).
    """
    if os.environ.get("TRAINSCAPE_ROOT"):
        return Path(os.environ["TRAINSCAPE_ROOT"]).resolve()
    return Path(__file__).resolve().parent.parent


def store_root() -> Path:
    """Where the MLflow store lives: ``DVC_ROOT`` (the real repository, also for queued experiments)."""
    return Path(os.environ["DVC_ROOT"]).resolve() if os.environ.get("DVC_ROOT") else repo_root()


def data_dir(dataset: str) -> Path:
    return repo_root() / "artifacts" / "data" / dataset


def stage_name(study: str, kind: str, unit: str) -> str:
    """``<study>_<kind>@<unit>``: the DVC stage, its MLflow run, the ``dvc.stage`` tag and the sidecar's
    ``stage``; its folder is :func:`study_dir` (train, extract) or ``figures_dir(study)/unit`` (render)."""
    return f"{study}_{kind}@{unit}"


STUDY_DVC_DIR = "graph"  # graph/<study>/dvc.yaml, with DVC's dvc.lock beside it


def dvc_file(study: str | None) -> str:
    """The ``dvc.yaml`` holding a study's stages (``None``: the framework's stages, at the root).

    One file per study, because DVC rewrites a stage's whole ``dvc.lock`` after the stage runs (a
    YAML round trip): with every stage in one lock that was a third of a fresh smoke build."""
    return "dvc.yaml" if study is None else f"{STUDY_DVC_DIR}/{study}/dvc.yaml"


def dvc_target(study: str, stage: str) -> str:
    """What ``dvc repro`` / ``dvc status`` take for a study's stage (or ``foreach`` group)."""
    return f"{dvc_file(study)}:{stage}"


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
