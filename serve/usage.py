"""Learning from use: which offered tool was called for a request, kept per tenant.

A search records what it offered (the tenant, the request id, the request and the tools);
feedback on that request id (``POST /v1/feedback``, or the MCP gateway's ``call_tool``) records
the call, and a *successful* call to an *offered* tool makes the request a learned example of
that tool for that tenant (:mod:`retrieval.index.learned`). A failed call, or a call to a tool that was
not offered, is recorded and not learned from.

Storage, per tenant, under a usage root (``<TOOLRANK_INDEX_DIR>/usage`` for the service,
``<index>-usage`` beside the gateway's index)::

    <root>/t-<sha256(tenant)[:16]>/tenant.json        {"tenant": name}
    <root>/t-.../v1/ v2/ ... CURRENT .lock             learned examples: an IndexStore (atomic, versioned)
    <root>/t-.../feedback.jsonl                        every feedback event, learned or not
    <root>/t-.../feedback.jsonl.1                      the one older part kept when it rotated
    <root>/t-.../audits.jsonl                          audited searches: probability, tool, verdict (never text)
    <root>/audit-salt                                  the secret the audit draw is keyed with (serve/audits.py)

One tenant's folder is never read for another tenant's search, so what one tenant teaches
cannot change another's answers.

What is kept, and for how long: obvious secrets in a request (passwords, keys, tokens) are
masked (:func:`retrieval.redaction.redact_secrets`) before the request is offered, learned or
logged; folders are 0700 and files 0600. The feedback log rotates past ``feedback_max_bytes``
(one older part kept, events older than ``feedback_keep_days`` dropped as it rotates), so a
tenant's log stays under twice the bound. Forgetting (``DELETE /v1/examples``) removes the text
from the learned examples, from every older version kept on disk and from both parts of the log.

The offers ledger (what each recent search offered, at most ``offers_per_tenant`` per tenant so one
tenant never evicts another's, each at most ``offer_ttl_s`` old) is a SQLite file in the usage root
(``<root>/offers.sqlite``, :class:`OfferLedger`), shared by every worker and every process on the
folder: feedback may reach any worker. SQLite's ``secure_delete`` overwrites what is deleted, and a
rollback journal (not a WAL) leaves no older copy beside it. A request id credits each offered tool
once, atomically across workers: a replayed feedback is recorded, not learned again. A read-only
service (a replica) keeps its ledger in memory and answers feedback with 405.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import logging
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Hashable, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field

from retrieval.catalog.model import ToolId
from retrieval.index.learned import DEFAULT_LIMIT, LearnedExamples, fold_request
from retrieval.jsonl import dumps_line, read_jsonl
from retrieval.redaction import redact_secrets

from .index_store import IndexStore, StoreError
from .settings import GatewaySettings

__all__ = ["GatewayUsage", "TenantUsage", "UsageBook", "FeedbackOutcome", "tenant_folder", "usage_root_for", "main"]

log = logging.getLogger(__name__)

LOCAL_TENANT = "local"     # the MCP gateway's one user


FEEDBACK_FILE = "feedback.jsonl"        # a tenant's feedback log, and its older part after a rotation
ROTATED_FILE = FEEDBACK_FILE + ".1"
AUDITS_FILE = "audits.jsonl"            # a tenant's audits (serve/audits.py): no request text, only the verdicts
AUDITS_KEPT = 2_000                     # the newest audits kept (and fitted on)
AUDITS_MAX_BYTES = 2 * AUDITS_KEPT * 400  # past this the file is trimmed to the newest AUDITS_KEPT


def tenant_folder(name: str) -> str:
    """A tenant's folder name: a hash, so any tenant name is a safe folder name."""
    return "t-" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:16]


def usage_root_for(path: str | Path) -> Path:
    """The usage root of a service index store (``DIR/usage``) or of a gateway index folder
    (``DIR-usage`` beside it); a folder that already is a usage root is returned as it is."""
    path = Path(path)
    if (path / "usage").is_dir() or (path / "CURRENT").exists():
        return path / "usage"
    if (path / "manifest.json").exists():
        return path.with_name(path.name + "-usage")
    return path


def _private(path: Path, mode: int) -> None:
    """``chmod`` where the file system allows it (a read-only or foreign-owned folder is left as it is)."""
    try:
        os.chmod(path, mode)
    except OSError:
        pass


