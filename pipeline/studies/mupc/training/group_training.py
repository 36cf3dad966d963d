"""Stacked PC and BP trainers of the μPC sweeps (spec §1.7–1.9, §1.11).

A *group* is a list of runs with the same :func:`~pipeline.studies.mupc.training.sweep_expansion.stack_key`
(same shapes and schedule); they differ only in seed, activity lr and param lr and are trained
together along the leading run axis R with per-run learning-rate tensors. Every run's weights come
from its own seed (``init_weights``), and its batch sequence from its own seeded generator, so a run
gives the same numbers alone or in any stack (tested).

Per iteration k = 1, 2, … (global across epochs): gather each run's batch [R, B, D]; feed-forward
init; record ½·mean (y − ŷ)² (BP: mean (y − ŷ)²); PC: T inference steps (fresh optimiser state),
weight gradient at the final activities, one Adam step (per-run lr). BP: autograd of the summed
per-run losses, one Adam step. Every ``test_every`` iterations: feed-forward test accuracy (%) and
loss on the test set in batches of 64 with drop_last (file order — the reference's per-evaluation
shuffle only changes which < 64 images are left out; the mean of per-batch accuracies over equal
batches equals the accuracy over the kept images).

Early stopping per run (§1.9): a non-finite train loss → ``diverged`` (the non-finite value is the
last entry of ``batch_train_losses``; no evaluation at that iteration); once evaluated, a test
accuracy < 15 % → ``no_learning`` (that evaluation is kept). Train losses are checked at evaluation
points (one device sync per test_every iterations) — the recorded arrays are the same as with a
per-iteration check.

A stopped run leaves the stack: where an evaluation point finds runs stopped, the group goes on with
the others alone (:class:`_Stack`; weights, Adam state, learning rates and batch orders taken along
the run axis, the iteration's buffers and the evaluator rebuilt for the smaller R, a CUDA graph
captured again), so a stopped run costs nothing after the check that found it; the group ends when
every run stopped. Runs are independent along the run axis, so shedding changes no run's numbers
beyond the last bits a change of stack size can move (tested against each run trained alone).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline.data import load_split, normalised
from pipeline.studies.mupc.engine.energy import Adam, EnergyTerms, InferenceConfig, PCEngine, act_into
from pipeline.studies.mupc.engine.iteration import GroupIteration, Outputs, cuda_capture, graphs_available
from pipeline.studies.mupc.engine.model import NetSpec, Weights, init_weights, multipliers, phi
from pipeline.studies.mupc.engine.runs import RunConfig
from pipeline.studies.mupc.training import hessian_monitor
from pipeline.studies.mupc.training.cost import GRAPH_MAX_STEP_BYTES, graphs_skipped
from pipeline.studies.mupc.training.sweep_expansion import stack_key

NO_LEARNING_ACC = 15.0
DATA_STATS = {"mnist": (0.1307, 0.3081), "fashion_mnist": (0.5, 0.5)}


# ----------------------------------------------------------------------------- data


@dataclass
class DataSet:
    """Device-resident normalised, flattened images and one-hot labels of one dataset."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor  # first n_test // 64 * 64 images (drop_last)
    y_test: torch.Tensor
    subset: dict[str, int | None] = field(default_factory=dict)


def load_dataset(name: str, n_train: int | None, n_test: int | None, device: str | torch.device,
                 dtype: torch.dtype = torch.float32, batch_size: int = 64, root: Any = None) -> DataSet:
    mean, std = DATA_STATS[name]
    out = []
    for train, n in ((True, n_train), (False, n_test)):
        split = load_split(name, train, root=None if root is None else Path(root) / name)
        imgs, labels = split.images, split.labels
        if n is not None:
            imgs, labels = imgs[:n], labels[:n]
        if not train:
            keep = len(labels) // batch_size * batch_size
            imgs, labels = imgs[:keep], labels[:keep]
        x = normalised(imgs, mean, std, device=device, dtype=dtype).reshape(len(labels), -1)
        y = torch.nn.functional.one_hot(labels, 10).to(device=device, dtype=dtype)
        out += [x, y]
    return DataSet(*out, subset={"n_train": n_train, "n_test": n_test})


