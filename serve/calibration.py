"""A served catalog calibrates itself: ``POST /v1/calibration`` (admin) runs ``toolrank index --calibrate``'s
probes (:mod:`retrieval.pipeline.probes`) on the index the service serves, in the background, and saves the
map with it as a new index version; ``GET /v1/calibration`` says how far it got and what it saved;
``DELETE /v1/calibration`` stops it.

Why a service needs it: a catalog changed over HTTP (``PUT`` / ``DELETE /v1/servers/...``) drops the
calibration it had (it was measured on other tools), and until now only an index built offline could get one.

One calibration runs at a time per store, whichever worker or replica started it: the worker running it holds
an exclusive ``flock`` on ``<store>/.calibration.lock`` for as long as it runs (the system releases it if the
process dies), and writes its progress to ``<store>/calibration-job.json`` (replaced atomically, readable by
every worker and read-only replica), which names the worker (host and pid). A job the file says is running
while nobody holds the lock was interrupted (the worker stopped); starting again reuses what the endpoint
already wrote (``<store>/probes-cache.jsonl``, keyed by the tools' content, as the command-line cache). A stop
is asked for through ``<store>/.calibration.stop`` (any worker may write it; the running one reads it before
each call to the endpoint); a worker shutting down stops its own job the same way. The probes are searched on a
copy of the newest version without its calibration (the shipped scale); the map is saved only if the newest
version still holds the same tools (a catalog changed meanwhile is reported, nothing saved). Decisions do not
change: the zone thresholds move with the probabilities (docs/day-one.md).
"""

from __future__ import annotations

import copy
import datetime as dt
import fcntl
import json
import logging
import os
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .engine import CatalogChanged, Engine

__all__ = ["CalibrationJobs", "CalibrationRunning", "jobs_of", "jobs_to_read", "keep_calibrated", "STATE_FILE", "LOCK_FILE", "STOP_FILE",
           "CACHE_FILE"]

log = logging.getLogger(__name__)

STATE_FILE = "calibration-job.json"
LOCK_FILE = ".calibration.lock"
STOP_FILE = ".calibration.stop"
CACHE_FILE = "probes-cache.jsonl"
_WRITE_EVERY_S = 1.0   # progress is written at most this often (and at each phase change)
_LOCK_TRIES_S = 0.2    # a POST waits this long for a lock another worker only looks at (GET probes it)


_STARTED = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")   # this process's start, as records say


class CalibrationRunning(RuntimeError):
    """A calibration of this store is already running (in this worker or another)."""


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def jobs_of(state: Any, engine: Engine) -> "CalibrationJobs | None":
    """The app's calibration jobs for ``engine``'s store, made on first use; None where no calibration can be
    saved (a Qdrant store, an index without tool hashes, a read-only store)."""
    root = getattr(engine.store, "root", None)
    if root is None or getattr(engine.store, "read_through", False) or getattr(engine.store, "read_only", False) \
            or not hasattr(engine.snapshot.index, "tool_hashes"):
        return None
    jobs = state.calibration_jobs
    if jobs is None or jobs.root != Path(root):
        jobs = state.calibration_jobs = CalibrationJobs(root)
    return jobs


def jobs_to_read(state: Any, engine: Engine) -> "CalibrationJobs | None":
    """:func:`jobs_of`, and on a read-only copy of a store jobs that only read the record its writer left; None
    where no calibration is kept at all (Qdrant, an index without tool hashes)."""
    jobs = jobs_of(state, engine)
    root = getattr(engine.store, "root", None)
    if jobs is None and root is not None and getattr(engine.store, "read_only", False):
        return CalibrationJobs(root)
    return jobs


def keep_calibrated(state: Any, engine: Engine, trigger: str) -> None:
    """The automatic calibration (``calibrate_after_change_s``): after a catalog change, or at start, schedule
    one (it runs only if the served index then has no calibration)."""
    delay = getattr(state.settings, "calibrate_after_change_s", None)
    if delay is None:
        return
    jobs = jobs_of(state, engine)
    if jobs is None:
        log.warning("TOOLRANK_CALIBRATE_AFTER_CHANGE_S: this store cannot carry a calibration (read-only or Qdrant); "
                    "no automatic calibration")
        return
    jobs.schedule(engine, state.settings.calibrate_probes, delay, trigger)