class TenantUsage:
    """One tenant's learned examples (an :class:`IndexStore` of :class:`LearnedExamples`) and feedback log."""

    def __init__(self, root: str | Path, tenant: str, *, limit: int = DEFAULT_LIMIT, refresh_s: float = 1.0,
                 feedback_max_bytes: int = 8 * 1024 * 1024, feedback_keep_days: float | None = None):
        self.tenant = tenant
        self.feedback_max_bytes = feedback_max_bytes
        self.feedback_keep_days = feedback_keep_days
        self.root = Path(root) / tenant_folder(tenant)
        # What users typed is kept here: folders 0700 and files 0600, whatever the umask.
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        for folder in (self.root.parent, self.root):
            _private(folder, 0o700)
        marker = self.root / "tenant.json"
        if not marker.exists():
            marker.write_text(json.dumps({"tenant": tenant}, ensure_ascii=False), encoding="utf-8")
            _private(marker, 0o600)
        self.store = IndexStore(self.root, LearnedExamples.load, keep=3)
        self.limit = limit
        self.refresh_s = refresh_s
        self._lock = threading.RLock()
        self._version: int | None = None
        self._learned = LearnedExamples(limit=limit)
        self._checked = 0.0

    @property
    def feedback_path(self) -> Path:
        return self.root / FEEDBACK_FILE

    def learned(self, *, fresh: bool = False) -> LearnedExamples:
        """The newest published learned examples (re-read at most every ``refresh_s`` unless ``fresh``)."""
        now = time.monotonic()
        if not fresh and now - self._checked < self.refresh_s:
            return self._learned
        try:
            version = self.store.current_version()
        except StoreError:
            version = -1
        if version is not None and version != self._version:
            try:
                version, found, _ = self.store.load_newest_readable()
            except StoreError:
                log.warning("tenant %r: learned examples cannot be read; searching without them", self.tenant)
                found = LearnedExamples(limit=self.limit)
            with self._lock:
                self._version, self._learned = version, found
        self._checked = now
        return self._learned

    def change(self, fn: Any, after: Any = None) -> tuple[LearnedExamples, Any]:
        """Apply ``fn(learned) -> (new, info)`` to the newest version under the store's lock; publish if
        changed, then call ``after(info)`` still under the lock (the lock is not re-entrant across calls)."""
        with self._lock, self.store.write_lock():
            self.store.clean_leftovers()
            current = self.learned(fresh=True)
            new, info = fn(current)
            if new != current:
                version = self.store.publish(new)
                self._version, self._learned = version, new
            if after is not None:
                after(info)
            return self._learned, info

    @property
    def rotated_path(self) -> Path:
        return self.root / ROTATED_FILE

    def record(self, event: dict[str, Any]) -> None:
        """Append one feedback event (under the store's lock: one line per event, whole); rotate the log
        past ``feedback_max_bytes``."""
        with self._lock, self.store.write_lock():
            if self._append(self.feedback_path, event) > self.feedback_max_bytes:
                self._rotate()

    @staticmethod
    def _append(path: Path, event: dict[str, Any]) -> int:
        """Append ``event`` as one whole line to ``path`` (made 0600); the file's size after. Call under the
        store's lock."""
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with open(fd, "a", encoding="utf-8") as fh:
            fh.write(dumps_line(event) + "\n")
            return fh.tell()

    def _rotate(self) -> None:
        """The log becomes the one older part (events past ``feedback_keep_days`` dropped), replacing the
        previous older part; a new log starts empty. Call under the store's lock."""
        rows = [row for _, row in read_jsonl(self.feedback_path)]
        if self.feedback_keep_days is not None:
            cutoff = time.time() - self.feedback_keep_days * 86400
            rows = [r for r in rows if float(r.get("at", 0) or 0) >= cutoff]
        self._rewrite(self.rotated_path, rows)
        self.feedback_path.unlink(missing_ok=True)

    def _rewrite(self, path: Path, rows: list[dict[str, Any]]) -> None:
        """Replace ``path`` with ``rows`` whole (written aside, 0600, then renamed; no copy left behind)."""
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(fd, "w", encoding="utf-8") as fh:
            fh.writelines(dumps_line(r) + "\n" for r in rows)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    def forget(self, tool_id: ToolId | None, requests: set[str] | None) -> None:
        """After a removal: drop every older version of the learned examples kept on disk, and blank the
        request text of matching events in both parts of the log (``requests`` None: every event of
        ``tool_id``, or every event when that is None too). Call under the store's lock."""
        self.store.drop_older()

        def matches(r: dict[str, Any]) -> bool:
            if tool_id is not None and (r.get("server"), r.get("tool")) != (tool_id.server, tool_id.tool):
                return False
            return requests is None or fold_request(str(r.get("request") or "")) in requests

        for path in (self.feedback_path, self.rotated_path):
            if not path.exists():
                continue
            rows = [row for _, row in read_jsonl(path)]
            if any(matches(r) and r.get("request") is not None for r in rows):
                self._rewrite(path, [{**r, "request": None, "forgotten": True} if matches(r) else r for r in rows])

    @property
    def audits_path(self) -> Path:
        return self.root / AUDITS_FILE

    def record_audit(self, event: dict[str, Any]) -> None:
        """Append one audit (a judged search: its best probability on the shipped scale and the verdict, never its
        text); past ``AUDITS_MAX_BYTES`` the file keeps the newest ``AUDITS_KEPT``."""
        with self._lock, self.store.write_lock():
            if self._append(self.audits_path, event) > AUDITS_MAX_BYTES:
                self._rewrite(self.audits_path, self.audits()[-AUDITS_KEPT:])

    def audits(self) -> list[dict[str, Any]]:
        """Every kept audit, oldest first. A line another process is still writing, or one that is damaged, is
        skipped: the audits are evidence, never a reason for a search to fail."""
        try:
            text = self.audits_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return []
        rows = []
        for line in text.split("\n"):
            try:
                row = json.loads(line) if line.strip() else None
            except (ValueError, RecursionError):
                continue
            if isinstance(row, dict):
                rows.append(row)
        return rows

    def events(self) -> list[dict[str, Any]]:
        """Every kept feedback event, oldest first (the older part, then the log)."""
        return [row for path in (self.rotated_path, self.feedback_path) if path.exists()
                for _, row in read_jsonl(path)]


def _day(at: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(at))


@dataclass(frozen=True)
class Offer:
    request: str
    need: str | None
    tools: tuple[ToolId, ...]
    at: float
    credited: set[ToolId] = field(default_factory=set, compare=False)   # tools this request id already taught
    decision: str | None = None                  # the search's decision
    probabilities: tuple[float, ...] = ()        # the decision probability of each offered tool, in order
    raw_best: float | None = None                # the best probability before the tenant's recalibration


