"""`python -m stages.claims [--strict]`: check every study's claims on the active profile (pipeline.claims).

Writes reports/claims.json and one MLflow run `claims`. A claim expected to hold that does not is
printed loudly; the exit code is 0 unless --strict (or TRAINSCAPE_CLAIMS_STRICT=1), for CI."""

from __future__ import annotations

import argparse
import sys

from pipeline.claims import run, strict_from_env
from pipeline.config import ConfigError, load_params
from pipeline.contract import CLAIM_ROLES
from pipeline.io import WriteError
from pipeline.progress import WRITE_FAILED, write_failed_line
from stages import finish


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m stages.claims", description=__doc__.splitlines()[0])
    ap.add_argument("--strict", action="store_true", help="exit 1 when a claim expected to hold does not")
    ap.add_argument("--profile", help="the profile dvc.yaml was generated for; must match params.yaml")
    ap.add_argument("--study", action="append", help="only this study's claims (repeatable)")
    ap.add_argument("--role", action="append", choices=CLAIM_ROLES, help="only claims of this role (repeatable)")
    ap.add_argument("--built", action="store_true",
                    help="only the claims whose every value was found (a slice of the pipeline built on its own)")
    args = ap.parse_args(argv)
    try:
        params = load_params()
        if args.profile is not None and args.profile != params.profile:
            raise ConfigError(f"params.yaml: profile = {params.profile!r} is not allowed here; allowed: "
                              f"{args.profile!r}, the profile dvc.yaml was generated for")
        return run(params, strict=args.strict or strict_from_env(), studies=args.study, roles=args.role,
                   built_only=args.built)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except WriteError as exc:  # a full disk: one line, not a traceback
        print(write_failed_line("claims", exc, "dvc.yaml:claims", None), file=sys.stderr)
        return WRITE_FAILED


if __name__ == "__main__":
    sys.exit(finish(main(sys.argv[1:])))
