"""The MCP gateway's state: live sessions to the configured servers, the index of their tools,
the pipeline over it, and the policy that says what the caller may see and run.

:mod:`serve.mcp_server` translates MCP to this and back; this module knows nothing of the
protocol's server side. Every backend session is an SDK ``ClientSession`` held open by its own
task; a session that dies (the server crashed) is dropped and started again on the next call.

What may run is decided on every call: the server must be in the configuration and eligible,
and the tool must be one of its currently listed tools that the caller may see. Anything else is
refused before any server is contacted; a hidden server is refused exactly like one that does
not exist.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Iterable, Iterator

import anyio

from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import ToolId
from retrieval.catalog.mcp_harvest import (DEFAULT_TIMEOUT_S, STRAY_ANSWER, MaskedStderr, McpConfig, ServerHarvest,
                                           ServerSpec, describe_error, list_all_tools, open_session, redact,
                                           server_description, tools_from_listing)
from retrieval.index.mcp import apply_harvest

if TYPE_CHECKING:
    from mcp import ClientSession, types

    from retrieval.index.embedded import ToolIndex
    from retrieval.pipeline.decision import Policy
    from retrieval.pipeline.flow import Pipeline
    from retrieval.pipeline.results import SearchResult

__all__ = ["Components", "default_components", "Backend", "BackendUnavailable", "ConnectionLost", "Gateway",
           "gateway_eligibility", "DEFAULT_CALL_TIMEOUT_S"]

log = logging.getLogger(__name__)

DEFAULT_CALL_TIMEOUT_S = 120.0
_SHUTDOWN_GRACE_S = 3.0
SETTLE_S = 0.5          # a burst of tools/list_changed is harvested once, after this long without another
EARLY_READY_S = 5.0   # without a saved index: how long after the first server answers searches wait for the rest
_MAX_SETTLE_WAITS = 10  # ... or after this many waits, if the notices never stop
FIRST_ANSWERS_KEPT = 64  # first find_tools answers remembered (by request) for the second attempt


def _request_key(request: str) -> str:
    """A request as the gateway remembers its first answer: spacing does not make another request (an agent
    that re-sends "Commit  the staged files\n" on its second attempt still gets the first answer kept); case
    does (``README`` and ``readme``, a branch name, may be other things)."""
    return " ".join(request.split())


@dataclass(frozen=True)
class Components:
    """What the gateway builds on.

    Attributes:
        encoder: embeds harvested tools (the shipped ONNX encoder by default).
        make_pipeline: the pipeline over an index (scorer, confidence model, public suggestions).
        load_index: loads a saved index with ``encoder``.
        default_index: the index to search without a configuration (the shipped catalog).
    """

    encoder: Any
    make_pipeline: Callable[["ToolIndex"], "Pipeline"]
    load_index: Callable[[Path], "ToolIndex"]
    default_index: Callable[[], "ToolIndex"]


def default_components(*, model: Path | None = None, no_model: bool = False, suggestions: bool = True,
                       threads: int = 2) -> Components:
    """The shipped encoder, scorer and confidence model (``no_model``: retrieval-only confidence)."""
    from retrieval.index.embedded import ToolIndex
    from retrieval.index.encoder import OnnxEncoder
    from retrieval.pipeline.flow import load_pipeline

    encoder = OnnxEncoder(threads=threads)
    made: dict[str, Any] = {}
    lock = threading.Lock()

    def load_public() -> None:
        """The shipped catalog's index for no_fit suggestions, built in the background the first time
        (20-30 s on 2 cores): the first find_tools never waits for it; until it is ready, a no_fit
        answer names no servers to connect."""
        from retrieval.index.default import public_index
        try:
            public = public_index()
        except Exception:  # noqa: BLE001 - suggestions are optional; the search is not
            log.warning("the public catalog index could not be built: no_fit answers carry no suggestions",
                        exc_info=True)
            return
        with lock:
            made["public"] = public
            for pipe in made.get("pipelines", []):
                pipe.public_index = public
            made["pipelines"] = []
        log.info("public catalog index ready: no_fit answers name servers to connect")

    def make_pipeline(index: "ToolIndex") -> "Pipeline":
        with lock:
            if "first" in made:      # one scorer per process: later indexes reuse it
                pipe = made["first"].with_index(index)
            else:
                pipe = made["first"] = load_pipeline(index, False if no_model else model, threads=threads,
                                                     public_suggestions=False)
                if suggestions:
                    threading.Thread(target=load_public, name="toolrank-public-index", daemon=True).start()
            pipe.public_index = made.get("public")
            if suggestions and pipe.public_index is None:
                made.setdefault("pipelines", []).append(pipe)
            return pipe

    def default_index() -> "ToolIndex":
        from retrieval.index.default import load_or_build_default
        return load_or_build_default()

    return Components(encoder, make_pipeline, lambda path: ToolIndex.load(path, encoder=encoder), default_index)


def gateway_eligibility(configured: Iterable[str] | None, servers: Iterable[str] | None = None,
                        tenant: Any = None) -> Eligibility:
    """What the caller may see: the configuration's servers, narrowed by ``servers`` (the
    ``--server`` option) and by a tenant's servers and tools (an admin tenant narrows nothing)."""
    allowed = None if configured is None else set(configured)
    if servers:
        allowed = set(servers) if allowed is None else allowed & set(servers)
    tools = None
    if tenant is not None and not tenant.admin:
        own = tenant.eligibility
        if own.servers is not None:
            allowed = set(own.servers) if allowed is None else allowed & set(own.servers)
        tools = own.tools
    return Eligibility.of(servers=allowed, tools=tools)


