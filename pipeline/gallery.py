"""The gallery: ``reports/manifest.json`` and ``reports/index.html`` from the figure sidecars and the
claims ledger (``reports/claims.json``)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

MANIFEST_KEYS = ("id", "study", "files", "params_hash", "git_commit", "run_key", "data_sha256",
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


def link_runs(manifest: dict[str, Any], runs: dict[str, dict[str, str]]) -> dict[str, Any]:
    """The manifest with the MLflow run id (``mlflow_run_id``) of each ``run_key`` the stages recorded
    (``runs``: key → ``{run_id, experiment_id}``, :func:`pipeline.tracking.run_map` after a sync), so its
    links open the runs; a key not synced yet gets none. Keys of ``TRAINSCAPE_TRACKING=direct`` stages are
    MLflow's run ids already: they come with an experiment id and stay."""

    def real(key: str | None, direct: bool = False) -> str | None:
        return runs[key]["run_id"] if key in runs else (key if direct else None)

    figures = []
    for entry in manifest["figures"]:
        key = entry.get("run_key")
        out = {**entry, "mlflow_run_id": real(key, bool(entry.get("mlflow_experiment_id")))}
        if key in runs:
            out["mlflow_experiment_id"] = runs[key]["experiment_id"]
        if "sources" in entry:
            out["sources"] = [{**src, "mlflow_run_id": real(src.get("run_key")),
                               "mlflow_children": {n: real(k) for n, k in src.get("children", {}).items()}}
                              for src in entry["sources"]]
        figures.append(out)
    return {**manifest, "figures": figures}


def _run_link(entry: dict[str, Any], ui: str) -> str:
    rid, eid = entry.get("mlflow_run_id"), entry.get("mlflow_experiment_id")
    if not rid and entry.get("run_recorded") is False:  # outputs pulled or checked out, not run here
        return "run not recorded here"
    if not rid:
        return "not in MLflow yet (sync pending)" if entry.get("run_key") else "tracking off"
    # MLflow 3 shows GenAI pages unless the link asks for the model-training views
    href = f"{ui}/#/experiments/{eid}/runs/{rid}" if eid else f"{ui}/#/runs/{rid}"
    href += "?workflowType=machine_learning"
    return f'<a href="{html.escape(href)}">{html.escape(rid[:12])}</a>'


def unit_of(entry: dict[str, Any]) -> str:
    """The figure family a card belongs to: its declared family, else its render unit."""
    if entry.get("family"):
        return str(entry["family"])
    stage = str(entry.get("render_stage", ""))
    return stage.split("@", 1)[1] if "@" in stage else "figures"


def anchor(study: str, unit: str) -> str:
    return f"{study}--{unit}"


def fmt(v: Any, depth: int = 0) -> str:
    """A measured value, short: numbers to 4 significant digits, nested mappings flattened."""
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {fmt(x, depth + 1)}" for k, x in v.items()) + "}"
    if isinstance(v, list | tuple):
        return "[" + ", ".join(fmt(x, depth + 1) for x in v) + "]"
    return str(v)


STATUS = {"holds": ("✓ holds", "ok"), "fails": ("✗ fails", "bad"), "not measured": ("– not measured", "na")}


ROLE_TITLES = {"finding": ("Findings", "what the papers and notebooks report about the world; each could "
                                       "have come out otherwise"),
               "sanity": ("Sanity checks", "theorems, properties of the code and golden values: they guard "
                                           "the pipeline, they are not what the papers found")}


def ledger_counts(c: dict[str, Any], what: str) -> str:
    """One line of counts: how many hold, fail, are not measured, and which expected ones do not hold."""
    esc = html.escape
    loud = c["expected_but_not_holding"]
    return (f"{c['holds']} of {c['claims']} {what} hold, {c['fails']} fail, {c['not_measured']} not measured "
            f"under this profile. Expected to hold but not holding: "
            f"<b class='{'bad' if loud else 'ok'}'>{len(loud)}</b>"
            f"{(' (' + esc(', '.join(loud)) + ')') if loud else ''}.")