class CalibrationJobs:
    """The calibration jobs of one index store folder (``root``)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self._mutex = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._timer: threading.Timer | None = None
        self._client: Any = None   # the running job's endpoint client (cancelled when the worker stops)
        self._closing = False

    # ------------------------------------------------------------------ reading

    def state(self) -> dict[str, Any]:
        """The last job's record (``{"state": "none"}`` before any); a job recorded as running that no worker
        runs any more reads ``interrupted``."""
        data = self._read()
        if data.get("state") == "running" and not self._running_somewhere():
            again = self._read()   # it may have ended between the two looks
            if again.get("state") == "running" and again.get("started_at") == data.get("started_at"):
                return {**again, "state": "interrupted",
                        "message": "the worker running it stopped before it finished; start it again (what the "
                                   "LLM endpoint already wrote is reused)"}
            return again
        return data

    def _read(self) -> dict[str, Any]:
        from .schemas import CalibrationJob

        try:
            data = json.loads((self.root / STATE_FILE).read_text(encoding="utf-8"))
            CalibrationJob.model_validate(data)   # a record this release cannot answer with is no record
            return data
        except FileNotFoundError:
            return {"state": "none", "message": "no calibration was started on this store"}
        except (OSError, ValueError) as exc:   # pydantic's ValidationError is a ValueError
            return {"state": "none", "message": f"the job record {STATE_FILE} cannot be read "
                                                f"({' '.join(str(exc).split())[:200]}); start a calibration to "
                                                "write a new one"}

    def _running_somewhere(self) -> bool:
        with self._mutex:
            if self._thread is not None and self._thread.is_alive():
                return True
        try:   # flock needs no write access: a read-only replica can look too
            fd = os.open(self.root / LOCK_FILE, os.O_RDONLY)
        except FileNotFoundError:
            return False
        except OSError:   # cannot look: do not call a running job interrupted
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ running

    def schedule(self, engine: Engine, probes: int, delay: float, trigger: str) -> None:
        """Calibrate ``delay`` s from now unless asked again before (the last catalog change of a burst starts
        it), and only if the served index then has no calibration: the service's automatic calibration
        (``calibrate_after_change_s``). A job running then (here or in another worker) defers it again."""
        with self._mutex:
            if self._closing:
                return
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(delay, self._fire, args=(engine, probes, delay, trigger))
            self._timer.daemon = True
            self._timer.name = "toolrank-calibration-timer"
            self._timer.start()

    def _fire(self, engine: Engine, probes: int, delay: float, trigger: str) -> None:
        try:
            engine.refresh()
            cal = getattr(engine.snapshot.pipeline, "catalog_calibration", None)
            if cal is not None and cal.complete:
                return   # calibrated meanwhile (by another worker, or nothing changed the tools); one whose tail
                #          still awaits judgments runs again (the cache has the rest)
            last = self.state()
            if last.get("state") == "running":
                self.schedule(engine, probes, max(delay, 5.0), trigger)   # after it: it may probe an older catalog
                return
            if last.get("state") in ("failed", "stopped") and (last.get("probed_version") or 0) >= engine.snapshot.version \
                    and str(last.get("started_at", "")) >= _STARTED:
                return   # this version was tried since the service started (another worker's run, or stopped by
                #          DELETE): a new catalog change or a restart tries again
            try:
                self.start(engine, probes, trigger=trigger)
            except CalibrationRunning:   # after the running one: it may have probed an older catalog
                self.schedule(engine, probes, max(delay, 5.0), trigger)
        except Exception:
            log.exception("the automatic catalog calibration (%s) could not start", trigger)

    def start(self, engine: Engine, probes: int, trigger: str = "request") -> dict[str, Any]:
        """Start probing the newest version through the ``TOOLRANK_LLM_*`` endpoint (its client is closed by the
        job when it ends, by this call when it raises); the job's first record.

        Raises:
            GenerationError: no endpoint is configured (said before anything else).
            CalibrationRunning: one is running on this store already.
            OSError: the store folder cannot be written.
        """
        from retrieval.index.examples import llm_client

        client = llm_client()
        try:
            return self._start(engine, client, probes, trigger)
        except BaseException:
            client.close()
            raise

    def _start(self, engine: Engine, client: Any, probes: int, trigger: str) -> dict[str, Any]:
        with self._mutex:
            if self._closing:
                raise CalibrationRunning("this worker is stopping")
            if self._thread is not None and self._thread.is_alive():
                raise CalibrationRunning("a calibration of this catalog is already running (in this worker)")
            fd = self._lock()
            try:
                self._clear_stop()
                self._clean_leftovers()
                self._stop.clear()
                engine.refresh()   # the store's newest version, not one a poll behind
                snap = engine.snapshot
                job = {"state": "running", "probes": int(probes), "probed_version": snap.version,
                       "started_at": _now(), "worker": f"{socket.gethostname()}:{os.getpid()}", "trigger": trigger,
                       "phase": "starting", "done": 0, "total": 0, "message": "probing the served catalog"}
                self._write(job)
                self._client = client
                self._thread = threading.Thread(target=self._run, args=(fd, engine, snap, client, job), daemon=True,
                                                name="toolrank-calibration")
                self._thread.start()
            except BaseException:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
                raise
            return dict(job)

    def _lock(self) -> int:
        fd = os.open(self.root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        end = time.monotonic() + _LOCK_TRIES_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if time.monotonic() < end:   # a reader's brief look, or a job: ask again shortly
                    time.sleep(0.02)
                    continue
                os.close(fd)
                raise CalibrationRunning("a calibration of this catalog is already running (in another worker)") \
                    from None
            except BaseException:
                os.close(fd)
                raise

    def request_stop(self) -> bool:
        """Ask the running job to stop (whichever worker runs it): it ends after the endpoint calls in flight,
        keeping what they wrote; False when none runs."""
        if not self._running_somewhere():
            return False
        self._stop.set()
        try:
            (self.root / STOP_FILE).touch()
        except OSError as exc:
            if self._thread is None or not self._thread.is_alive():   # only another worker could read it
                raise
            log.warning("could not write %s (%s); stopping this worker's job only", STOP_FILE, exc)
        return True

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop this worker's job (the service is stopping) and wait up to ``timeout`` s for it to record so."""
        with self._mutex:
            self._closing = True   # no timer starts a run any more
            if self._timer is not None:
                self._timer.cancel()
        thread = self._thread
        if thread is None or not thread.is_alive():
            return
        self._stop.set()
        cancel = getattr(self._client, "cancel", None)
        if callable(cancel):   # the calls in flight end now, not after the endpoint's timeout and retries
            cancel()
        thread.join(timeout)

    def wait(self, timeout: float | None = None) -> None:
        """Wait for this worker's job to end (tests)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _stopping(self) -> bool:
        return self._stop.is_set() or (self.root / STOP_FILE).exists()

    def _clear_stop(self) -> None:
        try:
            (self.root / STOP_FILE).unlink()
        except FileNotFoundError:
            pass

    def _run(self, fd: int, engine: Engine, snap: Any, client: Any, job: dict[str, Any]) -> None:
        from retrieval.pipeline.probes import write_probes

        try:
            with client:
                index = copy.copy(snap.index)   # read only (never changed: upserts change a freshly loaded copy),
                index.calibration = None        # without its calibration: the shipped scale
                tools = index.tool_hashes()
                pipeline = engine.pipeline_for(index)
                outcome = write_probes(pipeline, client, self.root / CACHE_FILE, n=job["probes"],
                                       progress=self._progress(job), stop=self._stopping)
            job["message"] = outcome.format()
            if outcome.calibration is None or outcome.stopped:
                job["state"] = "stopped" if outcome.stopped else "failed"
                if outcome.stopped:
                    job["message"] += "; nothing saved (what the endpoint wrote is kept: start again to go on)"
            else:
                self._progress(job)("saving", 0, 1)
                try:
                    saved = engine.set_calibration(outcome.calibration.to_dict(), tools)
                except CatalogChanged as exc:
                    job.update(state="failed", message=f"{job['message']}; {exc}")
                else:
                    job.update(state="done", saved_version=saved.version, done=1,
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
            self._clear_stop()
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

    def _write(self, job: dict[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(prefix=f".{STATE_FILE}.", dir=self.root)
        try:
            os.fchmod(fd, 0o644)   # every worker and replica reads it, whoever runs them
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(job, f, ensure_ascii=False, indent=1)
            os.replace(tmp, self.root / STATE_FILE)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _clean_leftovers(self) -> None:
        """Temporary record files a crash left half-written (older than a minute: no write is that slow)."""
        for path in self.root.glob(f".{STATE_FILE}.*"):
            try:
                if time.time() - path.stat().st_mtime > 60:
                    path.unlink()
            except OSError:
                pass
