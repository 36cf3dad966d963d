"""Where an output came from: git commit and dirty flag, params hash, data checksums; built here alone, as
the provenance an output's ``meta.json`` holds (:func:`output_provenance`) and as the tags every MLflow run
carries (:func:`run_tags`)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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


def output_provenance(*, study: str, stage: str, profile: str, params_hash: str, data_sha256: Mapping[str, str],
                      device: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What a unit's ``meta.json`` (and a render's sidecar) records of its inputs: only what they determine,
    so a rerun with the same code, params and data writes it byte for byte (no run key, no time)."""
    commit, dirty = git_state()
    return {"stage": stage, "study": study, "profile": profile, "git_commit": commit, "git_dirty": dirty,
            "params_hash": params_hash, "data_sha256": dict(data_sha256), "mlflow_experiment": study,
            **({"device": dict(device)} if device else {})}


def run_tags(*, study: str, stage: str, profile: str, params_hash: str,
             data_sha256: Mapping[str, str]) -> dict[str, str]:
    """The tags every MLflow run carries, so a run traces back to commit, params and data."""
    commit, dirty = git_state()
    return {
        "study": study,
        "profile": profile,
        "dvc.stage": stage,
        "dvc.exp_name": os.environ.get("DVC_EXP_NAME", "workspace"),
        "git.commit": commit,
        "git.dirty": str(dirty).lower(),
        "mlflow.source.git.commit": commit,
        "params.hash": params_hash,
        "data.sha256": json.dumps(dict(data_sha256), sort_keys=True),
        # the runs table's Source column: the DVC stage that ran
        "mlflow.source.name": stage,
        "mlflow.source.type": "JOB",
    }


def stage_provenance(*, study: str, stage: str, profile: str, params_hash: str, datasets: tuple[str, ...],
                     device: Mapping[str, Any] | None) -> tuple[dict[str, str], dict[str, str], dict[str, Any]]:
    """A stage's data checksums, its run's tags (with the device it trained on) and its outputs' provenance."""
    sums = data_checksums(datasets)
    tags = run_tags(study=study, stage=stage, profile=profile, params_hash=params_hash, data_sha256=sums)
    if device:  # where a training stage ran and at which float32 matmul precision
        tags.update({f"device.{k}": str(v) for k, v in device.items() if v is not None})
    prov = output_provenance(study=study, stage=stage, profile=profile, params_hash=params_hash, data_sha256=sums,
                             device=device)
    return sums, tags, prov