class OfferLedger:
    """Recent offers per tenant in one SQLite file, safe across threads, workers and processes.

    Args:
        path: the database file (created 0600), or None for an in-memory ledger (one process).
        per_tenant: offers kept per tenant (the oldest go first).
        ttl_s: offers older than this are never returned and are deleted as new ones arrive.
    """

    def __init__(self, path: Path | None, *, per_tenant: int = 2_000, ttl_s: float = 3600.0):
        import sqlite3

        self.path = path
        self.per_tenant = per_tenant
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        if path is not None and not path.exists():
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        self._db = sqlite3.connect(str(path) if path is not None else ":memory:", timeout=30.0,
                                   check_same_thread=False, isolation_level=None)
        for pragma in ("journal_mode=DELETE", "secure_delete=ON", "synchronous=NORMAL", "busy_timeout=30000"):
            self._db.execute(f"PRAGMA {pragma}")
        self._db.execute("CREATE TABLE IF NOT EXISTS offers (tenant TEXT NOT NULL, request_id TEXT NOT NULL, "
                         "request TEXT, need TEXT, tools TEXT NOT NULL, at REAL NOT NULL, credited TEXT NOT NULL "
                         "DEFAULT '[]', PRIMARY KEY (tenant, request_id))")
        self._db.execute("CREATE INDEX IF NOT EXISTS offers_age ON offers (tenant, at)")
        have = {row[1] for row in self._db.execute("PRAGMA table_info(offers)")}
        for column in ("decision TEXT", "probabilities TEXT", "raw_best REAL"):   # 0.8.0, 0.11.0: older files gain them
            if column.split()[0] not in have:
                try:
                    self._db.execute(f"ALTER TABLE offers ADD COLUMN {column}")
                except sqlite3.OperationalError as exc:   # another worker opening the same old file added it first
                    if "duplicate column" not in str(exc).lower():
                        raise
        # searches and successful calls per tenant, day and decision (real-use calibration, /v1/metrics/use)
        self._db.execute("CREATE TABLE IF NOT EXISTS daily (tenant TEXT NOT NULL, day TEXT NOT NULL, decision TEXT "
                         "NOT NULL, searches INTEGER NOT NULL DEFAULT 0, successes INTEGER NOT NULL DEFAULT 0, "
                         "PRIMARY KEY (tenant, day, decision))")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def put(self, tenant: str, request_id: str, offer: "Offer") -> None:
        tools = json.dumps([[t.server, t.tool] for t in offer.tools], ensure_ascii=False)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("INSERT OR REPLACE INTO offers (tenant, request_id, request, need, tools, at, "
                                 "credited, decision, probabilities, raw_best) VALUES (?, ?, ?, ?, ?, ?, '[]', ?, ?, ?)",
                                 (tenant, request_id, offer.request, offer.need, tools, offer.at, offer.decision,
                                  json.dumps(list(offer.probabilities)) if offer.probabilities else None,
                                  offer.raw_best))
                if offer.decision:
                    self._db.execute("INSERT INTO daily (tenant, day, decision, searches) VALUES (?, ?, ?, 1) "
                                     "ON CONFLICT (tenant, day, decision) DO UPDATE SET searches = searches + 1",
                                     (tenant, _day(offer.at), offer.decision))
                self._db.execute("DELETE FROM offers WHERE tenant = ? AND (at < ? OR rowid IN (SELECT rowid FROM "
                                 "offers WHERE tenant = ? ORDER BY at DESC LIMIT -1 OFFSET ?))",
                                 (tenant, time.time() - self.ttl_s, tenant, self.per_tenant))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def get(self, tenant: str, request_id: str) -> "Offer | None":
        with self._lock:
            row = self._db.execute("SELECT request, need, tools, at, credited, decision, probabilities, raw_best "
                                   "FROM offers WHERE tenant = ? AND request_id = ?", (tenant, request_id)).fetchone()
        if row is None or time.time() - row[3] > self.ttl_s:
            return None
        return Offer(row[0] or "", row[1], tuple(ToolId(*t) for t in json.loads(row[2])), row[3],
                     {ToolId(*t) for t in json.loads(row[4])}, row[5], tuple(json.loads(row[6])) if row[6] else (),
                     row[7])

    def success(self, tenant: str, offer: "Offer") -> None:
        """Count a successful call on the day and decision of the search that offered the tool."""
        if not offer.decision:
            return
        with self._lock:
            self._db.execute("INSERT INTO daily (tenant, day, decision, successes) VALUES (?, ?, ?, 1) "
                             "ON CONFLICT (tenant, day, decision) DO UPDATE SET successes = successes + 1",
                             (tenant, _day(offer.at), offer.decision))

    def days(self, tenant: str, last: int = 30) -> list[dict[str, Any]]:
        """Searches and successful calls per day and decision, the last ``last`` days with any."""
        with self._lock:
            rows = self._db.execute("SELECT day, decision, searches, successes FROM daily WHERE tenant = ? AND day IN "
                                    "(SELECT DISTINCT day FROM daily WHERE tenant = ? ORDER BY day DESC LIMIT ?) "
                                    "ORDER BY day, decision", (tenant, tenant, last)).fetchall()
        return [{"day": d, "decision": k, "searches": n, "successes": ok} for d, k, n, ok in rows]

    def credit(self, tenant: str, request_id: str, tool_id: ToolId) -> bool:
        """Claim ``tool_id``'s credit for this request id: True the first time only (across every worker)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute("SELECT credited FROM offers WHERE tenant = ? AND request_id = ?",
                                       (tenant, request_id)).fetchone()
                done = {tuple(t) for t in json.loads(row[0])} if row is not None else set()
                first = (tool_id.server, tool_id.tool) not in done
                if first and row is not None:
                    done.add((tool_id.server, tool_id.tool))
                    self._db.execute("UPDATE offers SET credited = ? WHERE tenant = ? AND request_id = ?",
                                     (json.dumps(sorted(done)), tenant, request_id))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return first

    def forget(self, tenant: str, requests: set[str] | None = None) -> int:
        """Delete a tenant's offers (those whose request is in ``requests``, compared with whitespace
        folded; all with None); ``secure_delete`` overwrites the deleted text in the file."""
        with self._lock:
            if requests is None:
                return self._db.execute("DELETE FROM offers WHERE tenant = ?", (tenant,)).rowcount
            rows = self._db.execute("SELECT request_id, request FROM offers WHERE tenant = ?", (tenant,)).fetchall()
            gone = [rid for rid, req in rows if fold_request(req or "") in requests]
            for rid in gone:
                self._db.execute("DELETE FROM offers WHERE tenant = ? AND request_id = ?", (tenant, rid))
            return len(gone)


@dataclass(frozen=True)
class FeedbackOutcome:
    learned: bool
    reason: str
    examples: int          # learned examples the tool has now (for this tenant)


class UsageBook:
    """Every tenant's usage under one root, and the ledger of recent offers (:class:`OfferLedger`)."""

    def __init__(self, root: str | Path | None = None, *, limit: int = DEFAULT_LIMIT, offers: int = 2_000,
                 offer_ttl_s: float = 3600.0, feedback_max_bytes: int = 8 * 1024 * 1024,
                 feedback_keep_days: float | None = None, read_only: bool = False):
        # Without a store, usage lives in a temporary folder removed when the book goes (at exit too):
        # nothing a user typed stays in /tmp after the service stops.
        self._tmp = tempfile.TemporaryDirectory(prefix="toolrank-usage-") if root is None else None
        self.root = Path(root) if root is not None else Path(self._tmp.name)
        self.limit = limit
        self.offer_ttl_s = offer_ttl_s
        self.feedback_max_bytes = feedback_max_bytes
        self.feedback_keep_days = feedback_keep_days
        self._tenants: dict[str, TenantUsage] = {}
        # (tenant, question) -> (files' stamp, fit or None, when fitted (monotonic s), observations, source)
        self._recalibrations: dict[tuple[str, Any], tuple[Any, Any, float, int, str | None]] = {}
        self._lock = threading.Lock()
        self.read_only = read_only
        ledger_path = None
        if not read_only:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            _private(self.root, 0o700)
            ledger_path = self.root / "offers.sqlite"
        # a replica keeps its offers in memory: it never writes into the store it serves
        self.ledger = OfferLedger(ledger_path, per_tenant=offers, ttl_s=offer_ttl_s)

    def tenant(self, name: str) -> TenantUsage:
        with self._lock:
            found = self._tenants.get(name)
            if found is None:
                found = self._tenants[name] = TenantUsage(self.root, name, limit=self.limit,
                                                          feedback_max_bytes=self.feedback_max_bytes,
                                                          feedback_keep_days=self.feedback_keep_days)
            return found

    def learned(self, tenant: str) -> LearnedExamples | None:
        """The tenant's learned examples, or None when it has none (searches then take the shared path)."""
        if not (self.root / tenant_folder(tenant)).exists():
            return None
        found = self.tenant(tenant).learned()
        return found if len(found) else None

    def offered(self, tenant: str, request_id: str | None, request: str, need: str | None,
                tools: Sequence[tuple[str, str]], *, decision: str | None = None,
                probabilities: Sequence[float] | None = None, raw_best: float | None = None) -> Offer | None:
        """Remember what a search offered (its request with secrets masked, tools, decision and their
        probabilities; ``raw_best``: the best probability before the tenant's recalibration, when one was
        applied); returns that offer (None without a request id)."""
        if not request_id:
            return None
        need = redact_secrets(need) if need else need
        probs = tuple(round(float(p), 4) for p in probabilities) if probabilities is not None else ()
        offer = Offer(redact_secrets(request), need, tuple(ToolId(*t) for t in tools), time.time(),
                      decision=decision, probabilities=probs if len(probs) == len(tools) else (),
                      raw_best=round(float(raw_best), 6) if raw_best is not None else None)
        try:
            self.ledger.put(tenant, request_id, offer)
        except Exception:   # a full or broken disk must not fail the search; feedback on it will 404
            log.warning("could not record the offer of request %s", request_id, exc_info=True)
        return offer

    def offer(self, tenant: str, request_id: str) -> Offer | None:
        return self.ledger.get(tenant, request_id)

    def feedback(self, tenant: str, offer: Offer, request_id: str, tool_id: tuple[str, str], success: bool, *,
                 learn: bool = True, error: str | None = None, vectorize: Any = None) -> FeedbackOutcome:
        """Record one call after an offer; learn the request when the call succeeded on an offered tool.

        ``vectorize(tool_id, requests) -> (key, vector) | None`` (:func:`retrieval.index.learned.tenant_vector`
        over the served index) computes the tool's tenant vector now, stored with the examples, so that
        searches never embed what the tenant taught.
        """
        tid = ToolId(*tool_id)
        was_offered = tid in offer.tools
        if self.read_only:
            from .index_store import ReadOnlyStoreError

            raise ReadOnlyStoreError(f"{self.root}: feedback is not stored on a read-only service")
        replay = tid in offer.credited
        if success and was_offered and learn and not replay:
            # claimed before the write, in the shared ledger: two racing replays cannot both learn
            replay = not self.ledger.credit(tenant, request_id, tid)
            offer.credited.add(tid)
        if not success:
            reason = "the call failed: recorded, not learned from"
        elif not was_offered:
            reason = "the tool was not among those offered for this request: recorded, not learned from"
        elif not learn:
            reason = "learning from use is switched off for this tenant: recorded, not learned from"
        elif replay:
            reason = "this request id already taught this tool: recorded, not learned again"
        else:
            reason = "learned: the request is now an example request of this tool for you"
        usage = self.tenant(tenant)
        learned_now = success and was_offered and learn and not replay
        if learned_now:
            def learn_one(cur: LearnedExamples) -> tuple[LearnedExamples, None]:
                new = cur.add(tid, offer.request)
                got = vectorize(tid, new.requests(tid)) if vectorize is not None else None
                return (new.with_vector(tid, *got) if got is not None else new), None

            current, _ = usage.change(learn_one)
        else:
            current = usage.learned()
        if success and was_offered and not replay:
            try:
                self.ledger.success(tenant, offer)
            except Exception:   # the counters must never fail a feedback
                log.warning("could not count the success of request %s", request_id, exc_info=True)
        offered_p = ([[t.server, t.tool, p] for t, p in zip(offer.tools, offer.probabilities)]
                     if offer.probabilities else None)
        usage.record({"at": round(time.time(), 3), "request_id": request_id, "request": offer.request,
                      "decision": offer.decision, "offered_probabilities": offered_p,
                      "offered_raw_best": offer.raw_best,
                      "server": tid.server, "tool": tid.tool, "outcome": "success" if success else "error",
                      "error": redact_secrets(error) if error else error, "offered": was_offered,
                      "learned": learned_now})
        return FeedbackOutcome(learned_now, reason, len(current.get(tid, ())))

    def _offered_successes(self, tenant: str, key: Callable[[dict], Hashable]) -> tuple[list[dict], int]:
        """The tenant's kept feedback events of a successful call to a tool its search offered, with the offered
        probabilities, the first per ``key(event)``; and how many successful calls went to tools not offered.
        The evidence of both the recalibration (one per request) and the calibration page (one per call)."""
        folder = self.root / tenant_folder(tenant)
        events = self.tenant(tenant).events() if folder.exists() else []
        seen: set[Hashable] = set()
        kept: list[dict] = []
        not_offered = 0
        for e in events:
            if e.get("outcome") != "success":
                continue
            if not e.get("offered"):
                not_offered += 1
                continue
            k = key(e)
            if not e.get("offered_probabilities") or k in seen:
                continue
            seen.add(k)
            kept.append(e)
        return kept, not_offered

    def use_observations(self, tenant: str) -> tuple[list[float], list[float]]:
        """The tenant's recalibration evidence: for each search (request id) whose offered tool was called
        successfully, its best probability before any recalibration and 1 when the called tool was the first
        one offered, else 0 (the first successful call of a request id counts)."""
        p: list[float] = []
        y: list[float] = []
        for e in self._offered_successes(tenant, lambda e: str(e.get("request_id")))[0]:
            offered = e["offered_probabilities"]
            if "offered_raw_best" in e:   # 0.11.0 on: None when the first tool was a shortcut (always available,
                raw = e["offered_raw_best"]   # named exactly), not a calibrated candidate: no observation
                if not isinstance(raw, (int, float)):
                    continue
                best = float(raw)
            else:                          # older events: what was offered (no recalibration existed)
                best = float(offered[0][2])
            if not 0.0 <= best < 1.0:
                continue
            p.append(best)
            y.append(float(offered[0][0] == e.get("server") and offered[0][1] == e.get("tool")))
        return p, y

    def _audit_evidence(self, tenant: str, model: str | None = None, question: str | None = None
                        ) -> tuple[list[float], list[float], list[tuple[float, float, bool]]]:
        """The tenant's audits read once: the first tools' evidence (best probability before any map, 1 when the
        judge said it fits) and the tail candidates' (shipped probability, candidates it stands for, fits) — the
        first audit of each request id for each, with ``model`` only those measured with that scorer and its probability models,
        with ``question`` only those asked it (``TOOLRANK_AUDIT_QUESTION``); the newest ``AUDITS_KEPT`` of each."""
        if not (self.root / tenant_folder(tenant)).exists():
            return [], [], []
        p: list[float] = []
        y: list[float] = []
        tail: list[tuple[float, float, bool]] = []
        heads: set[str] = set()
        tails: set[str] = set()
        for e in self.tenant(tenant).audits():
            if (model is not None and e.get("model") != model) or (question is not None and e.get("question") != question):
                continue   # another scorer, or another definition of a fit
            rid, best, fit, t = str(e.get("request_id")), e.get("raw_best"), e.get("fit"), e.get("tail")
            if rid not in heads and isinstance(best, (int, float)) and 0.0 <= best < 1.0 and isinstance(fit, bool):
                heads.add(rid)
                p.append(float(best))
                y.append(float(fit))
            if rid not in tails and isinstance(t, dict) and isinstance(t.get("p"), (int, float)) \
                    and 0.0 <= t["p"] < 1.0 and isinstance(t.get("weight"), (int, float)) and t["weight"] > 0 \
                    and isinstance(t.get("fit"), bool):
                tails.add(rid)
                tail.append((float(t["p"]), float(t["weight"]), t["fit"]))
        return p[-AUDITS_KEPT:], y[-AUDITS_KEPT:], tail[-AUDITS_KEPT:]

    def audit_observations(self, tenant: str, model: str | None = None,
                           question: str | None = None) -> tuple[list[float], list[float]]:
        """The tenant's audited first tools as recalibration evidence (:meth:`_audit_evidence`)."""
        p, y, _ = self._audit_evidence(tenant, model, question)
        return p, y

    def audit_tail_observations(self, tenant: str, model: str | None = None,
                                question: str | None = None) -> list[tuple[float, float, bool]]:
        """The candidates past the head the tenant's audits judged (:meth:`_audit_evidence`)."""
        return self._audit_evidence(tenant, model, question)[2]

    def recalibration(self, tenant: str, min_observations: int = 25, refit_s: float = 30.0, *,
                      feedback: bool = True, audits: bool = False, prior: tuple[float, ...] | None = None,
                      model: str | None = None, question: str = "step") -> Any:
        """The tenant's recalibration (:mod:`retrieval.pipeline.recalibration`), or None: from its audits
        (``audits``: at least ``min_observations`` of them; pulled towards ``prior``, the served catalog's own
        map, or the identity), else from its feedback (``feedback``: enough observations, and better than the
        shipped probabilities in cross-validation). ``model``: the served scorer and its probability models (``Pipeline.model_key``);
        audits measured with another are left out. Refitted when the tenant's files change (checked by their
        size and time), at most once per ``refit_s`` per tenant (the previous fit serves meanwhile); it reads the
        whole log, so call it off the event loop."""
        return self._recalibration(tenant, min_observations, refit_s, feedback, audits, prior, model, question)[0]

    def _recalibration(self, tenant: str, min_observations: int, refit_s: float, feedback: bool = True,
                       audits: bool = False, prior: tuple[float, ...] | None = None,
                       model: str | None = None, question: str = "step") -> tuple[Any, int, str | None]:
        """(the fit or None, the observations it rests on, "audits" or "feedback"), cached per tenant by its
        files' stamp and what is asked."""
        import dataclasses

        from retrieval.pipeline.probes import MIN_TAIL, audit_tail_shift
        from retrieval.pipeline.recalibration import fit_audit_recalibration, fit_use_recalibration

        folder = self.root / tenant_folder(tenant)
        if not folder.exists() or not (feedback or audits):   # no evidence yet (and no folder made for asking)
            return None, 0, None
        key = []
        for path in (folder / ROTATED_FILE, folder / FEEDBACK_FILE, folder / AUDITS_FILE):
            try:
                st = path.stat()
                key.append((st.st_size, st.st_mtime_ns))
            except OSError:
                key.append(None)
        asked = (min_observations, feedback, audits, prior, model, question)
        now = time.monotonic()
        with self._lock:   # one entry per question: the console's view and the searches do not evict each other
            cached = self._recalibrations.get((tenant, asked))
        # the same files: the same fit; changed files: the previous fit for refit_s
        if cached is not None and (cached[0] == tuple(key) or now - cached[2] < refit_s):
            return cached[1], cached[3], cached[4]
        fitted, n, source = None, 0, None
        if audits:
            p, y, tail = self._audit_evidence(tenant, model, question)
            need = min(min_observations, AUDITS_KEPT)   # at most AUDITS_KEPT are kept: never out of reach
            if len(p) >= need:
                fitted = fit_audit_recalibration(p, y, prior=tuple(prior[:2]) if prior else (1.0, 0.0),
                                                 min_observations=need)
                n, source = len(p), "audits"
                if fitted is not None and len(tail) >= MIN_TAIL:   # the tail's level from the same audits
                    base = float(prior[2]) if prior and len(prior) > 2 else 0.0
                    fitted = dataclasses.replace(fitted, tail_shift=audit_tail_shift(tail, base),
                                                 tail_judged=len(tail), tail_fits=sum(1 for t in tail if t[2]))
        if source is None and feedback:
            p, y = self.use_observations(tenant)
            fitted = fit_use_recalibration(p, y, min_observations=min_observations) if p else None
            n, source = len(p), "feedback"
        with self._lock:
            if len(self._recalibrations) >= 10_000:   # many tenants: the oldest entries go (refitted when asked)
                for k in list(self._recalibrations)[:1_000]:
                    del self._recalibrations[k]
            self._recalibrations[(tenant, asked)] = (tuple(key), fitted, now, n, source)
        return fitted, n, source

    def recalibration_state(self, tenant: str, enabled: bool, min_observations: int = 25, *,
                            audits: bool = False, prior: tuple[float, ...] | None = None,
                            model: str | None = None, question: str = "step") -> dict[str, Any]:
        """What :meth:`recalibration` rests on for ``tenant`` and what it fits, as of its files now (the same
        cache: refitted only when they changed since the last fit), so an operator sees what switching it on
        would do (``enabled``: the recalibration from feedback is on; ``audits``: this tenant's searches are
        audited)."""
        fitted, evidence, source = self._recalibration(tenant, min_observations, 0.0, True, audits, prior, model,
                                                       question)
        p, y = self.audit_observations(tenant, model, question)
        return {"enabled": enabled, "audits_on": audits, "evidence": evidence, "source": source,
                "applied": fitted is not None and (source == "audits" or enabled),
                "minimum": min_observations, "fitted": fitted is not None,
                "a": fitted.a if fitted is not None else None, "b": fitted.b if fitted is not None else None,
                "audited": len(p), "audited_fits": int(sum(y)),
                "tail_shift": getattr(fitted, "tail_shift", None), "tail_judged": getattr(fitted, "tail_judged", 0),
                "tail_fits": getattr(fitted, "tail_fits", 0)}

    def use_calibration(self, tenant: str, bins: int = 10) -> dict[str, Any]:
        """How calibrated the offered probabilities were on the tenant's real traffic.

        Every kept feedback event that reports a successful call to a tool the search offered is one
        observation per offered tool: the probability it was offered with, and 1 for the tool that was
        called, 0 for the others. (A failed call says nothing about which tool fitted; calls to tools
        not offered are counted apart.) Returns the reliability bins, the ECE, and the daily decisions.
        """
        calls, not_offered = self._offered_successes(
            tenant, lambda e: (str(e.get("request_id")), str(e.get("server")), str(e.get("tool"))))
        points: list[tuple[float, int]] = []
        for e in calls:
            for server, tool, p in e["offered_probabilities"]:
                points.append((float(p), int(server == e.get("server") and tool == e.get("tool"))))
        edges = [i / bins for i in range(bins + 1)]
        table = []
        for lo, hi in zip(edges, edges[1:]):
            inside = [(p, y) for p, y in points if lo <= p < hi or (hi == 1.0 and p == 1.0)]
            if inside:
                table.append({"low": lo, "high": hi, "n": len(inside),
                              "mean_probability": sum(p for p, _ in inside) / len(inside),
                              "called": sum(y for _, y in inside) / len(inside)})
        n = len(points)
        ece = sum(b["n"] / n * abs(b["mean_probability"] - b["called"]) for b in table) if n else None
        try:
            days = self.ledger.days(tenant)
        except Exception:   # a replica's memory ledger after a restart, or a locked file: no daily counts
            days = []
        return {"tenant": tenant, "observations": n, "searches_with_feedback": len(calls),
                "calls_to_tools_not_offered": not_offered, "ece": ece, "bins": table, "days": days}

    def remove(self, tenant: str, tool_id: tuple[str, str] | None = None, request: str | None = None) -> int:
        """Forget learned examples (a tool's, one request of it, or all) everywhere they are kept on disk."""
        if not (self.root / tenant_folder(tenant)).exists():
            return 0
        usage = self.tenant(tenant)
        tid = ToolId(*tool_id) if tool_id is not None else None
        gone: set[str] = set()

        def drop(cur: LearnedExamples) -> tuple[LearnedExamples, int]:
            targets = [tid] if tid is not None else list(cur)
            gone.update(r for t in targets for r in cur.requests(t) if request is None or r == request)
            return cur.remove(tool_id, request)

        def forget(n: int) -> None:
            if n:
                usage.forget(tid, {request} if request is not None else None)
                self.ledger.forget(tenant, None if tool_id is None and request is None else gone)

        _, n = usage.change(drop, after=forget)
        return int(n)