def ledger_rows(rows: list[dict[str, Any]], units: dict[str, list[str]]) -> list[str]:
    """A table of claims: the verdict on the profile, what was measured, links to the figures."""
    esc = html.escape
    parts = ["<table class='ledger'><colgroup><col style='width:15%'><col style='width:12%'><col style='width:29%'>"
             "<col style='width:7%'><col style='width:14%'><col style='width:16%'><col style='width:7%'></colgroup>"
             "<tr><th>claim</th><th>seed figure</th><th>statement</th><th>verdict</th>"
             "<th>expected here</th><th>measured</th><th>figures</th></tr>"]
    for r in rows:
        label, cls = STATUS[r["status"]]
        expected = "yes" if r["expected"] else f"no: {esc(r.get('reason') or '')}"
        links = " ".join(f"<a href='#{esc(anchor(r['study'], u))}'>{esc(u)}</a>" if u in units.get(r["study"], [])
                         else esc(u) for u in r["figures"])
        measured = fmt(r["measured"]) if r["status"] != "not measured" else "missing: " + "; ".join(r["missing"])
        short = measured if len(measured) <= 160 else measured[:157] + "…"
        row_cls = " class='surprise'" if r["expected"] and r["status"] != "holds" else ""
        parts.append(f"<tr{row_cls}><td><code>{esc(r['id'])}</code></td><td>{esc(r['seed_figure'])}</td>"
                     f"<td>{esc(r['sentence'])}<br><span class='prov'>{esc(r['check'])}</span></td>"
                     f"<td class='{cls}'>{label}</td><td>{expected}</td>"
                     f"<td class='prov' title='{esc(measured)}'>{esc(short)}</td><td>{links}</td></tr>")
    parts.append("</table>")
    return parts


def ledger_html(ledger: dict[str, Any], units: dict[str, list[str]]) -> list[str]:
    """The claims ledger: findings and sanity checks counted and tabled apart, one row per claim with its
    verdict on the profile and links to the figures it is about."""
    esc = html.escape
    s = ledger["summary"]
    parts = [f"<h2 id='claims'>Claims ledger (profile {esc(s['profile'])})</h2>",
             f"<p>{ledger_counts(s, 'claims')}</p>"]
    for role, (title, blurb) in ROLE_TITLES.items():
        rows = [r for r in ledger["claims"] if r.get("role") == role]
        c = s.get("by_role", {}).get(role)
        if not rows or c is None:
            continue
        parts += [f"<h3 id='claims-{role}'>{title}</h3>",
                  f"<p>{esc(blurb[0].upper() + blurb[1:])}. {ledger_counts(c, title.lower())}</p>",
                  *ledger_rows(rows, units)]
    return parts


def gallery_html(manifest: dict[str, Any], *, ledger: dict[str, Any] | None = None,
                 ui: str = "http://127.0.0.1:5000") -> str:
    """A static page that opens on the figures: a contents bar by study and figure family, the ledger's
    one-line summary (the full ledger one click away, below the figures), then per study a grid of cards,
    each a thumbnail with its caption and its provenance folded; then the tables and the full ledger.
    Paths relative to reports/."""
    esc = html.escape
    by_study: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for entry in manifest["figures"]:
        by_study.setdefault(entry["study"], {}).setdefault(unit_of(entry), []).append(entry)
    units = {study: list(fams) for study, fams in by_study.items()}
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>trainscape figures</title><style>",
        "body{font-family:sans-serif;margin:0 1.5em 1.5em;background:#fafafa}h2{border-bottom:1px solid #ccc}"
        "nav.contents{position:sticky;top:0;background:#fafafa;border-bottom:1px solid #ccc;padding:.4em 0;"
        "z-index:1;font-size:.85em;line-height:1.7}nav.contents b{margin-right:.3em}"
        "nav.contents a{margin-right:.45em;white-space:nowrap}nav.contents span.study{margin-right:1.2em}"
        ".grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(300px,1fr));gap:.8em}"
        ".card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:.6em;min-width:0;"
        "overflow-wrap:anywhere}.card h3{font-size:.9em;margin:0 0 .4em}.card p{font-size:.85em;margin:.3em 0}"
        ".card img{max-width:100%;height:auto}.prov{font-size:.8em;color:#555}"
        "details.prov summary{cursor:pointer}p.summary{font-size:1.05em}"
        "table.prov td{padding:0 .5em 0 0;vertical-align:top}"
        "table.ledger{border-collapse:collapse;font-size:.85em;background:#fff;width:100%;table-layout:fixed}"
        "table.ledger td{overflow-wrap:anywhere}"
        "table.ledger td,table.ledger th{border:1px solid #ddd;padding:.25em .4em;vertical-align:top;text-align:left}"
        "table.ledger tr.surprise{background:#fdecea}.ok{color:#1a7f37}.bad{color:#c62828;font-weight:bold}"
        ".na{color:#777}h3.family{margin:1.2em 0 .5em;color:#333}",
        "</style></head><body>",
        "<nav class='contents'>" + ("<a href='#claims'><b>claims</b></a> " if ledger else "") + " ".join(
            f"<span class='study'><a href='#{esc(study)}'><b>{esc(study)}</b></a>"
            + "".join(f"<a href='#{esc(anchor(study, u))}'>{esc(u)}&nbsp;({len(cards)})</a>"
                      for u, cards in by_study[study].items()) + "</span>"
            for study in sorted(by_study)) + "</nav>",
        "<h1>trainscape: figures</h1>",
        f"<p>{len(manifest['figures'])} figures from {len(by_study)} studies. Provenance per figure (under each "
        "card): git commit, params hash, data checksums of the datasets it read, MLflow run (open with "
        "<code>make ui</code>).</p>",
    ]
    if ledger:
        parts.append(f"<p class='summary'>{ledger_counts(ledger['summary'], 'claims')} "
                     "<a href='#claims'>The full claims ledger</a>.</p>")
    for study in sorted(by_study):
        parts.append(f"<h2 id='{esc(study)}'>{esc(study)}</h2>")
        for unit, cards in by_study[study].items():
            parts.append(f"<h3 class='family' id='{esc(anchor(study, unit))}'>{esc(study)} · {esc(unit)}</h3>"
                         "<div class='grid'>")
            parts += [card_html(e, ui) for e in cards]
            parts.append("</div>")
    if manifest.get("tables"):
        parts += tables_html(manifest["tables"])
    if ledger:
        parts += ledger_html(ledger, units)
    parts.append("</body></html>")
    return "\n".join(parts)


