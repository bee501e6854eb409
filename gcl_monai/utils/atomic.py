"""Files that appear whole or not at all: written beside their place, then moved there in one rename."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_write"]


@contextmanager
def atomic_write(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[Path]:
    """Yields a path beside ``path`` to write; leaving the block without an error moves it onto ``path``.

    The move is :func:`os.replace` on one file system, so a reader (another run, a resumed one, a copy of the
    folder) sees the old ``path`` or the new one, never a part, and a run cut off while writing leaves ``path`` as it
    was.
    On an error the partial file (or folder) is removed and the error goes on. The parent folders are created.

    Args:
        path: the file (or a folder that does not exist yet) to write.
        suffix: how the partial name ends, ``.NAME.PID`` + ``suffix``: the process id keeps runs that write the same
            path at once apart; the default ``.tmp`` is an ending that a copier of the folder can leave out. A writer
            that picks its format by the name (SimpleITK) is given the real extension instead, e.g. ``".nii.gz"``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}{suffix}")
    _remove(partial)
    try:
        yield partial
        os.replace(partial, path)
    finally:
        _remove(partial)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