# ------------------------------------------------------------------ PUT /v1/servers/{name}?write_examples=true


def written_examples(settings: Any, name: str, description: str, tools: Sequence[Any],
                     given: dict[str, list[str]] | None) -> tuple[dict[str, list[str]], str]:
    """Example requests for the tools of a PUT sent without any (written, or from the cache), merged with
    ``given``; and a note saying what happened. A failing endpoint leaves tools without examples.

    Raises:
        ServiceError: 422 when no LLM endpoint is configured.
    """
    from retrieval.catalog.model import Catalog, Tool
    from retrieval.index.examples import llm_client, write_examples

    from .errors import ServiceError

    given = dict(given or {})
    todo = Catalog([Tool(name, t.name, t.description, t.input_schema, description)
                    for t in tools if not given.get(t.name)], {name: description})
    root = Path(settings.index_dir) if getattr(settings, "index_dir", None) is not None else \
        Path(tempfile.gettempdir()) / "toolrank-examples"
    root.mkdir(parents=True, exist_ok=True)
    cache = root / "examples-cache.jsonl"
    try:
        client = llm_client()
    except ValueError as exc:
        raise ServiceError(422, "write_examples_unavailable",
                           f"write_examples needs an LLM endpoint on the service: {exc}") from None
    with client:
        outcome = write_examples(todo, client, cache,
                                 deadline_s=float(getattr(settings, "write_examples_timeout_s", 120.0)))
    for t in outcome.catalog:
        if t.examples:
            given[t.name] = list(t.examples)
    if outcome.missing:
        log.warning("PUT %s: %s", name, outcome.format())
    return given, outcome.format()


