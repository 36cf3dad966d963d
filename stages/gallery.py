"""`python -m stages.gallery [study ...]`: the gallery and manifest over the studies' render units.

It first replays the stages' tracking journals into MLflow (:func:`pipeline.tracking.sync`), so the
manifest and the gallery link the MLflow runs themselves.

The `gallery` stage of dvc.yaml passes no study: every declared study. Naming studies builds a
gallery of just those (e.g. in a test that renders one study)."""

from __future__ import annotations

import csv
import sys
from typing import Any

from pipeline import registry
from pipeline.config import ConfigError, Params, load_params
from pipeline.gallery import build_manifest, gallery_html, link_runs
from pipeline.io import WriteError, read_json, write_bytes, write_json
from pipeline.paths import rel, repo_root, sidecar_path, stage_name, study_dir
from pipeline.progress import WRITE_FAILED, write_failed_line
from pipeline.tracking import run_map, sync, tracking_mode
from pipeline.tracking.records import with_runs
from stages import finish


def tables(names: list[str], params: Params) -> list[dict[str, Any]]:
    """The per-run tables the studies declare (:attr:`Stage.tables`): file, stage, rows and columns."""
    out = []
    for name in names:
        study = registry.load(name)
        cfg = registry.config(study, params)
        for stage in study.stages:
            for unit in stage.units(cfg) if stage.tables else ():
                for table in stage.tables:
                    path = study_dir(name, stage.kind, unit) / table
                    if not path.exists():
                        continue
                    with open(path, newline="") as fh:
                        lines = list(csv.reader(fh))
                    header, rows = (lines[0], lines[1:]) if lines else ([], [])
                    out.append({"id": f"{name}/{unit}/{table}", "study": name,
                                "stage": stage_name(name, stage.kind, unit), "file": rel(path),
                                "rows": len(rows), "columns": header})
    return out


def main(studies: list[str]) -> int:
    try:
        params = load_params()
        names = studies or registry.names()
        sidecars = []
        for name in names:
            study = registry.load(name)
            render = study.stage("render")
            if render is None:
                continue
            for unit in render.units(registry.config(study, params)):
                sidecars.append(with_runs(read_json(sidecar_path(name, unit))))
        if params.tracking.enabled and tracking_mode() != "off":
            print(sync(on_error=params.tracking.on_error).line())
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    manifest = {**link_runs(build_manifest(sidecars), run_map()), "tables": tables(names, params)}
    out = repo_root() / "reports"
    ledger_file = out / "claims.json"  # the claims stage's ledger, shown on top when present
    ledger = read_json(ledger_file) if ledger_file.exists() and not studies else None
    try:
        write_json(out / "manifest.json", manifest)
        write_bytes(out / "index.html", gallery_html(manifest, ledger=ledger).encode())
    except WriteError as exc:  # a full disk: one line, not a traceback
        print(write_failed_line("gallery", exc, "dvc.yaml:gallery", None), file=sys.stderr)
        return WRITE_FAILED
    print(f"[gallery] {len(manifest['figures'])} figures -> reports/index.html, reports/manifest.json")
    return 0


if __name__ == "__main__":
    sys.exit(finish(main(sys.argv[1:])))