class BackendUnavailable(RuntimeError):
    """A configured server could not be started or reached (the message says why)."""


class ConnectionLost(RuntimeError):
    """A backend's connection ended while a request was waiting for its answer."""


@dataclass
class _Connection:
    """One live session to a server, and the events that end it."""

    stop: anyio.Event = field(default_factory=anyio.Event)     # set to close it
    dead: anyio.Event = field(default_factory=anyio.Event)     # set once closed, for whatever reason
    session: "ClientSession | None" = None
    init: "types.InitializeResult | None" = None
    reason: str = ""                                           # why it ended, when it broke


class Backend:
    """One configured server and its live SDK session, started on demand and again after a crash."""

    def __init__(self, spec: ServerSpec, *, timeout_s: float, on_tools_changed: Callable[["Backend"], None]):
        self.spec = spec
        self.name = spec.name
        self.timeout_s = spec.timeout_s or timeout_s
        self.error: str | None = None           # why the last start failed (None once running)
        self.list_error: str | None = None      # why the last tools/list failed (None once listed)
        self.listed = False                     # its first listing is over (whatever the outcome)
        self.problems: tuple[str, ...] = ()     # tools left out of its last listing as malformed
        self.changes = 0                        # tools/list_changed notices received
        self.reharvests = 0
        self.starts = 0
        self._conn: _Connection | None = None
        self._lock = anyio.Lock()
        self._on_tools_changed = on_tools_changed
        self.refreshing = False
        self._stderr: MaskedStderr | None = None   # the server's stderr, masked, for all its starts

    @property
    def session(self) -> "ClientSession | None":
        return self._conn.session if self._conn is not None else None

    @property
    def init(self) -> "types.InitializeResult | None":
        return self._conn.init if self._conn is not None else None

    async def connect(self, holders: anyio.abc.TaskGroup) -> _Connection:
        """The live connection, starting the server first if there is none.

        Raises:
            BackendUnavailable: the server does not start or answer ``initialize`` in time.
        """
        async with self._lock:
            if self._conn is not None and not self._conn.dead.is_set():
                return self._conn
            conn = _Connection()
            try:
                await holders.start(self._hold, conn)
            except Exception as exc:  # noqa: BLE001 - the server's fault: said, not raised
                self.error = describe_error(exc, self.spec, self.timeout_s)
                log.warning("server %r: %s", self.name, self.error)
                raise BackendUnavailable(self.error) from None
            self._conn, self.error = conn, None
            self.starts += 1
            return self._conn

    @staticmethod
    async def within(conn: _Connection, fn: Callable[[], Awaitable[Any]]) -> Any:
        """``await fn()`` (a request on ``conn``), unless the connection ends first.

        Raises:
            ConnectionLost: the connection ended first (the server crashed, or its transport broke).
            Exception: whatever ``fn`` raised (``McpError`` for an error answer or a timeout).
        """
        outcome: dict[str, Any] = {}
        async with anyio.create_task_group() as tg:
            async def watch() -> None:
                await conn.dead.wait()
                tg.cancel_scope.cancel()
            tg.start_soon(watch)
            try:
                outcome["result"] = await fn()
            except Exception as exc:  # noqa: BLE001 - re-raised below, outside the task group
                outcome["error"] = exc
            tg.cancel_scope.cancel()
        if "error" in outcome:
            raise outcome["error"]
        if "result" not in outcome:
            raise ConnectionLost(conn.reason or "the connection closed")
        return outcome["result"]

    def drop(self, conn: _Connection, reason: str = "") -> None:
        """Close a broken connection (its holder task stops a stdio server); the next call starts anew."""
        conn.reason = conn.reason or reason
        conn.stop.set()
        if self._conn is conn:
            self._conn = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.stop.set()
            self._conn = None

    async def _hold(self, conn: _Connection, *, task_status: Any) -> None:
        """Open the session, hand it over, and keep it open until ``conn.stop`` (its own task,
        so that a transport that dies takes only this task with it)."""
        async def on_message(message: Any) -> None:
            from mcp import types

            if isinstance(message, types.ServerNotification) and \
                    isinstance(message.root, types.ToolListChangedNotification):
                log.debug("server %r: tools changed", self.name)
                self._on_tools_changed(self)
            elif isinstance(message, Exception):
                # The transport failed (a stray stdout line never gets here: open_session logs
                # and skips it): the answers to pending requests may never come. Close the
                # connection so they fail now.
                reason = describe_error(message, self.spec, self.timeout_s)
                log.warning("server %r: transport error, closing the connection: %s", self.name, reason)
                self.drop(conn, reason)

        started = False
        try:
            if self.spec.transport == "stdio" and self._stderr is None:
                self._stderr = MaskedStderr(self.spec)
            async with open_session(self.spec, timeout_s=self.timeout_s, message_handler=on_message,
                                    errlog=self._stderr.file if self._stderr is not None else None) as opened:
                conn.session, conn.init = opened
                started = True
                task_status.started()
                await conn.stop.wait()
        except Exception as exc:  # noqa: BLE001 - a dying transport must never take the gateway down
            if not started:
                raise
            conn.reason = conn.reason or describe_error(exc, self.spec, self.timeout_s)
            log.info("server %r: connection closed (%s)", self.name, conn.reason)
        finally:
            conn.dead.set()


