"""``reports/metrics/mupc_figures.json``: the headline numbers of every rendered family (best μPC
accuracy per H, contour optima per width and depth — the transfer claim — selected lrs...).

Run as ``python -m pipeline.studies.mupc.figures.summary`` (stage ``mupc_figures_summary``)."""

from __future__ import annotations

import sys

from pipeline.config import load_params
from pipeline.io import read_json, write_json
from pipeline.paths import figures_dir, metrics_file


def transfer(headline: dict) -> dict:
    """Contour optima (notebook aggregation, loss) per act: the distinct (act lr, param lr) found."""
    out: dict[str, dict] = {}
    for key, opt in headline.get("contour_optimum", {}).items():
        parts = key.split("/")
        if parts[0] != "notebook" or parts[2] != "loss" or opt is None:
            continue
        act = parts[1]
        rec = out.setdefault(act, {"optima": {}, "distinct": []})
        rec["optima"][parts[3] if len(parts) > 3 else "all"] = opt
        pair = [opt["act_lr"], opt["param_lr"]]
        if pair not in rec["distinct"]:
            rec["distinct"].append(pair)
    return out


def main() -> int:
    params = load_params()
    cfg = params.study("mupc").figures
    fams = {}
    for unit in cfg.families:
        path = figures_dir("mupc") / unit / "headline.json"
        fams[unit] = read_json(path)
    summary = {
        "profile": params.profile,
        "families": fams,
        "transfer_width": transfer(fams.get("F23", {})),
        "transfer_depth": transfer(fams.get("F24", {})),
        "mupc_best_final_acc_per_H": fams.get("F15", {}).get("best_final_acc", {}),
        "mupc_best_final_acc_per_N": fams.get("F14", {}).get("best_final_acc", {}),
        "fig1_final_acc": fams.get("F18", {}).get("final_acc", {}),
    }
    write_json(metrics_file("mupc_figures"), summary)
    print(f"wrote {metrics_file('mupc_figures')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
