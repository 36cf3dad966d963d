"""The ledger run with ``--strict`` on a smoke slice that a pipeline test built: the claims whose metrics
the slice wrote must hold wherever smoke expects them to, so the suite fails when one stops holding."""

from __future__ import annotations

import sys
from collections.abc import Collection

from pipeline.io import read_json
from tests.conftest import RepoCopy


def strict_ledger(copy: RepoCopy, study: str, must_check: Collection[str], role: str | None = None) -> dict:
    """``python -m stages.claims --strict --study <study> --built [--role <role>]`` on the copy; it must exit
    0 and have checked at least the claims ``must_check`` (ids without the study prefix), so the check is
    not empty. A slice that shrinks the smoke grids checks its sanity claims only (``role='sanity'``):
    theorems and properties of the code hold at any size, findings are expected on smoke's sizes."""
    extra = ("--role", role) if role else ()
    proc = copy.run(sys.executable, "-m", "stages.claims", "--strict", "--study", study, "--built", *extra,
                    check=False)
    assert proc.returncode == 0, f"claims expected on smoke do not hold:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    ledger = read_json(copy.path / "reports" / "claims.json")
    checked = {r["claim"] for r in ledger["claims"]}
    assert set(must_check) <= checked, sorted(set(must_check) - checked)
    assert all(r["status"] == "holds" for r in ledger["claims"] if r["expected"]), ledger["summary"]
    return ledger
