"""`python -m stages.report [study ...]`: the gallery and manifest over the studies' render units.

The `report` stage of dvc.yaml passes no study: every study of params.yaml. Naming studies builds a
gallery of just those (e.g. in a test that renders one study)."""

from __future__ import annotations

import sys

from pipeline.config import ConfigError, load_params
from pipeline.io import read_json, write_bytes, write_json
from pipeline.paths import repo_root
from pipeline.report import build_manifest, gallery_html
from pipeline.stage import sidecar_path, study_steps


def main(studies: list[str]) -> int:
    try:
        params = load_params()
        for study in studies:
            params.study(study)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sidecars = []
    for study, cfg in params.studies.items():
        if studies and study not in studies:
            continue
        for unit in study_steps(study).units(cfg, "render"):
            sidecars.append(read_json(sidecar_path(study, unit)))
    manifest = build_manifest(sidecars)
    out = repo_root() / "reports"
    write_json(out / "manifest.json", manifest)
    write_bytes(out / "index.html", gallery_html(manifest).encode())
    print(f"[report] {len(manifest['figures'])} figures -> reports/index.html, reports/manifest.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
