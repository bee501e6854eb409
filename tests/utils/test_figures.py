"""Figures as compact PNGs: a plot becomes a palette PNG close to matplotlib's own, an image of many colours or with
transparency is left in full colour, and re-encoding is done once."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from gcl_monai.utils import compact_png, save_figure
from gcl_monai.utils.figures import MAX_MEAN_ERROR, main

matplotlib = pytest.importorskip("matplotlib")
from matplotlib.figure import Figure  # noqa: E402


def _plot() -> Figure:
    figure = Figure(figsize=(5, 3), layout="constrained")
    ax = figure.add_subplot()
    steps = np.arange(200)
    for k in range(8):
        ax.plot(steps, np.sin(steps / (10 + k)) + 0.1 * k, label=f"method {k}")
        ax.plot(steps[::20], np.cos(steps[::20] / 9) - k, ".", alpha=0.3)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return figure


def _pixels(path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"), dtype=np.int16)


def test_a_plot_is_written_as_a_palette_png_close_to_matplotlibs(tmp_path):
    figure = _plot()
    figure.savefig(tmp_path / "full.png", dpi=100, format="png")
    assert save_figure(figure, tmp_path / "compact.png", dpi=100) == tmp_path / "compact.png"
    with Image.open(tmp_path / "compact.png") as image:
        assert image.mode == "P" and image.size == Image.open(tmp_path / "full.png").size
    assert (tmp_path / "compact.png").stat().st_size < 0.6 * (tmp_path / "full.png").stat().st_size
    full, compact = _pixels(tmp_path / "full.png"), _pixels(tmp_path / "compact.png")
    assert np.abs(full - compact).mean() <= MAX_MEAN_ERROR
    white = (full == 255).all(-1)
    assert (compact[white] == 255).all(-1).mean() > 0.999  # the background keeps its white
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no partial file left


def test_an_image_of_many_colours_or_with_transparency_is_left_as_it_is(tmp_path):
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(tmp_path / "noise.png")
    clear = np.full((64, 64, 4), 255, np.uint8)
    clear[:32, :, 3] = 0
    Image.fromarray(clear).save(tmp_path / "clear.png")
    for name in ("noise.png", "clear.png"):
        before = (tmp_path / name).read_bytes()
        assert compact_png(tmp_path / name) == (len(before), len(before))
        assert (tmp_path / name).read_bytes() == before


def test_the_command_re_encodes_in_place_once(tmp_path, capsys):
    _plot().savefig(tmp_path / "plot.png", dpi=100, format="png")
    size = (tmp_path / "plot.png").stat().st_size
    assert main([str(tmp_path / "plot.png")]) == 0
    after = (tmp_path / "plot.png").stat().st_size
    assert after < size and f"{size} -> {after} bytes" in capsys.readouterr().out
    assert compact_png(tmp_path / "plot.png") == (after, after)  # a palette PNG is left as it is
