"""The gallery: ``reports/manifest.json`` and ``reports/index.html`` from the figure sidecars."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

MANIFEST_KEYS = ("id", "study", "files", "params_hash", "git_commit", "mlflow_run_id", "data_sha256",
                 "profile", "seed_figure")


def build_manifest(sidecars: list[dict[str, Any]]) -> dict[str, Any]:
    """Concatenate sidecar entries; every entry must carry the manifest keys; ids are unique."""
    figures: list[dict[str, Any]] = []
    seen: set[str] = set()
    for car in sidecars:
        for entry in car["figures"]:
            missing = [k for k in MANIFEST_KEYS if k not in entry]
            if missing:
                raise ValueError(f"figure {entry.get('id')!r} lacks manifest keys {missing}")
            if entry["id"] in seen:
                raise ValueError(f"figure id {entry['id']!r} appears twice")
            seen.add(entry["id"])
            figures.append(entry)
    return {"figures": figures}


def _run_link(entry: dict[str, Any], ui: str) -> str:
    rid, eid = entry.get("mlflow_run_id"), entry.get("mlflow_experiment_id")
    if not rid:
        return "tracking off"
    href = f"{ui}/#/experiments/{eid}/runs/{rid}" if eid else f"{ui}/#/runs/{rid}"
    return f'<a href="{html.escape(href)}">{html.escape(rid[:12])}</a>'


def gallery_html(manifest: dict[str, Any], *, ui: str = "http://127.0.0.1:5000") -> str:
    """A static page: one card per figure with caption and provenance; paths relative to reports/."""
    esc = html.escape
    by_study: dict[str, list[dict[str, Any]]] = {}
    for entry in manifest["figures"]:
        by_study.setdefault(entry["study"], []).append(entry)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>trainscape figures</title><style>",
        "body{font-family:sans-serif;margin:1.5em;background:#fafafa}h2{border-bottom:1px solid #ccc}"
        ".grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(420px,1fr));gap:1em}"
        ".card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:.8em}"
        ".card img{max-width:100%;height:auto}.prov{font-size:.8em;color:#555}"
        "table.prov td{padding:0 .5em 0 0;vertical-align:top}",
        "</style></head><body><h1>trainscape: figures</h1>",
        f"<p>{len(manifest['figures'])} figures. Provenance per figure: git commit, params hash, "
        "data checksums, MLflow run (open with <code>make ui</code>).</p>",
    ]
    for study in sorted(by_study):
        parts.append(f"<h2 id='{esc(study)}'>{esc(study)}</h2><div class='grid'>")
        for e in by_study[study]:
            rel = ["../" + f for f in e["files"]]
            pngs = [f for f in rel if f.endswith(".png")]
            img = f"<img src='{esc(pngs[0])}' alt='{esc(e['id'])}' loading='lazy'>" if pngs else ""
            links = " · ".join(f"<a href='{esc(f)}'>{esc(Path(f).suffix[1:])}</a>" for f in rel)
            data = ", ".join(f"{esc(k)}: {esc(v[:12])}" for k, v in sorted(e["data_sha256"].items())) or "none"
            family = f"<tr><td>family</td><td>{esc(e['family'])}</td></tr>" if e.get("family") else ""
            parts.append(
                f"<div class='card' id='{esc(e['id'])}'><h3>{esc(e['id'])}</h3>{img}"
                f"<p>{esc(e.get('caption', ''))}</p><p>{links}</p><table class='prov'>{family}"
                f"<tr><td>seed figure</td><td>{esc(e['seed_figure'])}</td></tr>"
                f"<tr><td>profile</td><td>{esc(e['profile'])}</td></tr>"
                f"<tr><td>git commit</td><td>{esc(e['git_commit'][:12])}"
                f"{' (dirty)' if e.get('git_dirty') else ''}</td></tr>"
                f"<tr><td>params hash</td><td>{esc(e['params_hash'][:12])}</td></tr>"
                f"<tr><td>MLflow run</td><td>{_run_link(e, ui)}</td></tr>"
                f"<tr><td>data sha256</td><td>{data}</td></tr></table></div>")
        parts.append("</div>")
    parts.append("</body></html>")
    return "\n".join(parts)
