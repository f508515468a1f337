"""A served catalog calibrates itself: ``POST /v1/calibration`` (admin) runs ``toolrank index --calibrate``'s
probes (:mod:`retrieval.pipeline.probes`) on the index the service serves, in the background, and saves the
map with it as a new index version; ``GET /v1/calibration`` says how far it got and what it saved.

Why a service needs it: a catalog changed over HTTP (``PUT`` / ``DELETE /v1/servers/...``) drops the
calibration it had (it was measured on other tools), and until now only an index built offline could get one.

One calibration runs at a time per store, whichever worker or replica started it: the worker running it holds
an exclusive ``flock`` on ``<store>/.calibration.lock`` for as long as it runs (the system releases it if the
process dies), and writes its progress to ``<store>/calibration-job.json`` (replaced atomically), which every
worker reads. A job the file says is running while nobody holds the lock was interrupted (the worker
stopped); starting again reuses what the endpoint already wrote (``<store>/probes-cache.jsonl``, keyed by
the tools' content, as the command-line cache). The probes are searched on a copy of the served version
without its calibration (the shipped scale); the map is saved only if the newest version still holds the
same tools (a catalog changed meanwhile is reported, nothing saved). Decisions do not change: the zone
thresholds move with the probabilities (docs/day-one.md).
"""

from __future__ import annotations

import copy
import datetime as dt
import errno
import fcntl
import json
import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .engine import CatalogChanged, Engine

__all__ = ["CalibrationJobs", "CalibrationRunning", "STATE_FILE", "LOCK_FILE", "CACHE_FILE"]

log = logging.getLogger(__name__)

STATE_FILE = "calibration-job.json"
LOCK_FILE = ".calibration.lock"
CACHE_FILE = "probes-cache.jsonl"
_WRITE_EVERY_S = 1.0   # progress is written at most this often (and at each phase change)


class CalibrationRunning(RuntimeError):
    """A calibration of this store is already running (in this worker or another)."""


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


class CalibrationJobs:
    """The calibration jobs of one index store folder (``root``)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self._mutex = threading.Lock()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ reading

    def state(self) -> dict[str, Any]:
        """The last job's record (``{"state": "none"}`` before any); a job recorded as running that no worker
        runs any more reads ``interrupted``."""
        try:
            data = json.loads((self.root / STATE_FILE).read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise ValueError("not an object")
        except FileNotFoundError:
            return {"state": "none", "message": "no calibration was started on this store"}
        except (OSError, ValueError) as exc:
            return {"state": "none", "message": f"the job record {STATE_FILE} cannot be read ({exc}); "
                                                "start a calibration to write a new one"}
        if data.get("state") == "running" and not self._running_somewhere():
            data = {**data, "state": "interrupted",
                    "message": "the worker running it stopped before it finished; start it again (what the LLM "
                               "endpoint already wrote is reused)"}
        return data

    def _running_somewhere(self) -> bool:
        with self._mutex:
            if self._thread is not None and self._thread.is_alive():
                return True
        fd = self._open_lock(create=False)
        if fd is None:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ running

    def start(self, engine: Engine, client: Any, probes: int) -> dict[str, Any]:
        """Start probing the served version through ``client`` (a chat client, closed when the job ends);
        the job's first record.

        Raises:
            CalibrationRunning: one is running on this store already.
            OSError: the store folder cannot be written.
        """
        with self._mutex:
            if self._thread is not None and self._thread.is_alive():
                raise CalibrationRunning("a calibration of this catalog is already running")
            fd = self._open_lock(create=True)
            assert fd is not None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise CalibrationRunning("a calibration of this catalog is already running (in another worker)") \
                    from None
            try:
                snap = engine.snapshot
                job = {"state": "running", "probes": int(probes), "probed_version": snap.version,
                       "started_at": _now(), "phase": "starting", "done": 0, "total": 0,
                       "message": "probing the served catalog"}
                self._write(job)
                self._thread = threading.Thread(target=self._run, args=(fd, engine, snap, client, job), daemon=True,
                                                name="toolrank-calibration")
                self._thread.start()
            except BaseException:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
                raise
            return dict(job)

    def wait(self, timeout: float | None = None) -> None:
        """Wait for this worker's job to end (tests, shutdown)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self, fd: int, engine: Engine, snap: Any, client: Any, job: dict[str, Any]) -> None:
        from retrieval.pipeline.probes import write_probes

        try:
            index = copy.copy(snap.index)   # the served version, read without its calibration (the shipped scale)
            index.calibration = None
            tools = index.tool_hashes()
            pipeline = engine.pipeline_for(index)
            with client:
                outcome = write_probes(pipeline, client, self.root / CACHE_FILE, n=job["probes"],
                                       progress=self._progress(job))
            job["message"] = outcome.format()
            if outcome.calibration is None:
                job["state"] = "failed"
            else:
                try:
                    saved = engine.set_calibration(outcome.calibration.to_dict(), tools)
                except CatalogChanged as exc:
                    job.update(state="failed", message=f"{job['message']}; {exc}")
                else:
                    job.update(state="done", saved_version=saved.version,
                               calibration=outcome.calibration.to_dict())
                    if outcome.error:   # fitted on what finished; the rest can be written by a later run
                        job["message"] += "; start again to probe the rest"
        except Exception as exc:   # never a silent end: the record says why
            log.exception("the catalog calibration failed")
            job.update(state="failed", message=f"the calibration failed: {type(exc).__name__}: {str(exc)[:300]}")
        finally:
            job["finished_at"] = _now()
            try:
                self._write(job)
            except OSError:
                log.exception("could not write the calibration job's record")
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            log.info("catalog calibration %s: %s", job["state"], job["message"])

    def _progress(self, job: dict[str, Any]):
        last = [0.0, ""]

        def told(phase: str, done: int, total: int) -> None:
            job.update(phase=phase, done=int(done), total=int(total))
            now = time.monotonic()
            if phase != last[1] or done >= total or now - last[0] >= _WRITE_EVERY_S:
                last[0], last[1] = now, phase
                try:
                    self._write(job)
                except OSError:   # progress is a courtesy: the job goes on
                    log.warning("could not write the calibration job's progress", exc_info=True)

        return told

    # ------------------------------------------------------------------ files

    def _open_lock(self, create: bool) -> int | None:
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        try:
            return os.open(self.root / LOCK_FILE, flags, 0o644)
        except OSError as exc:
            if not create and exc.errno in (errno.ENOENT, errno.EACCES, errno.EROFS):
                return None
            raise

    def _write(self, job: dict[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(prefix=f".{STATE_FILE}.", dir=self.root)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(job, f, ensure_ascii=False, indent=1)
            os.replace(tmp, self.root / STATE_FILE)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
