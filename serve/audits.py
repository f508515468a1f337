"""Audits: an unbiased sample of a tenant's searches, their first tool judged by the LLM endpoint (0.18.0).

A recalibration learnt from feedback sees only what the agent chose to call — a search that proceeded has its
first tool called whether it fits or not, a request no tool fits is seen only when it proceeds — and on the
held-out catalogs that bias made it worse on three of seven kinds (``benchmarks/use_recalibration.py
--biased``): it stays off by default. An audit is drawn **before** the outcome, from the request id alone
(``TOOLRANK_AUDIT_SHARE`` of the searches, at most ``TOOLRANK_AUDIT_DAILY_MAX`` a tenant per day and worker),
and asks the endpoint the calibration target's own question — would the first tool, called with suitable
arguments, itself do what the user asked (``probe_judge``, the prompt a catalog's calibration judges with) —
in the background, after the answer went out. Only the verdict is kept (``audits.jsonl`` in the tenant's usage
folder: the best probability on the shipped scale, the first tool, yes or no; never the request's text). Once a
tenant has ``TOOLRANK_USE_RECALIBRATION_MIN`` audits, its recalibration is fitted on them, pulled towards the
served catalog's own map (``retrieval.pipeline.recalibration.fit_audit_recalibration``); thresholds move with
it, so no decision changes (``benchmarks/audit_recalibration.py``).

The request goes to the operator's LLM endpoint (secrets masked first): audits are off unless the share is set,
and a tenant opts out with ``audit = false`` in the tenants file. A judge that fails or cannot be reached costs
the search nothing (counted, never retried); a full queue drops the audit (counted).
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from retrieval.catalog.model import Tool
from retrieval.redaction import redact_secrets

__all__ = ["Auditor", "drawn", "check_endpoint", "recalibration_args", "AUDIT_QUEUE"]

log = logging.getLogger(__name__)

AUDIT_QUEUE = 256       # audits waiting for the endpoint at most; more are dropped (counted)
FITS_AT = 0.5           # the judge's probability at or over which the first tool fits (as for probes)


def drawn(tenant: str, request_id: str | None, share: float) -> bool:
    """Whether this search is audited: a hash of the tenant and the request id under ``share`` — decided before
    anything about the search is known, so the audited searches are a uniform sample of the tenant's."""
    if not request_id or share <= 0.0:
        return False
    if share >= 1.0:
        return True
    h = hashlib.sha256(f"audit\0{tenant}\0{request_id}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2.0 ** 64 < share


def recalibration_args(settings: Any, tenant: Any, pipeline: Any) -> dict[str, Any] | None:
    """What ``UsageBook.recalibration`` is asked for this tenant on this pipeline, or None (nothing to read:
    neither feedback nor audits on)."""
    audits = float(getattr(settings, "audit_share", 0.0)) > 0.0 and bool(getattr(tenant, "audit", True))
    feedback = bool(settings.use_recalibration)
    if not (audits or feedback):
        return None
    cal = getattr(pipeline, "catalog_calibration", None)
    prior = (float(cal.a), float(cal.b)) if cal is not None else None
    return {"feedback": feedback, "audits": audits, "prior": prior}


def check_endpoint(share: float) -> None:
    """Raises ValueError, saying what to set, when audits are asked for and no LLM endpoint is configured."""
    from retrieval.writing.llm import LLMConfig

    try:
        LLMConfig.from_env()
    except ValueError as exc:
        raise ValueError(f"TOOLRANK_AUDIT_SHARE={share:g} needs the LLM endpoint that judges the audits: {exc}; "
                         "or leave TOOLRANK_AUDIT_SHARE unset") from None


@dataclass
class _Job:
    tenant: str
    request_id: str
    request: str
    tool: Tool
    raw_best: float
    version: Any


class Auditor:
    """Judges drawn searches' first tools in one background thread, through a client from ``client_factory``
    (made on first use, closed by :meth:`close`); verdicts go to ``book.tenant(t).record_audit``."""

    def __init__(self, book: Any, share: float, daily_max: int, client_factory: Callable[[], Any] | None = None,
                 *, queue_max: int = AUDIT_QUEUE, attempts: int = 2):
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"the audit share must be within [0, 1], got {share}")
        if client_factory is None:
            from retrieval.index.examples import llm_client

            client_factory = llm_client
        self.book, self.share, self.daily_max = book, float(share), int(daily_max)
        self._factory, self._client, self.attempts = client_factory, None, attempts
        self._queue: queue.Queue[_Job | None] = queue.Queue(maxsize=queue_max)
        self._lock = threading.Lock()
        self._days: dict[tuple[str, str], int] = {}
        self.counts = {"queued": 0, "judged": 0, "dropped": 0, "over_daily": 0, "failed": 0}
        self._thread: threading.Thread | None = None
        self._closed = False

    def offer(self, tenant: Any, request_id: str | None, request: str, result: Any, catalog: Any,
              version: Any = None) -> bool:
        """Queue an audit of ``result``'s first tool when this search is drawn (never blocks; True when queued).
        Not audited: a tenant that opted out, an answer without tools, a first tool a shortcut put there (its
        number is a policy floor, not a probability)."""
        name = getattr(tenant, "name", tenant)
        if self._closed or not getattr(tenant, "audit", True) or not drawn(name, request_id, self.share):
            return False
        raw = getattr(result, "raw_best", None)
        tools = getattr(result, "tools", None) or []
        if not tools or not isinstance(raw, (int, float)) or not 0.0 <= raw < 1.0:
            return False
        first = tools[0]
        tool = catalog.get(first.tool_id) if catalog is not None else None
        if tool is None or getattr(first, "source", "ranked") in ("exact_name", "always_available"):
            return False
        day = time.strftime("%Y-%m-%d", time.gmtime())
        with self._lock:
            used = self._days.get((name, day), 0)
            if used >= self.daily_max:
                self.counts["over_daily"] += 1
                return False
            try:
                self._queue.put_nowait(_Job(name, str(request_id), redact_secrets(request), tool, float(raw),
                                            version))
            except queue.Full:
                self.counts["dropped"] += 1
                return False
            self._days = {k: v for k, v in self._days.items() if k[1] == day}
            self._days[(name, day)] = used + 1
            self.counts["queued"] += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, daemon=True, name="toolrank-audits")
                self._thread.start()
        return True

    def _judge(self, job: _Job) -> float:
        from retrieval.pipeline.probes import _probability
        from retrieval.writing.prompting import messages, tool_text
        from retrieval.writing.runner import ask

        if self._client is None:
            self._client = self._factory()
        return ask(self._client, messages("probe_judge", request=job.request, tool=tool_text(job.tool)),
                   _probability, temperature=0.2, attempts=self.attempts)   # a retried reply is not the same reply

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                try:
                    p_yes = self._judge(job)
                except Exception as exc:   # an endpoint down or a reply never readable: the search lost nothing
                    with self._lock:
                        self.counts["failed"] += 1
                    log.warning("an audit of tenant %r could not be judged: %s", job.tenant, str(exc)[:200])
                    continue
                try:
                    self.book.tenant(job.tenant).record_audit(
                        {"at": time.time(), "request_id": job.request_id, "raw_best": round(job.raw_best, 6),
                         "fit": bool(p_yes >= FITS_AT), "p_yes": round(float(p_yes), 4),
                         "server": job.tool.server, "tool": job.tool.name, "index_version": job.version})
                except Exception:
                    with self._lock:
                        self.counts["failed"] += 1
                    log.warning("an audit of tenant %r could not be kept", job.tenant, exc_info=True)
                    continue
                with self._lock:
                    self.counts["judged"] += 1
            finally:
                self._queue.task_done()

    def join(self, timeout: float = 30.0) -> bool:
        """Wait until every queued audit is judged or failed (tests, shutdown); False on timeout."""
        end = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() > end:
                return False
            time.sleep(0.01)
        return True

    def state(self) -> dict[str, Any]:
        with self._lock:
            return {"share": self.share, "daily_max": self.daily_max, "waiting": self._queue.qsize(), **self.counts}

    def close(self, timeout: float = 5.0) -> None:
        """Stop taking audits; let the thread finish the one it judges (what waits is dropped); close the client."""
        self._closed = True
        while True:
            try:
                self._queue.get_nowait()
                self._queue.task_done()
                with self._lock:
                    self.counts["dropped"] += 1
            except queue.Empty:
                break
        if self._thread is not None:
            try:
                self._queue.put_nowait(None)
            except queue.Full:
                pass
            self._thread.join(timeout)
        if self._client is not None:
            try:
                self._client.close()
            except Exception:
                pass


def recalibration_state(state: Any, name: str, tenant: Any = None) -> dict[str, Any]:
    """What a tenant's recalibration rests on and what it fits (``UsageBook.recalibration_state``), asked as its
    searches ask (feedback switch, audits, the served catalog's map), with this worker's audit counters. Reads
    the tenant's files: call it off the event loop."""
    settings = state.settings
    if tenant is None or getattr(tenant, "name", None) != name:
        tenants = state.tenants.all() if state.tenants is not None else []
        tenant = next((t for t in tenants if t.name == name), None)
    engine = getattr(state, "engine", None)
    try:
        pipeline = engine.snapshot.pipeline if engine is not None else None
    except Exception:   # not ready yet: no catalog map to pull towards
        pipeline = None
    asked = recalibration_args(settings, tenant, pipeline) or {"feedback": False, "audits": False, "prior": None}
    out = state.usage.recalibration_state(name, settings.use_recalibration, settings.use_recalibration_min,
                                          audits=asked["audits"], prior=asked["prior"])
    return out