@contextmanager
def _probe_lock(cache: Path) -> Iterator[bool]:
    """An exclusive ``flock`` beside a probe cache while one gateway probes (True), or False when another process
    holds it: two gateways on one configuration (two MCP clients) would pay for every probe twice and rewrite
    each other's cache lines."""
    import fcntl
    import os

    try:
        fd = os.open(f"{cache}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:   # a folder it cannot write: probe without the lock (the cache will say why)
        log.warning("cannot lock %s.lock (%s); probing anyway", cache, exc)
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _error_result(text: str) -> "types.CallToolResult":
    from mcp import types

    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], isError=True)


class Gateway:
    """Search over the configured servers' tools, and calls forwarded to their live sessions.

    Without a configuration it only searches an index (find-only mode). Use inside
    ``async with gateway.running():``; searches wait for the first harvest.
    """

    def __init__(self, *, components: Components, config: McpConfig | None = None,
                 index: "ToolIndex | None" = None, eligible: Eligibility | None = None,
                 policy_overrides: dict[str, Any] | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S, index_dir: Path | None = None,
                 learn: bool = True, tenant: str | None = None, calibrate_probes: int | None = None,
                 audit: bool = True):
        from retrieval.pipeline.decision import Policy

        if config is None and index is None:
            raise ValueError("the gateway needs an MCP configuration, an index, or both")
        self.components = components
        self.config = config
        self.index = index
        self.eligible = eligible or Eligibility()
        self._overrides = dict(policy_overrides or {})
        Policy().with_overrides(**self._overrides)     # bad thresholds fail now, not on the first search
        self.timeout_s = timeout_s
        self.call_timeout_s = call_timeout_s
        self.index_dir = index_dir
        from .usage import LOCAL_TENANT, GatewayUsage   # learning from use: successful calls to found tools (docs/day-one.md)
        self.usage = GatewayUsage.for_index(index_dir, learn=learn, tenant=tenant or LOCAL_TENANT, audit=audit)
        self.backends: dict[str, Backend] = {}
        if config is not None:
            self.backends = {name: Backend(spec, timeout_s=timeout_s, on_tools_changed=self._tools_changed)
                             for name, spec in config.servers.items() if self.eligible.allows_server(name)}
        self.pipeline: "Pipeline | None" = None
        self.policy: "Policy | None" = None
        self.harvests = 0                       # completed harvests (first + every re-harvest)
        self._lock = threading.Lock()           # searches vs index updates (both run in threads)
        # the latest first answers by request text: a second find_tools for the same request keeps its
        # tools when the sharper need finds less (decision.keep_first_answer); touched on the event loop only
        self._first_answers: OrderedDict[str, Any] = OrderedDict()
        self._ready = anyio.Event()             # searches may start (saved index loaded, or first harvest done)
        self._harvested = anyio.Event()         # the first harvest is over
        self._holders: anyio.abc.TaskGroup | None = None
        self._work: anyio.abc.TaskGroup | None = None
        # the catalog's own calibration (--calibrate): probes written by the LLM endpoint once the tools settle
        self.calibrate_probes = calibrate_probes
        self.calibration_note: str | None = None      # what the last calibration run said
        self.calibration_runs = 0                     # calibrations given to the index
        self._calibrating = self._calibration_again = False
        self._stop_calibration = threading.Event()
        self._probe_cache: Path | None = None         # without an index folder: one for this process
        self._probe_client: Any = None                # the endpoint client of the run in progress

    @property
    def forwarding(self) -> bool:
        """Whether calls can be forwarded (a configuration was given)."""
        return self.config is not None

    # ------------------------------------------------------------------ life cycle

    @asynccontextmanager
    async def running(self) -> AsyncIterator["Gateway"]:
        """Start the backends and the first harvest in the background; stop them all on exit."""
        async with anyio.create_task_group() as holders:
            self._holders = holders
            try:
                async with anyio.create_task_group() as work:
                    self._work = work
                    work.start_soon(self._start)
                    try:
                        yield self
                    finally:
                        self._stop_calibration.set()   # a probe run stops: no endpoint call starts or is retried after
                        client = self._probe_client
                        if client is not None:
                            client.cancel()
                        work.cancel_scope.cancel()
            finally:
                for b in self.backends.values():
                    b.close()
                if self.usage is not None:   # audits waiting are dropped; the one being judged is cancelled
                    with anyio.CancelScope(shield=True):
                        await anyio.to_thread.run_sync(self.usage.close)
                if self._probe_cache is not None:   # --no-save: this process's probe cache goes with it
                    import shutil
                    shutil.rmtree(self._probe_cache.parent, ignore_errors=True)
                holders.cancel_scope.deadline = anyio.current_time() + _SHUTDOWN_GRACE_S

    async def wait_ready(self) -> None:
        await self._ready.wait()

    async def _start(self) -> None:
        try:
            if self.index is not None:
                # A saved index: answer from it at once; servers still starting are marked as such.
                await anyio.to_thread.run_sync(self._make_pipeline)
                self._ready.set()
            harvests: list[ServerHarvest] = []
            if self.backends:
                async with anyio.create_task_group() as tg:
                    for b in self.backends.values():
                        tg.start_soon(self._first_harvest, b, harvests)
                    if self.index is None and self.config is not None and len(self.backends) > 1:
                        tg.start_soon(self._ready_early, harvests)
            if self.config is not None:
                order = {name: i for i, name in enumerate(self.config.servers)}
                harvests.sort(key=lambda h: order[h.name])
                await anyio.to_thread.run_sync(self._apply, harvests, list(self.config.servers))
                self._want_calibration()
            elif self.index is not None:
                await anyio.to_thread.run_sync(self._make_pipeline)
        except Exception:  # noqa: BLE001 - searches then answer with what there is
            log.exception("the first harvest failed")
        finally:
            for b in self.backends.values():
                b.listed = True
            self._ready.set()
            self._harvested.set()

    async def _ready_early(self, harvests: list[ServerHarvest]) -> None:
        """Without a saved index, answer once the first servers are in: ``EARLY_READY_S`` after the first
        harvest ends, index what has come (the rest are marked as starting and join when they answer),
        instead of waiting for the slowest server (a server that never answers held every search for its
        whole timeout)."""
        total = len(self.backends)
        while not harvests:
            await anyio.sleep(0.05)
        deadline = anyio.current_time() + EARLY_READY_S
        while len(harvests) < total and anyio.current_time() < deadline:
            await anyio.sleep(0.05)
        if len(harvests) < total and not self._ready.is_set() and any(h.ok for h in harvests):
            await anyio.to_thread.run_sync(self._apply, list(harvests), None)
            log.info("searching the %d of %d servers that answered; the others join when they do",
                     sum(h.ok for h in harvests), total)
            self._ready.set()

    async def _first_harvest(self, b: Backend, out: list[ServerHarvest]) -> None:
        out.append(await self._list(b))
        b.listed = True

    async def _list(self, b: Backend) -> ServerHarvest:
        """One server's tools over its live session (started if needed); never raises."""
        t0 = anyio.current_time()
        try:
            conn = await b.connect(self._holders)
        except BackendUnavailable as exc:
            return ServerHarvest(b.name, None, b.spec.description, anyio.current_time() - t0, str(exc))
        try:
            with anyio.fail_after(b.timeout_s):
                listed = await b.within(conn, lambda: list_all_tools(conn.session))
            description = server_description(b.spec, conn.init)
            tools, problems = tools_from_listing(b.name, description, listed, str(self.config.path),
                                                 b.spec.disabled_tools)
        except ConnectionLost as exc:
            b.drop(conn)
            b.list_error = f"the connection ended while listing its tools ({exc})"
            return ServerHarvest(b.name, None, b.spec.description, anyio.current_time() - t0, b.list_error)
        except Exception as exc:  # noqa: BLE001 - reported per server
            reason = describe_error(exc, b.spec, b.timeout_s)
            log.warning("server %r: %s", b.name, reason)
            if isinstance(exc, (anyio.ClosedResourceError, anyio.BrokenResourceError)):
                b.drop(conn, reason)
            b.list_error = f"listing its tools failed: {reason}"
            return ServerHarvest(b.name, None, b.spec.description, anyio.current_time() - t0, b.list_error)
        b.list_error, b.problems = None, tuple(problems)
        for problem in problems:
            log.warning("server %r: left out %s", b.name, problem)
        return ServerHarvest(b.name, tools, description, anyio.current_time() - t0, problems=tuple(problems))

    def _make_pipeline(self) -> None:
        with self._lock:
            if self.index is not None and self.pipeline is None:
                self.pipeline = self.components.make_pipeline(self.index)
                self.policy = self.pipeline.policy.with_overrides(**self._overrides)

    def _apply(self, harvests: list[ServerHarvest], keep: list[str] | None) -> None:
        """Fold harvests into the index (changed tools only), then save it; runs in a thread."""
        with self._lock:
            index, reports = apply_harvest(self.index, harvests, keep=keep, encoder=self.components.encoder)
            for r in reports:
                log.info("server %r: %s, %d tools, %d embedded%s", r.name, r.status, r.tools, r.re_embedded,
                         f" ({r.reason})" if r.reason else "")
            changed = index is not self.index or any(r.status in ("added", "updated", "removed") for r in reports)
            self.index = index
            self.harvests += 1
            if index is not None and self.pipeline is None:
                self.pipeline = self.components.make_pipeline(index)
                self.policy = self.pipeline.policy.with_overrides(**self._overrides)
            if changed and index is not None:
                self._save(index)

    def _save(self, index: "ToolIndex") -> None:
        """Save ``index`` to the index folder, if there is one (under ``_lock``); a failure keeps it in memory."""
        if self.index_dir is None:
            return
        try:
            index.save(self.index_dir)
        except (OSError, ValueError) as exc:
            log.warning("could not save the index to %s: %s (the update is kept in memory)", self.index_dir, exc)

    def _tools_changed(self, b: Backend) -> None:
        b.changes += 1
        if self._work is not None and not b.refreshing:
            b.refreshing = True
            self._work.start_soon(self._reharvest, b)

    async def _reharvest(self, b: Backend) -> None:
        """Harvest one server again after it said its tools changed. A burst of notices is one
        harvest: it starts once none has come for ``SETTLE_S`` (or after ``_MAX_SETTLE_WAITS``
        waits), and notices that come during it cause one more."""
        try:
            await self._harvested.wait()
            while True:
                for _ in range(_MAX_SETTLE_WAITS):
                    seen = b.changes
                    await anyio.sleep(SETTLE_S)
                    if b.changes == seen:
                        break
                seen = b.changes
                harvest = await self._list(b)
                if harvest.ok:
                    await anyio.to_thread.run_sync(self._apply, [harvest], None)
                    self._want_calibration()
                b.reharvests += 1
                log.info("server %r: harvested again after its tools changed (%d notice(s) so far, harvest #%d)",
                         b.name, seen, b.reharvests)
                if b.changes == seen:
                    break
        finally:
            b.refreshing = False

    # ------------------------------------------------------------------ the catalog's own calibration

    def _want_calibration(self) -> None:
        """(event loop) With ``calibrate_probes``: calibrate the index once its tools settle, if it has no
        calibration for this scorer and its probability models (a run in progress is followed by one more)."""
        if self.calibrate_probes is None or self._work is None:
            return
        if self._calibrating:
            self._calibration_again = True
            return
        self._calibrating = True
        self._work.start_soon(self._calibrate_loop)

    async def _calibrate_loop(self) -> None:
        try:
            while True:
                self._calibration_again = False
                await anyio.to_thread.run_sync(self._calibrate, abandon_on_cancel=True)
                if not self._calibration_again or self._stop_calibration.is_set():
                    break
        except Exception:  # noqa: BLE001 - searches go on with the shipped probabilities
            log.exception("the catalog calibration failed")
        finally:
            self._calibrating = False

    def _calibrate(self) -> None:
        """(thread) Probe a copy of the index (retrieval.pipeline.probes, through the TOOLRANK_LLM_* endpoint) and
        give the index the map if its tools are still the same; saved with it when the gateway saves its index."""
        import shutil
        import tempfile

        from retrieval.index.examples import llm_client
        from retrieval.pipeline.probes import probe_cache_beside, write_probes

        with self._lock:
            index, pipeline = self.index, self.pipeline
            cal = pipeline.catalog_calibration if pipeline is not None else None
            if index is None or pipeline is None or not len(index.catalog.tools) \
                    or (cal is not None and cal.complete):
                return   # calibrated (one whose tail still awaits judgments is run again: the cache has the rest)
            tools = index.tool_hashes()
            tmp = Path(tempfile.mkdtemp(prefix="toolrank-probe-"))
            try:
                index.save(tmp / "index")   # a copy of its own: harvests change the index in place
                probed = self.components.load_index(tmp / "index")
            finally:
                shutil.rmtree(tmp, ignore_errors=True)   # the copy is in memory now: no user's tools left on disk
        probed.calibration = None
        if self.index_dir is not None:
            cache = probe_cache_beside(self.index_dir)
        else:
            self._probe_cache = self._probe_cache or Path(tempfile.mkdtemp(prefix="toolrank-probes-")) / "p.jsonl"
            cache = self._probe_cache
        if self._stop_calibration.is_set():
            return
        with _probe_lock(cache) as mine:
            if not mine:   # another gateway on this configuration probes the same tools: it saves the map
                log.info("another toolrank mcp on this configuration is calibrating it; its map is read at the next start")
                return
            with llm_client() as client:
                self._probe_client = client
                try:
                    outcome = write_probes(self.components.make_pipeline(probed), client, cache,
                                           n=self.calibrate_probes, stop=self._stop_calibration.is_set)
                finally:
                    self._probe_client = None
        self.calibration_note = outcome.format()
        if outcome.calibration is None:
            log.warning("%s", self.calibration_note)
            return
        with self._lock:
            if self.index is None or self.index.tool_hashes() != tools:
                log.info("the tools changed while they were probed: calibrating again")
                self._calibration_again = True
                return
            self.index.calibration = outcome.calibration.to_dict()
            self.calibration_runs += 1
            self._save(self.index)
        log.info("%s", self.calibration_note)

    # ------------------------------------------------------------------ what the caller may see

    def visible_servers(self) -> list[str]:
        """The eligible servers, in configuration (or index) order."""
        names = list(self.config.servers) if self.config is not None else \
            (self.index.catalog.servers if self.index is not None else [])
        return [s for s in names if self.eligible.allows_server(s)]

    def unavailable(self) -> dict[str, str]:
        """Eligible servers whose last start or last listing failed, with why (URL credentials redacted)."""
        return {name: redact(b.error or b.list_error or "") for name, b in self.backends.items()
                if b.error or b.list_error}

    def starting(self) -> list[str]:
        """Eligible servers whose first listing is not over yet (answers use their saved tools)."""
        return [name for name, b in self.backends.items() if not b.listed and not (b.error or b.list_error)]

    def tool_count(self) -> int:
        if self.index is None:
            return 0
        return sum(1 for t in self.index.catalog.tools if self.eligible.allows(t.id))

    # ------------------------------------------------------------------ find

    async def find(self, request: str, need: str | None = None, *, attempt: int = 1) -> "SearchResult | None":
        """The pipeline's answer over the eligible tools (None when nothing is indexed)."""
        await self._ready.wait()
        key = _request_key(request)
        previous = (self._first_answers.get(key) or SimpleNamespace(attempt=1)) if attempt >= 2 else None

        def search() -> "SearchResult | None":
            # a refit reads the feedback log: outside the lock every find_tools call takes
            recalibration = self.usage.recalibration(self.pipeline) if self.usage is not None else None
            with self._lock:
                if self.pipeline is None:
                    return None
                catalog = self.index.catalog if self.index is not None else None
                model = getattr(self.pipeline, "model_key", None)
                learned = self.usage.learned() if self.usage is not None else None
                result = self.pipeline.search(request, need, eligible=self.eligible, previous=previous,
                                              explain=True, fmt="mcp", policy=self.policy,
                                              **({"learned": learned} if learned else {}),
                                              **({"recalibration": recalibration} if recalibration else {}))
            if self.usage is not None:
                self.usage.offered(request, need, result, catalog, model)
            return result
        result = await anyio.to_thread.run_sync(search)
        if result is not None and attempt < 2:
            self._first_answers[key] = result
            self._first_answers.move_to_end(key)
            while len(self._first_answers) > FIRST_ANSWERS_KEPT:
                self._first_answers.popitem(last=False)
        return result

    # ------------------------------------------------------------------ call

    def refusal(self, server: str, tool: str) -> str | None:
        """Why ``server``/``tool`` may not run, or None. A hidden server reads like an unknown one."""
        visible = [s for s in self.visible_servers() if s in self.backends]
        if server not in self.backends or server not in visible:
            names = ", ".join(repr(s) for s in visible) or "none"
            return (f"refused: {server!r} is not one of the configured servers you may use ({names}); "
                    "call a tool that find_tools returned, with its 'server' as given. Nothing was run.")
        index = self.index          # a catalog is replaced whole, never changed: safe to read unlocked
        # a tool the configuration switches off (disabledTools) is never callable, even from an older saved index
        known = index is not None and ToolId(server, tool) in index.catalog \
            and tool not in self.backends[server].spec.disabled_tools
        down = self.unavailable().get(server)
        if not known and down:
            return (f"server {server!r} is not available ({down}), so its tools are "
                    "not known. Nothing was run; tell the user.")
        if not known or not self.eligible.allows((server, tool)):
            return (f"refused: server {server!r} has no tool {tool!r} that you may call; use find_tools "
                    "to find the right tool and its exact name. Nothing was run.")
        return None

    async def definition(self, server: str, tool: str) -> dict[str, Any] | str:
        """The whole MCP definition of one tool the caller may see (``server`` added), or why not."""
        from retrieval.pipeline.definitions import to_mcp

        await self._ready.wait()
        index = self.index
        if self.forwarding:
            why = self.refusal(server, tool)
            if why:
                return why.replace("Nothing was run; tell the user.", "Tell the user.").replace(" Nothing was run.", "")
        found = index.catalog.get(ToolId(server, tool)) if index is not None else None
        if found is None or not self.eligible.allows((server, tool)):
            return (f"refused: there is no tool {tool!r} on server {server!r} that you may use; use find_tools "
                    "to find the right tool and its exact name.")
        return {"server": server, **to_mcp(found)}

    async def call(self, server: str, tool: str, arguments: dict[str, Any] | None) -> "types.CallToolResult":
        """Forward one call to the owning server's live session and return its result as it is.

        The gateway's own failures (refused, server unavailable, crashed or silent) come back as
        results with ``isError`` and a sentence saying what happened. A JSON-RPC error from the
        server is raised unchanged (``McpError``).
        """
        from mcp import types
        from mcp.shared.exceptions import McpError

        if not self.forwarding:
            return _error_result("this toolrank server only finds tools (started without --mcp-config); "
                                 "call the tool on its own server")
        await self._ready.wait()
        why = self.refusal(server, tool)
        if why:
            log.info("refused a call to %r / %r", server, tool)
            return _error_result(why)
        b = self.backends[server]
        request = types.ClientRequest(types.CallToolRequest(
            params=types.CallToolRequestParams(name=tool, arguments=arguments)))
        for attempt in (1, 2):
            try:
                conn = await b.connect(self._holders)
            except BackendUnavailable as exc:
                return _error_result(f"server {server!r} is not available: {exc}. Nothing was run; "
                                     "tell the user, or try again later.")
            # send_request, not ClientSession.call_tool: the result goes back exactly as the server
            # sent it (call_tool would re-validate structured content and list tools again).
            send = lambda: conn.session.send_request(  # noqa: E731
                request, types.CallToolResult, request_read_timeout_seconds=timedelta(seconds=self.call_timeout_s))
            try:
                result = await b.within(conn, send)
                if self.usage is not None:
                    await anyio.to_thread.run_sync(self.usage.called, server, tool, result, self.index)
                return result
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
                # The connection had ended before this call (the request never left): start it again, once.
                b.drop(conn)
                if attempt == 2:
                    return _error_result(f"server {server!r} keeps closing its connection; nothing was run.")
            except ConnectionLost as exc:
                b.drop(conn)
                log.warning("server %r: the connection broke during a call to %r: %s", server, tool, exc)
                return _error_result(
                    f"the connection to server {server!r} broke during the call to {tool!r} ({exc}), so the call "
                    "may or may not have taken effect. toolrank connects again on the next call.")
            except McpError as exc:
                msg = exc.error.message or ""
                if exc.error.code == types.CONNECTION_CLOSED or "Connection closed" in msg:
                    b.drop(conn)
                    log.warning("server %r closed the connection during a call to %r", server, tool)
                    return _error_result(
                        f"server {server!r} closed the connection during the call to {tool!r} (it may have "
                        "crashed), so the call may or may not have taken effect. toolrank starts the server "
                        "again on the next call.")
                if exc.error.code == STRAY_ANSWER and msg.startswith("the server's answer"):
                    # msg is "the server's answer is not valid MCP (DETAIL)": say it once, not nested
                    detail = msg[len("the server's answer is not valid MCP"):].strip() or "(no detail)"
                    return _error_result(
                        f"server {server!r} answered the call to {tool!r} with something that is not valid MCP "
                        f"{redact(detail)}, so the call may or may not have taken effect.")
                if exc.error.code == 408 or "Timed out" in msg:     # the SDK's read timeout
                    return _error_result(
                        f"server {server!r} did not answer the call to {tool!r} within {self.call_timeout_s:g} s; "
                        "the call may still be running there.")
                raise
        raise AssertionError("unreachable")  # pragma: no cover