# ------------------------------------------------------------------ HTTP routes


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    request_id: str = Field(min_length=1, max_length=200, description="The request_id of the /v1/search answer.")
    server: str = Field(min_length=1, max_length=200, description="The server of the tool the agent called.")
    tool: str = Field(min_length=1, max_length=200, description="The tool the agent called.")
    outcome: Literal["success", "error"] = Field(description="Whether the call succeeded.")
    error: str | None = Field(None, max_length=2000, description="The error, when the call failed (recorded).")


class FeedbackResponse(BaseModel):
    recorded: bool = Field(True, description="The call was recorded (always true on 200).")
    learned: bool = Field(description="Whether the request became an example request of the tool.")
    reason: str = Field(description="Why it was, or was not, learned from.")
    examples: int = Field(description="Example requests this tool has now learned for you.")


class LearnedExampleOut(BaseModel):
    request: str = Field(description="The request, as it was searched.")
    learned_at: float = Field(description="Unix time of its latest successful use.")
    uses: int = Field(description="Successful calls merged into it (near-duplicate requests count as one).")


class LearnedTool(BaseModel):
    server: str = Field(description="The tool's server.")
    tool: str = Field(description="The tool.")
    examples: list[LearnedExampleOut] = Field(description="Its learned example requests, oldest first.")


