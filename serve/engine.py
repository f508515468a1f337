"""What one worker serves: a pipeline bound to one index version, swapped as the store moves on.

The served index is never changed in place. A catalog change loads the newest version from
the store into a private copy, changes that, publishes it as the next version, and swaps it in;
other workers see the new CURRENT on their next poll and swap it in the same way.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from retrieval.catalog.model import CatalogError
from retrieval.catalog.rules import confusable_with

from .index_store import IndexStore, StoreError

__all__ = ["Engine", "Snapshot", "UpdateOutcome", "CatalogChanged", "rebind", "load_like", "model_info"]

log = logging.getLogger(__name__)


def rebind(pipeline: Any, index: Any) -> Any:
    """A pipeline like ``pipeline`` (same scorer, policy, shortcuts) over ``index``.

    Uses ``pipeline.with_index(index)`` when the pipeline has it; otherwise a shallow copy
    with its ``index`` replaced and its dict/list/set attributes (caches) copied, so the two
    never share per-catalog state.
    """
    with_index = getattr(pipeline, "with_index", None)
    if callable(with_index):
        return with_index(index)
    clone = copy.copy(pipeline)
    for name, value in list(vars(clone).items()):
        if isinstance(value, (dict, list, set)):
            setattr(clone, name, copy.copy(value))
    clone.index = index
    return clone


def load_like(index: Any, path: Path) -> Any:
    """Load a saved index of the same class as ``index``, reusing its encoder when it has one."""
    cls = type(index)
    encoder = getattr(index, "encoder", None)
    if encoder is not None:
        try:
            return cls.load(path, encoder=encoder)
        except TypeError:  # a load() without an encoder argument
            pass
    return cls.load(path)


def model_info(pipeline: Any) -> dict[str, Any]:
    """The served scorer's name and version (both None when the pipeline names none)."""
    info = getattr(pipeline, "model_info", None) or {}
    return {"name": info.get("name"), "version": None if info.get("version") is None else str(info.get("version"))}


@dataclass(frozen=True)
class Snapshot:
    """One consistent view for one request: never changes under it."""

    pipeline: Any
    version: int
    # Per-tenant view fingerprints of this version (see serve.routes.common), filled on first use.
    views: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def index(self) -> Any:
        return self.pipeline.index

    @property
    def catalog(self) -> Any:
        return self.pipeline.index.catalog


class CatalogChanged(RuntimeError):
    """What was measured on one catalog is refused for another."""


@dataclass(frozen=True)
class UpdateOutcome:
    changed: bool
    created: bool
    tools: int            # tools on the server after the change (upsert) or removed (delete)
    re_embedded: int
    version: int


