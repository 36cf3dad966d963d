"""The stage contract shared by every study.

A study is a folder ``pipeline/studies/<study>/`` with ``config.py`` (its params schema, ``SCHEMA``)
and ``steps.py``, which exposes:

* ``datasets(cfg) -> tuple[str, ...]`` — datasets the study reads (for provenance);
* ``units(cfg, kind) -> list[str]`` — the keys of each stage family (``train``, ``extract``,
  ``render``), exactly the ``foreach`` keys of ``dvc.yaml``;
* ``train(ctx, unit)``, optionally ``extract(ctx, unit)``, and ``render(ctx, unit) -> list[Figure]``.

``stages/<kind>.py`` are thin CLIs over :func:`run_stage`, which validates ``params.yaml`` and the
unit *before any compute*, opens the MLflow parent run, calls the study, and records provenance.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from pipeline.config import ConfigError, Params, flatten, load_params
from pipeline.io import read_json, write_json
from pipeline.paths import figures_dir, rel, study_dir
from pipeline.provenance import data_checksums, git_state
from pipeline.tracking import Tracker, provenance_tags

KINDS = ("train", "extract", "render")


@dataclass
class Figure:
    """One published figure: its files and where it came from."""

    id: str  # unique within the study, e.g. "glyph_init"; the manifest prefixes the study
    files: list[Path]
    caption: str
    seed_figure: str  # which figure of the seed notebook it reproduces
    sources: list[tuple[str, str]] = field(default_factory=list)  # (kind, unit) it read
    family: str | None = None  # e.g. "F1" for mupc
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class StageContext:
    study: str
    kind: str
    unit: str
    params: Params
    cfg: Any
    tracker: Tracker
    datasets: tuple[str, ...]
    data_sha256: dict[str, str]

    @property
    def profile(self) -> str:
        return self.params.profile

    @property
    def stage(self) -> str:
        return stage_name(self.study, self.kind, self.unit)

    @property
    def out_dir(self) -> Path:
        return study_dir(self.study, self.kind, self.unit)

    @property
    def device(self) -> str:
        """``TRAINSCAPE_DEVICE`` if set, else CUDA when available, else CPU."""
        if os.environ.get("TRAINSCAPE_DEVICE"):
            return os.environ["TRAINSCAPE_DEVICE"]
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def unit_dir(self, kind: str, unit: str) -> Path:
        return study_dir(self.study, kind, unit)

    def provenance(self) -> dict[str, Any]:
        commit, dirty = git_state()
        return {
            "stage": self.stage,
            "study": self.study,
            "profile": self.profile,
            "git_commit": commit,
            "git_dirty": dirty,
            "params_hash": self.params.section_hash(self.study),
            "data_sha256": self.data_sha256,
            "mlflow_run_id": self.tracker.parent.run_id,
            "mlflow_experiment": self.study,
            "mlflow_experiment_id": self.tracker.experiment_id,
        }

    def write_meta(self, folder: Path | None = None, **extra: Any) -> Path:
        """``meta.json`` beside a unit's outputs: provenance plus ``extra`` (child run ids...)."""
        return write_json((folder or self.out_dir) / "meta.json", {**self.provenance(), **extra})

    def read_meta(self, kind: str, unit: str) -> dict[str, Any]:
        return read_json(self.unit_dir(kind, unit) / "meta.json")

    def log(self, msg: str) -> None:
        print(f"[{self.stage}] {msg}", flush=True)


def stage_name(study: str, kind: str, unit: str) -> str:
    """The DVC stage address (``DVC_STAGE``, set by DVC) or ``<study>_<kind>@<unit>`` outside DVC."""
    return os.environ.get("DVC_STAGE") or f"{study}_{kind}@{unit}"


def study_steps(study: str) -> ModuleType:
    return importlib.import_module(f"pipeline.studies.{study}.steps")


def prepare(study: str, kind: str, unit: str, params: Params | None = None) -> tuple[Params, Any, ModuleType]:
    """Validate everything a stage needs; raise ConfigError before any compute."""
    params = params or load_params()
    cfg = params.study(study)
    steps = study_steps(study)
    allowed = steps.units(cfg, kind)
    if unit not in allowed:
        raise ConfigError(f"params.yaml: {study} has no {kind} unit {unit!r}; allowed: {allowed}")
    return params, cfg, steps


def run_stage(study: str, kind: str, unit: str) -> int:
    """Entry point of ``stages/<kind>.py``: returns a process exit code."""
    try:
        params, cfg, steps = prepare(study, kind, unit)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    datasets = tuple(steps.datasets(cfg))
    sums = data_checksums(datasets)
    name = stage_name(study, kind, unit)
    tags = provenance_tags(study=study, stage=name, profile=params.profile,
                           params_hash=params.section_hash(study), data_sha256=sums)
    own = f"profiles.{params.profile}."
    flat = {k: v for k, v in flatten(params.raw.get(study, {})).items()
            if not k.startswith("profiles.") or k.startswith(own)}
    start = time.time()
    with Tracker(study, name, tags, params={"profile": params.profile, **flat},
                 enabled=params.tracking.enabled, on_error=params.tracking.on_error) as tracker:
        ctx = StageContext(study, kind, unit, params, cfg, tracker, datasets, sums)
        fn = getattr(steps, kind)
        result = fn(ctx, unit)
        if kind == "render":
            record_figures(ctx, result or [])
        tracker.parent.log_metrics({"stage_seconds": time.time() - start})
    ctx.log(f"done in {time.time() - start:.1f} s")
    return 0


def record_figures(ctx: StageContext, figures: list[Figure]) -> Path:
    """Log figure files to the render run and write the sidecar the report stage reads."""
    entries = []
    for fig in figures:
        sources = []
        for kind, unit in fig.sources:
            meta = ctx.read_meta(kind, unit)
            sources.append({"stage": meta.get("stage"), "mlflow_run_id": meta.get("mlflow_run_id"),
                            "children": meta.get("mlflow_children", {})})
        for f in fig.files:
            ctx.tracker.parent.log_artifact(f, f"figures/{fig.id}")
        entries.append({
            "id": f"{ctx.study}/{fig.id}",
            "study": ctx.study,
            "family": fig.family,
            "files": [rel(f) for f in fig.files],
            "caption": fig.caption,
            "seed_figure": fig.seed_figure,
            "sources": sources,
            **{k: v for k, v in ctx.provenance().items() if k not in ("stage", "study")},
            "render_stage": ctx.stage,
            **fig.extra,
        })
    return write_json(sidecar_path(ctx.study, ctx.unit), {"figures": entries})


def sidecar_path(study: str, render_unit: str) -> Path:
    return figures_dir(study) / f"{render_unit}.figures.json"


def main(kind: str, argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(f"usage: python -m stages.{kind} <study> <unit>", file=sys.stderr)
        return 2
    return run_stage(argv[0], kind, argv[1])
