"""The claims ledger: every study's claims checked against the metrics the active profile published.

A study names a module in its declaration (``Study.claims``) whose ``CLAIMS`` lists
:class:`~pipeline.contract.Claim` records. The ``claims`` stage (after every extract and render)
reads exactly the metrics files those claims name and the active profile writes, applies each
claim's check (:mod:`pipeline.checks`), writes ``reports/claims.json`` and logs one MLflow run
``claims``. A claim that is expected to hold and does not is printed loudly; the stage still
succeeds (a research result is data), unless ``--strict`` / ``TRAINSCAPE_CLAIMS_STRICT=1``.

``claims.json`` is a DVC output, so it holds only what its inputs (the claims, the metrics) determine:
the same inputs give the same bytes. The runs (this stage's own and those that wrote the metrics it
read) go to the stage's run record, ``.trainscape/runs/claims.json`` (:mod:`pipeline.tracking.records`).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from pipeline import registry
from pipeline.checks import describe
from pipeline.config import ConfigError, Params
from pipeline.contract import CLAIM_ROLES, Claim, Study
from pipeline.io import read_json, write_json
from pipeline.paths import metrics_path, repo_root, sidecar_path, stage_name, study_dir
from pipeline.provenance import run_tags
from pipeline.tracking import Tracker
from pipeline.tracking import records as run_records

STAGE = "claims"  # the stage's name: its MLflow experiment and run record
STRICT_ENV = "TRAINSCAPE_CLAIMS_STRICT"
HOLDS, FAILS, UNMEASURED = "holds", "fails", "not measured"

ROLE_LABELS = {"finding": "findings", "sanity": "sanity checks"}  # how the ledger counts each role


def ledger_path() -> Path:
    return repo_root() / "reports" / "claims.json"


def study_claims(study: Study) -> list[Claim]:
    """The study's declared claims, checked: unique ids, reads of the study's own metrics only."""
    if not study.claims:
        return []
    claims = list(importlib.import_module(study.claims).CLAIMS)
    seen: set[str] = set()
    for c in claims:
        if c.id in seen:
            raise ConfigError(f"{study.claims}: claim id {c.id!r} appears twice")
        seen.add(c.id)
        if not c.reads:
            raise ConfigError(f"{study.claims}: claim {c.id!r} reads no metric")
        for read in c.reads:
            if len(read) < 2 or not read[0].startswith(f"{study.name}_") or "@" not in read[0]:
                raise ConfigError(f"{study.claims}: claim {c.id!r} reads {read!r}; allowed: "
                                  f"({study.name}_<kind>@<unit>, key, …), a metrics file of this study")
    return claims


def all_claims() -> list[tuple[Study, list[Claim]]]:
    return [(s, study_claims(s)) for s in (registry.load(n) for n in registry.names())]


def claims_modules() -> list[str]:
    return [s.claims for s in (registry.load(n) for n in registry.names()) if s.claims]


def published(params: Params) -> set[str]:
    """The stages whose metrics file the active profile writes (stages declared ``metrics=True``)."""
    out = set()
    for name in registry.names():
        study = registry.load(name)
        cfg = registry.config(study, params)
        for stage in study.stages:
            if stage.metrics:
                out.update(stage_name(name, stage.kind, u) for u in stage.units(cfg))
    return out


def read_stages(params: Params) -> list[str]:
    """The published stages some claim reads: the claims stage's data deps, in name order."""
    wanted = {read[0] for _, claims in all_claims() for c in claims for read in c.reads}
    return sorted(wanted & published(params))


def lookup(data: Any, keys: tuple[str, ...]) -> tuple[bool, Any]:
    """(found, value) of ``data[k0][k1]…``; list items by index."""
    node = data
    for k in keys:
        if isinstance(node, Mapping) and k in node:
            node = node[k]
        elif isinstance(node, list) and k.lstrip("-").isdigit() and -len(node) <= int(k) < len(node):
            node = node[int(k)]
        else:
            return False, None
    return True, node


