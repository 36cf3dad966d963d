"""save_mpl lays a figure out once for all its formats: the files must be those of a plain savefig; a plotly
figure's PNG and PDF come from kaleido, byte-stable, and a render that needs Chromium says so before computing."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

# skips, rather than breaks, collection where plotly is absent (a bare GPU machine's `pytest -m gpu`): the
# project's plotting module draws the μPC figures with it
pytest.importorskip("plotly")

import plotly.graph_objects as go

from pipeline import plotting
from pipeline.config import ConfigError
from pipeline.contract import Figure
from pipeline.plotting import _META, dpi, plt, save_mpl
from pipeline.stage import prepare
from pipeline.writer import figures as writer_figures
from pipeline.writer.figures import check_settings, exports_plotly_images, figure_workers, save_figure, save_figures


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


# ----------------------------------------------------------------------------- plotly through kaleido


#: set-up installs Chromium, so under CI a missing one is a failure, not a skip
needs_chromium = pytest.mark.skipif(plotting.find_chromium() is None and os.environ.get("CI") != "true",
                                    reason="no Chromium for kaleido (apt-get install chromium); CI=true fails instead")


def plotly_figure() -> go.Figure:
    fig = go.Figure(go.Scatter(x=[1, 10, 100], y=[3, 1, 2], mode="lines+markers", name="H=8"))
    fig.update_layout(width=450, height=300, xaxis_type="log", title="kaleido")
    return fig


@needs_chromium
def test_kaleido_writes_png_and_pdf_of_the_layout_size_beside_the_html(tmp_path, monkeypatch):
    """A figure drawn with plotly alone: PNG (layout size × the style's scale) and PDF from kaleido, then its
    HTML; a rebuild writes the same bytes (Chromium's PDF dates are fixed)."""
    monkeypatch.setenv("TRAINSCAPE_DPI", "75")  # scale 1: 450 × 300 px
    fig = Figure("k", "caption", "none", plotly=plotly_figure())
    files = save_figure(fig, tmp_path)
    assert [p.name for p in files] == ["k.png", "k.pdf", "k.html"]
    png = files[0].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (450, 300)
    pdf = files[1].read_bytes()
    assert pdf[:5] == b"%PDF-" and b"D:19700101000000" in pdf and b"/MediaBox" in pdf
    first = {p.name: p.read_bytes() for p in files}
    again = save_figure(fig, tmp_path / "again")
    assert {p.name: p.read_bytes() for p in again} == first
    monkeypatch.setenv("TRAINSCAPE_DPI", "150")  # the default: scale 2
    (big, *_) = save_figure(Figure("b", "c", "none", plotly=plotly_figure()), tmp_path)
    assert struct.unpack(">II", big.read_bytes()[16:24]) == (900, 600)


def test_pdf_dates_are_fixed_in_place():
    raw = b"<< /CreationDate (D:20261126151944+00'00') /ModDate (D:20261126151944+00'00') >>\nxref"
    out = plotting.stable_pdf(raw)
    assert len(out) == len(raw) and out.count(b"D:19700101000000+00'00'") == 2  # xref offsets stay valid


def test_an_animation_and_a_matplotlib_figure_get_no_kaleido_image(tmp_path, monkeypatch):
    def boom(*_a, **_k):
        raise AssertionError("kaleido called")

    monkeypatch.setattr(plotting, "plotly_image", boom)
    anim = plotly_figure()
    anim.frames = [go.Frame(data=[go.Scatter(x=[1], y=[1])])]
    assert [p.name for p in save_figure(Figure("a", "c", "none", plotly=anim), tmp_path)] == ["a.html"]
    (mpl,) = _figures(1)
    mpl.plotly = plotly_figure()
    assert [p.name for p in save_figure(mpl, tmp_path)] == ["fig0.png", "fig0.pdf", "fig0.html"]


def test_the_palette_is_the_notebooks_sampling():
    from plotly.colors import sample_colorscale

    assert plotting.palette("Blues", 3) == sample_colorscale("Blues", 5)[2:]
    assert plotting.palette("Blues", 3, skip=1, extra=2) == sample_colorscale("Blues", 5)[1:4]
    assert plotting.palette("Viridis", 4, skip=0, extra=0) == sample_colorscale("Viridis", 4)
    assert go.Figure().layout.template.layout.font.size == plotting.PLOTLY_STYLE["font"]["size"]


def test_a_render_that_exports_plotly_images_needs_chromium_before_any_compute(monkeypatch):
    """Checked with the render's settings (stages/render.py's checks), only for units that export plotly images:
    one line naming what to install."""
    assert exports_plotly_images("mupc_training", "F22") and not exports_plotly_images("imprint", "glyph")
    assert not exports_plotly_images("no_such_study", "x")
    monkeypatch.setattr(plotting, "find_chromium", lambda: None)
    with pytest.raises(ConfigError, match=r"apt-get install chromium.*make setup"):
        check_settings(["mupc_training", "F22", "--profile", "smoke"])
    check_settings(["imprint", "glyph"])  # matplotlib only: no browser needed


def test_the_renderer_starts_kaleido_before_computing_only_for_units_with_plotly_images(monkeypatch):
    """stages/render.py's checks start Chromium at once where the unit exports plotly images (it launches while
    the unit computes), and nowhere else."""
    started = []
    monkeypatch.setattr(writer_figures, "kaleido_server", lambda: started.append(True))
    monkeypatch.setattr(plotting, "find_chromium", lambda: "/usr/bin/chromium")
    assert writer_figures.check_settings(["mupc_training", "F22", "--profile", "smoke"]) is True
    writer_figures.ready_renderer(["imprint", "glyph", "--profile", "smoke"])
    assert started == []
    writer_figures.ready_renderer(["mupc_training", "F22", "--profile", "smoke"])
    assert started == [True]


def test_no_figure_saver_is_forked_beside_a_running_kaleido_server(tmp_path, monkeypatch):
    """Forked children would not have the server's threads: with it running, the savers stay in this process
    and write the same bytes."""
    monkeypatch.setenv("TRAINSCAPE_DPI", "40")
    monkeypatch.setenv("TRAINSCAPE_FIGURE_WORKERS", "3")
    forks = []
    monkeypatch.setattr(writer_figures.multiprocessing, "get_context", lambda *a: forks.append(a))
    monkeypatch.setattr(writer_figures, "kaleido_running", lambda: True)
    files = save_figures(_figures(2), tmp_path)
    assert forks == [] and [[p.name for p in f] for f in files] == [[f"fig{i}.png", f"fig{i}.pdf"] for i in range(2)]


def test_plotly_html_loads_the_units_one_copy_of_plotly_js(tmp_path):
    """Each HTML file loads plotly.js from its folder (4.6 MB once per render unit, not in every file)."""
    import plotly.graph_objects as go

    from pipeline.plotting import PLOTLY_JS, save_plotly_html, save_plotly_js

    fig = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))
    html = save_plotly_html(fig, tmp_path / "a.html").read_text()
    assert f'src="{PLOTLY_JS}"' in html and len(html) < 100_000
    js = save_plotly_js(tmp_path).read_text()
    assert len(js) > 1_000_000 and "plotly" in js[:2000].lower()
    assert save_plotly_html(fig, tmp_path / "b.html").read_text().replace("b", "a") == html.replace("b", "a")