class LearnedList(BaseModel):
    learning: bool = Field(description="Whether this tenant learns from use (tenants file: learn_from_use).")
    tools: list[LearnedTool] = Field(description="Tools with learned example requests.")


class CalibrationBin(BaseModel):
    low: float = Field(description="Lower edge of the probability bin.")
    high: float = Field(description="Upper edge of the probability bin.")
    n: int = Field(ge=0, description="Offered tools in the bin.")
    mean_probability: float = Field(description="Mean probability they were offered with.")
    called: float = Field(description="Share of them that was the tool called with success.")


class DecisionDay(BaseModel):
    day: str = Field(description="UTC day, YYYY-MM-DD.")
    decision: str = Field(description="proceed, search_again, choose or no_fit.")
    searches: int = Field(ge=0, description="Searches that ended with this decision.")
    successes: int = Field(ge=0, description="Successful calls reported for those searches.")


class RecalibrationState(BaseModel):
    enabled: bool = Field(description="Whether the service recalibrates from feedback (TOOLRANK_USE_RECALIBRATION).")
    audits_on: bool = Field(False, description="Whether this tenant's searches are audited (TOOLRANK_AUDIT_SHARE > 0 "
                                               "and the tenant's audit not false): with enough audits the "
                                               "recalibration rests on them, whatever `enabled` says.")
    evidence: int = Field(ge=0, description="Observations the fit rests on: audits, or else searches whose first "
                                            "offered tool is a calibrated candidate and a successful call was "
                                            "reported.")
    source: Literal["audits", "feedback"] | None = Field(None, description="What the fit rests on.")
    applied: bool = Field(False, description="Whether a recalibration is applied to this tenant's searches now.")
    minimum: int = Field(ge=0, description="Evidence needed before a fit (TOOLRANK_USE_RECALIBRATION_MIN).")
    fitted: bool = Field(description="Whether a recalibration was fitted: from audits once there are enough; from "
                                     "feedback when it beat the shipped probabilities in cross-validation.")
    a: float | None = Field(None, description="q = sigmoid(a * logit(p) + b): the slope, when fitted.")
    b: float | None = Field(None, description="The offset, when fitted.")
    audited: int = Field(0, ge=0, description="Audits kept for this tenant (searches whose first tool was judged).")
    audited_fits: int = Field(0, ge=0, description="Of them, those whose first tool the judge said fits.")
    tail_shift: float | None = Field(None, description="From audits: the level of the candidates past the scored "
                                                       "head (their shipped logit moved by this), when at least 20 "
                                                       "audits judged one; None: the catalog's own level.")
    tail_judged: int = Field(0, ge=0, description="Candidates past the head the audits judged (one per audit).")
    tail_fits: int = Field(0, ge=0, description="Of them, those the judge said fit.")


