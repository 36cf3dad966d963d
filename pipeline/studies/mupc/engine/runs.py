"""One training run of the μPC study: its configuration, canonical key and on-disk record.

The key mirrors the notebook's run folders (spec §5.1) so that a run is recognisable, with the
two fields the reference left out (``test_every`` and the metrics mode, quirk Q3). Numbers are
formatted canonically (quirk Q5): integral values as integers, others as ``repr`` of the float.

On disk, a sweep stage owns ``artifacts/mupc/train/<sweep>/`` and each run has
``runs/<hash>/config.json`` (the RunConfig, its key, status) and ``runs/<hash>/arrays.npz``:

* ``batch_train_losses`` — per training iteration (PC: ½·mean (y−ŷ)² before inference; BP: mean
  (y−ŷ)²), truncated at an early stop;
* ``test_accs`` (%), ``test_losses`` — one per evaluation (every ``test_every`` iterations);
* ``n_infer_iters`` — PC only, per training iteration;
* ``lambda_min``, ``lambda_max``, ``cond_nums`` — ``metrics == "hessian"`` only, one row per
  recorded iteration (row 0 = initialisation, row k after iteration k·test_every), κ = |λmax|/|λmin|.

``status`` is ``finished``, ``diverged`` (non-finite train loss) or ``no_learning`` (test accuracy
< 15 % once evaluated), exactly the reference's early-stopping rules (§1.9).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal


def fmt_num(v: float | int) -> str:
    """Canonical number text: 1000.0 → '1000', 0.5 → '0.5', 1e-4 → '0.0001'."""
    f = float(v)
    return str(int(f)) if f.is_integer() else repr(f)


@dataclass(frozen=True)
class RunConfig:
    dataset: Literal["mnist", "fashion_mnist"]
    N: int
    H: int
    act: Literal["linear", "tanh", "relu"]
    param: Literal["sp", "mupc", "ntp", "depth_mup"]
    init: Literal["standard", "standard_gauss", "one_over_N", "orthogonal"]
    skips: bool
    seed: int
    epochs: int
    test_every: int
    param_lr: float
    method: Literal["pc", "bp"] = "pc"  # predictive coding or backprop
    T: int = 0  # max inference steps (PC)
    act_optim: Literal["gd", "adam"] = "gd"
    act_lr: float = 0.0
    activity_decay: float = 0.0
    weight_decay: float = 0.0
    spectral_penalty: float = 0.0
    batch_size: int = 64
    metrics: Literal["basic", "hessian"] = "basic"

    def key(self) -> str:
        ds = {"mnist": "MNIST", "fashion_mnist": "Fashion-MNIST"}[self.dataset]
        if self.method == "bp":
            return (f"bp_results/{ds}/width_{self.N}/{self.H}_n_hidden/{self.act}/{self.param}_param/adam/"
                    f"lr_{fmt_num(self.param_lr)}/batch_size_{self.batch_size}/{self.epochs}_epochs/"
                    f"test_every_{self.test_every}/{self.seed}")
        return (f"pcn_results/{ds}/width_{self.N}/{self.H}_n_hidden/{self.act}/"
                f"{'skips' if self.skips else 'no_skips'}/{self.init}_weight_init/{self.param}_param/"
                f"param_optim_adam/param_lr_{fmt_num(self.param_lr)}/batch_size_{self.batch_size}/"
                f"{self.T}_max_infer_iters/activity_optim_{self.act_optim}/activity_lr_{fmt_num(self.act_lr)}/"
                f"activity_decay_{fmt_num(self.activity_decay)}/weight_decay_{fmt_num(self.weight_decay)}/"
                f"spectral_penalty_{fmt_num(self.spectral_penalty)}/{self.epochs}_epochs/"
                f"test_every_{self.test_every}/{self.metrics}/{self.seed}")

    def hash(self) -> str:
        """Stable id of the configuration (folder name; resumption compares it), over the field names runs
        were first recorded with (``method`` was ``kind``): a run keeps its folder and resumes."""
        fields = dataclasses.asdict(self)
        fields["kind"] = fields.pop("method")
        blob = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def as_params(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_record(cls, run: Mapping[str, Any]) -> RunConfig:
        """A run as an index or ``config.json`` records it, also one recorded before ``kind`` became ``method``
        (the runs of the H100 fixtures)."""
        fields = dict(run)
        if "kind" in fields:
            fields["method"] = fields.pop("kind")
        return cls(**fields)


RUN_ARRAYS = ("batch_train_losses", "test_accs", "test_losses", "n_infer_iters", "lambda_min",
              "lambda_max", "cond_nums")
STATUSES = ("finished", "diverged", "no_learning")
