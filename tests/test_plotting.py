"""save_mpl lays a figure out once for all its formats: the files must be those of a plain savefig."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.config import ConfigError
from pipeline.contract import Figure
from pipeline.figure_writer import figure_workers, save_figures
from pipeline.plotting import _META, dpi, plt, save_mpl
from pipeline.stage import prepare


def figure() -> plt.Figure:
    """Constrained layout, log axes, a legend placed 'best', a heat map with a colour bar, a suptitle."""
    rng = np.random.default_rng(0)
    fig, axes = plt.subplots(1, 3, figsize=(9, 3), layout="constrained")
    x = np.arange(1, 33)
    for k in range(4):
        axes[0].plot(x, np.exp(rng.normal(0, 0.3, x.size).cumsum() / 4) * (k + 1), label=f"H={2 ** k}")
    axes[0].set_yscale("log")
    axes[0].legend()
    axes[1].plot(x, x**2)
    axes[1].set_title("a long title that the layout has to make room for")
    im = axes[2].imshow(rng.random((6, 6)), cmap="viridis")
    fig.colorbar(im, ax=axes[2], label="κ")
    fig.suptitle("test figure")
    return fig


@pytest.mark.parametrize("raster_dpi", ["40", None])
def test_save_mpl_writes_what_savefig_writes(tmp_path, monkeypatch, raster_dpi):
    if raster_dpi:
        monkeypatch.setenv("TRAINSCAPE_DPI", raster_dpi)
    fig = figure()
    for fmt in ("png", "pdf"):
        fig.savefig(tmp_path / f"plain.{fmt}", format=fmt, dpi=dpi(), metadata=_META.get(fmt))
    plt.close(fig)
    paths = save_mpl(figure(), tmp_path / "once")
    assert [p.name for p in paths] == ["once.png", "once.pdf"]
    plain, once = plt.imread(tmp_path / "plain.png"), plt.imread(tmp_path / "once.png")
    assert plain.shape == once.shape
    assert np.array_equal(plain, once)  # same layout, same tight box, same legend place: the same pixels
    assert (tmp_path / "once.pdf").read_bytes()[:5] == b"%PDF-"
    assert abs((tmp_path / "once.pdf").stat().st_size - (tmp_path / "plain.pdf").stat().st_size) < 200
    assert not plt.get_fignums()  # save_mpl closes the figure


def _figures(n: int) -> list:
    out = []
    for i in range(n):
        fig, ax = plt.subplots(figsize=(3, 2))
        ax.plot(np.arange(10) ** (i + 1), label=f"power {i + 1}")
        ax.set_yscale("log")
        ax.legend()
        out.append(Figure(f"fig{i}", f"caption {i}", "none", mpl=fig))
    return out


def test_forked_figure_savers_write_the_same_bytes_as_one_process(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINSCAPE_DPI", "40")
    written = {}
    for workers in ("1", "3"):
        monkeypatch.setenv("TRAINSCAPE_FIGURE_WORKERS", workers)
        assert figure_workers(4) == int(workers)
        folder = tmp_path / workers
        folder.mkdir()
        files = save_figures(_figures(4), folder)
        assert [[p.name for p in f] for f in files] == [[f"fig{i}.png", f"fig{i}.pdf"] for i in range(4)]
        written[workers] = {p.name: p.read_bytes() for f in files for p in f}
        assert not plt.get_fignums()  # every figure closed in this process too
    assert written["1"] == written["3"]
    assert len({v for k, v in written["3"].items() if k.endswith(".png")}) == 4  # four different pictures


def test_a_failing_forked_save_stops_the_render_and_a_bad_worker_count_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINSCAPE_FIGURE_WORKERS", "2")
    figs = [*_figures(1), Figure("empty", "no figure at all", "none")]
    with pytest.raises(ValueError, match="'empty' has neither a matplotlib nor a plotly figure"):
        save_figures(figs, tmp_path)
    plt.close("all")
    for bad in ("0", "two"):
        monkeypatch.setenv("TRAINSCAPE_FIGURE_WORKERS", bad)
        message = f"TRAINSCAPE_FIGURE_WORKERS = '{bad}' is not allowed; allowed: a whole number >= 1"
        with pytest.raises(ConfigError, match=message):
            figure_workers(3)
        with pytest.raises(ConfigError, match=message):  # a render stage refuses it before any compute
            prepare("render", "imprint", "glyph")
        with pytest.raises(ConfigError, match="imprint has no train unit 'nope'"):  # other kinds ignore it
            prepare("train", "imprint", "nope")