class UseCalibration(BaseModel):
    tenant: str = Field(description="The tenant the figures are of.")
    observations: int = Field(ge=0, description="(offered tool, probability) points from successful calls.")
    searches_with_feedback: int = Field(ge=0, description="Searches with at least one successful call reported.")
    calls_to_tools_not_offered: int = Field(ge=0, description="Successful calls to a tool the search had not offered.")
    ece: float | None = Field(None, description="Expected calibration error over the bins (None without data).")
    bins: list[CalibrationBin] = Field(description="Reliability bins of width 0.1 (empty ones left out).")
    days: list[DecisionDay] = Field(description="Searches and successful calls per UTC day and decision.")
    recalibration: RecalibrationState | None = Field(
        None, description="The recalibration from this tenant's feedback: what it rests on, and whether it applies "
                          "(or would, when switched on).")


class Removed(BaseModel):
    removed: int = Field(description="How many learned example requests were removed.")


# ------------------------------------------------------------------ CLI: toolrank examples list|remove


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="toolrank examples",
                                description="List or remove example requests learned from use.")
    sub = p.add_subparsers(dest="command", required=True)
    for name, text in (("list", "list learned example requests"), ("remove", "remove learned example requests")):
        s = sub.add_parser(name, help=text)
        s.add_argument("--store", type=Path, required=True,
                       help="the service's index store (TOOLRANK_INDEX_DIR), the gateway's index folder, or a "
                            "usage folder")
        s.add_argument("--tenant", default=None, help=f"tenant name (default: every tenant for list; "
                                                      f"{LOCAL_TENANT!r}, the gateway's, for remove)")
        s.add_argument("--server", help="only this server's tools")
        s.add_argument("--tool", help="only this tool (with --server)")
        if name == "remove":
            s.add_argument("--request", help="only this learned request (exact text, as listed)")
            s.add_argument("--all", action="store_true", help="every learned example of the tenant")
        else:
            s.add_argument("--json", action="store_true", help="print as JSON")
    return p


