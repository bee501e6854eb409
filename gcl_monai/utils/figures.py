"""
Figures as compact PNGs: a plot has few colours (its lines, markers and text on white, with their anti-aliased
edges), so a 256-colour palette holds it in about a third of the bytes of matplotlib's RGBA PNG, which matters for
plots kept in a repository, where every clone and copy of the checkout carries them.

``python -m gcl_monai.utils.figures FILE.png ...`` re-encodes PNGs already written (in place; a palette PNG, or one
that the palette would change visibly, is left as it is).
"""

from __future__ import annotations

import argparse
import io
import os
from pathlib import Path
from typing import Any

from gcl_monai.utils.atomic import atomic_write

__all__ = ["MAX_MEAN_ERROR", "compact_png", "save_figure"]

#: the most that the palette may change the image, as the mean absolute difference per channel in grey levels (of
#: 255): a plot's stays below 0.3 (its few colours are kept exactly, the palette's errors fall on rare anti-aliased
#: edge pixels) and a grey-level image's is 0; an image of more smooth hues than 256 colours can stand for (a
#: two-dimensional colour gradient: 2.9) goes over and is kept in full colour
MAX_MEAN_ERROR = 1.0


def _palette(image: Any) -> Any | None:
    """``image`` (a PIL image) as a 256-colour palette image, or None when it is not opaque or the palette would
    change it by more than :data:`MAX_MEAN_ERROR`."""
    import numpy as np
    from PIL import Image

    if image.mode == "P":
        return None
    if "A" in image.getbands() and image.getchannel("A").getextrema() != (255, 255):
        return None  # transparency: kept as it is
    rgb = image.convert("RGB")
    # median cut refined by k-means: keeps the plot's frequent colours (its lines, grid and text) within a few grey
    # levels; the faster octree shifts even the white background by one level and greys towards a hue
    palette = rgb.quantize(colors=256, method=Image.Quantize.MEDIANCUT, kmeans=3)
    error = np.abs(np.asarray(palette.convert("RGB"), dtype=np.int16) - np.asarray(rgb, dtype=np.int16)).mean()
    return palette if error <= MAX_MEAN_ERROR else None


def _compact(png: bytes) -> bytes:
    """The PNG ``png`` as a 256-colour palette PNG (:data:`MAX_MEAN_ERROR`) when that is smaller, else ``png``."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        image.load()
    palette = _palette(image)
    if palette is None:
        return png
    buffer = io.BytesIO()
    palette.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue() if buffer.tell() < len(png) else png


def compact_png(path: str | os.PathLike) -> tuple[int, int]:
    """
    Re-encodes the PNG ``path`` in place as a 256-colour palette PNG (:data:`MAX_MEAN_ERROR`) when that is smaller;
    the file is replaced in one move.

    Returns:
        the file's bytes before and after (equal when it was left as it was).
    """
    path = Path(path)
    png = path.read_bytes()
    compact = _compact(png)
    if compact is not png:
        with atomic_write(path, suffix=".png") as partial:
            partial.write_bytes(compact)
    return len(png), len(compact)


def save_figure(figure: Any, path: str | os.PathLike, dpi: float = 120) -> Path:
    """
    Writes the matplotlib ``figure`` to ``path`` as ``figure.savefig(path, dpi=dpi)`` would, as a compact PNG
    (:func:`compact_png`), in one move.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    path = Path(path)
    buffer = io.BytesIO()
    figure.savefig(buffer, dpi=dpi, format="png")
    with atomic_write(path, suffix=".png") as partial:
        partial.write_bytes(_compact(buffer.getvalue()))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gcl_monai.utils.figures", description="Re-encode PNG figures as 256-colour palette PNGs."
    )
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    total = [0, 0]
    for path in args.files:
        before, after = compact_png(path)
        total[0], total[1] = total[0] + before, total[1] + after
        print(f"{path}: {before} -> {after} bytes" + ("" if after < before else " (left as it was)"))
    print(f"{len(args.files)} files: {total[0]} -> {total[1]} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
