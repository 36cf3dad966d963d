"""Triton kernels for :class:`~pipeline.studies.mupc.engine.energy.PCEngine`'s ``fused`` route: one inference step in
two kernels per product instead of eight element-wise kernels and two matrix products.

Why: at 64 runs of 512:128:128 the engine is bound by memory bandwidth (``benchmarks/README.md``, "the engine
against the memory floor"), and ≈ 61 % of its bytes are activity-sized temporaries (φ, φ', μ, ε, Jᵀε, G). Here
φ(z) is applied while the product loads z, and φ'(z), the Jᵀε combine, the norm partials and the GD or Adam
update are done on the product's tile before it is stored, so no φ, φ', μ, Jᵀε or G tensor is written:

* :func:`predict_error` — ``E = Y − μ``, ``μ = s·X + a·φ(X) Wᵀ`` per batch item (hidden errors ε_ℓ from
  z_{ℓ−1}, z_ℓ; the output error ε_L from z_H, y); the route's feed-forward pass writes μ with the same kernel,
  so a layer whose input has not moved has an error of exactly 0, as on the standard route (Adam would turn
  round-off there into full-size steps);
* :func:`grad_step` — ``G = E_self − s·E_next − a·φ'(Z)·(E_next W) (+ c_z Z)``, ``Σ G²`` per tile into a
  partials buffer (reduced per run by the engine, no atomics: the same numbers every run), then the GD or Adam
  step on ``Z`` in place.

A row's tiles (one layer of one run) are neighbouring programs of the launch grid, so the activities every
tile of the row reads whole come from L2 after the first, not from memory. Both read their weights once per
step, each program a contiguous block: :func:`predict_error` a row strip of W, :func:`grad_step` a column strip,
which the engine gives it from a copy of W stored transposed (on an H100 a strided column strip held the step
at 69 % of the copy bandwidth). A single kernel reading each weight tile once for both products is not built
(the transposed product needs every column of ε_{ℓ+1} before it can start; running a few rows' two launches
back to back, for the second to read from L2, was slower). Launches take no host value that changes between
iterations (learning rates are read from a device tensor), so a CUDA graph replays them.
Scalar arguments are declared float64 and cast to the tile's type in the kernel: Triton passes an undeclared
Python float as float32, which cost the float64 route 1e-6 of relative error on CUDA (the interpreter kept it).
Runs on CUDA, or on the CPU under Triton's interpreter (``TRITON_INTERPRET=1``, which this module sets where
torch sees no CUDA device, before Triton reads it), which is how the tests check it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

if not torch.cuda.is_available():  # no GPU: the kernels can only run in Triton's interpreter (read at import)
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton
import triton.language as tl

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"
ACTS = {"linear": 0, "tanh": 1, "relu": 2}
if INTERPRETED:
    libdevice = None
else:  # the CUDA math library's tanh, the one torch's CUDA tanh calls
    from triton.language.extra import libdevice


@triton.jit
def _tanh(x, INTERP: tl.constexpr):
    """tanh: libdevice on the GPU; under the interpreter (which has no libdevice) from exp, exact to a few ulp
    of 1 (the absolute error of a float product's round-off anyway)."""
    if INTERP:
        e = tl.exp(-2.0 * tl.abs(x))
        t = (1.0 - e) / (1.0 + e)
        return tl.where(x < 0, -t, t)
    else:
        return libdevice.tanh(x)


@triton.jit
def _phi(x, ACT: tl.constexpr, INTERP: tl.constexpr):
    if ACT == 1:
        return _tanh(x, INTERP)
    elif ACT == 2:
        return tl.maximum(x, 0.0)
    else:
        return x


@triton.jit
def _dphi(x, ACT: tl.constexpr, INTERP: tl.constexpr):
    """φ'(x) as ``energy.act_into`` forms it: 1 − tanh², or 1 where x > 0 else 0 (φ'(0) = 0)."""
    if ACT == 1:
        t = _tanh(x, INTERP)
        return 1.0 - t * t
    elif ACT == 2:
        return tl.where(x > 0, 1.0, 0.0).to(x.dtype)
    else:
        return tl.full(x.shape, 1.0, x.dtype)


@triton.jit
def _scalar(x, dt: tl.constexpr, INTERP: tl.constexpr):
    """A float64 scalar argument in the tile's type ``dt``. The interpreter passes the Python float itself, which
    numpy's rules already combine in the tile's type (a cast there would go through float32)."""
    if INTERP:
        return x
    else:
        return x.to(dt)


@triton.jit
def _mac(acc, a, b, F64: tl.constexpr, PREC: tl.constexpr):
    """``acc + a @ b`` over one K tile. float32: ``tl.dot`` (tensor cores, TF32 where ``PREC`` says). float64: the
    broadcast product summed over K, which every Triton accepts (3.6 and 3.7 assert in ``tl.dot`` on a float64
    accumulator, their ``out_dtype`` defaulting to float32; float64 is the route's exactness check, not its fast
    path)."""
    if F64:
        return acc + tl.sum(a[:, :, None] * b[None, :, :], axis=1)
    else:
        return tl.dot(a, b, acc=acc, input_precision=PREC, out_dtype=tl.float32)


@triton.jit
def _predict_error_kernel(X, W, Y, E, Bn, M, K, s: tl.float64, a: tl.float64,
                          sxp, sxb, sxk, swp, swm, swk, syp, syb, sym, sep, seb, sem,
                          ERROR: tl.constexpr, ACT: tl.constexpr, HAS_S: tl.constexpr, F64: tl.constexpr,
                          PREC: tl.constexpr,
                          INTERP: tl.constexpr, BB: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr):
    nm = tl.cdiv(M, BM)  # a row's M tiles are neighbouring programs, so its X is re-read from L2, not memory
    p, pm, pb = tl.program_id(0) // nm, tl.program_id(0) % nm, tl.program_id(1)
    ob = pb * BB + tl.arange(0, BB)
    om = pm * BM + tl.arange(0, BM)
    ok = tl.arange(0, BK)
    acc = tl.zeros((BB, BM), dtype=tl.float64 if F64 else tl.float32)
    s, a = _scalar(s, acc.dtype, INTERP), _scalar(a, acc.dtype, INTERP)
    for k0 in range(0, K, BK):
        kk = k0 + ok
        x = tl.load(X + p * sxp + ob[:, None] * sxb + kk[None, :] * sxk,
                    mask=(ob[:, None] < Bn) & (kk[None, :] < K), other=0.0)
        w = tl.load(W + p * swp + kk[:, None] * swk + om[None, :] * swm,
                    mask=(kk[:, None] < K) & (om[None, :] < M), other=0.0)
        acc = _mac(acc, _phi(x, ACT, INTERP), w, F64, PREC)
    mask = (ob[:, None] < Bn) & (om[None, :] < M)
    mu = a * acc
    if HAS_S:
        mu = s * tl.load(X + p * sxp + ob[:, None] * sxb + om[None, :] * sxk, mask=mask, other=0.0) + mu
    if ERROR:  # the same μ as the feed-forward launch: a layer whose input has not moved gets exactly z − z
        mu = tl.load(Y + p * syp + ob[:, None] * syb + om[None, :] * sym, mask=mask, other=0.0) - mu
    tl.store(E + p * sep + ob[:, None] * seb + om[None, :] * sem, mu, mask=mask)


@triton.jit
def _grad_step_kernel(EN, W, ES, Z, PART, LR, AM, AV, Bn, N, K, R, s: tl.float64, a: tl.float64,
                      decay: tl.float64, lr_scalar: tl.float64, b1: tl.float64, b2: tl.float64, c1: tl.float64,
                      c2: tl.float64, floor: tl.float64, eps: tl.float64, bsize: tl.float64,
                      senp, senb, senk, swp, swk, swn, sesp, sesb, sesn, szp, szb, szn, smp, smb, smn,
                      ACT: tl.constexpr, HAS_S: tl.constexpr, DECAY: tl.constexpr, PER_RUN: tl.constexpr,
                      ADAM: tl.constexpr, F64: tl.constexpr, PREC: tl.constexpr, INTERP: tl.constexpr,
                      BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    nn = tl.cdiv(N, BN)  # a row's N tiles are neighbouring programs, so its E_next is re-read from L2
    p, pn, pb = tl.program_id(0) // nn, tl.program_id(0) % nn, tl.program_id(1)
    ob = pb * BB + tl.arange(0, BB)
    on = pn * BN + tl.arange(0, BN)
    ok = tl.arange(0, BK)
    acc = tl.zeros((BB, BN), dtype=tl.float64 if F64 else tl.float32)
    dt = acc.dtype
    s, a, decay, lr_scalar = _scalar(s, dt, INTERP), _scalar(a, dt, INTERP), _scalar(decay, dt, INTERP), \
        _scalar(lr_scalar, dt, INTERP)
    b1, b2, c1, c2 = _scalar(b1, dt, INTERP), _scalar(b2, dt, INTERP), _scalar(c1, dt, INTERP), _scalar(c2, dt, INTERP)
    floor, eps, bsize = _scalar(floor, dt, INTERP), _scalar(eps, dt, INTERP), _scalar(bsize, dt, INTERP)
    for k0 in range(0, K, BK):
        kk = k0 + ok
        en = tl.load(EN + p * senp + ob[:, None] * senb + kk[None, :] * senk,
                     mask=(ob[:, None] < Bn) & (kk[None, :] < K), other=0.0)
        w = tl.load(W + p * swp + kk[:, None] * swk + on[None, :] * swn,
                    mask=(kk[:, None] < K) & (on[None, :] < N), other=0.0)
        acc = _mac(acc, en, w, F64, PREC)
    mask = (ob[:, None] < Bn) & (on[None, :] < N)
    z_ptr = Z + p * szp + ob[:, None] * szb + on[None, :] * szn
    z = tl.load(z_ptr, mask=mask, other=0.0)
    g = tl.load(ES + p * sesp + ob[:, None] * sesb + on[None, :] * sesn, mask=mask, other=0.0)
    if HAS_S:
        g = g - s * tl.load(EN + p * senp + ob[:, None] * senb + on[None, :] * senk, mask=mask, other=0.0)
    g = g - a * (_dphi(z, ACT, INTERP) * acc)
    if DECAY:
        g = g + decay * z
    g = tl.where(mask, g, 0.0)
    tl.store(PART + p * tl.num_programs(1) * nn + pb * nn + pn,
             tl.sum(tl.sum(g * g, axis=1), axis=0))
    lr = tl.load(LR + p % R) if PER_RUN else lr_scalar
    if ADAM:  # energy.PCEngine._adam, element for element
        g = g / bsize
        m_ptr = AM + p * smp + ob[:, None] * smb + on[None, :] * smn
        v_ptr = AV + p * smp + ob[:, None] * smb + on[None, :] * smn
        m = b1 * tl.load(m_ptr, mask=mask, other=0.0) + (1.0 - b1) * g
        v = b2 * tl.load(v_ptr, mask=mask, other=0.0) + (1.0 - b2) * g * g
        tl.store(m_ptr, m, mask=mask)
        tl.store(v_ptr, v, mask=mask)
        g = (m / c1) / (tl.sqrt(tl.maximum(v / c2, floor)) + eps)
    tl.store(z_ptr, z - g * lr, mask=mask)


@dataclass(frozen=True)
class Tiles:
    """How both kernels cut their products: at most ``rows`` batch rows by ``cols`` output columns a program, a
    K tile of ``k`` (float32; float64 keeps 8), and ``warps`` warps and ``stages`` pipelined K tiles a program.
    No setting changes a number beyond float round-off (the K tile sets the order of a product's sums)."""

    rows: int = 64
    cols: int = 64
    k: int = 64  # 64:64:4:3, the fastest pair of fused_tiles.py's 54 settings on an H100 (fixtures/fused/)
    warps: int = 4
    stages: int = 3

    @classmethod
    def parse(cls, text: str) -> Tiles:
        """``cols:k:warps:stages`` (``rows`` stays 64), as the benchmarks name a setting."""
        try:
            vals = [int(v) for v in text.split(":")]
            if len(vals) != 4:
                raise ValueError
            t = cls(64, *vals)
        except ValueError:
            raise ValueError(f"fused tiles {text!r}: expected cols:k:warps:stages, integers") from None
        for name in ("cols", "k", "warps"):
            v = getattr(t, name)
            if v < (16 if name != "warps" else 1) or v & (v - 1):
                raise ValueError(f"fused tiles {text!r}: {name} = {v} must be a power of two"
                                 f"{' of at least 16' if name != 'warps' else ''}")
        if t.stages < 1:
            raise ValueError(f"fused tiles {text!r}: stages = {t.stages} must be at least 1")
        return t

    def label(self) -> str:
        return f"{self.cols}:{self.k}:{self.warps}:{self.stages}"


TILES = Tiles()  # what an engine built now launches with (it keeps the setting it was built with)


def _block(n: int, most: int) -> int:
    """A power-of-two tile edge covering ``n`` up to ``most``, at least 16 (``tl.dot``'s smallest)."""
    return max(16, min(most, triton.next_power_of_2(n)))


def _block_k(K: int, dtype: torch.dtype, t: Tiles) -> int:
    """The K tile: ``t.k`` for ``tl.dot``; 8 in float64, whose [B, K, M] broadcast product is held whole."""
    return _block(K, t.k) if dtype != torch.float64 else min(8, triton.next_power_of_2(K))


def _prec(dtype: torch.dtype, tf32: bool) -> str:
    return "tf32" if tf32 and dtype == torch.float32 else "ieee"


def tiles(B: int, N: int, t: Tiles | None = None) -> int:
    """Norm partials per (layer, run) row that :func:`grad_step` writes for a batch of B and width N."""
    t = t or TILES
    return triton.cdiv(B, _block(B, t.rows)) * triton.cdiv(N, _block(N, t.cols))


def predict_error(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor | None, e: torch.Tensor, act: str, s: float,
                  a: float, tf32: bool = False, t: Tiles | None = None) -> None:
    """``e = y − μ`` with ``μ = s·x + a·φ(x) wᵀ`` for [P, B, K] ``x``, [P, M, K] ``w``, [P, B, M] ``y`` and ``e``
    (s only where M = K; any strides); ``y`` None: ``e = μ`` (the feed-forward pass, whose μ bits the errors
    then repeat)."""
    t = t or TILES
    P, B, K = x.shape
    M = w.shape[1]
    BB, BM, BK = _block(B, t.rows), _block(M, t.cols), _block_k(K, x.dtype, t)
    grid = (P * triton.cdiv(M, BM), triton.cdiv(B, BB))
    yy = e if y is None else y
    _predict_error_kernel[grid](x, w, yy, e, B, M, K, float(s), float(a), *x.stride(), *w.stride(), *yy.stride(),
                                *e.stride(), ERROR=y is not None, ACT=ACTS[act], HAS_S=bool(s),
                                F64=x.dtype == torch.float64, PREC=_prec(x.dtype, tf32), INTERP=INTERPRETED,
                                BB=BB, BM=BM, BK=BK, num_warps=t.warps, num_stages=t.stages)


def grad_step(e_next: torch.Tensor, w: torch.Tensor, e_self: torch.Tensor, z: torch.Tensor, part: torch.Tensor,
              act: str, s: float, a: float, decay: float, lr: torch.Tensor | float, R: int,
              adam: tuple[torch.Tensor, torch.Tensor, int, float] | None = None, tf32: bool = False,
              t: Tiles | None = None) -> None:
    """One activity step on ``z`` [P, B, N] (rows layer-major, run ``p % R``): G = e_self − s·e_next − a·φ'(z)·
    (e_next w) (+ decay·z) with ``e_next`` [P, B, K], ``w`` [P, K, N] (any strides: the engine passes a
    transposed copy's view, whose column strips are contiguous); ``part`` [P, tiles] gets Σ G² per tile; then GD
    (``lr`` [R] or a float, already divided by B) or, with ``adam = (m, v, t, floor)``, Adam on G / B (``lr``
    undivided; ``floor``: the engine's floor of v̂, ``energy.sqrt_floor``)."""
    t = t or TILES
    P, B, N = z.shape
    K = e_next.shape[2]
    BB, BN, BK = _block(B, t.rows), _block(N, t.cols), _block_k(K, z.dtype, t)
    grid = (P * triton.cdiv(N, BN), triton.cdiv(B, BB))
    per_run = isinstance(lr, torch.Tensor)
    b1, b2, eps = 0.9, 0.999, 1e-8
    if adam is None:
        m = v = z
        c1 = c2 = floor = 1.0
    else:
        m, v, step, floor = adam
        c1, c2 = 1 - b1**step, 1 - b2**step
    _grad_step_kernel[grid](e_next, w, e_self, z, part, lr if per_run else z, m, v, B, N, K, R, float(s),
                            float(a), float(decay), 0.0 if per_run else float(lr), b1, b2, c1, c2, floor, eps,
                            float(B), *e_next.stride(), *w.stride(), *e_self.stride(), *z.stride(), *m.stride(),
                            ACT=ACTS[act], HAS_S=bool(s), DECAY=bool(decay), PER_RUN=per_run, ADAM=adam is not None,
                            F64=z.dtype == torch.float64, PREC=_prec(z.dtype, tf32), INTERP=INTERPRETED,
                            BB=BB, BN=BN, BK=BK, num_warps=t.warps, num_stages=t.stages)