class Engine:
    """The current snapshot of one worker, and the only code that changes it.

    Args:
        store: the index store shared by every worker.
        make_pipeline: a pipeline (scorer, policy, shortcuts) over a given index.
        seed: the first index, called only when the store is empty.
    """

    def __init__(self, store: IndexStore, make_pipeline: Callable[[Any], Any], seed: Callable[[], Any]):
        self.store = store
        self._make_pipeline = make_pipeline
        self._seed = seed
        self._swap_lock = threading.Lock()
        self._write_lock = threading.Lock()  # one writer per process; flock orders processes
        self._snapshot: Snapshot | None = None
        self.on_swap: Callable[[Snapshot], None] | None = None
        self.unreadable: dict[int, str] = {}         # versions that failed to load, and why
        self._failed_at: dict[int, float] = {}       # when refresh last failed on a version
        self.retry_unreadable_s = 30.0

    @property
    def snapshot(self) -> Snapshot:
        snap = self._snapshot
        if snap is None:
            raise RuntimeError("engine not started: call start() first")
        return snap

    @property
    def ready(self) -> bool:
        return self._snapshot is not None

    def _swap(self, index: Any, version: int) -> bool:
        """Serve ``index`` as ``version`` unless something newer is already served."""
        with self._swap_lock:
            if self._snapshot is not None and self._snapshot.version >= version:
                return False
            self._snapshot = Snapshot(self._make_pipeline(index), version)
            snap = self._snapshot
        if self.on_swap is not None:
            self.on_swap(snap)
        return True

    def remake(self) -> None:
        """Serve the current version through a freshly made pipeline (e.g. once the public
        suggestion index has loaded); the version number stays the same."""
        with self._swap_lock:
            snap = self._snapshot
            if snap is None:
                return
            self._snapshot = Snapshot(self._make_pipeline(snap.index), snap.version)
        log.info("index version %d: pipeline remade", snap.version)

    # ------------------------------------------------------------------ start and refresh

    def start(self) -> Snapshot:
        """Seed the store if it is empty (under the lock: one worker seeds), then serve CURRENT, or
        the newest version that can be read when CURRENT cannot (with a warning)."""
        if getattr(self.store, "read_only", False):  # a read-only copy: read it, never lock or write
            if self._empty_store():
                raise StoreError(f"{self.store.root}: the read-only index store holds no index version; serve a "
                                 "copy of a seeded store (a CURRENT file and v<N> folders)")
            version, index = self._load_newest()
            self._swap(index, version)
            log.info("serving index version %d from %s (read-only)", version, self.store.root)
            return self.snapshot
        with self.store.write_lock():
            clean = getattr(self.store, "clean_leftovers", None)  # folder stores leave temporary folders
            if clean is not None:
                clean()
            if self._empty_store():
                index = self._seed()
                version = self.store.publish(index)
                log.info("seeded the empty index store %s as v%d", getattr(self.store, "root", ""), version)
            else:
                version, index = self._load_newest()
        self._swap(index, version)
        log.info("serving index version %d from %s", version, self.store.root)
        return self.snapshot

    def _empty_store(self) -> bool:
        try:
            current = self.store.current_version()
        except Exception:  # a garbled pointer: the versions on disk decide
            current = None
        on_disk = getattr(self.store, "versions_on_disk", None)
        return current is None and not (on_disk() if on_disk is not None else [])

    def _load_newest(self) -> tuple[int, Any]:
        """The newest readable version (stores without fallback: CURRENT)."""
        newest = getattr(self.store, "load_newest_readable", None)
        if newest is not None:
            version, index, skipped = newest()
            self.unreadable.update(skipped)
            return version, index
        version = self.store.current_version()
        if version is None:
            raise RuntimeError("the index store has no current version; restart the service to reseed it")
        return version, self.store.load(version)

    def refresh(self) -> bool:
        """Pick up a newer CURRENT if there is one; returns whether the served version changed.

        A version that fails to load is skipped (logged once) and tried again after
        ``retry_unreadable_s``; the worker keeps serving what it has.
        """
        version = self.store.current_version()
        if version is None or (self._snapshot is not None and version <= self._snapshot.version):
            return False
        failed = self._failed_at.get(version)
        if failed is not None and time.monotonic() - failed < self.retry_unreadable_s:
            return False
        try:
            index = self.store.load(version)
        except Exception as exc:
            self._failed_at[version] = time.monotonic()
            self.unreadable[version] = f"{type(exc).__name__}: {str(exc)[:300]}"
            log.warning("index version %d cannot be read (%s); still serving v%s", version, self.unreadable[version],
                        self._snapshot.version if self._snapshot is not None else "none")
            return False
        self.unreadable.pop(version, None)
        swapped = self._swap(index, version)
        if swapped:
            log.info("picked up index version %d", version)
        return swapped

    # ------------------------------------------------------------------ writes

    def pipeline_for(self, index: Any) -> Any:
        """A pipeline like the served ones (scorer, policy, shortcuts) over ``index``, which is not served."""
        return self._make_pipeline(index)

    def _write(self, what: str, change: Callable[[Any], tuple[bool, bool, int, int]]) -> UpdateOutcome:
        with self._write_lock, self.store.write_lock():
            # The newest state, whoever wrote it (an unreadable newest version is skipped, with a warning).
            version, working = self._load_newest()
            changed, created, tools, re_embedded = change(working)
            if changed:
                version = self.store.publish(working)
        if changed:
            self._swap(working, version)
        else:
            self.refresh()
        log.info("%s: changed=%s, version %d", what, changed, version)
        return UpdateOutcome(changed, created, tools, re_embedded, version)

    def set_calibration(self, calibration: dict[str, Any], tools: dict[Any, str]) -> UpdateOutcome:
        """Save ``calibration`` (a catalog calibration's dict) with the newest version, as a new version.

        ``tools`` are the tool hashes it was measured on (``ToolIndex.tool_hashes``).

        Raises:
            CatalogChanged: the newest version's tools are not those (the catalog changed while probing).
        """

        def change(index: Any) -> tuple[bool, bool, int, int]:
            if index.tool_hashes() != tools:
                raise CatalogChanged("the catalog changed while it was probed (a server was added, replaced or "
                                     "removed); nothing was saved: calibrate again")
            if index.calibration == calibration:
                return False, False, len(index.catalog.tools), 0
            index.calibration = calibration
            return True, False, len(index.catalog.tools), 0

        return self._write("catalog calibration", change)

    def upsert_server(self, name: str, description: str, tools: list[Any],
                      examples: dict[str, list[str]] | None) -> UpdateOutcome:
        """Add or replace one server; tools whose content is unchanged are not re-embedded.

        ``examples`` maps tool names to example requests; tools it does not name keep the
        examples they had (an empty list clears them).

        Raises:
            CatalogError: a new server's name reads the same as another server's (look-alike letters).
        """

        def change(index: Any) -> tuple[bool, bool, int, int]:
            catalog = index.catalog
            before = {t.name: t for t in catalog.server_tools(name)}
            created = not before
            if created:
                clash = confusable_with(name, catalog.servers)
                if clash is not None:
                    raise CatalogError(f"server name {name!r} reads the same as the existing server {clash!r} "
                                       "(look-alike letters of another script); choose a distinct name")
            merged = []
            for t in tools:
                ex = (examples or {}).get(t.name)
                if ex is None and t.name in before:
                    ex = list(before[t.name].examples)
                merged.append(dataclasses.replace(t, server=name, server_description=description,
                                                  examples=tuple(ex or ())))
            same = (not created and catalog.server_descriptions.get(name, "") == description
                    and {n: t.content_hash() for n, t in before.items()}
                    == {t.name: t.content_hash() for t in merged})
            if same:
                return False, False, len(merged), 0
            n = index.upsert_server(name, description, merged)
            return True, created, len(merged), int(n)

        return self._write(f"catalog change on server {name!r}", change)

    def remove_server(self, name: str) -> UpdateOutcome:
        """Remove one server; ``tools`` in the outcome is how many tools went with it."""

        def change(index: Any) -> tuple[bool, bool, int, int]:
            n = int(index.remove_server(name))
            return n > 0, False, n, 0

        return self._write(f"catalog change on server {name!r}", change)
