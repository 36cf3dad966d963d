"""A scratch workspace for running real stage commands outside the checkout (``TRAINSCAPE_ROOT``): the params,
the data through a link, and a git history (provenance asks it for the commit)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GIT = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def scratch_workspace(root: Path, data_mirror: Path, edit: Callable[[Path], None] = lambda root: None) -> Path:
    """``root`` with the checkout's params (``edit`` may change them before they are committed) and the data."""
    shutil.copytree(ROOT / "params", root / "params")
    shutil.copy(ROOT / "params.yaml", root / "params.yaml")
    (root / "artifacts").mkdir()
    (root / "artifacts" / "data").symlink_to(data_mirror)
    edit(root)
    for args in (["init", "-q"], ["add", "params", "params.yaml"], ["commit", "-q", "-m", "params"]):
        subprocess.run(["git", *args], cwd=root, check=True, env={**os.environ, **GIT})
    return root
