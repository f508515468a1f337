"""Replacing a folder atomically: one way for every store that writes a new version aside first; and the
version a store's ``CURRENT`` pointer names (the service's index store writes it, the CLI reads it)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["VERSION_DIR", "pointed_version", "replace_dir", "written_aside"]

VERSION_DIR = re.compile(r"^v(\d+)$")   # a store's version folders: v1, v2, ...


def pointed_version(root: Path, pointer: str = "CURRENT") -> int | None:
    """The version ``root/pointer`` names (``v3`` -> 3); None where there is no such file. Raises ``ValueError``
    when it names something else (``UnicodeDecodeError``, itself one, when it is not text)."""
    path = root / pointer
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    m = VERSION_DIR.match(text)
    if not m:
        raise ValueError(f"{path}: expected a version name like 'v3', found {text[:40]!r}")
    return int(m.group(1))


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
