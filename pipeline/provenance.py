"""Where an output came from: git commit and dirty flag, params hash, data checksums."""

from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path

from pipeline.io import read_json
from pipeline.paths import data_dir, repo_root


@functools.cache
def git_state() -> tuple[str, bool]:
    """(commit, dirty) of the repository; ('unknown', True) outside git."""
    root = repo_root()
    try:
        # one git process: porcelain v2 with --branch gives the commit ("# branch.oid") and the changes;
        # the dvc.lock files are rewritten by DVC itself while `dvc repro` runs: not a change to the inputs
        out = subprocess.run(["git", "status", "--porcelain=v2", "--branch", "--untracked-files=no", "--", ".",
                              ":(exclude)dvc.lock", ":(exclude,glob)graph/**/dvc.lock"],
                             cwd=root, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown", True
    lines = out.splitlines()
    commit = next((ln.split()[2] for ln in lines if ln.startswith("# branch.oid ")), "unknown")
    return ("unknown" if commit == "(initial)" else commit), any(not ln.startswith("#") for ln in lines)


class MissingInputError(FileNotFoundError):
    """An input a stage declares (a dataset, another unit's output) is not on disk: run what makes it."""


def data_checksums(datasets: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``{'<dataset>/<file>': sha256}`` from each dataset's ``checksums.json`` (written by download).

    ``datasets`` are the ones the unit declares it reads (its DVC deps), so a missing checksum file is
    a missing input, never a figure without its data checksum.
    """
    out: dict[str, str] = {}
    for ds in datasets:
        path = data_dir(ds) / "checksums.json"
        if not path.exists():
            raise MissingInputError(f"dataset {ds!r} is not downloaded ({path} is missing); "
                               f"run `dvc repro download@{ds}`")
        meta = read_json(path)
        for name, sums in sorted(meta["files"].items()):
            out[f"{ds}/{name}"] = sums["sha256"]
    return out


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