def _tenants(root: Path) -> list[str]:
    out = []
    for child in sorted(root.glob("t-*")):
        try:
            out.append(json.loads((child / "tenant.json").read_text(encoding="utf-8"))["tenant"])
        except (OSError, ValueError, KeyError):
            continue
    return out


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    root = usage_root_for(a.store)
    if not root.is_dir():
        print(f"toolrank examples: {a.store} holds no learned examples (looked in {root})", file=sys.stderr)
        return 2
    if a.tool and not a.server:
        print("toolrank examples: --tool needs --server", file=sys.stderr)
        return 2
    book = UsageBook(root)
    if a.command == "list":
        names = [a.tenant] if a.tenant else _tenants(root)
        rows = []
        for name in names:
            learned = book.learned(name) or LearnedExamples()
            for tid, ex in sorted(learned.items()):
                if (a.server and tid.server != a.server) or (a.tool and tid.tool != a.tool):
                    continue
                rows.append({"tenant": name, "server": tid.server, "tool": tid.tool,
                             "examples": [e.to_dict() for e in ex]})
        if a.json:
            print(json.dumps(rows, indent=1, ensure_ascii=False))
        else:
            for r in rows:
                print(f"[{r['tenant']}] {r['server']} / {r['tool']}  ({len(r['examples'])})")
                for e in r["examples"]:
                    print(f"    {e['uses']}x  {e['request']}")
            if not rows:
                print("no learned example requests")
        return 0
    tenant = a.tenant or LOCAL_TENANT
    if not a.all and not a.server:
        print("toolrank examples remove: give --server (and --tool, --request) or --all", file=sys.stderr)
        return 2
    if a.all:
        n = book.remove(tenant)
    elif a.tool:
        n = book.remove(tenant, (a.server, a.tool), a.request)
    else:
        learned = book.learned(tenant) or LearnedExamples()
        n = sum(book.remove(tenant, tid, a.request) for tid in list(learned) if tid.server == a.server)
    print(f"removed {n} learned example request(s) of tenant {tenant!r}")
    return 0 if n else 1


# ------------------------------------------------------------------ the MCP gateway (one user)


class GatewayUsage:
    """What the gateway's ``find_tools`` offered recently, and learning from its ``call_tool`` results
    (tenant ``local``, stored beside the gateway's index folder)."""

    def __init__(self, root: str | Path, *, recent: int = 20, tenant: str = LOCAL_TENANT,
                 settings: GatewaySettings | None = None, audit: bool = True):
        self.book = UsageBook(root)
        self.tenant = tenant
        self.audit = audit   # the tenants file's audit = false: none of its searches leaves for the endpoint
        self._who = SimpleNamespace(name=tenant, audit=audit)   # the tenant as audits read it
        self.settings = settings if settings is not None else GatewaySettings()
        self._recent: list[tuple[str, Offer]] = []
        self._n = 0
        self._max = recent
        self._lock = threading.Lock()
        self.auditor: Any = None
        if self.settings.audit_share > 0 and audit:   # the gateway's own searches audited (serve/audits.py)
            from .audits import Auditor

            self.auditor = Auditor(self.book, self.settings.audit_share, self.settings.audit_daily_max,
                                   question=self.settings.audit_question)

    @classmethod
    def for_index(cls, index_dir: str | Path | None, *, learn: bool = True,
                  tenant: str = LOCAL_TENANT, audit: bool = True) -> "GatewayUsage | None":
        """Learning beside the gateway's index folder, or None: no folder (``--no-save``), the setting off,
        or the tenant's ``learn_from_use = false`` (``learn``). ``tenant``: whose examples they are."""
        settings = GatewaySettings()
        if index_dir is None or not learn or not settings.learn_from_use:
            return None
        index_dir = Path(index_dir)
        return cls(index_dir.with_name(index_dir.name + "-usage"), tenant=tenant, settings=settings, audit=audit)

    def learned(self) -> LearnedExamples | None:
        return self.book.learned(self.tenant)

    def recalibration(self, pipeline: Any = None) -> Any:
        """The gateway tenant's recalibration from its audits (``TOOLRANK_AUDIT_SHARE``; pulled towards
        ``pipeline``'s catalog map) or its calls (``TOOLRANK_USE_RECALIBRATION``), or None."""
        from .audits import recalibration_args

        asked = recalibration_args(self.settings, self._who, pipeline)
        if asked is None:
            return None
        try:
            return self.book.recalibration(self.tenant, self.settings.use_recalibration_min,
                                           self.settings.use_recalibration_refit_s, **asked)
        except Exception:   # the evidence unreadable: find_tools goes on with the catalog's own numbers
            log.warning("the gateway's recalibration could not be read; searching without it", exc_info=True)
            return None

    def close(self) -> None:
        if self.auditor is not None:
            self.auditor.close()

    def offered(self, request: str, need: str | None, result: Any, catalog: Any = None, model: str | None = None) -> None:
        """Remember a ``find_tools`` answer (with its first tool's probability before any recalibration,
        the evidence a later fit reads); audit it when drawn (``catalog``: where its first tool's card is)."""
        if result is None:
            return
        with self._lock:
            self._n += 1
            rid = f"find-{self._n}-{uuid.uuid4().hex[:12]}"   # unique across gateways sharing the folder
        # the book's offer (secrets masked, decision and probabilities kept) is the one learned from
        offer = self.book.offered(self.tenant, rid, request, need, [t.tool_id for t in result.tools],
                                  decision=getattr(result, "decision", None),
                                  probabilities=[float(getattr(t, "probability", 0.0)) for t in result.tools],
                                  raw_best=getattr(result, "raw_best", None))
        with self._lock:
            self._recent = (self._recent + [(rid, offer)])[-self._max:]
        if self.auditor is not None:
            self.auditor.offer(self._who, rid, request, result, catalog, model=model)

    def called(self, server: str, tool: str, result: Any, index: Any = None) -> None:
        """Record a forwarded call: learned when it succeeded and the newest recent search offered the tool
        (with ``index``, the tool's tenant vector is computed and stored now)."""
        tid = ToolId(server, tool)
        with self._lock:
            recent = [(rid, o) for rid, o in self._recent if time.time() - o.at <= self.book.offer_ttl_s]
        if not recent:
            return
        rid, offer = next(((r, o) for r, o in reversed(recent) if tid in o.tools), recent[-1])
        try:
            from retrieval.index.learned import tenant_vector

            vectorize = (lambda t, reqs: tenant_vector(index, t, reqs)) if index is not None else None
            self.book.feedback(self.tenant, offer, rid, tid, not bool(getattr(result, "isError", False)),
                               vectorize=vectorize)
        except Exception:   # learning must never break a call
            log.warning("could not record the call to %s for learning", tid, exc_info=True)
