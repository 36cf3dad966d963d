"""Every path derives from the repository root (``DVC_ROOT`` inside DVC experiments)."""

from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path:
    """The repository root: ``TRAINSCAPE_ROOT``, else ``DVC_ROOT``, else the folder above this package."""
    for var in ("TRAINSCAPE_ROOT", "DVC_ROOT"):
        if os.environ.get(var):
            return Path(os.environ[var]).resolve()
    return Path(__file__).resolve().parent.parent


def data_dir(dataset: str) -> Path:
    return repo_root() / "artifacts" / "data" / dataset


def study_dir(study: str, kind: str, unit: str) -> Path:
    """``artifacts/<study>/<kind>/<unit>``: one stage's own output folder."""
    return repo_root() / "artifacts" / study / kind / unit


def figures_dir(study: str) -> Path:
    return repo_root() / "reports" / "figures" / study


def metrics_file(study: str) -> Path:
    return repo_root() / "reports" / "metrics" / f"{study}.json"


def rel(path: Path) -> str:
    """A path relative to the repository root, with forward slashes (for manifests)."""
    return Path(path).resolve().relative_to(repo_root()).as_posix()
