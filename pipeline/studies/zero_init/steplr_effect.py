"""The effect of the notebooks' StepLR(12, 0.7) on the rank curves, against the spread over data orders.

Trains the official setting (no bias) with and without the decay, for partial identity and ZerO, over
several data seeds, on a reduced budget (a training subset, 20 epochs, so the decay acts on epochs
13-20 as in the official run), and prints rank(W3 − I) at the end of epoch 12 (before the decay) and at
the end, per seed, with the difference the decay makes next to the spread over seeds. Not a stage: a
measurement behind the README's statement.

    python -m pipeline.studies.zero_init.steplr_effect [--n-h 1024] [--train 6400] [--seeds 1 2 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch

from pipeline.data import load_split, normalised
from pipeline.studies.zero_init.train import RunConfig, train_run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-h", type=int, default=1024)
    ap.add_argument("--train", type=int, default=6400, help="first N training images")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--log-interval", type=int, default=50)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--inits", nargs="+", default=["partial_identity", "zero"])
    ap.add_argument("--out", help="write the numbers as JSON here")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    tr, te = load_split("mnist", train=True), load_split("mnist", train=False)
    x_tr, y_tr = normalised(tr.images[: args.train], 0.0, 1.0, "cpu"), tr.labels[: args.train]
    x_te, y_te = normalised(te.images[:2000], 0.0, 1.0, "cpu"), te.labels[:2000]
    rows = []
    for init in args.inits:
        for seed in args.seeds:
            for step in (12, None):
                cfg = RunConfig(init=init, n_h=args.n_h, bias=None, epochs=args.epochs, lr=0.1, batch_size=64,
                                test_batch_size=1000, log_interval=args.log_interval, max_iters=None,
                                rank_tol=1e-4, rank_on="cpu", zero_scale="code", init_seed=seed, data_seed=seed,
                                lr_step_size=step, lr_gamma=0.7)
                t0 = time.time()
                res = train_run(cfg, x_tr, y_tr, x_te, y_te, log=lambda _m: None)
                ranks = [t["rank_w3_minus_i"] for t in res.test]
                rows.append({"init": init, "seed": seed, "step_lr": step is not None, "rank_per_epoch": ranks,
                             "rank_epoch12": ranks[min(11, len(ranks) - 1)], "rank_final": ranks[-1],
                             "test_acc_final": res.test[-1]["test_acc"]})  # the time is printed, not kept
                print(f"{init:16s} seed {seed} StepLR {'on ' if step else 'off'}: rank epoch 12 "
                      f"{rows[-1]['rank_epoch12']}, final {ranks[-1]}, test acc {res.test[-1]['test_acc']:.2f} % "
                      f"({time.time() - t0:.0f} s)", flush=True)
    print(f"\nn_h {args.n_h}, {args.train} training images, {args.epochs} epochs, seeds {args.seeds}")
    summary = {}
    for init in args.inits:
        on = {r["seed"]: r for r in rows if r["init"] == init and r["step_lr"]}
        off = {r["seed"]: r for r in rows if r["init"] == init and not r["step_lr"]}
        diff = np.array([on[s]["rank_final"] - off[s]["rank_final"] for s in args.seeds])
        finals_on = np.array([on[s]["rank_final"] for s in args.seeds])
        grow_on = np.array([on[s]["rank_final"] - on[s]["rank_epoch12"] for s in args.seeds])
        grow_off = np.array([off[s]["rank_final"] - off[s]["rank_epoch12"] for s in args.seeds])
        summary[init] = {"final_rank_on_minus_off": diff.tolist(), "final_rank_on": finals_on.tolist(),
                         "seed_spread_final_rank_on": int(finals_on.max() - finals_on.min()),
                         "growth_epochs_13_20_on": grow_on.tolist(), "growth_epochs_13_20_off": grow_off.tolist()}
        print(f"{init:16s} final rank with StepLR − without: {diff.tolist()} (mean {diff.mean():+.1f}); "
              f"spread of the final rank over seeds (StepLR on): {finals_on.max() - finals_on.min()}; "
              f"rank growth over epochs 13-20: on {grow_on.tolist()}, off {grow_off.tolist()}")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"args": vars(args), "rows": rows, "summary": summary}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
