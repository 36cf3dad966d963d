"""render@<figure>: Figure 3 of the ZerO paper, rank(W3 − I) against iterations with the input-dimension line."""

from __future__ import annotations

from typing import Any

from pipeline.contract import Context, Figure, Output
from pipeline.plotting import plt
from pipeline.studies.zero_init.config import ZeroInitParams

INIT_LABELS = {"zero": "ZerO", "partial_identity": "Partial Identity", "random": "Random",
               "one": "OnE", "spray": "Spray"}
# One hue per init in every figure of the study (the input-dimension line keeps the seed's red); the shade
# says the width, so a run has the same colour wherever it is drawn.
INIT_CMAPS = {"partial_identity": "Blues", "zero": "Greens", "random": "Greys", "one": "Purples", "spray": "YlOrBr"}
WIDTH_SHADES = {256: 0.35, 512: 0.55, 1024: 0.75, 2048: 0.95}


def run_color(init: str, n_h: int) -> tuple[float, float, float, float]:
    """The colour of a run: its init's hue, darker for wider layers (other widths: the 1024 shade)."""
    return plt.get_cmap(INIT_CMAPS[init])(WIDTH_SHADES.get(n_h, 0.75))


def rank_figure(curves: list[tuple[str, list[int], list[int]]], input_dim: int,
                colors: list | None = None, title: str = "") -> plt.Figure:
    """One panel: each curve on its own iteration indices; red dashed line at ``input_dim``."""
    fig, ax = plt.subplots(1, 1, figsize=(7, 4))
    x_max = max(max(its) for _, its, _ in curves)
    ax.plot([0, x_max], [input_dim, input_dim], label=f"input_dim={input_dim}", linestyle="dashed",
            color="red", linewidth=2)
    for i, (label, its, ranks) in enumerate(curves):
        # earlier curves wider, so a curve that coincides with a later one (partial identity at 1024 and
        # 2048) still shows around it
        ax.plot(its, ranks, label=label, linewidth=max(3.2 - 0.5 * i, 1.2), color=colors[i] if colors else None)
    ax.set_ylabel("Rank", fontsize=14)
    ax.set_xlabel("Iterations", fontsize=14)
    ax.legend(fontsize=10, loc="center left", bbox_to_anchor=(1.02, 0.5))  # outside: never over a curve
    if title:
        ax.set_title(title, fontsize=11)
    fig.tight_layout(w_pad=0.5)
    return fig


def run_label(cfg: ZeroInitParams, key: str, all_same_init: bool) -> str:
    """The legend label: ``style.labels`` if set, else the width (one init) or the init (one width)."""
    if key in cfg.style.labels:
        return cfg.style.labels[key]
    run = cfg.runs[key]
    return f"n_h={run.n_h}" if all_same_init else f"{INIT_LABELS[run.init]} Init"


def caption(cfg: ZeroInitParams, profile: str, fig_key: str, results: dict[str, dict[str, Any]]) -> str:
    parts = []
    for key, r in results.items():
        p = r["params"]
        bias = "no bias" if p["bias"] is None else f"bias {p['bias']:g}"
        step = p.get("lr_step_size")
        decay = (f", lr ×{p['lr_gamma']:g} every {step} epochs (StepLR)"
                 if step is not None and p["epochs"] > step and p["lr_gamma"] != 1.0 else "")
        parts.append(f"{key} ({INIT_LABELS[p['init']]}, n_h={p['n_h']}, {bias}, {p['epochs']} epoch(s){decay}, "
                     f"{r['iterations']} iterations on {p['train_images']} images, final rank "
                     f"{r['rank_w3_minus_i'][-1]}, final test acc {r['test'][-1]['test_acc']:.2f} %)")
    stand_in = "SMOKE STAND-IN (not the paper's numbers). " if profile == "smoke" else ""
    return (f"{stand_in}{cfg.style.titles[fig_key]}. rank(W3 − I) of the square layer l3 (singular values > "
            f"{cfg.rank_tol:g}, float32) against the true iteration index, plain SGD lr {cfg.lr:g}, "
            f"batch {cfg.batch_size}; "
            f"dashed: input dimension {cfg.input_dim_line}. Runs: " + "; ".join(parts)
            + f". Profile {profile}: {cfg.style.profile_note}")


def render(ctx: Context, unit: str) -> Output:
    cfg: ZeroInitParams = ctx.cfg
    spec = cfg.figures[unit]
    results = {k: ctx.read("train", k, "result.json") for k in spec.runs}
    same = len({cfg.runs[k].init for k in spec.runs}) == 1
    curves = [(run_label(cfg, k, same), r["iters"], r["rank_w3_minus_i"]) for k, r in results.items()]
    colors = [run_color(cfg.runs[k].init, cfg.runs[k].n_h) for k in results]
    title = "SMOKE STAND-IN" if ctx.profile == "smoke" else ""
    fig = Figure(id=unit, mpl=rank_figure(curves, cfg.input_dim_line, colors, title),
                 caption=caption(cfg, ctx.profile, unit, results),
                 seed_figure=spec.seed_figure, sources=[("train", k) for k in spec.runs],
                 extra={"runs": list(spec.runs)})
    return Output(figures=[fig],
                  run_metrics={f"{k}.final_rank_w3_minus_i": r["rank_w3_minus_i"][-1] for k, r in results.items()})
