"""Replacing a folder atomically: one way for every store that writes a new version aside first."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

__all__ = ["replace_dir"]


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
