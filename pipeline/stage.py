"""The runner: one unit of one study's stage, from validated params to written results.

``python -m stages.<kind> <study> <unit> --profile <p>`` (the command ``dvc.yaml`` holds) comes
here. Everything that can be wrong with the input is checked before any compute: the profile
``dvc.yaml`` was generated for, the study's section resolved for that profile, the unit. Then the
study's function computes and returns an :class:`~pipeline.contract.Output`, and
:mod:`pipeline.writer` writes it with provenance and MLflow records.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline import device as devices
from pipeline import plan as planning
from pipeline import progress, registry
from pipeline.config import (
    ConfigError,
    Params,
    figure_workers_setting,
    flatten,
    load_params,
    params_file,
    params_hash,
)
from pipeline.contract import Context, Output, Stage, Study
from pipeline.declared import DeclaredView, declared_reader, key_paths
from pipeline.executor import ClusterLostError, executor_name, mapper
from pipeline.io import WriteError
from pipeline.paths import dvc_target, stage_name, study_dir
from pipeline.provenance import MissingInputError, stage_provenance
from pipeline.tracking import Tracker, dataset_inputs, tracking_mode
from pipeline.writer import unit_reader, write_part, write_unit


@dataclass
class Prepared:
    """A unit checked and ready to run."""

    params: Params
    study: Study
    stage: Stage
    cfg: Any
    unit: str
    fn: Callable[[Context, str], Any]
    folder: Path  # where its outputs go: artifacts/<study>/<kind>/<unit>
    executor: str = "local"
    device: str = "cpu"
    precision: str | None = None  # how its float32 products compute on its device (None: torch's defaults)

    @property
    def name(self) -> str:
        return stage_name(self.study.name, self.stage.kind, self.unit)


def prepare(kind: str, study_name: str, unit: str, profile: str | None = None,
            params: Params | None = None) -> Prepared:
    """Validate everything a stage needs; raise :class:`ConfigError` before any compute."""
    params = params or load_params()
    tracking_mode()  # a bad TRAINSCAPE_TRACKING stops the stage here, before any compute
    if kind == "render":
        figure_workers_setting()  # so does a bad TRAINSCAPE_FIGURE_WORKERS
    if profile is not None and profile != params.profile:
        raise ConfigError(f"params.yaml: profile = {params.profile!r} is not allowed here; allowed: {profile!r}, "
                          f"the profile dvc.yaml was generated for (switch with `make profile P={params.profile}`)")
    study = registry.load(study_name)
    stage = study.stage(kind)
    if stage is None:
        raise ConfigError(f"study {study_name!r} has no {kind} stage; it has "
                          f"{[f.kind for f in study.stages]}")
    cfg = registry.config(study, params)
    units = list(stage.units(cfg))
    if unit not in units:
        raise ConfigError(f"{params_file(study_name)}: {study_name} has no {kind} unit {unit!r} under profile "
                          f"{params.profile!r}; allowed: {units}")
    for src_kind, src_unit in stage.reads(cfg, unit):  # every declared input exists before any compute
        meta = study_dir(study_name, src_kind, src_unit) / "meta.json"
        if not meta.exists():
            target = dvc_target(study_name, src_kind, src_unit)
            raise MissingInputError(f"{study_name}: {src_kind} unit {src_unit!r} has not been built "
                                    f"({meta} is missing); run `dvc repro {target}`")
    fn = getattr(importlib.import_module(stage.entry), stage.function(cfg, unit))
    # after the entry's import: torch is loaded exactly when the stage's code uses it
    device = devices.resolve()
    return Prepared(params, study, stage, cfg, unit, fn, study_dir(study_name, kind, unit), executor_name(),
                    device, stage.precision(cfg, unit, device))


RenderWriter = Callable[..., Any]


def device_record(p: Prepared) -> dict[str, Any]:
    """Set the unit's declared float32 matmul precision on its device, then describe the device: the
    record (``meta.json``, MLflow tags) says what the unit computes in, not torch's defaults."""
    return devices.record(p.device, p.precision)


