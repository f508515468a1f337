"""Audits: an unbiased sample of a tenant's searches, judged by the LLM endpoint (0.18.0).

A recalibration learnt from feedback sees only what the agent chose to call — a search that proceeded has its
first tool called whether it fits or not, a request no tool fits is seen only when it proceeds — and on the
held-out catalogs that bias made it worse on three of seven kinds (``benchmarks/use_recalibration.py
--biased``): it stays off by default. An audit is drawn **before** the outcome, from the request id alone
(``TOOLRANK_AUDIT_SHARE`` of the searches, keyed with a secret of the deployment so a client cannot choose which;
at most ``TOOLRANK_AUDIT_DAILY_MAX`` a tenant per day and worker, paced over the day so the sample stays spread
over it). In the background, after the answer went out, the endpoint is asked about the search's first tool and
about one candidate past its scored head (drawn uniformly among the ones the search itself read: the tenant's
own tools, with its own policy) — two short replies an audit. ``TOOLRANK_AUDIT_QUESTION`` says what it asks:
``step`` (the default) — is it a right tool to call, for the request or one of its steps; ``tool`` — does it by
itself do everything asked (the prompt a catalog's calibration judges with). Only the verdicts are kept
(``audits.jsonl`` in the tenant's usage folder: the probabilities on the shipped scale, the tools, yes or no,
the question; never the request's text). Once a tenant has ``TOOLRANK_USE_RECALIBRATION_MIN`` audits, its
recalibration is fitted on them, pulled towards the served catalog's own map
(``retrieval.pipeline.recalibration.fit_audit_recalibration``), and with 20 judged tail candidates its level
past the head starts at the catalog's and moves where they cannot come from it (``probes.audit_tail_shift``);
thresholds move with the map, so no decision changes (``benchmarks/audit_recalibration.py``,
``benchmarks/audit_tail.py``).

The request goes to the operator's LLM endpoint (secrets masked first): audits are off unless the share is set,
and a tenant opts out with ``audit = false`` in the tenants file. A judge that fails or cannot be reached costs
the search nothing (counted, never retried); a full queue drops the audit (counted).
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from retrieval.catalog.model import Tool
from retrieval.redaction import redact_secrets

__all__ = ["Auditor", "drawn", "check_endpoint", "recalibration_args", "audit_salt", "AUDIT_QUEUE"]

log = logging.getLogger(__name__)

AUDIT_QUEUE = 256       # audits waiting for the endpoint at most; more are dropped (counted)
FITS_AT = 0.5           # the judge's probability at or over which the first tool fits (as for probes)
QUESTIONS = {"step": "audit_step",    # is it a right tool to call: for the request or one of its steps (default)
             "tool": "probe_judge"}   # does the tool by itself do everything asked (the scorer's training question)


def drawn(tenant: str, request_id: str | None, share: float, salt: bytes = b"") -> bool:
    """Whether this search is audited: a keyed hash of the tenant and the request id under ``share`` — decided
    before anything about the search is known, so the audited searches are a uniform sample of the tenant's
    (``salt``: the deployment's secret, :func:`audit_salt`; a client that sets its request ids cannot tell
    which are drawn)."""
    if not request_id or share <= 0.0:
        return False
    if share >= 1.0:
        return True
    h = hashlib.blake2b(f"{tenant}\0{request_id}".encode(), key=salt[:64], digest_size=8, person=b"toolrank-audit").digest()
    return int.from_bytes(h, "big") / 2.0 ** 64 < share


def audit_salt(root: str | Path) -> bytes:
    """The deployment's audit secret, made once in the usage root (0600) and shared by every worker on it."""
    path = Path(root) / "audit-salt"
    try:
        return bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError):
        pass
    Path(root).mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:   # another worker made it meanwhile
        time.sleep(0.05)
        return bytes.fromhex(path.read_text().strip())
    with open(fd, "w") as fh:
        fh.write(secrets.token_hex(32))
    return bytes.fromhex(path.read_text().strip())


def recalibration_args(settings: Any, tenant: Any, pipeline: Any) -> dict[str, Any] | None:
    """What ``UsageBook.recalibration`` is asked for this tenant on this pipeline, or None (nothing to read:
    neither feedback nor audits on)."""
    audits = float(getattr(settings, "audit_share", 0.0)) > 0.0 and bool(getattr(tenant, "audit", True))
    feedback = bool(settings.use_recalibration)
    if not (audits or feedback):
        return None
    cal = getattr(pipeline, "catalog_calibration", None)
    prior = (float(cal.a), float(cal.b), float(getattr(cal, "tail_shift", 0.0))) if cal is not None else None
    return {"feedback": feedback, "audits": audits, "prior": prior, "model": getattr(pipeline, "model_key", None),
            "question": getattr(settings, "audit_question", "step")}


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
    model: str | None = None
    tail: Any = None         # one candidate past the head of the same search: (tool, shipped p, candidates it stands for)


