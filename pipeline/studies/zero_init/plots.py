"""Figure 3 of the ZerO paper: rank(W3 − I) against iterations, with the input-dimension line."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from pipeline.plotting import save_mpl


def rank_figure(curves: list[tuple[str, list[int], list[int]]], input_dim: int, base: Path) -> list[Path]:
    """One panel: each curve on its own iteration indices; red dashed line at ``input_dim``."""
    fig, ax = plt.subplots(1, 1, figsize=(5, 4))
    x_max = max(max(its) for _, its, _ in curves)
    ax.plot([0, x_max], [input_dim, input_dim], label=f"input_dim={input_dim}", linestyle="dashed",
            color="red", linewidth=2)
    for label, its, ranks in curves:
        ax.plot(its, ranks, label=label, linewidth=2)
    ax.set_ylabel("Rank", fontsize=14)
    ax.set_xlabel("Iterations", fontsize=14)
    ax.legend(fontsize=10)
    fig.tight_layout(w_pad=0.5)
    return save_mpl(fig, base)