@dataclass
class Started:
    """A unit about to compute (:func:`begin`): its tags, provenance and device record."""

    name: str  # the stage: its DVC stage, MLflow run and artifact folder share it
    tags: dict[str, str]
    provenance: dict[str, Any]
    data_sha256: dict[str, str]
    params: dict[str, Any]  # the resolved section, flat, as MLflow's params
    hardware: dict[str, Any] | None
    bars: Callable[..., Any]  # the unit's progress bars (Context.progress)
    clock: float = field(default_factory=time.time)


@dataclass
class Ran:
    """What the study returned and when its code ran (:func:`run_unit`; the times are bookkeeping)."""

    final: Output
    first_line: float
    last_line: float
    study_seconds: float


def execute(p: Prepared, render_writer: RenderWriter | None = None) -> Output:
    """Run a prepared unit (:func:`prepare`): begin, context, run, write, record; returns the final output.

    Render units pass :func:`pipeline.writer.figures.write_render` (only they load the plotting code)."""
    started = begin(p)
    tracking = p.params.tracking
    with Tracker(p.study.name, started.name, started.tags, params=started.params, enabled=tracking.enabled,
                 on_error=tracking.on_error, datasets=dataset_inputs(started.data_sha256)) as tracker:
        ctx = context(p, started)
        ran = run_unit(p, ctx, tracker, started)
        write(p, ran.final, tracker, started, render_writer)
        record(ran, tracker, started)
    progress.finished(started.name, started.clock, ran.first_line, ran.last_line, ran.study_seconds)
    return ran.final


def begin(p: Prepared) -> Started:
    """The plan line (a stage estimated above 24 h stops here, before any compute, unless
    TRAINSCAPE_ALLOW_LONG=1), for a training unit the device at its declared precision, then the run's tags,
    the outputs' provenance (commit, params hash, data checksums, device) and the unit's progress bars."""
    name = p.name
    planning.before_stage(p.study, p.stage, p.cfg, p.unit, p.device, lambda msg: print(f"[{name}] {msg}", flush=True))
    hardware = device_record(p) if p.stage.kind == "train" else None
    if hardware:
        print(f"[{name}] {devices.line(hardware)}", flush=True)
    phash, flat = params_hash(p.cfg), {"profile": p.params.profile, **flatten(p.cfg)}
    sums, tags, prov = stage_provenance(study=p.study.name, stage=name, profile=p.params.profile,
                                        params_hash=phash, datasets=tuple(p.stage.datasets(p.cfg, p.unit)),
                                        device=hardware)
    return Started(name, {**tags, "executor": p.executor}, prov, sums, flat, hardware,  # executor: MLflow only
                   progress.bars(name))


def context(p: Prepared, started: Started) -> Context:
    """What the study's function sees: only what its stage declares (what dvc.yaml lists for the unit)."""
    read = unit_reader(p.study.name)
    view = DeclaredView(p.cfg, key_paths(p.stage.keys(p.cfg, p.unit)), where=started.name)
    return Context(study=p.study.name, kind=p.stage.kind, unit=p.unit, profile=p.params.profile, cfg=view,
                   device=p.device, stage=started.name, provenance=started.provenance,
                   reader=declared_reader(read, p.stage.reads(p.cfg, p.unit), started.name),
                   own=lambda name: read(p.stage.kind, p.unit, name, required=False),
                   log=lambda msg: print(f"[{started.name}] {msg}", flush=True), progress=started.bars,
                   mapper=mapper(p.executor))


