"""train@<run>: one run of the ZerO study, plain SGD on MNIST with the ranks of the l3 residual every few
steps. Returns ``result.json`` (the run's params and series) and one MLflow child run."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.nn import functional as F  # noqa: N812

from pipeline.contract import Context, Output, Run
from pipeline.data import load_split, normalised
from pipeline.device import cpu_threads
from pipeline.studies.zero_init.config import ZeroInitParams
from pipeline.studies.zero_init.model import MLP, residual_rank, residual_ranks


@dataclass
class RunConfig:
    init: str
    n_h: int
    bias: float | None
    epochs: int
    lr: float
    batch_size: int
    test_batch_size: int
    log_interval: int
    max_iters: int | None
    rank_tol: float
    rank_on: str
    zero_scale: str
    init_seed: int
    data_seed: int
    input_dim: int = 784
    lr_step_size: int | None = None  # StepLR: lr · gamma^⌊(epoch − 1) / step_size⌋; None = constant lr
    lr_gamma: float = 1.0


@dataclass
class RunResult:
    iters: list[int] = field(default_factory=list)  # rank points: 0 (init), logged steps, final step
    rank_w3_minus_i: list[int] = field(default_factory=list)
    rank_w3_minus_w3_0: list[int] = field(default_factory=list)
    loss_iters: list[int] = field(default_factory=list)  # logged steps (after the update)
    train_loss: list[float] = field(default_factory=list)  # the batch loss of that step
    running_acc: list[float] = field(default_factory=list)  # % correct so far in the epoch
    test: list[dict[str, float]] = field(default_factory=list)  # per epoch: epoch, iteration, acc, loss
    iterations: int = 0
    diverged: bool = False
    seconds: dict[str, float] = field(default_factory=dict)

    def first_iter_above(self, level: int) -> int | None:
        for it, r in zip(self.iters, self.rank_w3_minus_i):
            if r > level:
                return it
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "iters": self.iters, "rank_w3_minus_i": self.rank_w3_minus_i,
            "rank_w3_minus_w3_0": self.rank_w3_minus_w3_0, "loss_iters": self.loss_iters,
            "train_loss": self.train_loss, "running_acc": self.running_acc, "test": self.test,
            "iterations": self.iterations, "diverged": self.diverged,
        }  # not the seconds: wall clock goes to MLflow only (the child run's train_seconds, rank_seconds)


def sgd_step(params: list[torch.Tensor], lr: float) -> None:
    """Plain SGD, p ← p − lr·∇p: the seed's optimiser (a torch.optim.SGD subclass whose ``step``
    ignores momentum and weight decay). Written out because constructing ``torch.optim.SGD`` costs
    seconds of import time on first use, more than a smoke run's whole training."""
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p.add_(p.grad, alpha=-lr)


