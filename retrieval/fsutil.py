"""Replacing a folder atomically: one way for every store that writes a new version aside first."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["replace_dir", "written_aside"]


@contextmanager
def written_aside(directory: Path) -> Iterator[Path]:
    """A fresh folder beside ``directory`` to write a new version into; on a clean exit it replaces
    ``directory`` (:func:`replace_dir`), on any error it is removed and ``directory`` is untouched."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
    try:
        yield tmp
        replace_dir(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def replace_dir(tmp: Path, directory: Path) -> None:
    """Put the fully written folder ``tmp`` in the place of ``directory``.

    The old folder is renamed aside first and removed after, so a reader sees either the old or the
    new version, never a half-written one; a crash leaves at worst a ``.NAME.old-…`` folder behind.
    """
    old = None
    if directory.exists():
        old = directory.with_name(f".{directory.name}.old-{os.getpid()}-{time.time_ns()}")
        directory.rename(old)
    tmp.rename(directory)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