def batch_orders(seed: int, n: int, batch_size: int, epochs: int) -> torch.Tensor:
    """The run's batch indices [epochs · n // B, B]: a fresh shuffle per epoch from its own generator,
    drop_last (60000 // 64 = 937 iterations per epoch)."""
    gen = torch.Generator().manual_seed(int(seed))
    per = n // batch_size
    return torch.cat([torch.randperm(n, generator=gen)[: per * batch_size].view(per, batch_size)
                      for _ in range(epochs)])


# ----------------------------------------------------------------------------- evaluation


def predict(spec: NetSpec, w: Weights, x: torch.Tensor) -> torch.Tensor:
    """Feed-forward output ŷ [R, B, d_y] without keeping the activities (evaluation)."""
    m, R, N = multipliers(spec), w.runs, spec.N
    if x.dim() == 2:  # shared inputs: all runs' first layers as one product [n, R·N]
        z = (m.a_in * (x @ w.w_in.reshape(R * N, -1).T)).view(len(x), R, N).transpose(0, 1)
    else:
        z = m.a_in * torch.matmul(x, w.w_in.transpose(-1, -2))
    hidden = w.w_hid.unbind(1)  # not a slice per layer: BP differentiates this (model.feedforward says why)
    for ell in range(spec.H - 1):
        z = torch.baddbmm(z, phi(spec.act, z), hidden[ell].transpose(-1, -2), beta=m.s, alpha=m.a_hid)
    return m.a_out * torch.matmul(phi(spec.act, z), w.w_out.transpose(-1, -2))