def lr_at_epoch(lr: float, epoch: int, step_size: int | None, gamma: float) -> float:
    """The lr of 1-based ``epoch`` under ``StepLR(step_size, gamma)`` stepped after every epoch (the
    notebooks' schedule): epochs 1..step_size use ``lr``, the next step_size epochs ``lr·gamma``, ..."""
    if step_size is None:
        return lr
    return lr * gamma ** ((epoch - 1) // step_size)


def evaluate(model: MLP, x: torch.Tensor, y: torch.Tensor, batch: int) -> tuple[float, float]:
    """Test accuracy (%) and mean NLL over ``x``."""
    model.eval()
    correct = 0
    loss = 0.0
    with torch.no_grad():
        for i in range(0, x.shape[0], batch):
            out = model(x[i : i + batch])
            loss += float(F.nll_loss(out, y[i : i + batch], reduction="sum"))
            correct += int((out.argmax(dim=1) == y[i : i + batch]).sum())
    model.train()
    return 100.0 * correct / x.shape[0], loss / x.shape[0]


def train_run(cfg: RunConfig, x_train: torch.Tensor, y_train: torch.Tensor, x_test: torch.Tensor,
              y_test: torch.Tensor, log: Callable[[str], None] = print,
              track: Callable[..., Any] = lambda iterable, **_: iterable) -> RunResult:
    """Train one MLP; tensors are already on the training device (pixels in [0, 1], flattened).

    The init seed is set before the model is built and the data order comes from its own generator
    (the seed notebook seeded only after building, so its random init was unseeded).
    """
    device = x_train.device
    torch.manual_seed(cfg.init_seed)
    model = MLP(cfg.n_h, cfg.init, bias=cfg.bias, zero_scale=cfg.zero_scale, seed=cfg.init_seed).to(device)
    w3_0 = model.l3.weight.detach().clone()
    params = [p for p in model.parameters() if p.requires_grad]
    order = torch.Generator().manual_seed(cfg.data_seed)
    res = RunResult()
    t_rank = 0.0
    t0 = time.time()

    def record_rank(it: int) -> None:
        nonlocal t_rank
        t = time.time()
        r_i, r_0 = residual_ranks(model.l3.weight, w3_0, cfg.rank_tol, cfg.rank_on)
        t_rank += time.time() - t
        res.iters.append(it)
        res.rank_w3_minus_i.append(r_i)
        res.rank_w3_minus_w3_0.append(r_0)

    record_rank(0)
    n = x_train.shape[0]
    n_batches = math.ceil(n / cfg.batch_size)
    it = 0
    stop = False
    for epoch in track(range(1, cfg.epochs + 1), total=cfg.epochs, desc="epochs", unit="epoch"):
        lr = lr_at_epoch(cfg.lr, epoch, cfg.lr_step_size, cfg.lr_gamma)
        perm = torch.randperm(n, generator=order).to(device)
        correct = torch.zeros((), dtype=torch.int64, device=device)
        seen = 0
        for batch_idx in range(n_batches):
            idx = perm[batch_idx * cfg.batch_size : (batch_idx + 1) * cfg.batch_size]
            xb, yb = x_train[idx], y_train[idx]
            for p in params:
                p.grad = None
            out = model(xb)
            loss = F.nll_loss(out, yb)
            correct += (out.argmax(dim=1) == yb).sum()
            seen += yb.shape[0]
            loss.backward()
            sgd_step(params, lr)
            it += 1
            if batch_idx % cfg.log_interval == 0:
                lv = float(loss.detach())
                res.loss_iters.append(it)
                res.train_loss.append(lv)
                res.running_acc.append(100.0 * int(correct) / seen)
                record_rank(it)
                if not math.isfinite(lv):
                    res.diverged = True
                    stop = True
                    break
            if cfg.max_iters is not None and it >= cfg.max_iters:
                stop = True
                break
        acc, tloss = evaluate(model, x_test, y_test, cfg.test_batch_size)
        # rank(W3 − I) at the epoch's last iteration (not a logged step): the per-epoch view that claims
        # read, e.g. the rank before and after the StepLR decay
        t = time.time()
        r_end = residual_rank(model.l3.weight, cfg.rank_tol, cfg.rank_on)
        t_rank += time.time() - t
        res.test.append({"epoch": epoch, "iteration": it, "lr": lr, "test_acc": acc, "test_loss": tloss,
                         "rank_w3_minus_i": r_end})
        log(f"epoch {epoch}: iteration {it}, lr {lr:g}, test acc {acc:.2f} %, rank(W3-I) {r_end}")
        if stop:
            break
    if res.iters[-1] != it:
        record_rank(it)
    res.iterations = it
    res.seconds = {"total": time.time() - t0, "rank": t_rank}
    return res


def run_params(cfg: ZeroInitParams, profile: str, unit: str) -> dict[str, Any]:
    """The flattened configuration of one run (its MLflow params, kept in result.json)."""
    run = cfg.runs[unit]
    step = cfg.settings[run.setting].step_lr
    return {"run": unit, "init": run.init, "n_h": run.n_h, "setting": run.setting,
            "bias": cfg.settings[run.setting].bias, "lr_step_size": step.step_size if step else None,
            "lr_gamma": step.gamma if step else 1.0, **dataclasses.asdict(cfg.budgets[run.setting]), "lr": cfg.lr,
            "batch_size": cfg.batch_size, "test_batch_size": cfg.test_batch_size,
            "rank_tol": cfg.rank_tol, "rank_on": cfg.rank_on, "zero_scale": cfg.zero_scale,
            "init_seed": cfg.init_seed, "data_seed": cfg.data_seed, "profile": profile}


def train(ctx: Context, unit: str) -> Output:
    cfg: ZeroInitParams = ctx.cfg
    run = cfg.runs[unit]
    b = cfg.budgets[run.setting]
    device = ctx.device
    if device == "cpu":
        torch.set_num_threads(cpu_threads(cfg.cpu_threads))
    tr, te = load_split(cfg.dataset, train=True), load_split(cfg.dataset, train=False)
    ntr, nte = b.train_subset or tr.labels.shape[0], b.test_subset or te.labels.shape[0]
    # pixels in [0, 1] (ToTensor), no normalisation, as in the seed
    x_tr = normalised(tr.images[:ntr], 0.0, 1.0, device)
    x_te = normalised(te.images[:nte], 0.0, 1.0, device)
    y_tr, y_te = tr.labels[:ntr].to(device), te.labels[:nte].to(device)
    step = cfg.settings[run.setting].step_lr
    rc = RunConfig(init=run.init, n_h=run.n_h, bias=cfg.settings[run.setting].bias, epochs=b.epochs,
                   lr=cfg.lr, batch_size=cfg.batch_size, test_batch_size=cfg.test_batch_size,
                   log_interval=b.log_interval, max_iters=b.max_iters, rank_tol=cfg.rank_tol,
                   rank_on=cfg.rank_on, zero_scale=cfg.zero_scale, init_seed=cfg.init_seed,
                   data_seed=cfg.data_seed, input_dim=cfg.input_dim_line,
                   lr_step_size=step.step_size if step else None, lr_gamma=step.gamma if step else 1.0)
    ctx.log(f"{run.init} n_h={run.n_h} setting={run.setting} epochs={b.epochs} "
            f"train images={ntr} device={device}")
    params = {**run_params(cfg, ctx.profile, unit), "train_images": ntr, "test_images": nte, "device": device}
    res = train_run(rc, x_tr, y_tr, x_te, y_te, log=ctx.log, track=ctx.track)
    first = res.first_iter_above(cfg.input_dim_line)
    epochs = [t["epoch"] for t in res.test]
    series = {"rank_w3_minus_i": (res.iters, res.rank_w3_minus_i),
              "rank_w3_minus_w3_0": (res.iters, res.rank_w3_minus_w3_0),
              "train_loss": (res.loss_iters, res.train_loss), "running_acc": (res.loss_iters, res.running_acc),
              "test_acc": (epochs, [t["test_acc"] for t in res.test]),
              "lr": (epochs, [t["lr"] for t in res.test]),
              "rank_w3_minus_i_epoch_end": (epochs, [t["rank_w3_minus_i"] for t in res.test]),
              "test_loss": (epochs, [t["test_loss"] for t in res.test])}
    finals = {"final_rank_w3_minus_i": res.rank_w3_minus_i[-1], "final_rank_w3_minus_w3_0": res.rank_w3_minus_w3_0[-1],
              "final_test_acc": res.test[-1]["test_acc"], "iterations": res.iterations,
              "train_seconds": res.seconds["total"], "rank_seconds": res.seconds["rank"]}
    if first is not None:
        finals["first_iter_rank_above_input_dim"] = first
    child = Run(unit, params, metrics=finals, series=series,
                failed="training loss became non-finite" if res.diverged else None)
    ctx.log(f"final rank(W3-I) {res.rank_w3_minus_i[-1]}, rank(W3-W3_0) {res.rank_w3_minus_w3_0[-1]}, "
            f"test acc {res.test[-1]['test_acc']:.2f} %, {res.seconds['total']:.1f} s "
            f"({res.seconds['rank']:.1f} s ranks)")
    result = {"params": params, **res.to_json(), "first_iter_rank_above_input_dim": first}
    return Output(json={"result.json": result}, runs=[child])
