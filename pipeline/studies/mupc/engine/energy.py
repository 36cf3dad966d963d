"""PC energy, layer-parallel analytic gradients, inference and the weight step (spec §1.6–1.8, §1.11).

Conventions (kept from the reference so the notebook's learning rates mean the same thing):
errors ``ε_ℓ = z_ℓ − μ_ℓ(z_{ℓ−1})`` for ℓ ≤ H and ``ε_L = y − ŷ``; the optimiser sees the gradient of
the *batch-mean* energy, so plain GD with rate η moves each sample by η/B·g. All functions take the
run axis R first; per-run learning rates are tensors of shape [R].
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Literal

import torch

from pipeline.device import matmul_precision
from pipeline.studies.mupc.engine import fused
from pipeline.studies.mupc.engine.model import (
    Multipliers,
    NetSpec,
    Weights,
    _runs,
    dphi,
    input_prediction,
    multipliers,
    output_prediction,
    phi,
)


@dataclass(frozen=True)
class EnergyTerms:
    """Regularisers of §1.6 (all zero in the paper's experiments)."""

    activity_decay: float = 0.0
    weight_decay: float = 0.0
    spectral_penalty: float = 0.0


def errors(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
           m: Multipliers | None = None, mu_in: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Hidden errors ε [R, H, B, N] and output error ε_L = y − ŷ [R, B, d_y]."""
    m = m or multipliers(spec)
    mu1 = input_prediction(w, m, x) if mu_in is None else mu_in
    if spec.H > 1:
        mu_h = m.a_hid * torch.matmul(phi(spec.act, z[:, :-1]), w.w_hid.transpose(-1, -2))
        if m.s:
            mu_h = mu_h + m.s * z[:, :-1]
        eps = torch.cat([(z[:, 0] - mu1).unsqueeze(1), z[:, 1:] - mu_h], dim=1)
    else:
        eps = (z[:, 0] - mu1).unsqueeze(1)
    eps_out = _runs(y, w.runs) - output_prediction(spec, w, m, z[:, -1])
    return eps, eps_out


def energy(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
           terms: EnergyTerms = EnergyTerms()) -> torch.Tensor:
    """Batch energy F per run [R] (§1.6): mean over the batch of the summed squared errors / 2."""
    eps, eps_out = errors(spec, w, x, y, z)
    B = z.shape[2]
    f = 0.5 * (eps.pow(2).sum(dim=(1, 2, 3)) + eps_out.pow(2).sum(dim=(1, 2))) / B
    if terms.activity_decay:
        f = f + 0.5 * terms.activity_decay * z.pow(2).sum(dim=(1, 2, 3)) / B
    if terms.weight_decay:
        f = f + 0.5 * terms.weight_decay * sum(t.pow(2).flatten(1).sum(1) for t in w.tensors())
    if terms.spectral_penalty:
        f = f + 0.5 * terms.spectral_penalty * _spectral_penalty(w)
    return f


def _gram_minus_identity(t: torch.Tensor) -> torch.Tensor:
    g = torch.matmul(t.transpose(-1, -2), t)
    return g - torch.eye(g.shape[-1], dtype=t.dtype, device=t.device)


def _spectral_penalty(w: Weights) -> torch.Tensor:
    total = _gram_minus_identity(w.w_in).pow(2).sum(dim=(1, 2))
    total = total + _gram_minus_identity(w.w_hid).pow(2).sum(dim=(1, 2, 3))
    return total + _gram_minus_identity(w.w_out).pow(2).sum(dim=(1, 2))


def layer_losses(eps: torch.Tensor, eps_out: torch.Tensor) -> torch.Tensor:
    """Recorded layer energies Σ_b ½‖ε_ℓ,b‖² / B per run: [R, L]."""
    B = eps.shape[2]
    hid = 0.5 * eps.pow(2).sum(dim=(2, 3)) / B
    return torch.cat([hid, (0.5 * eps_out.pow(2).sum(dim=(1, 2)) / B).unsqueeze(1)], dim=1)


def activity_grad(spec: NetSpec, w: Weights, z: torch.Tensor, eps: torch.Tensor, eps_out: torch.Tensor,
                  m: Multipliers | None = None, activity_decay: float = 0.0) -> torch.Tensor:
    """∂F/∂z for the batch-mean energy, all layers at once: (ε_ℓ − J_ℓᵀ ε_{ℓ+1} + c_z z_ℓ) / B."""
    m = m or multipliers(spec)
    B = z.shape[2]
    back = torch.empty_like(z)
    if spec.H > 1:
        nxt = eps[:, 1:]
        back[:, :-1] = m.a_hid * dphi(spec.act, z[:, :-1]) * torch.matmul(nxt, w.w_hid) + m.s * nxt
    back[:, -1] = m.a_out * dphi(spec.act, z[:, -1]) * torch.matmul(eps_out, w.w_out)
    g = eps - back
    if activity_decay:
        g = g + activity_decay * z
    return g / B


def weight_grads(spec: NetSpec, w: Weights, x: torch.Tensor, z: torch.Tensor, eps: torch.Tensor,
                 eps_out: torch.Tensor, terms: EnergyTerms = EnergyTerms(),
                 m: Multipliers | None = None) -> Weights:
    """∂F/∂W at the given activities (§1.8), batch-mean, plus regulariser gradients."""
    m = m or multipliers(spec)
    B = z.shape[2]
    xr = _runs(x, w.runs)
    g_in = -(m.a_in / B) * torch.matmul(eps[:, 0].transpose(-1, -2), xr)
    if spec.H > 1:
        g_hid = -(m.a_hid / B) * torch.matmul(eps[:, 1:].transpose(-1, -2), phi(spec.act, z[:, :-1]))
    else:
        g_hid = torch.zeros_like(w.w_hid)
    g_out = -(m.a_out / B) * torch.matmul(eps_out.transpose(-1, -2), phi(spec.act, z[:, -1]))
    grads = Weights(g_in, g_hid, g_out)
    if terms.weight_decay:
        grads = Weights(*(g + terms.weight_decay * t for g, t in zip(grads.tensors(), w.tensors())))
    if terms.spectral_penalty:
        grads = Weights(*(g + 2.0 * terms.spectral_penalty * torch.matmul(t, _gram_minus_identity(t))
                          for g, t in zip(grads.tensors(), w.tensors())))
    return grads


# ----------------------------------------------------------------------------- optimisers


def _lr(lr: torch.Tensor | float, like: torch.Tensor) -> torch.Tensor | float:
    """Broadcast a per-run learning rate [R] against a tensor with the run axis first."""
    if isinstance(lr, torch.Tensor):
        return lr.to(like.dtype).reshape(-1, *([1] * (like.dim() - 1)))
    return lr


class Adam:
    """Element-wise Adam (β 0.9/0.999, ε 1e-8, as optax/torch) with a per-run learning rate [R]."""

    def __init__(self, params: list[torch.Tensor], lr: torch.Tensor | float, betas=(0.9, 0.999), eps=1e-8):
        self.lr, self.b1, self.b2, self.eps = lr, betas[0], betas[1], eps
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = 0

    def step(self, params: list[torch.Tensor], grads: list[torch.Tensor]) -> list[torch.Tensor]:
        c1, c2 = self.moments(grads)
        return [p - _lr(self.lr, p) * self.direction(m, v, c1, c2) for p, m, v in zip(params, self.m, self.v)]

    def moments(self, grads: list[torch.Tensor]) -> tuple[float, float]:
        """Count a step and move the moments by ``grads`` (in place); returns the step's bias corrections."""
        self.t += 1
        for m, v, g in zip(self.m, self.v, grads):
            m.mul_(self.b1).add_(g, alpha=1 - self.b1)
            v.mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
        return 1 - self.b1**self.t, 1 - self.b2**self.t

    def direction(self, m: torch.Tensor, v: torch.Tensor, c1: float, c2: float) -> torch.Tensor:
        """The step's direction from (a block of) the moments: element-wise, so a block of them gives the same
        numbers as the whole."""
        return (m / c1) / ((v / c2).sqrt() + self.eps)

    def select(self, idx: torch.Tensor) -> Adam:
        """This optimiser for the runs ``idx`` alone (run axis first): their moments, learning rates and the
        step count, so those runs go on as they would have in the larger stack (a stack shedding stopped runs)."""
        out = copy.copy(self)
        out.lr = self.lr.index_select(0, idx) if isinstance(self.lr, torch.Tensor) else self.lr
        out.m = [t.index_select(0, idx) for t in self.m]
        out.v = [t.index_select(0, idx) for t in self.v]
        return out


@dataclass(frozen=True)
class InferenceConfig:
    steps: int  # T = max_infer_iters, no early stopping
    optim: Literal["gd", "adam"] = "gd"
    activity_decay: float = 0.0
    conv_threshold: float = 1e-3  # for the n_infer_iters log (RMS of the activity gradient)


@dataclass
class InferenceResult:
    z: torch.Tensor  # [R, H, B, N] final activities
    n_converged: torch.Tensor  # [R] last step index with grad RMS below the threshold, else T


def infer(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, z0: torch.Tensor,
          lr: torch.Tensor | float, cfg: InferenceConfig) -> InferenceResult:
    """Synchronous inference: T steps of GD or Adam (fresh state per batch) on the batch-mean energy."""
    m = multipliers(spec)
    mu1 = input_prediction(w, m, x)
    z = z0.clone()
    opt = Adam([z], lr) if cfg.optim == "adam" else None
    R = z.shape[0]
    n_conv = torch.full((R,), cfg.steps, dtype=torch.long, device=z.device)
    for t in range(cfg.steps):
        eps, eps_out = errors(spec, w, x, y, z, m, mu1)
        g = activity_grad(spec, w, z, eps, eps_out, m, cfg.activity_decay)
        if opt is None:
            z = z - _lr(lr, z) * g
        else:
            (z,) = opt.step([z], [g])
        rms = g.pow(2).flatten(1).mean(1).sqrt()
        n_conv = torch.where(rms < cfg.conv_threshold, torch.full_like(n_conv, t), n_conv)
    return InferenceResult(z, n_conv)


def train_loss(y_hat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Logged PC loss per run: ½ · mean over (B × d_y) of (y − ŷ)² (§1.9)."""
    return 0.5 * (_runs(y, y_hat.shape[0]) - y_hat).pow(2).mean(dim=(1, 2))


# ----------------------------------------------------------------------------- layer-batched engine


def act_into(act: str, z: torch.Tensor, p: torch.Tensor, d: torch.Tensor | None) -> None:
    """p = φ(z) and d = φ'(z), written into preallocated buffers (linear: p is z, d is unused)."""
    if act == "relu":
        torch.clamp_min(z, 0.0, out=p)
        if d is not None:
            torch.sign(p, out=d)  # 1 where z > 0, else 0 (φ'(0) = 0, as dphi)
    elif act == "tanh":
        torch.tanh(z, out=p)
        if d is not None:
            torch.addcmul(p.new_ones(()), p, p, value=-1.0, out=d)  # 1 − tanh², as dphi
    elif act != "linear":
        raise ValueError(f"activation {act!r} is not one of linear, tanh, relu")


def layer_major(w_hid: torch.Tensor) -> torch.Tensor:
    """Hidden weights [R, H-1, N, N] as the bmm batch [(H-1)·R, N, N], layer-major (index ℓ·R + r).

    A view when the storage is already layer-major (``w_hid = store.transpose(0, 1)`` with ``store``
    contiguous [H-1, R, N, N], as the trainer keeps it), else one copy."""
    R, L1, N, M = w_hid.shape
    return w_hid.transpose(0, 1).reshape(L1 * R, N, M)


class PCEngine:
    """A stacked group's PC iteration on preallocated, layer-major buffers (spec §1.6–1.8).

    Activities, errors, activity gradients and φ(z) are [H, R, B, N] tensors, layer-major, so with the
    activities known every hidden layer of every run goes through one ``bmm`` per product and inference
    step (batch [layers × runs]) instead of a Python loop over layers; ``W_1 x`` is computed once per batch;
    element-wise work is done in place on views made once. The numbers are those of :func:`errors`,
    :func:`activity_grad`, :func:`infer` and :func:`weight_grads` to float round-off.

    Use: :meth:`bind` the weights (views; rebinding is needed only when the tensors are replaced),
    :meth:`feedforward` (takes the batch, activity init, returns the train loss), :meth:`infer`,
    :meth:`errors` (at the final activities), :meth:`weight_grads`. Predictions μ_ℓ are formed exactly as the
    feed-forward pass forms them, so a layer whose input has not moved has an error of exactly 0 (as in
    :func:`errors`; Adam would turn round-off there into full-size steps).

    **The inference front.** From the feed-forward point (and without activity decay) only ε_L is nonzero;
    step t moves the top t+1 layers and leaves every layer below with an error, a gradient and a move of
    exactly 0. With ``front`` (the default) the engine computes only the layers the signal has reached: the
    top t layers' errors and the top t+1 layers' gradients at step t, the top min(T, H) layers' weight
    gradients at the end (exact zeros below). The numbers are those of the whole computation, bit for bit
    (tested). Step t's hidden products cover min(t, H-1) of the H-1 layers, so it pays where T is not much
    larger than H (``benchmarks/pc_training.py`` measures it). ``front=False`` computes every layer at every
    step.
    """

    def __init__(self, spec: NetSpec, R: int, B: int, cfg: InferenceConfig, *, dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu", front: bool = True, route: str = "standard"):
        check_route(route, device, front)
        self.spec, self.R, self.B, self.cfg, self.route = spec, R, B, cfg, route
        self.m = multipliers(spec)
        H, N = spec.H, spec.N
        shape = (H, R, B, N)

        def buf(*s: int) -> torch.Tensor:
            return torch.zeros(*s, dtype=dtype, device=device)

        self.z, self.E, self.T, self.G = buf(*shape), buf(*shape), buf(*shape), buf(*shape)
        linear = spec.act == "linear"
        self.P = self.z if linear else buf(*shape)  # φ(z)
        self.D = None if linear else buf(*shape)  # φ'(z)
        self.mu1 = buf(R, B, N)
        self.eps_out = buf(R, B, spec.d_y)
        self.y: torch.Tensor | None = None  # the batch's targets [R, B, d_y], taken by feedforward / set_activities
        self.gnorm = buf(max(cfg.steps, 1), R)  # ‖B·∂F/∂z‖ per step and run
        self._layer_norms = buf(H * R)
        self.adam_m = buf(*shape) if cfg.optim == "adam" else None
        self.adam_v = buf(*shape) if cfg.optim == "adam" else None
        self.at_feedforward = False
        self.use_front = front and not cfg.activity_decay  # decay moves every layer from the first step
        self.reached = H  # top layers whose errors may be nonzero (the rest are exactly 0)
        self.z_layers, self.P_layers, self.E0 = self.z.unbind(0), self.P.unbind(0), self.E[0]
        self.v_last = {k: t[-1] for k, t in self._bufs().items()}
        self._views: dict[int, dict[str, torch.Tensor]] = {}  # per front size: made once, reused every step
        self._partials: torch.Tensor | None = None  # the fused route's Σ G² per (layer, run) row and tile
        if route == "fused":
            self._fused, self._tiles = fused, fused.TILES
            self._tf32 = matmul_precision(str(device)) == "tf32"  # as the engine's torch products compute
            self._partials = buf(H * R, fused.tiles(B, N, self._tiles))
            # the hidden weights stored transposed, copied at each infer: the step kernel's ε W reads a program's
            # column strip of W, which is one contiguous block here (on an H100 the step kernel took 4.46 ms
            # instead of 6.88 at 64 runs of 512:128; tests/mupc_training/fixtures/fused/step_wt_39a097d.json)
            self._w_cols = buf((H - 1) * R, N, N)

    def _bufs(self) -> dict[str, torch.Tensor]:
        out = {"z": self.z, "E": self.E, "T": self.T, "G": self.G, "P": self.P}
        if self.D is not None:
            out["D"] = self.D
        if self.adam_m is not None:
            out["m"], out["v"] = self.adam_m, self.adam_v
        return out

    def _top(self, k: int) -> dict[str, torch.Tensor]:
        """Views for an error front of k layers (slicing in the step loop costs more than the small
        element-wise kernels, so each set is made once): ``top:*`` the top min(k+1, H) layers (gradient,
        φ, update), ``lo:*``/``hi:*`` the c = min(k, H-1) hidden products' rows below/above, as [H', R, B, N]
        and flat ``flo:*``/``fhi:*`` [c·R, B, N], and the c layers' hidden weights ``w``/``wt``."""
        if k in self._views:
            return self._views[k]
        H, R, B = self.spec.H, self.R, self.B
        g, c = min(k + 1, H), min(k, H - 1)
        v: dict[str, torch.Tensor] = {}
        for name, t in self._bufs().items():
            v[f"top:{name}"] = t[H - g:]
            if c:
                lo, hi = t[H - 1 - c:H - 1], t[H - c:]
                v[f"lo:{name}"], v[f"hi:{name}"] = lo, hi
                v[f"flo:{name}"], v[f"fhi:{name}"] = lo.reshape(-1, B, t.shape[-1]), hi.reshape(-1, B, t.shape[-1])
        v["rows"] = self.G[H - g:].view(g * R, -1)
        v["norms"] = self._layer_norms[(H - g) * R:]
        if c:  # the weights are bound first (bind clears these views)
            v["w"], v["wt"] = self.w_hid[(H - 1 - c) * R:], self.w_hid_t[(H - 1 - c) * R:]
            if self.route == "fused":  # the same [c·R, N, N] weights as ``w``, read from the transposed copy
                v["wc"] = self._w_cols.transpose(1, 2)[(H - 1 - c) * R:]
        self._views[k] = v
        return v

    # -- weights

    def bind(self, w: Weights) -> None:
        """Use these weights (kept as views: in-place updates of the tensors are seen without rebinding)."""
        if w.runs != self.R:
            raise ValueError(f"weights hold {w.runs} runs, the engine {self.R}")
        R = self.R
        self.w_in_t = w.w_in.transpose(1, 2)
        self.w_out, self.w_out_t = w.w_out, w.w_out.transpose(1, 2)
        self.w_hid = layer_major(w.w_hid)
        self.w_hid_t = self.w_hid.transpose(1, 2)
        self.w_hid_t_layers = [self.w_hid_t[ell * R:(ell + 1) * R] for ell in range(self.spec.H - 1)]
        self._views.clear()

    def buffers(self) -> list[torch.Tensor]:
        """Every buffer an iteration writes (to save and restore an iteration's starting state)."""
        extra = [] if self._partials is None else [self._partials]
        return [*self._bufs().values(), self.mu1, self.eps_out, self.gnorm, self._layer_norms, *extra]

    def runs_view(self, t: torch.Tensor) -> torch.Tensor:
        """A layer-major buffer [H, R, B, N] in the engine-wide layout [R, H, B, N] (a view)."""
        return t.transpose(0, 1)

    # -- passes

    def _input_prediction(self, x: torch.Tensor) -> None:
        self.mu1.baddbmm_(_runs(x, self.R), self.w_in_t, beta=0.0, alpha=self.m.a_in)

    def _output_error(self) -> None:
        """ε_L = y − a_L φ(z_H) W_Lᵀ."""
        torch.baddbmm(self.y, self.v_last["P"], self.w_out_t, alpha=-self.m.a_out, out=self.eps_out)

    def feedforward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Take the batch ``(x, y)``, feed-forward activities into ``z`` (§1.5) and ε_L; returns the train
        loss ½·mean (y − ŷ)² [R]. :meth:`infer` and :meth:`errors` use this batch.

        Every hidden error is exactly 0 here (μ_ℓ is z_ℓ, formed the same way), so ``E`` is zeroed."""
        s, m = self.spec, self.m
        z, P = self.z_layers, self.P_layers
        self.y = _runs(y, self.R)
        self._input_prediction(x)
        z[0].copy_(self.mu1)
        if self.route == "fused":  # μ as the route's errors form it (the kernel applies φ as it reads z)
            R = self.R
            for ell in range(1, s.H):
                self._fused.predict_error(z[ell - 1], self.w_hid[(ell - 1) * R:ell * R], None, z[ell], s.act, m.s,
                                          m.a_hid, self._tf32)
        for ell in range(1, s.H if self.route == "standard" else 1):
            act_into(s.act, z[ell - 1], P[ell - 1], None)
            if m.s:
                z[ell].copy_(z[ell - 1]) if m.s == 1.0 else torch.mul(z[ell - 1], m.s, out=z[ell])
                z[ell].baddbmm_(P[ell - 1], self.w_hid_t_layers[ell - 1], alpha=m.a_hid)
            else:
                z[ell].baddbmm_(P[ell - 1], self.w_hid_t_layers[ell - 1], beta=0.0, alpha=m.a_hid)
        act_into(s.act, z[-1], P[-1], self.v_last["D"] if self.D is not None else None)
        self._output_error()
        self.E.zero_()
        self.at_feedforward = True
        self.reached = 0
        return 0.5 * self.eps_out.pow(2).mean(dim=(1, 2))

    def set_activities(self, z0: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> None:
        """Take the batch ``(x, y)`` and start inference from given activities ``z0 [R, H, B, N]`` (not
        necessarily feed-forward)."""
        self.y = _runs(y, self.R)
        self._input_prediction(x)
        self.z.copy_(z0.transpose(0, 1))
        self.at_feedforward = False
        self.reached = self.spec.H

    def errors(self, k: int | None = None) -> None:
        """φ(z), φ'(z), hidden errors ``E`` and ε_L at the current activities (one bmm for all hidden layers).

        Only the top ``k`` layers' errors are formed (default: every layer the inference signal has
        reached); the ones below are exactly 0 and stay as they are in ``E``."""
        m, H = self.m, self.spec.H
        k = self.reached if k is None else k
        v = self._top(k)
        act_into(self.spec.act, v["top:z"], v["top:P"], v["top:D"] if self.D is not None else None)
        if self.route == "fused":  # μ as the route's feed-forward pass formed it (exact zeros where nothing moved)
            return self._fused_errors(k)
        if k >= H:
            torch.sub(self.z_layers[0], self.mu1, out=self.E0)
        if "wt" in v:  # μ_ℓ exactly as the feed-forward pass forms it
            if m.s:
                v["hi:E"].copy_(v["lo:z"]) if m.s == 1.0 else torch.mul(v["lo:z"], m.s, out=v["hi:E"])
                v["fhi:E"].baddbmm_(v["flo:P"], v["wt"], alpha=m.a_hid)
            else:
                v["fhi:E"].baddbmm_(v["flo:P"], v["wt"], beta=0.0, alpha=m.a_hid)
            torch.sub(v["hi:z"], v["hi:E"], out=v["hi:E"])
        self._output_error()

    def _grad(self, k: int | None) -> None:
        """G = B·∂F/∂z = ε_ℓ − J_ℓᵀ ε_{ℓ+1} (+ c_z z) on the top min(k+1, H) layers for an error front of k
        layers (below them G is 0, or, following the front, never read); k None: all hidden ε are zero (the first
        step from feed-forward)."""
        m, last = self.m, self.v_last
        if k is None:
            (last["G"] if self.use_front else self.G).zero_()  # following the front, only the top row is read
            last["T"].baddbmm_(self.eps_out, self.w_out, beta=0.0)
            if self.D is None:
                last["G"].add_(last["T"], alpha=-m.a_out)
            else:
                last["G"].addcmul_(last["D"], last["T"], value=-m.a_out)
        else:
            v = self._top(k)
            hidden = "w" in v
            if hidden:
                if m.s:
                    torch.sub(v["lo:E"], v["hi:E"], alpha=m.s, out=v["lo:G"])
                else:
                    v["lo:G"].copy_(v["lo:E"])
            last["G"].copy_(last["E"])
            if self.D is None:  # linear: the Jacobian product accumulates straight into G
                if hidden:
                    v["flo:G"].baddbmm_(v["fhi:E"], v["w"], alpha=-m.a_hid)
                last["G"].baddbmm_(self.eps_out, self.w_out, alpha=-m.a_out)
            else:
                if hidden:
                    torch.bmm(v["fhi:E"], v["w"], out=v["flo:T"])
                    v["lo:G"].addcmul_(v["lo:D"], v["lo:T"], value=-m.a_hid)
                last["T"].baddbmm_(self.eps_out, self.w_out, beta=0.0)
                last["G"].addcmul_(last["D"], last["T"], value=-m.a_out)
        if self.cfg.activity_decay:
            self.G.add_(self.z, alpha=self.cfg.activity_decay)

    def infer(self, lr: torch.Tensor | float) -> torch.Tensor:
        """T synchronous GD or Adam steps (fresh state) on the batch-mean energy; returns n_converged [R]."""
        if self.route == "fused":
            return self._infer_fused(lr)
        cfg, B, R, H = self.cfg, self.B, self.R, self.spec.H
        per_run = isinstance(lr, torch.Tensor)
        lr_v = lr.to(self.z.dtype).view(1, R, 1, 1) if per_run else lr
        lr_b = lr_v / B
        if cfg.optim == "adam":
            self.adam_m.zero_()
            self.adam_v.zero_()
        front = self.use_front and self.at_feedforward
        if front:
            self._layer_norms.zero_()
        for t in range(cfg.steps):
            first = t == 0 and self.at_feedforward
            k = min(t, H) if front else H  # layers whose errors may be nonzero before this step
            if not first:
                self.errors(k)
            self._grad(None if first else k)
            v = self._top(k if front else H)  # the layers this step moves (all, when not following the front)
            # ‖G‖ per run in two contiguous reductions (one over (0, 2, 3) is ≈ 6× slower for R > 1)
            torch.linalg.vector_norm(v["rows"], dim=1, out=v["norms"])
            torch.linalg.vector_norm(self._layer_norms.view(-1, R), dim=0, out=self.gnorm[t])
            if cfg.optim == "adam":
                self._adam(t + 1, lr_v, v)
            elif per_run:
                v["top:z"].addcmul_(v["top:G"], lr_b, value=-1.0)
            else:
                v["top:z"].add_(v["top:G"], alpha=-lr_b)
        self.reached = min(cfg.steps, H) if front else H
        self.at_feedforward = False
        return self.n_converged()

    def _infer_fused(self, lr: torch.Tensor | float) -> torch.Tensor:
        """:meth:`infer` on the fused route: per step the error kernel on the hidden and output products, then
        the gradient-and-update kernel on the rows the step moves (:mod:`~pipeline.studies.mupc.engine.fused`). The
        same layers as the standard route (the inference front), the same numbers to float round-off; φ, φ',
        T and G are not formed (the final :meth:`errors` forms φ and φ' for the weight gradients)."""
        cfg, B, R, H = self.cfg, self.B, self.R, self.spec.H
        adam = cfg.optim == "adam"
        rate = lr.to(self.z.dtype).reshape(R) if isinstance(lr, torch.Tensor) else lr
        rate = rate if adam else rate / B  # GD: the step on G = B·∂F/∂z, as the standard route's lr_b
        if adam:
            self.adam_m.zero_()
            self.adam_v.zero_()
        self._partials.zero_()
        self._w_cols.copy_(self.w_hid.transpose(1, 2))  # the weights as they are now (updated in place between)
        front = self.use_front and self.at_feedforward
        for t in range(cfg.steps):
            first = t == 0 and self.at_feedforward
            k = min(t, H) if front else H
            if not first:
                self._fused_errors(k)
            moved = 0 if first and front else min(k, H - 1)  # hidden rows below the top one that this step moves
            self._fused_grad_step(moved, rate, t + 1 if adam else None)
            torch.sum(self._partials.view(H, R, -1), dim=(0, 2), out=self.gnorm[t])
            self.gnorm[t].sqrt_()
        self.reached = min(cfg.steps, H) if front else H
        self.at_feedforward = False
        return self.n_converged()

    def _fused_errors(self, k: int) -> None:
        """The top ``k`` layers' errors ``E`` and ε_L at the current activities (:meth:`errors`' numbers, with
        φ applied as the product reads z)."""
        m, H, act, f, tl = self.m, self.spec.H, self.spec.act, self._fused, self._tiles
        if k >= H:
            torch.sub(self.z_layers[0], self.mu1, out=self.E0)
        c = min(k, H - 1)
        if c:
            v = self._top(k)
            f.predict_error(v["flo:z"], v["w"], v["fhi:z"], v["fhi:E"], act, m.s, m.a_hid, self._tf32, tl)
        f.predict_error(self.v_last["z"], self.w_out, self.y, self.eps_out, act, 0.0, m.a_out, self._tf32, tl)

    def _fused_grad_step(self, c: int, rate: torch.Tensor | float, adam_t: int | None) -> None:
        """The activity step on the top row and the ``c`` hidden rows below it: their gradient (Jᵀε through
        the hidden weights, read from their transposed copy, or W_L for the top row), its Σ G² partials, and the
        GD or Adam update."""
        m, H, R, act, f, tl = self.m, self.spec.H, self.R, self.spec.act, self._fused, self._tiles
        decay = self.cfg.activity_decay
        moments, floor = self._bufs(), sqrt_floor(self.z.dtype, 1e-8)
        if c:
            v = self._top(c)
            lo = slice(H - 1 - c, H - 1)
            adam = None if adam_t is None else (_flat(moments["m"][lo]), _flat(moments["v"][lo]), adam_t, floor)
            f.grad_step(v["fhi:E"], v["wc"], v["flo:E"], v["flo:z"], self._partials[(H - 1 - c) * R:(H - 1) * R],
                        act, m.s, m.a_hid, decay, rate, R, adam, self._tf32, tl)
        last = self.v_last
        adam = None if adam_t is None else (last["m"], last["v"], adam_t, floor)
        f.grad_step(self.eps_out, self.w_out, last["E"], last["z"], self._partials[(H - 1) * R:], act, 0.0,
                    m.a_out, decay, rate, R, adam, self._tf32, tl)

    def _adam(self, t: int, lr: torch.Tensor | float, v: dict[str, torch.Tensor]) -> None:
        """The :class:`Adam` update on the activities, in place (g = G / B), operation for operation, on the
        layers ``v`` holds (elsewhere G, m and v are 0, so the update is too)."""
        b1, b2, eps = 0.9, 0.999, 1e-8
        G, T, m, s = v["top:G"], v["top:T"], v["top:m"], v["top:v"]
        G.div_(self.B)
        m.mul_(b1).add_(G, alpha=1 - b1)
        s.mul_(b2).addcmul_(G, G, value=1 - b2)
        torch.div(s, 1 - b2**t, out=T)
        T.clamp_min_(sqrt_floor(T.dtype, eps)).sqrt_().add_(eps)
        torch.div(m, 1 - b1**t, out=G)
        G.div_(T)
        if isinstance(lr, torch.Tensor):
            v["top:z"].addcmul_(G, lr, value=-1.0)
        else:
            v["top:z"].add_(G, alpha=-lr)

    def n_converged(self) -> torch.Tensor:
        """Last step whose gradient RMS is below the threshold, else T (as :func:`infer`)."""
        T = self.cfg.steps
        if T == 0:
            return torch.zeros(self.R, dtype=torch.long, device=self.z.device)
        n = self.spec.H * self.B * self.spec.N
        rms = self.gnorm[:T] / (self.B * n**0.5)
        below = rms < self.cfg.conv_threshold
        steps = torch.arange(T, device=self.z.device).unsqueeze(1).expand(T, self.R)
        last = torch.where(below, steps, torch.full_like(steps, -1)).amax(0)
        return torch.where(last >= 0, last, torch.full_like(last, T))

    def weight_grads(self, x: torch.Tensor, out: list[torch.Tensor]) -> None:
        """∂F/∂W (batch mean) at the current errors into ``out`` = [g_in [R,N,D], g_hid storage
        [H-1, R, N, N] (layer-major), g_out [R,d_y,N]] (regularisers: :func:`add_regularisers`).
        Layers whose error is exactly 0 (below the inference front) get an exact 0."""
        m, B, H = self.m, self.B, self.spec.H
        g_in, g_hid, g_out = out
        if self.reached >= H:
            g_in.baddbmm_(self.E0.transpose(1, 2), _runs(x, self.R), beta=0.0, alpha=-m.a_in / B)
        else:
            g_in.zero_()
        if H > 1:
            v = self._top(self.reached)
            flat = g_hid.view(-1, *g_hid.shape[-2:])
            rows = v["fhi:E"].shape[0] if "w" in v else 0  # layers × runs with a nonzero error above
            flat[:flat.shape[0] - rows].zero_()
            if rows:
                flat[flat.shape[0] - rows:].baddbmm_(v["fhi:E"].transpose(1, 2), v["flo:P"], beta=0.0,
                                                  alpha=-m.a_hid / B)
        g_out.baddbmm_(self.eps_out.transpose(1, 2), self.v_last["P"], beta=0.0, alpha=-m.a_out / B)


ROUTES = ("standard", "fused")


def check_route(route: str, device: str | torch.device, front: bool = True) -> None:
    """Refuse an engine route this device cannot run: ``fused`` needs Triton and CUDA (or Triton's
    interpreter, ``TRITON_INTERPRET=1``, on the CPU), and follows the inference front (its kernels form μ in
    another order than the feed-forward pass, so a layer that has not moved gets round-off for an error, which
    Adam would turn into full-size steps; ``front=False`` is the standard route's comparison path)."""
    if route not in ROUTES:
        raise ValueError(f"engine route {route!r} is not one of {', '.join(ROUTES)}")
    if route == "standard":
        return
    import os

    try:
        import triton  # noqa: F401
    except ImportError as e:
        raise ValueError("engine route 'fused' needs Triton (both locks pin it, Linux only): not installed") from e
    if not str(device).startswith("cuda") and os.environ.get("TRITON_INTERPRET", "0") != "1":
        raise ValueError(f"engine route 'fused' runs on CUDA (or under TRITON_INTERPRET=1), not on {device}")
    if not front:
        raise ValueError("engine route 'fused' follows the inference front (front=False is the standard route's)")


def _flat(t: torch.Tensor) -> torch.Tensor:
    """A layer-major slice [c, R, B, N] as the kernels' rows [c·R, B, N] (a view)."""
    return t.reshape(-1, *t.shape[-2:])


def add_regularisers(grads: list[torch.Tensor], params: list[torch.Tensor], terms: EnergyTerms) -> None:
    """Weight decay and spectral-penalty gradients (§1.6) added in place (any layout of N×N stacks)."""
    for g, t in zip(grads, params):
        if terms.weight_decay:
            g.add_(t, alpha=terms.weight_decay)
        if terms.spectral_penalty:
            flat = t.reshape(-1, *t.shape[-2:])
            g.add_((torch.matmul(flat, _gram_minus_identity(flat))).view_as(t), alpha=2.0 * terms.spectral_penalty)


def sqrt_floor(dtype: torch.dtype, eps: float) -> float:
    """A floor for Adam's v̂ that leaves √v̂ + ε bitwise unchanged and keeps exact zeros out of ``sqrt``.

    Below it √v̂ is under a quarter of ε's last bit, so √v̂ + ε rounds to ε either way; on this CPU
    ``sqrt`` of 0 runs ≈ 8× slower than of a normal number, and weights whose gradient is exactly 0
    (μPC's first layer once the inference signal has not reached it) make whole tensors of zeros."""
    return (0.25 * torch.finfo(dtype).eps * eps) ** 2


def _run_pieces(t: torch.Tensor, run_dim: int, r: int) -> list[torch.Tensor]:
    """The contiguous pieces of run ``r`` of a stacked tensor whose run axis is 0 or 1."""
    return [t[r]] if run_dim == 0 else list(t[:, r].unbind(0))


class InPlaceAdam:
    """:class:`Adam` updating the parameters in place, one learning rate per run.

    ``params[i]`` carries the run axis at ``run_dims[i]`` (0, or 1 for layer-major hidden weights).
    Where torch has the fused CPU/GPU Adam kernel (``torch._fused_adam_``, the kernel behind
    ``torch.optim.Adam(fused=True)``) the runs sharing a learning rate go through it in one call (the
    whole stacked tensors when all runs share it): one pass over the weights instead of eleven, ≈ 3× faster
    on one CPU thread, the same numbers to float round-off. Elsewhere (``fused=False``, or a torch
    without the kernel, which :attr:`fused` then reports) the update is the element-wise form of
    :class:`Adam` with per-run lr views, equal to it to the last bits."""

    def __init__(self, params: list[torch.Tensor], lrs: list[float], run_dims: tuple[int, ...],
                 betas=(0.9, 0.999), eps=1e-8, fused: bool = True):
        self.params, self.lrs, self.run_dims = params, [float(v) for v in lrs], run_dims
        self.b1, self.b2, self.eps = betas[0], betas[1], eps
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = 0
        self.fused = fused and hasattr(torch, "_fused_adam_")
        if self.fused:
            self._step = torch.zeros((), dtype=torch.float32, device=params[0].device)
            self._groups = self._lr_groups()
            self._pieces = [(lr, runs, tuple(self._group_pieces(ts, runs) for ts in (params, self.m, self.v)))
                            for lr, runs in self._groups]
        else:
            R = len(self.lrs)
            lr = torch.tensor(self.lrs, dtype=params[0].dtype, device=params[0].device)
            self.lr_views = [lr.view([R if i == d else 1 for i in range(p.dim())]) for p, d in zip(params, run_dims)]
            self.buf = [torch.empty_like(p) for p in params]

    def _lr_groups(self) -> list[tuple[float, list[int]]]:
        """Runs sharing a learning rate, in first-seen order: one fused call per distinct rate (a sweep's
        stacked runs usually share it), not one per run."""
        groups: dict[float, list[int]] = {}
        for r, lr in enumerate(self.lrs):
            groups.setdefault(lr, []).append(r)
        return list(groups.items())

    def _group_pieces(self, tensors: list[torch.Tensor], runs: list[int]) -> list[torch.Tensor]:
        """The tensors whole when the group holds every run, else the contiguous pieces of its runs."""
        if len(runs) == len(self.lrs):
            return list(tensors)
        return [q for r in runs for t, d in zip(tensors, self.run_dims) for q in _run_pieces(t, d, r)]

    def step(self, grads: list[torch.Tensor]) -> None:
        self.advance()
        self.apply(grads)

    def carry(self, other: InPlaceAdam, idx: torch.Tensor) -> None:
        """Take the moments and step count of runs ``idx`` of ``other`` (a larger stack, same layout), so that
        these runs go on as they would have there (a stack shedding stopped runs). The update is element-wise,
        so a run's numbers do not depend on its stack-mates or on how the runs are grouped by learning rate."""
        for dst, src, d in zip([*self.m, *self.v], [*other.m, *other.v], [*self.run_dims, *self.run_dims]):
            torch.index_select(src, d, idx, out=dst)
        self.t = other.t
        if self.fused:
            self._step.fill_(self.t)

    def advance(self) -> None:
        """Count the step (on the host, and into the device tensor the fused kernel reads).

        Kept apart from :meth:`apply` so a captured :meth:`apply` (CUDA graph) reads this step's count on
        replay instead of the count it was captured with."""
        self.t += 1
        if self.fused:
            self._step.fill_(self.t)

    def apply(self, grads: list[torch.Tensor]) -> None:
        """The update of the counted step (:meth:`advance` first); ``grads`` may be overwritten."""
        if self.fused:
            for lr, runs, (ps, ms, vs) in self._pieces:
                gs = self._group_pieces(grads, runs)
                torch._fused_adam_(ps, gs, ms, vs, [], [self._step] * len(ps), lr=lr, beta1=self.b1, beta2=self.b2,
                                   weight_decay=0.0, eps=self.eps, amsgrad=False, maximize=False)
            return
        c1, c2 = 1 - self.b1**self.t, 1 - self.b2**self.t
        for p, g, m, v, b, lr in zip(self.params, grads, self.m, self.v, self.buf, self.lr_views):
            m.mul_(self.b1).add_(g, alpha=1 - self.b1)
            v.mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
            torch.div(v, c2, out=b)
            b.clamp_min_(sqrt_floor(b.dtype, self.eps)).sqrt_().add_(self.eps)
            torch.div(m, c1, out=g)  # the gradient buffer is free now
            g.div_(b)
            p.addcmul_(g, lr, value=-1.0)