class Evaluator:
    """Test accuracy (%) and loss per run [R] on the kept test images (batches of 64, drop_last), as
    :func:`predict` computes ŷ, on buffers made once per group.

    At a stack's sizes every intermediate is hundreds of kilobytes to megabytes; allocated afresh at
    each evaluation, each one is mapped and page-faulted in again (``benchmarks/pc_evaluation.py``
    measures both ways)."""

    def __init__(self, spec: NetSpec, R: int, data: DataSet, half_mse: bool, max_elems: int = 2**26):
        self.spec, self.R, self.data, self.half_mse = spec, R, data, half_mse
        self.m = multipliers(spec)
        n, N, d_y = len(data.y_test), spec.N, data.y_test.shape[1]
        self.chunk = max(64, min(n, (max_elems // max(1, R * N)) // 64 * 64))
        c, dev, dt = min(self.chunk, n), data.x_test.device, data.x_test.dtype

        def buf(*s: int) -> torch.Tensor:
            return torch.empty(*s, dtype=dt, device=dev)

        self.first, self.z, self.p = buf(c, R * N), buf(R, c, N), buf(R, c, N)
        self.y_hat, self.diff = buf(R, c, d_y), buf(R, c, d_y)
        self.labels = data.y_test.argmax(-1)

    def _phi(self, z: torch.Tensor, p: torch.Tensor) -> None:
        """φ(z) into its own buffer (a product must not read the tensor it writes)."""
        if self.spec.act == "linear":
            p.copy_(z)
        else:
            act_into(self.spec.act, z, p, None)

    @torch.no_grad()
    def __call__(self, w: Weights) -> tuple[torch.Tensor, torch.Tensor]:
        s, m, R, N, data = self.spec, self.m, self.R, self.spec.N, self.data
        if w.runs != R:
            raise ValueError(f"weights hold {w.runs} runs, the evaluator {R}")
        n = len(data.y_test)
        correct = torch.zeros(R, device=data.x_test.device)
        sq = torch.zeros(R, device=data.x_test.device, dtype=torch.float64)
        w_in = w.w_in.reshape(R * N, -1).T
        for i in range(0, n, self.chunk):
            x, y = data.x_test[i:i + self.chunk], data.y_test[i:i + self.chunk]
            c = len(x)
            first, z, p, y_hat = self.first[:c], self.z[:, :c], self.p[:, :c], self.y_hat[:, :c]
            torch.mm(x, w_in, out=first)  # shared inputs: all runs' first layers as one product [c, R·N]
            torch.mul(first.view(c, R, N).transpose(0, 1), m.a_in, out=z)
            for ell in range(s.H - 1):
                self._phi(z, p)
                z.baddbmm_(p, w.w_hid[:, ell].transpose(-1, -2), beta=m.s, alpha=m.a_hid)
            self._phi(z, p)
            torch.bmm(p, w.w_out.transpose(-1, -2), out=y_hat)
            y_hat.mul_(m.a_out)
            correct += (y_hat.argmax(-1) == self.labels[i:i + c]).sum(-1)
            sq += torch.sub(y_hat, y, out=self.diff[:, :c]).square_().sum(dim=(1, 2)).double()
        acc = 100.0 * correct / n
        loss = sq / (n * data.y_test.shape[-1]) * (0.5 if self.half_mse else 1.0)
        return acc.cpu(), loss.cpu()


def evaluate(spec: NetSpec, w: Weights, data: DataSet, half_mse: bool,
             max_elems: int = 2**26) -> tuple[torch.Tensor, torch.Tensor]:
    """One :class:`Evaluator` call (a loop evaluating many times keeps the evaluator)."""
    return Evaluator(spec, w.runs, data, half_mse, max_elems)(w)


# ----------------------------------------------------------------------------- results


@dataclass
class RunResult:
    rc: RunConfig
    status: str
    arrays: dict[str, np.ndarray]
    stop_iter: int  # iterations performed (= len(batch_train_losses))
    extra: dict[str, Any] = field(default_factory=dict)


def net_spec(rc: RunConfig, D: int = 784, d_y: int = 10) -> NetSpec:
    gain = 1.05 if (rc.init == "orthogonal" and rc.act == "tanh") else 1.0
    skips = True if rc.method == "bp" else rc.skips
    return NetSpec(D=D, N=rc.N, H=rc.H, d_y=d_y, act=rc.act, skips=skips, param=rc.param, init=rc.init,
                   orth_gain=gain)


class _Book:
    """Per-run bookkeeping of a stacked group: active mask, truncation, arrays."""

    def __init__(self, runs: list[RunConfig], n_iters: int, hessian: bool):
        R = len(runs)
        self.runs = runs
        self.active = np.ones(R, dtype=bool)
        self.status = ["finished"] * R
        self.stop = np.full(R, n_iters, dtype=np.int64)  # iterations recorded per run
        self.test_accs: list[list[float]] = [[] for _ in range(R)]
        self.test_losses: list[list[float]] = [[] for _ in range(R)]
        self.hessian = hessian
        self.hrows: list[list[tuple[float, float, float]]] = [[] for _ in range(R)]
        self.hmethod = ""
        self.checked = 0  # losses checked up to this iteration

    def check_losses(self, losses: torch.Tensor, upto: int) -> None:
        """Mark runs whose train loss became non-finite in iterations (checked, upto] as diverged."""
        if upto <= self.checked:
            return
        chunk = losses[self.checked:upto].cpu().numpy()  # [k, R]
        bad = ~np.isfinite(chunk)
        for r in np.flatnonzero(self.active & bad.any(0)):
            first = int(np.argmax(bad[:, r]))
            self.active[r] = False
            self.status[r] = "diverged"
            self.stop[r] = self.checked + first + 1  # the non-finite loss is the last entry
        self.checked = upto

    def kept(self, live: np.ndarray) -> np.ndarray:
        """Positions in a stack of the runs ``live`` (group indices) that are still active."""
        return np.flatnonzero(self.active[live])

    def record_eval(self, live: np.ndarray, acc: torch.Tensor, loss: torch.Tensor) -> None:
        """Record an evaluation of the stack ``live`` (values per stack position) for its active runs."""
        for j in self.kept(live):
            self.test_accs[live[j]].append(float(acc[j]))
            self.test_losses[live[j]].append(float(loss[j]))

    def apply_no_learning(self, k: int) -> None:
        for r in np.flatnonzero(self.active):
            if self.test_accs[r] and self.test_accs[r][-1] < NO_LEARNING_ACC:
                self.active[r] = False
                self.status[r] = "no_learning"
                self.stop[r] = k

    def record_hessian(self, lo: torch.Tensor, hi: torch.Tensor, kappa: torch.Tensor, method: str,
                       idx: np.ndarray) -> None:
        self.hmethod = method
        for j, r in enumerate(idx):
            self.hrows[r].append((float(lo[j]), float(hi[j]), float(kappa[j])))

    def results(self, losses: torch.Tensor, n_conv: torch.Tensor | None, seconds: float) -> list[RunResult]:
        L = losses.cpu().numpy()
        C = n_conv.cpu().numpy() if n_conv is not None else None
        out = []
        for r, rc in enumerate(self.runs):
            s = int(self.stop[r])
            arrays = {"batch_train_losses": L[:s, r].astype(np.float32),
                      "test_accs": np.asarray(self.test_accs[r], dtype=np.float64),
                      "test_losses": np.asarray(self.test_losses[r], dtype=np.float64)}
            if C is not None:
                arrays["n_infer_iters"] = C[:s, r].astype(np.int64)
            if self.hessian:
                rows = np.asarray(self.hrows[r], dtype=np.float64).reshape(-1, 3)
                arrays["lambda_min"], arrays["lambda_max"], arrays["cond_nums"] = rows[:, 0], rows[:, 1], rows[:, 2]
            extra: dict[str, Any] = {"group_size": len(self.runs)}  # the group's seconds: MLflow only (train.py)
            if self.hessian:
                extra["hessian_method"] = self.hmethod
            out.append(RunResult(rc, self.status[r], arrays, s, extra))
        return out


@dataclass
class _Stack:
    """The runs a group still trains, in stack order: their indices in the group (``live``; on the device,
    ``cols``: their columns of the group's arrays [n_iters, R]), their batch orders [n_iters, R', B] and
    an evaluator for R' runs. :meth:`select` sheds the others."""

    live: np.ndarray
    cols: torch.Tensor
    orders: torch.Tensor
    evaluate: Evaluator

    @classmethod
    def of(cls, orders: torch.Tensor, evaluate: Evaluator) -> _Stack:
        R = orders.shape[1]
        return cls(np.arange(R), torch.arange(R, device=orders.device), orders, evaluate)

    def select(self, keep: np.ndarray) -> _Stack:
        """The stack of positions ``keep`` alone (each run's batch order is its own, so it goes on unchanged)."""
        idx = torch.as_tensor(keep, dtype=torch.long, device=self.orders.device)
        ev = self.evaluate
        return _Stack(self.live[keep], self.cols.index_select(0, idx), self.orders.index_select(1, idx),
                      Evaluator(ev.spec, len(keep), ev.data, ev.half_mse))


def _graph_note(graphs: bool, off: str | None) -> dict[str, Any]:
    """What a run records of CUDA graphs: ``cuda_graphs`` whether it trained on them throughout, and where the
    params asked for them but a capture failed, ``cuda_graphs_off``: why not."""
    return {"cuda_graphs": graphs and off is None, **({"cuda_graphs_off": off} if off else {})}


def _record(arr: torch.Tensor, i: int, cols: torch.Tensor, values: torch.Tensor) -> None:
    """Row i of a group's array [n_iters, R] for the stack's runs (``cols``), on the device (no sync)."""
    arr[i].index_copy_(0, cols, values)


def _group_start(runs: list[RunConfig], data: DataSet, device: str | torch.device,
                 dtype: torch.dtype) -> tuple[NetSpec, torch.Tensor, Weights]:
    """A group's net, its runs' batch orders ``[iterations, R, B]`` and their initial weights, each run's from its
    own seed (the PC and BP trainers start alike)."""
    rc0 = runs[0]
    spec = net_spec(rc0, data.x_train.shape[1], data.y_train.shape[1])
    orders = torch.stack([batch_orders(rc.seed, len(data.y_train), rc0.batch_size, rc0.epochs) for rc in runs],
                         1).to(device)
    return spec, orders, init_weights(spec, [rc.seed for rc in runs], dtype=dtype, device=device)


# ----------------------------------------------------------------------------- PC


def train_pc_group(runs: list[RunConfig], data: DataSet, device: str | torch.device,
                   dtype: torch.dtype = torch.float32, hessian_dense_max_n: int = hessian_monitor.DENSE_CROSSOVER_N,
                   cuda_graphs: bool = True, engine: str = "standard") -> list[RunResult]:
    """Train a stackable group of PC runs together; one RunResult per run (order kept).

    The iteration runs on :class:`~pipeline.studies.mupc.engine.iteration.GroupIteration`'s static buffers; the
    weights live in its storage (hidden layers layer-major, ``[H-1, R, N, N]``) and are updated in place;
    ``it.w`` is the run-major view of that storage the other functions take. Where an evaluation point finds
    runs stopped, the group goes on with the others alone (:meth:`GroupIteration.shed`, :meth:`_Stack.select`).
    With ``cuda_graphs`` on a CUDA device the iteration is captured and replayed, captured again after
    each shedding (after the check of :meth:`~pipeline.studies.mupc.engine.iteration.GroupIteration.enable_graph`;
    where it fails the group trains eagerly from there on); each run records ``cuda_graphs``: whether it
    trained on graphs throughout (``cuda_graphs_off``: why not). ``engine``: the engine's route (``standard`` or
    ``fused``, :class:`~pipeline.studies.mupc.engine.energy.PCEngine`), recorded by each run."""
    t0 = time.time()
    rc0 = runs[0]
    B, R = rc0.batch_size, len(runs)
    spec, orders, w0 = _group_start(runs, data, device, dtype)
    n_iters = orders.shape[0]
    inf_cfg = InferenceConfig(steps=rc0.T, optim=rc0.act_optim, activity_decay=rc0.activity_decay)
    terms = EnergyTerms(rc0.activity_decay, rc0.weight_decay, rc0.spectral_penalty)
    it = GroupIteration(spec, w0, B, inf_cfg, terms, [rc.act_lr for rc in runs], [rc.param_lr for rc in runs],
                        data.x_train, data.y_train, device, dtype, engine)
    del w0
    hess = rc0.metrics == "hessian"
    book = _Book(runs, n_iters, hess)
    stack = _Stack.of(orders, Evaluator(spec, R, data, half_mse=True))
    losses = torch.empty(n_iters, R, dtype=dtype, device=device)
    n_conv = torch.empty(n_iters, R, dtype=torch.long, device=device)
    graphs = cuda_graphs and graphs_available(device)
    graphs_off: str | None = None  # why the group trains eagerly from some capture on (a failed capture: for good)
    skipped: str | None = None  # why a stack of the group was not captured (graphs would not pay there)
    skipped_r = 0  # the stack size the rule last turned down (a shed stack is judged again)
    notes: dict[int, dict[str, Any]] = {}  # per run that left the stack: its graph note then

    with torch.no_grad():
        for i in range(n_iters):
            k = i + 1
            if graphs and graphs_off is None and it.replay is None and skipped_r != it.R:  # first or shed stack
                why = graphs_pay(rc0, spec, it.R, dtype)
                if why is None:
                    graphs_off = it.enable_graph([stack.orders[i], stack.orders[min(i + 1, n_iters - 1)]],
                                                 capture_iteration)
                else:
                    skipped, skipped_r = why, it.R
            it.load(stack.orders[i])
            if it.replay is not None and not (hess and i == 0):
                loss, conv = it.step()  # the graph's static outputs, copied on the device
            else:
                loss = it.feedforward()
                if hess and i == 0:  # row 0: feed-forward activities, initial weights
                    _hessian_row(book, spec, it, stack.live, np.arange(R), rc0.activity_decay, hessian_dense_max_n)
                conv = it.finish()
            _record(losses, i, stack.cols, loss)
            _record(n_conv, i, stack.cols, conv)
            if k % rc0.test_every == 0 or k == n_iters:
                book.check_losses(losses, k)
                if k % rc0.test_every == 0 and book.active.any():
                    acc, tl = stack.evaluate(it.w)
                    book.record_eval(stack.live, acc, tl)
                    if hess:
                        _hessian_row(book, spec, it, stack.live, book.kept(stack.live), rc0.activity_decay,
                                     hessian_dense_max_n)
                    book.apply_no_learning(k)
                keep = book.kept(stack.live)
                notes.update({int(r): _graph_note(graphs, graphs_off or skipped) for r in stack.live
                              if not book.active[r]})
                if len(keep) == 0 or k == n_iters:
                    break
                if len(keep) < len(stack.live):  # shed the stopped runs
                    stack, it = stack.select(keep), it.shed(keep)
    results = book.results(losses, n_conv, time.time() - t0)
    for r, res in enumerate(results):
        res.extra.update(notes.get(r) or _graph_note(graphs, graphs_off or skipped))
        res.extra["engine"] = engine
    return results


def _hessian_row(book: _Book, spec: NetSpec, it: GroupIteration, live: np.ndarray, pos: np.ndarray, decay: float,
                 dense_max_n: int) -> None:
    """The Hessian monitor's row for the runs at stack positions ``pos`` (each one's first sample of the loaded
    batch, at the activities the iteration left), recorded for them. A function of its own so that nothing it
    takes (a copy of the weights among them) outlives it, into the stack's shedding."""
    w, x, y, z = it.w, it.x, it.y, it.engine.runs_view(it.engine.z)
    if len(pos) < it.R:  # runs stopped at this evaluation: their rows are not recorded
        sel = torch.as_tensor(pos, device=it.device)
        w, x, y, z = Weights(*(t[sel] for t in w.tensors())), x[sel], y[sel], z[sel]
    lo, hi, kap, meth = hessian_monitor.monitor(spec, w, x, y, z, decay, dense_max_n)
    book.record_hessian(lo, hi, kap, meth, live[pos])


def graphs_pay(rc: RunConfig, spec: NetSpec, R: int, dtype: torch.dtype) -> str | None:
    """None where a CUDA graph of a stack of ``R`` such runs is expected to pay, else why not
    (:func:`~pipeline.studies.mupc.training.cost.graphs_skipped` at :data:`GRAPH_MAX_STEP_BYTES`)."""
    return graphs_skipped(spec.N, spec.H, rc.T, spec.act, R, rc.batch_size, dtype.itemsize, GRAPH_MAX_STEP_BYTES)


def capture_iteration(fn: Callable[[], Outputs]) -> tuple[Callable[[], None], Outputs]:
    """How the trainer captures an iteration (``iteration.cuda_capture``; a seam for the tests)."""
    return cuda_capture(fn)


# ----------------------------------------------------------------------------- BP


def train_bp_group(runs: list[RunConfig], data: DataSet, device: str | torch.device,
                   dtype: torch.dtype = torch.float32) -> list[RunResult]:
    """BP with Depth-μP (skips, 1/√D, 1/√(N·L), 1/N; N(0,1) weights), loss mean (y − ŷ)², Adam."""
    t0 = time.time()
    rc0 = runs[0]
    R = len(runs)
    spec, orders, w = _group_start(runs, data, device, dtype)
    n_iters = orders.shape[0]
    opt = Adam(w.tensors(), torch.tensor([rc.param_lr for rc in runs], dtype=dtype, device=device))
    book = _Book(runs, n_iters, False)
    stack = _Stack.of(orders, Evaluator(spec, R, data, half_mse=False))
    losses = torch.empty(n_iters, R, dtype=dtype, device=device)
    for i in range(n_iters):
        k = i + 1
        idx = stack.orders[i]
        x, y = data.x_train[idx], data.y_train[idx]
        params = [t.detach().requires_grad_(True) for t in w.tensors()]
        y_hat = predict(spec, Weights(*params), x)
        per_run = (y - y_hat).pow(2).mean(dim=(1, 2))
        grads = torch.autograd.grad(per_run.sum(), params)  # runs are independent: ∂(Σ_r ℓ_r)/∂W_r = ∂ℓ_r/∂W_r
        _record(losses, i, stack.cols, per_run.detach())
        with torch.no_grad():
            w = Weights(*opt.step([p.detach() for p in params], list(grads)))
            if k % rc0.test_every == 0 or k == n_iters:
                book.check_losses(losses, k)
                if k % rc0.test_every == 0 and book.active.any():
                    acc, tl = stack.evaluate(w)
                    book.record_eval(stack.live, acc, tl)
                    book.apply_no_learning(k)
                keep = book.kept(stack.live)
                if len(keep) == 0 or k == n_iters:
                    break
                if len(keep) < len(stack.live):  # shed the stopped runs
                    sel = torch.as_tensor(keep, dtype=torch.long, device=w.w_in.device)
                    w = Weights(*(t.index_select(0, sel) for t in w.tensors()))
                    stack, opt = stack.select(keep), opt.select(sel)
    return book.results(losses, None, time.time() - t0)


_LAYOUTS: dict[tuple, tuple[int, dict[int, float]]] = {}


def _sync(device: str | torch.device) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def stack_layout(rc: RunConfig, R: int, D: int, d_y: int, device: str | torch.device,
                 dtype: torch.dtype) -> tuple[int, dict[int, float]]:
    """Runs per stack for R stackable PC runs on this device, chosen by measurement (cached per process).

    Stacking pays where one run's products are too small to fill the device (small N, GPUs); on one CPU
    thread at N = 128 nine stacked runs stream their weights from L3 at every product, while one run's
    stay in L2, so one by one is faster there. The probe times a feed-forward pass plus two inference
    steps of the engine for 1, 3 and R runs per stack on random weights (best of three) and returns
    the best size and the measured training-step rates (runs · steps / s) per size."""
    sizes = sorted({1, min(3, R), R})
    key = (str(device), dtype, rc.N, rc.H, rc.act, rc.skips, rc.batch_size, rc.act_optim, D, d_y, tuple(sizes))
    if key in _LAYOUTS:
        return _LAYOUTS[key]
    spec = net_spec(rc, D, d_y)
    rates: dict[int, float] = {}
    with torch.no_grad():
        for k in sizes:
            eng = PCEngine(spec, k, rc.batch_size, InferenceConfig(steps=2, optim=rc.act_optim), dtype=dtype,
                           device=device)
            eng.bind(init_weights(spec, list(range(k)), dtype=dtype, device=device))
            x = torch.randn(k, rc.batch_size, D, dtype=dtype, device=device)
            y = torch.randn(k, rc.batch_size, d_y, dtype=dtype, device=device)
            best = float("inf")
            for rep in range(4):  # the first round warms up
                _sync(device)
                t = time.perf_counter()
                eng.feedforward(x, y)
                eng.infer(0.1)
                _sync(device)
                if rep:
                    best = min(best, time.perf_counter() - t)
            rates[k] = 3 * k / best
    choice = max(sizes, key=lambda k: (rates[k], k))
    _LAYOUTS[key] = (choice, rates)
    return choice, rates


AUTO_STACK_MAX_N = 64  # on one CPU thread stacking pays at N = 16 and costs at N = 128 (benchmarks/pc_training.py)


def auto_layout(rc: RunConfig, R: int, device: str | torch.device) -> int:
    """Runs per stack by a fixed rule: all of them on a GPU, and on the CPU while one run's products
    are too small to fill the core (N ≤ AUTO_STACK_MAX_N); else one by one."""
    if not str(device).startswith("cpu") or rc.N <= AUTO_STACK_MAX_N:
        return R
    return 1


def train_group(runs: list[RunConfig], data: DataSet, device: str | torch.device,
                dtype: torch.dtype = torch.float32, hessian_dense_max_n: int = hessian_monitor.DENSE_CROSSOVER_N,
                layout: str = "auto", cuda_graphs: bool = True, engine: str = "standard") -> list[RunResult]:
    """Train runs that share one stack key (see ``sweeps.stack_key``) together.

    ``layout`` (PC only): ``stacked`` trains the group as one stack, ``sequential`` run by run,
    ``measure`` in stacks of the size :func:`stack_layout` measured fastest on this device, ``auto`` by
    :func:`auto_layout`, a fixed rule drawn from those measurements. A run's numbers can differ in the
    last float bits between stack sizes (batched products sum in another order), so the default must
    not depend on a timing: ``auto`` gives the same stacks on every rerun and every executor. Each run
    records the choice in ``stack_layout``. ``cuda_graphs``, ``engine``: see :func:`train_pc_group`."""
    if len({stack_key(rc) for rc in runs}) != 1:
        raise ValueError("train_group: runs differ in a shape/schedule field; split them with stack_groups")
    if runs[0].method == "bp":
        out = train_bp_group(runs, data, device, dtype)
        for res in out:
            res.extra["cuda_graphs"] = False
        return out
    R = len(runs)
    if layout not in ("auto", "measure", "stacked", "sequential"):
        raise ValueError(f"layout {layout!r} is not one of auto, measure, stacked, sequential")
    rates: dict[int, float] = {}
    if layout == "measure" and R > 1:
        size, rates = stack_layout(runs[0], R, data.x_train.shape[1], data.y_train.shape[1], device, dtype)
    elif layout == "auto":
        size = auto_layout(runs[0], R, device)
    else:
        size = 1 if layout == "sequential" else R
    out: list[RunResult] = []
    for i in range(0, R, size):
        out += train_pc_group(runs[i:i + size], data, device, dtype, hessian_dense_max_n, cuda_graphs, engine)
    note = {"runs_per_stack": size, "layout": layout,
            "measured_steps_per_s": {str(k): round(v, 1) for k, v in rates.items()}}
    for res in out:
        res.extra["stack_layout"] = note
    return out