def card_html(e: dict[str, Any], ui: str) -> str:
    esc = html.escape
    rel = ["../" + f for f in e["files"]]
    pngs = [f for f in rel if f.endswith(".png")]
    img = f"<img src='{esc(pngs[0])}' alt='{esc(e['id'])}' loading='lazy'>" if pngs else ""
    links = " · ".join(f"<a href='{esc(f)}'>{esc(Path(f).suffix[1:])}</a>" for f in rel)
    data = ", ".join(f"{esc(k)}: {esc(v[:12])}" for k, v in sorted(e["data_sha256"].items())) or "none"
    family = f"<tr><td>family</td><td>{esc(e['family'])}</td></tr>" if e.get("family") else ""
    return (f"<div class='card' id='{esc(e['id'])}'><h3>{esc(e['id'])}</h3>{img}"
            f"<p>{esc(e.get('caption', ''))}</p><details class='prov'><summary>{links} · provenance</summary>"
            f"<table class='prov'>{family}"
            f"<tr><td>seed figure</td><td>{esc(e['seed_figure'])}</td></tr>"
            f"<tr><td>profile</td><td>{esc(e['profile'])}</td></tr>"
            f"<tr><td>git commit</td><td>{esc(e['git_commit'][:12])}"
            f"{' (dirty)' if e.get('git_dirty') else ''}</td></tr>"
            f"<tr><td>params hash</td><td>{esc(e['params_hash'][:12])}</td></tr>"
            f"<tr><td>MLflow run</td><td>{_run_link(e, ui)}</td></tr>"
            f"<tr><td>data sha256</td><td>{data}</td></tr></table></details></div>")


def tables_html(tables: list[dict[str, Any]]) -> list[str]:
    """The per-run tables (CSV, one row per run: settings, status, final metrics), linked, with their shape."""
    esc = html.escape
    rows = "".join(f"<tr><td>{esc(t['study'])}</td><td><a href='{esc('../' + t['file'])}'>{esc(t['file'])}</a></td>"
                   f"<td>{t['rows']}</td><td class='prov'>{esc(', '.join(t['columns']))}</td></tr>" for t in tables)
    return ["<h2 id='tables'>Tables</h2><p>One row per run: its settings, status and final metrics "
            "(open with <code>pandas.read_csv</code>).</p>",
            "<table class='ledger'><colgroup><col style='width:12%'><col style='width:33%'><col style='width:6%'>"
            f"<col style='width:49%'></colgroup><tr><th>study</th><th>table</th><th>rows</th><th>columns</th></tr>"
            f"{rows}</table>"]
