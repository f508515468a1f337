"""Versioned index folders with an atomic pointer: one writer, any number of readers.

Layout of a store directory::

    <root>/v1/ v2/ ...   each a complete saved index (written by ``index.save``: temp + rename)
    <root>/CURRENT       the name of the version to serve ("v7"), replaced atomically (os.replace)
    <root>/.lock         fcntl.flock'ed by whoever writes (seeding, publishing, cleaning)

A writer (any worker of any replica sharing the folder) takes the lock, loads the version
CURRENT names (so it never builds on a stale copy), applies its change, saves the result as a
new ``v<N+1>`` folder and only then points CURRENT at it. A reader that sees a new CURRENT loads
a folder that is already complete, so a half-written index is never served. Old versions are
deleted by the writer, keeping the newest ``keep``.

A version that cannot be read (a disk fault, a folder written by a buggy release) does not take
the service down: :meth:`IndexStore.load_newest_readable` falls back to the newest older one
that loads, with a warning, and the next change is built on that. Temporary folders of writes
that crashed half-way (``.v7.tmp-*``, ``.v7.old-*``, ``.CURRENT.tmp-*``) are removed by
:meth:`IndexStore.clean_leftovers` under the lock, when no write can be in progress.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator

from retrieval.fsutil import VERSION_DIR, pointed_version

__all__ = ["IndexStore", "StoreError", "ReadOnlyStoreError"]

log = logging.getLogger(__name__)

# What ToolIndex.save and _point_to leave behind when a process dies half-way.
_LEFTOVER = re.compile(r"^\.(?:v\d+\.(?:tmp|old)-.*|CURRENT\.tmp-.*)$")


class StoreError(RuntimeError):
    """The store folder is unusable (unreadable pointer, version folder missing)."""


class ReadOnlyStoreError(StoreError):
    """A change was asked of a store served read-only."""


_NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


class IndexStore:
    """A directory of index versions with a ``CURRENT`` pointer.

    Args:
        root: the store folder (created if missing).
        load: reads one saved index folder, e.g. ``ToolIndex.load``.
        keep: how many versions to keep on disk (at least 2, so a lagging reader can finish).
        read_only: never write to the folder (a read-only copy or replica): no lock file, no
            seeding, no clean-up; :meth:`write_lock` raises :class:`ReadOnlyStoreError`. ``None``
            (the default): read-only exactly when the lock file cannot be opened for writing.

    Raises:
        StoreError: a read-only store folder that does not exist, or a folder that cannot be created.
    """

    def __init__(self, root: str | Path, load: Callable[[Path], Any], *, keep: int = 5,
                 read_only: bool | None = None):
        if keep < 2:
            raise ValueError(f"keep={keep}: keep at least 2 versions so readers never lose the one they load")
        self.root = Path(root)
        self._load = load
        self.keep = keep
        if read_only:
            if not self.root.is_dir():
                raise StoreError(f"{self.root}: a read-only index store must be an existing folder (a copy of a "
                                 "store with a CURRENT file and v<N> folders)")
        else:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"{self.root}: cannot create the index store folder ({exc.strerror}); pass a "
                                 "writable folder, or serve an existing copy read-only") from None
        if read_only is None:
            read_only = not self._lock_writable()
            if read_only:
                log.warning("index store %s is not writable: serving it read-only (catalog changes are refused)",
                            self.root)
        self.read_only = bool(read_only)

    def _lock_writable(self) -> bool:
        try:
            fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            if exc.errno in _NOT_WRITABLE:
                return False
            raise
        os.close(fd)
        return os.access(self.root, os.W_OK)  # versions are written as new folders beside the lock

    @property
    def pointer(self) -> Path:
        return self.root / "CURRENT"

    def path_of(self, version: int) -> Path:
        return self.root / f"v{version}"

    # ------------------------------------------------------------------ reading

    def current_version(self) -> int | None:
        """The version CURRENT names, or None for a store not yet seeded."""
        try:
            return pointed_version(self.root, self.pointer.name)
        except UnicodeDecodeError:
            raise
        except ValueError as exc:
            raise StoreError(str(exc)) from None

    def load(self, version: int) -> Any:
        """Load one version's index folder."""
        path = self.path_of(version)
        if not path.is_dir():
            raise StoreError(f"{path}: index version {version} is not on disk (deleted or never written)")
        return self._load(path)

    def load_newest_readable(self) -> tuple[int, Any, list[tuple[int, str]]]:
        """The version CURRENT names if it loads, else the newest older one that does.

        Returns ``(version, index, skipped)``: ``skipped`` lists ``(version, reason)`` for each
        version that failed to load (empty when CURRENT loaded). With CURRENT missing or
        garbled every version on disk is tried, newest first.

        Raises:
            StoreError: no version on disk can be loaded.
        """
        try:
            current = self.current_version()
        except StoreError as exc:
            log.warning("%s; trying the versions on disk", exc)
            current = None
        on_disk = self.versions_on_disk()
        order = ([current] if current is not None else []) + \
            [v for v in reversed(on_disk) if current is None or v < current]
        skipped: list[tuple[int, str]] = []
        for version in order:
            try:
                index = self.load(version)
            except Exception as exc:  # any failure to read a version: try the one before
                reason = f"{type(exc).__name__}: {str(exc)[:300]}"
                log.warning("index version %d in %s cannot be read (%s); trying the one before", version,
                            self.root, reason)
                skipped.append((version, reason))
                continue
            if skipped:
                log.warning("serving index version %d of %s: the newer %s could not be read; the next catalog "
                            "change is built on v%d", version, self.root,
                            ", ".join(f"v{v}" for v, _ in skipped), version)
            return version, index, skipped
        detail = "; ".join(f"v{v}: {r}" for v, r in skipped) or "no version folders"
        raise StoreError(f"{self.root}: no index version can be read ({detail}); move the folder aside to "
                         "start from a fresh store")

    def versions_on_disk(self) -> list[int]:
        out = []
        for child in self.root.iterdir():
            m = VERSION_DIR.match(child.name)
            if m and child.is_dir():
                out.append(int(m.group(1)))
        return sorted(out)

    # ------------------------------------------------------------------ writing (hold the lock)

    @contextlib.contextmanager
    def write_lock(self) -> Iterator[None]:
        """Exclusive across processes and hosts sharing the folder (fcntl.flock); blocks until held.

        Raises:
            ReadOnlyStoreError: the store is served read-only.
        """
        if self.read_only:
            raise ReadOnlyStoreError(f"{self.root} is served read-only; send catalog changes to the service that "
                                     "writes the store")
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def clean_leftovers(self) -> list[str]:
        """Remove temporary folders and files of writes that died half-way. Call under :meth:`write_lock`."""
        removed = []
        for child in self.root.iterdir():
            if _LEFTOVER.match(child.name):
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        child.unlink()
                removed.append(child.name)
        if removed:
            log.warning("removed %d leftover(s) of interrupted writes from %s: %s", len(removed), self.root,
                        ", ".join(sorted(removed)[:10]))
        return removed

    def publish(self, index: Any) -> int:
        """Save ``index`` as the next version and point CURRENT at it. Call under :meth:`write_lock`."""
        on_disk = self.versions_on_disk()
        try:
            current = self.current_version() or 0
        except StoreError:  # a garbled pointer is replaced below
            current = 0
        version = max([current, *on_disk]) + 1  # never reuse a folder name
        path = self.path_of(version)
        index.save(path)
        self._point_to(version)
        log.info("published index version %d at %s", version, path)
        self._clean(version)
        return version

    def _point_to(self, version: int) -> None:
        tmp = self.root / f".CURRENT.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(f"v{version}\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.pointer)
        with contextlib.suppress(OSError):  # make the rename durable where the OS allows
            dfd = os.open(self.root, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    def drop_older(self) -> list[int]:
        """Delete every version but the current one (forgetting: no older copy of what was removed stays on
        disk). Call under :meth:`write_lock`. Returns the versions deleted."""
        current = self.current_version()
        old = [v for v in self.versions_on_disk() if v != current]
        for v in old:
            shutil.rmtree(self.path_of(v), ignore_errors=True)
        if old:
            log.info("deleted older versions %s of %s", ", ".join(f"v{v}" for v in old), self.root)
        return old

    def _clean(self, current: int) -> None:
        old = [v for v in self.versions_on_disk() if v != current][: -(self.keep - 1) or None]
        for v in old:
            shutil.rmtree(self.path_of(v), ignore_errors=True)
        if old:
            log.info("deleted old index versions %s", ", ".join(f"v{v}" for v in old))