class Auditor:
    """Judges drawn searches' first tools in one background thread, through a client from ``client_factory``
    (made on first use, closed by :meth:`close`); verdicts go to ``book.tenant(t).record_audit``.

    The daily maximum is a token bucket per tenant, refilled at ``daily_max`` a day with at most an hour's worth
    held (at least one): a busy tenant's audits are spread over the day, not spent in its first hour."""

    def __init__(self, book: Any, share: float, daily_max: int, client_factory: Callable[[], Any] | None = None,
                 *, queue_max: int = AUDIT_QUEUE, attempts: int = 2, salt: bytes | None = None, question: str = "step"):
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"the audit share must be within [0, 1], got {share}")
        if question not in QUESTIONS:
            raise ValueError(f"the audit question must be one of {sorted(QUESTIONS)}, got {question!r}")
        self.question = question
        if client_factory is None:
            from retrieval.index.examples import llm_client

            client_factory = llm_client
        self.book, self.share, self.daily_max = book, float(share), int(daily_max)
        self.salt = salt if salt is not None else audit_salt(book.root)
        self._factory, self._client, self.attempts = client_factory, None, attempts
        self._queue: queue.Queue[_Job | None] = queue.Queue(maxsize=queue_max)
        self._lock = threading.Lock()
        self._rate = self.daily_max / 86_400.0
        self._burst = max(1.0, self.daily_max / 24.0)
        self._buckets: dict[str, tuple[float, float]] = {}   # tenant -> (tokens, when: monotonic s)
        self.counts = {"queued": 0, "judged": 0, "dropped": 0, "over_daily": 0, "failed": 0}
        self._thread: threading.Thread | None = None
        self._closed = False

    def _take(self, tenant: str) -> bool:
        """One audit from the tenant's bucket (call under the lock)."""
        now = time.monotonic()
        tokens, when = self._buckets.get(tenant, (self._burst, now))
        tokens = min(self._burst, tokens + (now - when) * self._rate)
        if tokens < 1.0:
            self._buckets[tenant] = (tokens, now)
            return False
        self._buckets[tenant] = (tokens - 1.0, now)
        if len(self._buckets) > 100_000:   # a bound on tenants remembered; a forgotten one starts full again
            self._buckets.pop(next(iter(self._buckets)))
        return True

    def offer(self, tenant: Any, request_id: str | None, request: str, result: Any, catalog: Any,
              version: Any = None, model: str | None = None) -> bool:
        """Queue an audit of ``result``'s first tool when this search is drawn (never blocks, never raises; True
        when queued). Not audited: a tenant that opted out, an answer without tools, a first tool a shortcut put
        there (its number is a policy floor, not a probability). One of the candidates past the head the search
        itself read (``result.tail``: the tenant's own eligible tools, its own policy) is drawn too, uniformly by a
        keyed hash of the request id, and judged with it: the tail's level from the tenant's own traffic."""
        try:
            return self._offer(tenant, request_id, request, result, catalog, version, model)
        except Exception:   # an audit must never fail the search it would have judged
            log.warning("a search could not be queued for an audit", exc_info=True)
            return False

    def _offer(self, tenant: Any, request_id: str | None, request: str, result: Any, catalog: Any,
               version: Any, model: str | None) -> bool:
        name = getattr(tenant, "name", tenant)
        if not getattr(tenant, "audit", True) or not drawn(name, request_id, self.share, self.salt):
            return False
        raw = getattr(result, "raw_best", None)
        tools = getattr(result, "tools", None) or []
        if not tools or not isinstance(raw, (int, float)) or not 0.0 <= raw < 1.0:
            return False
        first = tools[0]
        tool = catalog.get(first.tool_id) if catalog is not None else None
        if tool is None or getattr(first, "source", "ranked") in ("exact_name", "always_available"):
            return False
        job = _Job(name, str(request_id), redact_secrets(request), tool, float(raw), version, model,
                   self._tail_of(name, str(request_id), getattr(result, "tail", ()) or (), catalog))
        with self._lock:
            if self._closed:
                return False
            if not self._take(name):
                self.counts["over_daily"] += 1
                return False
            try:
                self._queue.put_nowait(job)
            except queue.Full:
                self.counts["dropped"] += 1
                return False
            self.counts["queued"] += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, daemon=True, name="toolrank-audits")
                self._thread.start()
        return True

    def _judge(self, job: _Job, tool: Tool | None = None) -> float:
        from retrieval.pipeline.probes import _probability
        from retrieval.writing.prompting import messages, tool_text
        from retrieval.writing.runner import ask

        with self._lock:
            if self._closed:
                raise RuntimeError("closed")
            if self._client is None:
                self._client = self._factory()
            client = self._client
        return ask(client, messages(QUESTIONS[self.question], request=job.request, tool=tool_text(tool or job.tool)),
                   _probability, temperature=0.2, attempts=self.attempts)   # a retried reply is not the same reply

    def _tail_of(self, tenant: str, request_id: str, rows: Any, catalog: Any) -> tuple[Tool, float, int] | None:
        """One of a search's candidates past the head, drawn uniformly by a keyed hash of the tenant and the
        request id (a repeated request draws afresh; a client cannot choose), with its card, shipped probability
        and the number of candidates it stands for; None without a tail."""
        from retrieval.pipeline.probes import tail_draw

        rows = list(rows)
        if not rows or catalog is None:
            return None
        tid, p = rows[tail_draw(f"{self.salt.hex()}\0{tenant}\0{request_id}", len(rows), 1)[0]]
        tool = catalog.get(tid)
        return (tool, float(p), len(rows)) if tool is not None else None

    def _tail(self, job: _Job) -> dict[str, Any] | None:
        """The job's tail candidate judged: its shipped probability, the candidates it stands for, the tool and the
        verdict; None without one, or when it could not be judged (the head's verdict is kept either way)."""
        if job.tail is None:
            return None
        tool, p, weight = job.tail
        try:
            p_yes = self._judge(job, tool)
        except Exception as exc:
            with self._lock:
                closed = self._closed
            if not closed:
                log.warning("the tail candidate of an audit of tenant %r could not be judged: %s", job.tenant,
                            type(exc).__name__)
            return None
        return {"p": round(p, 8), "weight": weight, "server": tool.server, "tool": tool.name,
                "fit": bool(p_yes >= FITS_AT), "p_yes": round(float(p_yes), 4)}

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
                        closed = self._closed
                    if not closed:   # the type and status only: a reply may echo the request
                        log.warning("an audit of tenant %r could not be judged: %s%s", job.tenant,
                                    type(exc).__name__, f" (status {exc.status})" if getattr(exc, "status", None) else "")
                    continue
                tail = self._tail(job)
                with self._lock:
                    if self._closed:   # stopping: nothing is written after close
                        continue
                try:
                    self.book.tenant(job.tenant).record_audit(
                        {"at": time.time(), "request_id": job.request_id, "raw_best": round(job.raw_best, 6),
                         "fit": bool(p_yes >= FITS_AT), "p_yes": round(float(p_yes), 4),
                         "server": job.tool.server, "tool": job.tool.name, "index_version": job.version,
                         "model": job.model, "question": self.question, **({"tail": tail} if tail else {})})
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
            return {"share": self.share, "daily_max": self.daily_max, "question": self.question,
                    "waiting": self._queue.qsize(), **self.counts}

    def close(self, timeout: float = 5.0) -> None:
        """Stop taking audits; drop what waits; cancel the call in flight (its verdict is not written); close the
        client."""
        with self._lock:
            self._closed = True
            thread, client = self._thread, self._client
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
            self._queue.task_done()
            with self._lock:
                self.counts["dropped"] += 1
        if client is not None and hasattr(client, "cancel"):
            try:
                client.cancel()
            except Exception:
                pass
        if thread is not None:
            try:
                self._queue.put_nowait(None)
            except queue.Full:
                pass
            thread.join(timeout)
        if client is not None:
            try:
                client.close()
            except Exception:
                pass


def recalibration_state(state: Any, name: str, tenant: Any = None) -> dict[str, Any]:
    """What a tenant's recalibration rests on and what it fits (``UsageBook.recalibration_state``), asked as its
    searches ask (feedback switch, audits, the served catalog's map and model). Reads the tenant's files: call it
    off the event loop."""
    settings = state.settings
    if tenant is None or getattr(tenant, "name", None) != name:
        tenants = state.tenants.all() if state.tenants is not None else []
        tenant = next((t for t in tenants if t.name == name), None)
    engine = getattr(state, "engine", None)
    try:
        pipeline = engine.snapshot.pipeline if engine is not None else None
    except Exception:   # not ready yet: no catalog map to pull towards
        pipeline = None
    asked = recalibration_args(settings, tenant, pipeline) or {"audits": False, "prior": None, "model": None,
                                                               "question": "step"}
    return state.usage.recalibration_state(name, settings.use_recalibration, settings.use_recalibration_min,
                                           audits=asked["audits"], prior=asked["prior"], model=asked["model"],
                                           question=asked["question"])
