"""Calibration probes of mupc_training (``make plan``, the stage's plan line): one step of each shape, timed.

Each probe builds one step of a sweep's work with the trainer's own iteration on random data and returns
it with the FLOPs it computes (counted as ``cost.py`` counts them); the planner times it. A step above
``budget`` FLOPs is scaled down first, so no probe takes long where the real step would (N = 512, H = T =
128 executes ≈ 5·10¹¹ FLOPs per iteration): T is halved towards H (steps beyond the front all cost the
same), then H and T together down to 8 layers, then the runs per stack, then H again. On CUDA the runs per
stack go first (the budget there holds a whole 128-layer iteration of a few runs), and the iteration is
replayed from a CUDA graph where graphs are on (``graphs`` in the work's shape): an eager iteration of a
32-layer stand-in ran ≈ 6× slower per FLOP on an H100 than the 128-layer graph it stood for (the plan then
said 5 min 45 s for a sweep that trained in 52 s), and a large stack the trainer runs eagerly is bound by
bandwidth, where eager and replayed rates agree (1.01–1.04×) but its few-run stand-in's are not. The
estimate extrapolates the scaled step's seconds per FLOP to the real shape, N kept (so the products keep
their size).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from pipeline.device import cpu_threads
from pipeline.studies.mupc.engine.energy import Adam, EnergyTerms, InferenceConfig, PCEngine
from pipeline.studies.mupc.engine.iteration import GroupIteration
from pipeline.studies.mupc.engine.model import Weights, init_weights
from pipeline.studies.mupc.engine.runs import RunConfig
from pipeline.studies.mupc.training import hessian_monitor
from pipeline.studies.mupc.training.cost import (
    bp_iteration_flops,
    hessian_flops,
    iteration_flops,
)
from pipeline.studies.mupc.training.group_training import auto_layout, net_spec, predict
from pipeline.studies.mupc.training.train import DTYPES, set_precision

Step = tuple[Callable[[], None], float]
B, D, D_Y, MIN_LAYERS = 64, 784, 10, 8


def _dtype(precision: str) -> torch.dtype:
    return DTYPES["float64" if precision == "float64" else "float32"]


def _setup(threads: int, precision: str, device: str) -> None:
    if device.startswith("cpu"):
        torch.set_num_threads(cpu_threads(threads))
    set_precision(device, precision)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _batch(R: int, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(R, B, D, generator=g).to(device=device, dtype=dtype)
    y = torch.nn.functional.one_hot(torch.randint(0, D_Y, (R, B), generator=g), D_Y).to(device=device, dtype=dtype)
    return x, y


def scaled(flops: Callable[[int, int, int], float], H: int, T: int, R: int, budget: float,
           runs_first: bool = False) -> tuple[int, int, int]:
    """(H, T, R) reduced by the module's rule until ``flops(H, T, R)`` is within ``budget`` (``runs_first``: the
    runs per stack before the layers, CUDA's order)."""
    while flops(H, T, R) > budget:
        if runs_first and R > 1:
            R //= 2
        elif T > H:
            T = max(H, T // 2)
        elif H > MIN_LAYERS or (R == 1 and H > 1):
            h = max(1, H // 2)
            T, H = max(1, T * h // H), h
        elif R > 1:
            R //= 2
        else:
            break
    return H, T, R


def _run(N: int, H: int, T: int, act_optim: str, front: bool, method: str = "pc") -> RunConfig:
    return RunConfig(dataset="mnist", N=N, H=H, act="tanh", param="mupc", init="standard_gauss", skips=True, seed=0,
                     epochs=1, test_every=1, param_lr=1e-3, method=method, T=T, act_optim=act_optim, act_lr=0.1,
                     activity_decay=0.0 if front else 0.1)


def pc_step(*, N: int, H: int, T: int, runs: int, act_optim: str, front: bool, precision: str, threads: int,
            device: str, budget: float, graphs: bool = False) -> Step:
    """One PC training iteration (feed-forward, T inference steps, errors, weight gradients, Adam) of one stack
    as the trainer runs it (:class:`GroupIteration`, ``auto_layout`` runs per stack; ``graphs`` on CUDA:
    captured and replayed, eager where the capture or its check fails, as in the trainer)."""
    _setup(threads, precision, device)
    cuda = device.startswith("cuda")
    H, T, R = scaled(lambda h, t, r: r * iteration_flops(N, h, t, front=front)[1], H, T, runs, budget, cuda)
    rc = _run(N, H, T, act_optim, front)
    R = auto_layout(rc, R, device)
    spec, dtype = net_spec(rc), _dtype(precision)
    w0 = init_weights(spec, list(range(R)), dtype=dtype, device=device)
    x, y = _batch(1, dtype, device)
    x, y = x[0], y[0]  # a B-image training set: each run's batch is all of it, in its own order
    g = torch.Generator().manual_seed(1)
    orders = torch.stack([torch.randperm(B, generator=g).repeat(R, 1) for _ in range(2)]).to(device)
    it = GroupIteration(spec, w0, B, InferenceConfig(steps=T, optim=act_optim, activity_decay=rc.activity_decay),
                        EnergyTerms(activity_decay=rc.activity_decay), [rc.act_lr] * R, [rc.param_lr] * R, x, y,
                        device, dtype)
    del w0
    if graphs and cuda:
        it.enable_graph([orders[0], orders[1]])

    @torch.no_grad()
    def step() -> None:
        it.load(orders[0])
        it.step()
        _sync(device)

    return step, R * iteration_flops(N, H, T, front=front)[1]


def bp_step(*, N: int, H: int, runs: int, precision: str, threads: int, device: str, budget: float) -> Step:
    """One BP iteration (feed-forward, autograd, Adam) of a stack of runs, as ``train_bp_group`` forms it."""
    _setup(threads, precision, device)
    H, _, R = scaled(lambda h, t, r: r * bp_iteration_flops(N, h), H, 0, runs, budget)
    rc = _run(N, H, 0, "gd", True, method="bp")
    spec, dtype = net_spec(rc), _dtype(precision)
    w = init_weights(spec, list(range(R)), dtype=dtype, device=device)
    opt = Adam(w.tensors(), torch.full((R,), 1e-3, dtype=dtype, device=device))
    x, y = _batch(R, dtype, device)
    state = {"w": w}

    def step() -> None:
        params = [t.detach().requires_grad_(True) for t in state["w"].tensors()]
        per_run = (y - predict(spec, Weights(*params), x)).pow(2).mean(dim=(1, 2))
        grads = torch.autograd.grad(per_run.sum(), params)
        with torch.no_grad():
            state["w"] = Weights(*opt.step([p.detach() for p in params], list(grads)))
        _sync(device)

    return step, R * bp_iteration_flops(N, H)


def hessian(*, N: int, H: int, method: str, threads: int, device: str, budget: float) -> Step:
    """One Hessian-monitor call of one run (float64 blocks, dense ``eigvalsh`` or the structured extremes)."""
    _setup(threads, "float64", device)
    budget = budget / 8 if method == "structured" else budget  # ARPACK's Python loop: ≈ 0.1 GFLOP/s here
    while H > 1 and hessian_flops(N, H, method) > budget:
        H //= 2
    rc = _run(N, H, 1, "gd", True)
    spec = net_spec(rc)
    w = init_weights(spec, [0], dtype=torch.float32, device=device)
    x, y = _batch(1, torch.float32, device)
    engine = PCEngine(spec, 1, B, InferenceConfig(steps=1), device=device)
    engine.bind(w)
    engine.feedforward(x, y)
    z = engine.runs_view(engine.z)
    dense_max_n = N * H if method == "dense" else 0

    def step() -> None:
        hessian_monitor.monitor(spec, w, x, y, z, 0.0, dense_max_n)
        _sync(device)

    return step, hessian_flops(N, H, method)