def evaluate(claim: Claim, study: str, profile: str, load: Callable[[str], Any | None]) -> dict[str, Any]:
    """One ledger row: what the claim read, what its check measured, and whether it held.

    ``load(stage)`` returns that stage's metrics, or None when the profile does not publish them.
    """
    values, missing = [], []
    reads = []
    for read in claim.reads:
        data = load(read[0])
        found, val = lookup(data, read[1:]) if data is not None else (False, None)
        if not found:
            missing.append("/".join(read) + (" (no metrics: stage not run under this profile or not built)"
                                             if data is None else ""))
        values.append(val)
        reads.append({"stage": read[0], "path": list(read[1:]), "value": val})
    if missing:
        holds, measured, status = None, None, UNMEASURED
    else:
        ok, measured = claim.check(*values)
        holds = bool(ok)
        status = HOLDS if holds else FAILS
    expected = claim.expected(profile)
    return {
        "id": f"{study}/{claim.id}", "study": study, "claim": claim.id, "role": claim.role,
        "seed_figure": claim.seed_figure,
        "sentence": claim.sentence, "figures": list(claim.figures), "reads": reads, "check": describe(claim.check),
        "measured": measured, "holds": holds, "status": status, "profile": profile, "expected": expected,
        "reason": claim.fails_on.get(profile), "missing": missing,
        "surprise": (status != HOLDS) if expected else (status == HOLDS),
    }


def counts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How many claims there are, hold, fail, are not measured, are expected; who surprises."""
    return {"claims": len(rows), "holds": sum(r["status"] == HOLDS for r in rows),
            "fails": sum(r["status"] == FAILS for r in rows),
            "not_measured": sum(r["status"] == UNMEASURED for r in rows),
            "expected": sum(r["expected"] for r in rows),
            "expected_but_not_holding": [r["id"] for r in rows if r["expected"] and r["status"] != HOLDS],
            "holding_though_not_expected": [r["id"] for r in rows if not r["expected"] and r["status"] == HOLDS]}


def summarise(rows: list[dict[str, Any]], profile: str) -> dict[str, Any]:
    """The counts over every claim, and per role (findings apart from sanity checks: a ledger of
    theorems that hold says nothing about what the papers found)."""
    return {"profile": profile, **counts(rows),
            "by_role": {k: counts([r for r in rows if r.get("role") == k]) for k in CLAIM_ROLES}}


def source_run(stage: str) -> str | None:
    """The MLflow run (key) of the execution that wrote a metrics file: the stage's run record for its
    meta.json or sidecar (:mod:`pipeline.tracking.records`); None where this workspace did not record it."""
    head, unit = stage.split("@", 1)
    study, kind = head.rsplit("_", 1)
    path = sidecar_path(study, unit) if kind == "render" else study_dir(study, kind, unit) / "meta.json"
    rec = run_records.lookup(stage, read_json(path)) if path.exists() else None
    return rec.get("run_key") if rec else None


def build_ledger(params: Params, root_load: Callable[[str], Any | None] | None = None, *,
                 studies: Collection[str] | None = None, roles: Collection[str] | None = None,
                 built_only: bool = False) -> dict[str, Any]:
    """Evaluate every claim of every study (or of ``studies``, of ``roles``) on the active profile;
    ``built_only`` keeps the claims whose every value was found, for a slice of the pipeline built on
    its own (a full build must measure every claim: a missing value is a surprise there)."""
    available = published(params)
    if studies is not None:
        unknown = sorted(set(studies) - set(registry.names()))
        if unknown:
            raise ConfigError(f"claims: study {unknown[0]!r} is not allowed; allowed: {registry.names()}")

    def load(stage: str) -> Any | None:
        if stage not in available:
            return None
        if root_load is not None:
            return root_load(stage)
        path = metrics_path(stage)
        return read_json(path) if path.exists() else None

    rows = []
    for study, claims in all_claims():
        if studies is not None and study.name not in studies:
            continue
        rows += [evaluate(c, study.name, params.profile, load) for c in claims if roles is None or c.role in roles]
    if built_only:
        rows = [r for r in rows if r["status"] != UNMEASURED]
    return {"summary": summarise(rows, params.profile), "claims": rows}


def source_runs(ledger: Mapping[str, Any], params: Params) -> dict[str, str | None]:
    """The run (key) behind each published metrics file the ledger read, for the stage's run record: a
    forced rerun of a source gives it a new key without changing its bytes, so the key is no input of the ledger."""
    available = published(params)
    stages = sorted({r["stage"] for row in ledger["claims"] for r in row["reads"] if r["stage"] in available})
    return {s: source_run(s) for s in stages}


def definitions_hash(ledger: Mapping[str, Any]) -> str:
    """A hash of what was claimed (ids, sentences, checks, expectations), for the run's params.hash tag."""
    spec = [[r["id"], r.get("role"), r["sentence"], r["check"], r["expected"],
             [[x["stage"], x["path"]] for x in r["reads"]]] for r in ledger["claims"]]
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def log_ledger(ledger: Mapping[str, Any], params: Params, path: Path) -> str | None:
    """One MLflow run ``claims`` (experiment ``claims``): a 1/0 metric per measured claim, counts, the file."""
    s = ledger["summary"]
    tags = run_tags(study="claims", stage="claims", profile=s["profile"],
                           params_hash=definitions_hash(ledger), data_sha256={})
    with Tracker("claims", "claims", tags, params={"profile": s["profile"], "claims": s["claims"]},
                 enabled=params.tracking.enabled, on_error=params.tracking.on_error) as tracker:
        metrics = {f"holds/{r['id']}": float(r["holds"]) for r in ledger["claims"] if r["holds"] is not None}
        metrics.update({"claims_holding": s["holds"], "claims_failing": s["fails"],
                        "claims_not_measured": s["not_measured"],
                        "expected_but_not_holding": len(s["expected_but_not_holding"])})
        for role, c in s["by_role"].items():
            metrics.update({f"{role}/holding": c["holds"], f"{role}/failing": c["fails"],
                            f"{role}/not_measured": c["not_measured"],
                            f"{role}/expected_but_not_holding": len(c["expected_but_not_holding"])})
        tracker.parent.log_metrics(metrics)
        tracker.parent.log_artifact(path)
        return tracker.parent.run_key


