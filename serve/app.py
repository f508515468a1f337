"""The HTTP service: ``create_app`` builds a FastAPI app around a pipeline and an index store.

Start-up (the lifespan) loads or seeds the index store and the scorer in the background, so
``/healthz`` answers at once and ``/readyz`` turns 200 when the pipeline is ready. A poller picks
up index versions written by other workers or replicas. The routes live in :mod:`serve.routes`,
one router per resource, and reach the app's :class:`~serve.state.ServiceState` through the
dependencies of :mod:`serve.deps`. Tests inject a small fake pipeline::

    app = create_app(Settings(auth_disabled=True), pipeline=FakePipeline(...))
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import logging
import os
import shutil
import tempfile
import unicodedata
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import anyio
from fastapi import FastAPI

from retrieval.version import package_version

from .engine import Engine, Snapshot, load_like, model_info, rebind
from .errors import install_error_handlers
from .index_store import IndexStore
from .metrics import Metrics
from .middleware import BodySizeLimit, RequestContext
from .protocol import install_quiet_accept_errors
from .routes import ROUTERS
from .routes.ranking import tenant_policy
from .schemas import MAX_BODY_DEPTH, MAX_SCHEMA_DEPTH
from .settings import Settings
from .state import ServiceState
from .tenants import Tenants, load_tenants
from .usage import UsageBook

__all__ = ["create_app", "ServiceState"]

log = logging.getLogger(__name__)


# ------------------------------------------------------------------ pipeline parts


def _injected_parts(pipeline: Any) -> tuple[Callable[[Path], Any], Callable[[], Any], Callable[[Any], Any], dict]:
    def make(index: Any) -> Any:
        return pipeline if index is pipeline.index else rebind(pipeline, index)

    scorer = {"loaded": getattr(pipeline, "scorer", True) is not None, **model_info(pipeline)}
    return (lambda path: load_like(pipeline.index, path)), (lambda: pipeline.index), make, scorer


def _start_engine(state: ServiceState, root: Path, pipeline: Any | None) -> None:
    """Blocking start-up: build or accept the pipeline, open the store, serve CURRENT."""
    if pipeline is not None:
        load, seed, make, scorer = _injected_parts(pipeline)
    else:
        from .loading import default_parts

        parts = default_parts(state.settings)
        load, seed, make, scorer = parts.load, parts.seed, parts.make_pipeline, parts.scorer
    if state.settings.backend == "qdrant":  # one shared collection: no folder, no polling
        from .qdrant_store import qdrant_store

        store, seed = qdrant_store(state.settings, seed, getattr(pipeline, "index", None))
    else:
        store = IndexStore(root, load, keep=state.settings.keep_versions,
                           read_only=True if state.settings.read_only else None)
    engine = Engine(store, make, seed)

    def on_swap(snap: Snapshot) -> None:
        state.metrics.index_version.set(snap.version)
        state.metrics.index_swaps.inc()

    engine.on_swap = on_swap
    if pipeline is None:
        parts.notes = state.notes  # background work shows in /readyz
        parts.on_public_ready = lambda: _remake_served(state, engine)  # suggestions built in the background
    engine.start()
    if engine.unreadable:
        state.notes["store"] = (f"serving index version {engine.snapshot.version}: newer version(s) "
                                f"{', '.join(f'v{v}' for v in sorted(engine.unreadable))} could not be read (see the log)")
    for tenant in state.tenants.all() if state.tenants is not None else ():
        try:
            tenant_policy(engine.snapshot.pipeline, tenant)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"tenant {tenant.name!r}: policy overrides {tenant.policy} do not fit the "
                             f"pipeline's policy: {exc}; fix the tenants file") from None
    for warning in allow_list_warnings(state.tenants, engine.snapshot.catalog):
        log.warning("%s", warning)
    if getattr(store, "read_only", False):
        state.notes["read_only"] = "read-only index store: catalog changes are refused"
    if state.settings.calibrate_after_change_s is not None:
        from retrieval.index.examples import llm_client

        from .calibration import jobs_of, keep_calibrated
        if jobs_of(state, engine) is not None:   # a read-only copy or Qdrant: said by keep_calibrated, no endpoint needed
            try:
                llm_client().close()
            except ValueError as exc:
                raise ValueError(f"TOOLRANK_CALIBRATE_AFTER_CHANGE_S needs an LLM endpoint: {exc}") from None
        keep_calibrated(state, engine, "start")
    state.scorer = scorer
    state.engine = engine
    state.status = "ready"
    state.detail = "" if scorer.get("loaded") else str(scorer.get("detail", "no scorer model loaded"))


def allow_list_warnings(tenants: Tenants | None, catalog: Any) -> list[str]:
    """One line per server or tool that a tenant's allow-list names but the catalog does not have
    (a misspelling silently hides it from the tenant), with the nearest name when one is close."""
    if tenants is None:
        return []
    servers = set(catalog.servers)
    tools = {tuple(t.id) for t in catalog.tools}
    out = []
    for tenant in tenants.all():
        for server in sorted(tenant.eligibility.servers or ()):
            if server not in servers and unicodedata.normalize("NFC", server) not in servers:
                near = difflib.get_close_matches(server, sorted(servers), n=1, cutoff=0.6)
                out.append(f"tenant {tenant.name!r}: allowed server {server!r} is not in the catalog"
                           + (f"; did you mean {near[0]!r}?" if near else " (a typo, or a server not added yet)"))
        for server, tool in sorted(tenant.eligibility.tools or ()):
            if (server, tool) in tools:
                continue
            if server not in servers:
                out.append(f"tenant {tenant.name!r}: allowed tool {tool!r} names server {server!r}, which is not in "
                           "the catalog")
                continue
            near = difflib.get_close_matches(tool, sorted(t for s, t in tools if s == server), n=1, cutoff=0.6)
            out.append(f"tenant {tenant.name!r}: allowed tool {tool!r} is not on server {server!r}"
                       + (f"; did you mean {near[0]!r}?" if near else ""))
    return out


def _remake_served(state: ServiceState, engine: Engine) -> None:
    """The public suggestion index finished loading: serve the same version with it."""
    engine.remake()
    state.notes.pop("public", None)


# ------------------------------------------------------------------ the app


def create_app(settings: Settings | None = None, *, pipeline: Any | None = None,
               tenants: Tenants | None = None) -> FastAPI:
    """Build the service.

    Args:
        settings: the service settings; read from ``TOOLRANK_*`` environment variables when None.
        pipeline: an object with ``search``, ``score``, ``model_info`` and an ``index`` (with
            ``catalog``, ``upsert_server``, ``remove_server``, ``save``, ``load``). When None the
            lifespan builds the real ``retrieval.pipeline.flow.Pipeline``.
        tenants: API keys and tenants; loaded from ``settings.config`` when None.

    Raises:
        TenantConfigError: the tenants file is invalid (checked here, before serving anything).
    """
    settings = settings or Settings()
    if tenants is None and settings.config is not None:
        tenants = load_tenants(settings.config)
    if tenants is None and not settings.auth_disabled:
        raise ValueError("no tenants: pass tenants=, set settings.config, or set auth_disabled=True for development")
    metrics = Metrics()
    usage = UsageBook(Path(settings.index_dir) / "usage" if settings.index_dir is not None else None,
                      offers=settings.offers_per_tenant, feedback_max_bytes=int(settings.feedback_max_mb * 1024 * 1024),
                      feedback_keep_days=settings.feedback_keep_days,
                      read_only=settings.read_only or (settings.index_dir is not None and Path(settings.index_dir).is_dir()
                                                       and not os.access(settings.index_dir, os.W_OK)))
    state = ServiceState(settings, tenants, metrics, usage)
    if settings.audit_share > 0 and not usage.read_only:   # a replica writes nothing, audits included
        from .audits import Auditor, check_endpoint

        check_endpoint(settings.audit_share)
        state.auditor = Auditor(usage, settings.audit_share, settings.audit_daily_max, question=settings.audit_question)

    app = FastAPI(
        title="toolrank",
        version=package_version(),
        summary="Find the few MCP tools that fit a request among thousands, with calibrated probabilities.",
        lifespan=_lifespan(state, pipeline),
    )
    app.state.toolrank = state
    install_error_handlers(app)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes, max_depth=MAX_BODY_DEPTH,
                       depth_hint=f" (an inputSchema may nest at most {MAX_SCHEMA_DEPTH} levels)",
                       timeout_s=settings.body_timeout_s)
    app.add_middleware(RequestContext, metrics=metrics)  # outermost: sees every status, 413 included
    for router in ROUTERS:
        app.include_router(router)
    if settings.ui:   # the operator console (docs/operations.md, "Console")
        from .console import router as console

        app.include_router(console)
    return app


def _lifespan(state: ServiceState, pipeline: Any | None) -> Callable[[FastAPI], Any]:
    """The app's lifespan: start the engine in the background, poll the store, clean up at shutdown."""
    settings = state.settings

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        private = None
        if settings.index_dir is None:
            private = Path(tempfile.mkdtemp(prefix="toolrank-store-"))
        root = Path(settings.index_dir) if settings.index_dir is not None else private

        async def start() -> None:
            try:
                # abandon_on_cancel: a shutdown during a long first build does not wait for it
                await anyio.to_thread.run_sync(_start_engine, state, root, pipeline, abandon_on_cancel=True)
                log.info("ready: index version %d", state.engine.snapshot.version)
            except Exception as exc:
                state.status, state.detail = "failed", "the index or the model failed to load; see the server log"
                if not settings.fail_fast:
                    log.exception("start-up failed: the service stays unready")
                    return
                reason = _one_line(exc)
                log.error("start-up failed: %s; exiting", reason)
                log.debug("start-up failure", exc_info=True)
                _exit_process(f"start-up failed: {reason}", settings.failure_file)

        async def poll() -> None:
            while True:
                await asyncio.sleep(settings.poll_interval_s)
                if state.engine is None:
                    continue
                try:
                    await anyio.to_thread.run_sync(state.engine.refresh)
                except Exception:
                    log.warning("could not pick up a newer index version; retrying", exc_info=True)

        install_quiet_accept_errors(asyncio.get_running_loop())  # one line per kind per 10 s, not thousands
        tasks = [asyncio.create_task(start(), name="toolrank-start"), asyncio.create_task(poll(), name="toolrank-poll")]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            if state.calibration_jobs is not None:   # a running calibration records that it stopped
                await anyio.to_thread.run_sync(state.calibration_jobs.shutdown)
            if state.auditor is not None:   # audits waiting are dropped; the one being judged ends
                await anyio.to_thread.run_sync(state.auditor.close)
            if private is not None:
                shutil.rmtree(private, ignore_errors=True)
            log.info("stopped")

    return lifespan


# ------------------------------------------------------------------ start-up failures


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 1000 else text[:1000] + "..."


startup_failure: str | None = None  # why start-up failed in this process (read by ``toolrank serve``)


def _exit_process(reason: str, failure_file: Path | None) -> None:
    """Stop the process after a start-up failure (``fail_fast``): the reason goes to
    :data:`startup_failure` and to ``failure_file`` (for a parent process; ``toolrank serve`` prints
    it and exits 3). A uvicorn worker of several exits at once
    with status 3, which stops the parent; a single process shuts down gracefully (SIGINT to itself)."""
    import multiprocessing
    import os
    import signal

    global startup_failure
    startup_failure = reason
    if failure_file is not None:
        with contextlib.suppress(OSError):
            Path(failure_file).write_text(reason + "\n", encoding="utf-8")
    if multiprocessing.parent_process() is not None:
        logging.shutdown()
        os._exit(3)
    os.kill(os.getpid(), signal.SIGINT)