def run_unit(p: Prepared, ctx: Context, tracker: Tracker, started: Started) -> Ran:
    """The study's function; a resumable unit's parts are written as they come (``write_part``)."""
    first_line = time.time()
    computing = time.perf_counter()
    result = p.fn(ctx, p.unit)
    study_seconds = time.perf_counter() - computing
    final = result if isinstance(result, Output) else None
    while final is None:  # a generator of parts (resumable units), returning the final output
        computing = time.perf_counter()
        try:
            part = next(result)
        except StopIteration as stop:
            final = stop.value or Output()
            break
        finally:
            study_seconds += time.perf_counter() - computing
        if not p.stage.resumable or part.part is None:
            raise TypeError(f"{started.name}: only resumable stages yield parts, each with Output.part set")
        write_part(p.folder, started.name, part, tracker, started.provenance)
    missing = [t for t in p.stage.tables if t not in final.tables]
    if missing:
        raise TypeError(f"{started.name}: the stage declares the tables {missing} but the output has none of them")
    if p.stage.metrics and final.metrics is None:
        raise TypeError(f"{started.name}: the stage declares metrics but the output has none")
    return Ran(final, first_line, time.time(), study_seconds)


def write(p: Prepared, final: Output, tracker: Tracker, started: Started, render_writer: RenderWriter | None) -> None:
    """The unit's outputs: figures and their sidecar (render) or its folder, then its metrics file."""
    metrics = final.metrics if p.stage.metrics else None
    if p.stage.kind != "render":
        write_unit(p.folder, started.name, final, tracker, started.provenance, in_place=p.stage.resumable,
                   metrics=metrics)
    elif render_writer is None:
        raise TypeError(f"{started.name}: a render unit needs the figure writer")
    else:
        render_writer(p.study.name, p.unit, final, tracker, started.provenance, p.params.figures.of(p.params.profile),
                      metrics=metrics)


def record(ran: Ran, tracker: Tracker, started: Started) -> None:
    """The stage's MLflow run: its headline numbers, the study's run metrics and the stage's time."""
    tracker.parent.log_metrics({**headline(ran.final.metrics), **ran.final.run_metrics,
                                "stage_seconds": time.time() - started.clock})


def headline(metrics: Any, prefix: str = "", limit: int = 200) -> dict[str, float]:
    """The numbers of a stage's published metrics as flat MLflow metric keys (``a.b.c``), so the
    runs table and chart view compare stages by them; lists and strings stay in the metrics file."""
    out: dict[str, float] = {}
    if isinstance(metrics, dict):
        for key, value in metrics.items():
            for k, v in headline(value, f"{prefix}{key}.", limit).items():
                if len(out) < limit:
                    out[k] = v
    elif isinstance(metrics, int | float) and metrics == metrics and abs(metrics) != float("inf"):
        out[prefix.rstrip(".")] = float(metrics)
    return {re.sub(r"[^\w.\-/ ]", "_", k): v for k, v in out.items()}


def main(kind: str, argv: list[str] | None = None, render_writer: RenderWriter | None = None,
         checks: Callable[[], Any] | None = None) -> int:
    """Entry of ``stages/<kind>.py``: a process exit code (2 for bad input or a missing input, before
    any compute; 3 for a lost Ray head; :data:`pipeline.progress.WRITE_FAILED` for an output that could not be written).
    ``checks`` validates the stage script's own settings (e.g. the renderer's)."""
    ap = argparse.ArgumentParser(prog=f"python -m stages.{kind}", description=f"run one {kind} unit of a study")
    ap.add_argument("study")
    ap.add_argument("unit")
    ap.add_argument("--profile", help="the profile dvc.yaml was generated for; must match params.yaml")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if checks is not None:
            checks()
        prepared = prepare(kind, args.study, args.unit, args.profile)
    except (ConfigError, MissingInputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        execute(prepared, render_writer)
    except (ConfigError, MissingInputError) as exc:  # a study's own check of its input (e.g. a device param)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except WriteError as exc:  # a full disk: one line, not a traceback; what was written stays
        print(progress.write_failed_line(prepared.name, exc, dvc_target(prepared.study.name, kind, prepared.unit),
                                         prepared.folder if prepared.stage.resumable else None),
              file=sys.stderr, flush=True)
        return progress.WRITE_FAILED
    except ClusterLostError as exc:  # the parts written so far stay; the run record and journal are closed
        print(f"error: {prepared.name}: {exc}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(3)  # not Ray's exit hooks: they wait for the lost head, then abort with a C++ message
    return 0