def print_ledger(ledger: Mapping[str, Any], out: Any = None, err: Any = None) -> None:
    """One line per claim; a loud block for each claim expected to hold that does not."""
    out, err = out or sys.stdout, err or sys.stderr
    s = ledger["summary"]
    for r in ledger["claims"]:
        mark = {HOLDS: "ok  ", FAILS: "FAIL", UNMEASURED: "n/a "}[r["status"]]
        note = "" if r["expected"] else f"  (not expected on {r['profile']}: {r['reason']})"
        print(f"[claims] {mark} {r['role']:<7} {r['id']}: {r['sentence']}{note}", file=out)
    for rid in s["expected_but_not_holding"]:
        r = next(x for x in ledger["claims"] if x["id"] == rid)
        detail = f"missing {r['missing']}" if r["missing"] else f"measured {json.dumps(r['measured'])[:300]}"
        print(f"\n!!!! CLAIM ({r['role'].upper()}) EXPECTED TO HOLD ON {r['profile'].upper()} DOES NOT: {rid} "
              f"({r['seed_figure']})\n"
              f"!!!!   {r['sentence']}\n!!!!   check {r['check']}: {detail}", file=err)
    for role, c in s["by_role"].items():
        print(f"[claims] {ROLE_LABELS.get(role, role)}: {c['holds']}/{c['claims']} hold ({c['fails']} fail, "
              f"{c['not_measured']} not measured); expected but not holding: {len(c['expected_but_not_holding'])}",
              file=out)
    print(f"[claims] {s['holds']}/{s['claims']} hold on profile {s['profile']!r} ({s['fails']} fail, "
          f"{s['not_measured']} not measured); expected but not holding: {len(s['expected_but_not_holding'])}",
          file=out)


def strict_from_env() -> bool:
    return os.environ.get(STRICT_ENV, "").lower() in ("1", "true", "yes", "on")


def run(params: Params, *, strict: bool = False, studies: Collection[str] | None = None,
        roles: Collection[str] | None = None, built_only: bool = False) -> int:
    """The claims stage: evaluate, write ``reports/claims.json``, log, record the runs, print; exit code (1 under
    ``strict`` when a claim expected on this profile does not hold, or when nothing was checked)."""
    ledger = build_ledger(params, studies=studies, roles=roles, built_only=built_only)
    path = write_json(ledger_path(), ledger)
    run_key = log_ledger(ledger, params, path)
    run_records.record(STAGE, ledger, {"run_key": run_key, "mlflow_experiment": STAGE,
                                       "sources": source_runs(ledger, params)})
    print_ledger(ledger)
    if strict and not ledger["claims"]:
        print("!!!! no claim was checked (no study's metrics built?)", file=sys.stderr)
        return 1
    return 1 if strict and ledger["summary"]["expected_but_not_holding"] else 0
