"""The HTTP service: ``create_app`` builds a FastAPI app around a pipeline and an index store.

Start-up (the lifespan) loads or seeds the index store and the scorer in the background, so
``/healthz`` answers at once and ``/readyz`` turns 200 when the pipeline is ready. A poller picks
up index versions written by other workers or replicas. Tests inject a small fake pipeline::

    app = create_app(Settings(auth_disabled=True), pipeline=FakePipeline(...))
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import difflib
import functools
import hashlib
import logging
import math
import shutil
import tempfile
import time
import unicodedata
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import anyio
from fastapi import Depends, FastAPI, Path as PathParam, Query, Request, Response
from fastapi.responses import JSONResponse

from retrieval.catalog.formats import tools_from_mcp_list
from retrieval.catalog.model import CatalogError, Tool, ToolId
from retrieval.catalog.rules import check_name
from retrieval.jsonl import dumps_line, round_trips
from retrieval.pipeline.results import ScoredTool, SearchResult

from .admission import Admission, QueueFull, RateLimiter, WaitTimedOut
from .engine import Engine, Snapshot, load_like, rebind
from .errors import ServiceError, install_error_handlers
from .index_store import IndexStore, ReadOnlyStoreError
from .metrics import CONTENT_TYPE_LATEST, Metrics
from .protocol import install_quiet_accept_errors
from .middleware import BodySizeLimit, RequestContext
from .schemas import (
    MAX_BODY_DEPTH, MAX_NAME_CHARS, MAX_SCHEMA_DEPTH, CandidateScore, ErrorResponse, Health, ModelInfo,
    PreviousAttempt, Readiness, ScoreRequest, ScoreResponse, SearchRequest, SearchResponse, ServerChange,
    ServerDetail, ServerList, ServerSummary, ServerUpdate, TokenFigures, ToolResult,
)
from .settings import Settings
from .tenants import DEV_TENANT, Tenant, Tenants, load_tenants
from .work import WorkCancelled, WorkToken, run_with

__all__ = ["create_app", "ServiceState"]

log = logging.getLogger(__name__)

_ERRORS = {status: {"model": ErrorResponse, "description": text} for status, text in {
    401: "No API key, or a key that is not valid.",
    413: "The body is larger than the limit.",
    422: "Invalid input: the message names the field and the fix.",
    429: "The tenant's request rate is over its limit; retry after Retry-After seconds.",
    503: "Not ready yet (index loading), no scorer model loaded, or overloaded (queue full, deadline passed): "
         "retry after Retry-After seconds.",
}.items()}
_READ_ERRORS = {k: v for k, v in _ERRORS.items() if k in (401, 422, 429, 503)}
_ADMIN_ERRORS = {**_ERRORS, 403: {"model": ErrorResponse, "description": "The key is not an admin key."},
                 405: {"model": ErrorResponse, "description": "The service serves a read-only copy of the index."},
                 507: {"model": ErrorResponse, "description": "The index store is out of disk space; nothing "
                                                              "was changed."}}
_NOT_FOUND = {404: {"model": ErrorResponse, "description": "No server of that name is available to the caller."}}

ServerName = PathParam(min_length=1, max_length=MAX_NAME_CHARS, description="Server name (URL-encoded).",
                       examples=["GitHub"])


class ServiceState:
    """Per-app state: status, engine, scorer status, the admission queue and rate limits."""

    def __init__(self, settings: Settings, tenants: Tenants | None, metrics: Metrics):
        self.settings = settings
        self.tenants = tenants
        self.metrics = metrics
        self.status = "loading"
        self.detail = "loading the index and the model"
        self.engine: Engine | None = None
        self.scorer: dict[str, Any] = {}
        self.notes: dict[str, str] = {}   # what /readyz adds to its detail (fallbacks, background work)
        self.admission = Admission(settings.max_concurrency, settings.max_queue, settings.max_queue_wait_s)
        self.rates = RateLimiter()

    async def run(self, request: Request, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run blocking pipeline work in a thread, under the worker's admission control.

        At most ``max_concurrency`` calls run at once and ``max_queue`` wait; the request's
        deadline (``request_timeout_s``) covers the wait and the work. When the client hangs
        up, or the deadline passes, the work stops at its next checkpoint (the real scorer
        checks before every batch) and a request still waiting leaves the queue.

        Raises:
            ServiceError: 503 (queue full, deadline passed) with Retry-After, or 499 (client gone).
        """
        token = WorkToken(time.monotonic() + self.settings.request_timeout_s)
        gone = asyncio.Event()

        async def watch() -> None:  # the body has been read: the next message can only be a disconnect
            while True:
                message = await request.receive()
                if message["type"] == "http.disconnect":
                    token.cancel("disconnected")
                    gone.set()
                    return

        watcher = asyncio.ensure_future(watch())
        try:
            await self._admit(token, gone)
            started = time.monotonic()
            try:
                return await anyio.to_thread.run_sync(functools.partial(run_with, token, fn, *args, **kwargs))
            except WorkCancelled as exc:
                raise self._stopped(exc.reason) from None
            finally:
                self.admission.release(time.monotonic() - started)
        finally:
            watcher.cancel()

    async def _admit(self, token: WorkToken, gone: asyncio.Event) -> None:
        acquire = asyncio.ensure_future(self.admission.acquire(token.remaining()))
        left = asyncio.ensure_future(gone.wait())
        try:
            await asyncio.wait({acquire, left}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            left.cancel()
            if not acquire.done():
                acquire.cancel()
                try:
                    await acquire
                except asyncio.CancelledError:
                    pass
                else:  # got the slot just as the client left: give it back
                    self.admission.release()
        if acquire.cancelled():
            raise self._stopped("disconnected")
        try:
            acquire.result()
        except QueueFull as exc:
            self.metrics.rejections.labels("queue_full").inc()
            # No counts: they add up every tenant's requests, which no tenant should be able to watch.
            raise ServiceError(503, "overloaded", f"the service is at capacity; retry after {exc.retry_after} s",
                               headers={"Retry-After": str(exc.retry_after)}) from None
        except WaitTimedOut:
            raise self._stopped("deadline") from None
        if token.reason is not None:  # the client left while the slot was being handed over
            self.admission.release()
            raise self._stopped(token.reason)

    def _stopped(self, reason: str) -> ServiceError:
        if reason == "disconnected":
            self.metrics.rejections.labels("client_gone").inc()
            return ServiceError(499, "client_closed_request", "the client closed the connection; the work was stopped")
        self.metrics.rejections.labels("deadline").inc()
        retry = self.admission.retry_after()
        return ServiceError(503, "deadline_exceeded",
                            f"no answer within the {self.settings.request_timeout_s:g} s deadline (the service is "
                            f"busy); retry after {retry} s, or send fewer candidates",
                            headers={"Retry-After": str(retry)})


# ------------------------------------------------------------------ pipeline parts


def _injected_parts(pipeline: Any) -> tuple[Callable[[Path], Any], Callable[[], Any], Callable[[Any], Any], dict]:
    def make(index: Any) -> Any:
        return pipeline if index is pipeline.index else rebind(pipeline, index)

    scorer = {"loaded": getattr(pipeline, "scorer", True) is not None, **_model_info(pipeline)}
    return (lambda path: load_like(pipeline.index, path)), (lambda: pipeline.index), make, scorer


def _model_info(pipeline: Any) -> dict[str, Any]:
    info = getattr(pipeline, "model_info", None) or {}
    return {"name": info.get("name"), "version": None if info.get("version") is None else str(info.get("version"))}


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
            _policy(engine.snapshot.pipeline, tenant)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"tenant {tenant.name!r}: policy overrides {tenant.policy} do not fit the "
                             f"pipeline's policy: {exc}; fix the tenants file") from None
    for warning in allow_list_warnings(state.tenants, engine.snapshot.catalog):
        log.warning("%s", warning)
    if getattr(store, "read_only", False):
        state.notes["read_only"] = "read-only index store: catalog changes are refused"
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
    state = ServiceState(settings, tenants, metrics)
    from .usage import UsageBook, install_usage_routes   # learning from use (docs/day-one.md)
    state.usage = UsageBook(Path(settings.index_dir) / "usage" if settings.index_dir is not None else None)

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
            if private is not None:
                shutil.rmtree(private, ignore_errors=True)
            log.info("stopped")

    app = FastAPI(
        title="toolrank",
        version=_package_version(),
        summary="Find the few MCP tools that fit a request among thousands, with calibrated probabilities.",
        lifespan=lifespan,
    )
    app.state.toolrank = state
    install_error_handlers(app)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes, max_depth=MAX_BODY_DEPTH,
                       depth_hint=f" (an inputSchema may nest at most {MAX_SCHEMA_DEPTH} levels)",
                       timeout_s=settings.body_timeout_s)
    app.add_middleware(RequestContext, metrics=metrics)  # outermost: sees every status, 413 included

    # -------------------------------------------------------------- dependencies

    def tenant_of(request: Request) -> Tenant:
        if settings.auth_disabled:
            tenant = DEV_TENANT
        else:
            key = _presented_key(request)
            if not key:
                raise ServiceError(401, "missing_api_key",
                                   "send your API key as 'Authorization: Bearer <key>' or 'X-API-Key: <key>'",
                                   headers={"WWW-Authenticate": "Bearer"})
            found = state.tenants.authenticate(key) if state.tenants is not None else None
            if found is None:
                raise ServiceError(401, "invalid_api_key", "the API key is not valid; check it, or ask for a new one",
                                   headers={"WWW-Authenticate": "Bearer"})
            tenant = found
        request.state.tenant = tenant.name
        if tenant.rate_per_s is not None:
            wait = state.rates.take(tenant.name, tenant.rate_per_s, tenant.burst or 1)
            if wait > 0:
                retry = max(1, math.ceil(wait))
                metrics.rejections.labels("rate_limited").inc()
                raise ServiceError(429, "rate_limited", f"over this key's limit of {tenant.rate_per_s:g} requests a "
                                   f"second; retry after {retry} s", headers={"Retry-After": str(retry)})
        return tenant

    def admin_of(tenant: Tenant = Depends(tenant_of)) -> Tenant:
        if not tenant.admin:
            raise ServiceError(403, "admin_required", "catalog changes need an admin API key")
        return tenant

    def snapshot_of() -> Snapshot:
        if state.engine is None:
            raise ServiceError(503, "not_ready", f"the service is not ready ({state.detail}); retry in a few seconds",
                               headers={"Retry-After": "5"})
        if getattr(state.engine.store, "read_through", False):  # Qdrant: serve the newest committed version
            try:
                state.engine.refresh()
            except Exception:
                log.warning("could not read the index backend's newest version; serving the last one",
                            exc_info=True)
        return state.engine.snapshot

    def engine_of() -> Engine:
        snapshot_of()
        assert state.engine is not None
        return state.engine

    # -------------------------------------------------------------- scoring and search

    @app.post("/v1/score", response_model=ScoreResponse, responses=_ERRORS, tags=["ranking"],
              summary="The scorer's probability for each (request, candidate tool) pair, alone",
              description="`scorer_probability` is the cross-encoder's calibrated probability for each pair, with "
                          "no retrieval evidence: it is not the decision probability of /v1/search (named "
                          "`probability` there) and differs from it for the same tool.")
    async def score(body: ScoreRequest, request: Request, tenant: Tenant = Depends(tenant_of),
                    snap: Snapshot = Depends(snapshot_of)) -> ScoreResponse:
        if not state.scorer.get("loaded", False):
            raise ServiceError(503, "no_scorer", "no scorer model is loaded on this service; start it with --model DIR")
        tools = [Tool(c.server, c.name, c.description) for c in body.candidates]
        probs = await state.run(request, snap.pipeline.score, body.request, body.need, tools)
        probs = [float(p) for p in probs]
        if len(probs) != len(tools) or any(not 0.0 <= p <= 1.0 for p in probs):
            raise RuntimeError(f"scorer returned {len(probs)} values for {len(tools)} candidates, or values outside [0, 1]")
        return ScoreResponse(scores=[CandidateScore(id=c.id, scorer_probability=p) for c, p in zip(body.candidates, probs)],
                             model=ModelInfo(**_model_info(snap.pipeline)))

    @app.post("/v1/search", response_model=SearchResponse, responses=_ERRORS, tags=["ranking"],
              summary="The caller's tools that fit the request, ranked, with a decision")
    async def search(body: SearchRequest, request: Request, tenant: Tenant = Depends(tenant_of),
                     snap: Snapshot = Depends(snapshot_of)) -> SearchResponse:
        pipeline = snap.pipeline
        learned = state.usage.learned(tenant.name) if tenant.learn_from_use else None
        result = await state.run(
            request, pipeline.search, body.request, body.need,
            eligible=tenant.eligibility, previous=_previous(body.previous, tenant), k=body.k,
            explain=body.explain, fmt=body.format, policy=_policy(pipeline, tenant),
            **({"learned": learned} if learned else {}))
        result = _visible_result(result, tenant, snap)
        metrics.decisions.labels(result.decision).inc()
        request_id = getattr(request.state, "request_id", None)
        state.usage.offered(tenant.name, request_id, body.request, body.need, [t.tool_id for t in result.tools])
        response = _search_response(result, snap, body.explain, await _view_version(snap, tenant))
        response.request_id = request_id
        return response

    # -------------------------------------------------------------- catalog

    @app.get("/v1/servers", response_model=ServerList, responses={k: v for k, v in _ERRORS.items() if k in (401, 503)}, tags=["catalog"],
             summary="The caller's servers (every server for an admin)")
    async def list_servers(tenant: Tenant = Depends(tenant_of), snap: Snapshot = Depends(snapshot_of)) -> ServerList:
        catalog = snap.catalog
        counts: dict[str, int] = {}
        for t in catalog.tools:
            if tenant.sees_tool(t.id):
                counts[t.server] = counts.get(t.server, 0) + 1
        servers = [ServerSummary(name=s, description=catalog.server_descriptions.get(s, ""), tools=counts.get(s, 0))
                   for s in catalog.servers if tenant.sees_server(s)]
        return ServerList(servers=servers, index_version=await _view_version(snap, tenant))

    @app.get("/v1/servers/{name}", response_model=ServerDetail, responses={**_READ_ERRORS, **_NOT_FOUND},
             tags=["catalog"], summary="One of the caller's servers, with its tools")
    async def get_server(name: str = ServerName, tenant: Tenant = Depends(tenant_of),
                         snap: Snapshot = Depends(snapshot_of)) -> ServerDetail:
        catalog = snap.catalog
        found = _stored_name(name, catalog)
        tools = [t for t in catalog.server_tools(found) if tenant.sees_tool(t.id)] if tenant.sees_server(found) else []
        if not tools:
            raise _no_such_server(name)
        return ServerDetail(name=found, description=catalog.server_descriptions.get(found, ""),
                            tools=[{"name": t.name, "description": t.description, "inputSchema": t.input_schema}
                                   for t in tools],
                            index_version=await _view_version(snap, tenant))

    @app.put("/v1/servers/{name}", response_model=ServerChange, tags=["catalog"], response_model_exclude_none=True,
             responses={**_ADMIN_ERRORS, 201: {"model": ServerChange, "description": "The server was new."}},
             summary="Add or replace a server from its MCP tools/list result (admin)",
             description="Only tools whose text changed are embedded again. The change is saved as a new "
                         "index version; every worker serves it within the pick-up bound.")
    async def put_server(body: ServerUpdate, response: Response, name: str = ServerName,
                         tenant: Tenant = Depends(admin_of), engine: Engine = Depends(engine_of),
                         write_examples: bool = Query(False, description="Write 5 example requests for each new or "
                                                      "changed tool sent without any, through the TOOLRANK_LLM_* "
                                                      "endpoint (cached by content hash; docs/day-one.md).")
                         ) -> ServerChange:
        try:
            name = check_name(name, "server name")
        except CatalogError as exc:
            raise ServiceError(422, "invalid_server_name", str(exc)) from None
        if "/" in name:
            raise ServiceError(422, "invalid_server_name", f"server name {name!r} must contain no '/'")
        where = f"PUT /v1/servers/{name}"
        try:
            tools = tools_from_mcp_list(name, body.description, {"tools": [t.model_dump() for t in body.tools]}, where)
        except CatalogError as exc:
            raise ServiceError(422, "invalid_catalog", str(exc)) from None
        names = [t.name for t in tools]
        dup = next((n for i, n in enumerate(names) if n in names[:i]), None)
        if dup is not None:
            raise ServiceError(422, "invalid_catalog", f"{where}: tool name {dup!r} appears twice in 'tools' "
                               "(after NFC normalisation); tool names must be unique on a server")
        examples = None if body.examples is None else \
            {unicodedata.normalize("NFC", k): v for k, v in body.examples.items()}
        unknown = sorted(set(examples or {}) - set(names))
        if unknown:
            raise ServiceError(422, "invalid_catalog", f"{where}: 'examples' names {unknown[0]!r}, which is not in "
                               "'tools'; key examples by the names of the tools you send")
        # Refuse here whatever the store could not write and read back unchanged: nothing is written.
        for t in tools:
            if not round_trips({**t.to_dict(), "examples": (examples or {}).get(t.name, [])}):
                raise ServiceError(422, "invalid_catalog", f"{where}: tool {t.name!r} cannot be stored as JSON and "
                                   "read back unchanged; send plain JSON text and finite numbers")
        note = None
        if write_examples:
            from .usage import written_examples
            examples, note = await anyio.to_thread.run_sync(written_examples, settings, name, body.description,
                                                            tools, examples)
        try:
            outcome = await _write(engine.upsert_server, name, body.description, tools, examples)
        except CatalogError as exc:
            raise ServiceError(422, "invalid_catalog", str(exc)) from None
        metrics.catalog_updates.labels("upsert").inc()
        response.status_code = 201 if outcome.created else 200
        return ServerChange(name=name, created=outcome.created, changed=outcome.changed, tools=outcome.tools,
                            re_embedded=outcome.re_embedded, index_version=outcome.version, examples_note=note)

    @app.delete("/v1/servers/{name}", response_model=ServerChange,
                responses={**{k: v for k, v in _ADMIN_ERRORS.items() if k != 413}, **_NOT_FOUND},
                tags=["catalog"], summary="Remove a server and its tools (admin)")
    async def delete_server(name: str = ServerName, tenant: Tenant = Depends(admin_of),
                            engine: Engine = Depends(engine_of)) -> ServerChange:
        outcome = await _write(engine.remove_server, _stored_name(name, engine.snapshot.catalog))
        if not outcome.changed:
            raise _no_such_server(name)
        metrics.catalog_updates.labels("delete").inc()
        return ServerChange(name=name, changed=True, tools=outcome.tools, index_version=outcome.version)

    install_usage_routes(app, state, tenant_of, snapshot_of)

    # -------------------------------------------------------------- probes

    @app.get("/healthz", response_model=Health, tags=["probes"], summary="The process is alive")
    async def healthz() -> JSONResponse:
        if state.status == "failed":
            return JSONResponse({"status": "failed"}, status_code=500)
        return JSONResponse({"status": "ok"})

    @app.head("/healthz", include_in_schema=False)
    async def healthz_head() -> Response:  # load balancers that probe with HEAD
        return Response(status_code=500 if state.status == "failed" else 200)

    def _is_admin(request: Request) -> bool:
        """Whether the request carries an admin key (probes take no key, but may be given one)."""
        key = _presented_key(request)
        found = state.tenants.authenticate(key) if key and state.tenants is not None else None
        return found is not None and found.admin

    @app.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}}, tags=["probes"],
             summary="Index and model loaded (503 until then)")
    async def readyz(request: Request) -> JSONResponse:
        ready = state.engine is not None
        # The version number moves with every catalog change: only admins may watch it.
        admin = settings.auth_disabled or _is_admin(request)
        parts = [state.detail] if state.detail else []
        if admin:  # fallbacks and background work name store versions
            parts += list(state.notes.values())
        detail = "; ".join(parts)
        body = Readiness(ready=ready, status=state.status,
                         index_version=state.engine.snapshot.version if ready and admin else None,
                         scorer=state.scorer, detail=detail)
        return JSONResponse(body.model_dump(), status_code=200 if ready else 503)

    @app.get("/metrics", tags=["probes"], summary="Prometheus metrics (admin key, unless metrics_public)",
             response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}},
                                                 401: _ERRORS[401], 403: _ADMIN_ERRORS[403]})
    async def prometheus(request: Request) -> Response:
        if not (settings.metrics_public or settings.auth_disabled) and not tenant_of(request).admin:
            # its counters show catalog activity: admins only
            raise ServiceError(403, "admin_required", "/metrics needs an admin API key (or metrics_public for a "
                               "scraper on a private network)")
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return app


# ------------------------------------------------------------------ helpers


_OUT_OF_SPACE = (errno.ENOSPC, errno.EDQUOT)


async def _write(change: Callable[..., Any], *args: Any) -> Any:
    """Run a catalog change in a thread; a full disk is a 507 and a read-only store a 405, not a 500."""
    try:
        return await anyio.to_thread.run_sync(change, *args)
    except ReadOnlyStoreError as exc:
        raise ServiceError(405, "read_only_store", f"this service serves a read-only copy of the index; {exc}",
                           headers={"Allow": "GET, HEAD"}) from None
    except OSError as exc:
        if exc.errno not in _OUT_OF_SPACE:
            raise
        log.error("catalog change not saved: the index store is out of disk space (%s)", exc.strerror)
        raise ServiceError(507, "out_of_space", "the index store is out of disk space: the change was not saved "
                           "and the catalog is unchanged; retry once space has been freed") from None


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


def _package_version() -> str:
    try:
        from importlib.metadata import version
        return version("toolrank")
    except Exception:
        return "0.1.0+local"


def _presented_key(request: Request) -> str | None:
    auth = request.headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    key = request.headers.get("x-api-key")
    return key.strip() if key and key.strip() else None


def _stored_name(name: str, catalog: Any) -> str:
    """The server a path names: as given, or its NFC form (names are stored NFC-normalised)."""
    if name in catalog.server_descriptions:
        return name
    return unicodedata.normalize("NFC", name)


async def _view_version(snap: Snapshot, tenant: Tenant) -> int:
    """The index version as ``tenant`` may see it.

    Admins and tenants allowed every server see the store's version. For a tenant restricted
    to some servers it is a 52-bit fingerprint of what it can see (its servers' descriptions
    and its tools' content), so a change to a server hidden from it changes nothing it gets.
    """
    if tenant.sees_everything:
        return snap.version
    key = (tenant.eligibility.servers, tenant.eligibility.tools)
    found = snap.views.get(key)
    if found is None:
        found = await anyio.to_thread.run_sync(_fingerprint, snap.catalog, tenant)
        if len(snap.views) > 1024:  # tenants are few; bound it anyway
            snap.views.clear()
        snap.views[key] = found
    return found


def _fingerprint(catalog: Any, tenant: Tenant) -> int:
    h = hashlib.sha256()
    for server in sorted(s for s in catalog.servers if tenant.sees_server(s)):
        h.update(dumps_line([server, catalog.server_descriptions.get(server, "")]).encode("utf-8") + b"\n")
    for line in sorted(dumps_line([t.server, t.name, t.content_hash()]) for t in catalog.tools if tenant.sees_tool(t.id)):
        h.update(line.encode("utf-8") + b"\n")
    return int(h.hexdigest()[:13], 16)


def _no_such_server(name: str) -> ServiceError:
    # Exactly the same answer for a server that does not exist and one the caller may not see.
    return ServiceError(404, "server_not_found", f"no server named {name!r} is available to you; "
                        "GET /v1/servers lists yours")


def _previous(previous: PreviousAttempt | None, tenant: Tenant) -> SearchResult | None:
    if previous is None:
        return None
    tools = [ScoredTool(ToolId(r.server, r.tool), float(r.probability or 0.0), i + 1)
             for i, r in enumerate(previous.tools) if tenant.eligibility.allows((r.server, r.tool))]
    return SearchResult(decision=previous.decision, tools=tools,
                        best_probability=max((t.probability for t in tools), default=0.0),
                        attempt=previous.attempt)


def _policy(pipeline: Any, tenant: Tenant) -> Any | None:
    if not tenant.policy:
        return None
    base = getattr(pipeline, "policy", None)
    if base is None:
        log.warning("tenant %r has policy overrides but the pipeline exposes no .policy; using its defaults",
                    tenant.name)
        return None
    return dataclasses.replace(base, **tenant.policy)


_GENERIC_MESSAGES = {
    "proceed": "Proceed with these tools.",
    "search_again": "No tool clearly fits. Search again with a more specific need, passing this result as `previous`.",
    "no_fit": "No connected tool fits this request.",
}


def _visible_result(result: SearchResult, tenant: Tenant, snap: Snapshot) -> SearchResult:
    """Drop anything naming a server or tool the tenant may not see (defence in depth).

    A correct pipeline never needs this; if it ever removes something, the message (which
    might name what was removed) is replaced by a generic one.
    """
    deployment = set(snap.catalog.servers)
    public_index = getattr(snap.pipeline, "public_index", None)
    public = set(public_index.catalog.servers) if public_index is not None else set()
    tools = [t for t in result.tools if tenant.eligibility.allows(t.tool_id)]
    suggestions = [s for s in result.suggestions if s not in deployment or s in public or tenant.sees_server(s)]
    restricted = [s for s in result.restricted_to if tenant.sees_server(s)]
    if len(tools) == len(result.tools) and suggestions == result.suggestions and restricted == result.restricted_to:
        return result
    log.warning("search result named servers or tools outside tenant %r's eligibility; removed them", tenant.name)
    best = result.best_probability if len(tools) == len(result.tools) else max((t.probability for t in tools), default=0.0)
    return dataclasses.replace(result, tools=tools, suggestions=suggestions, restricted_to=restricted,
                               best_probability=best, message=_GENERIC_MESSAGES.get(result.decision, ""))


def _search_response(result: SearchResult, snap: Snapshot, explain: bool, version: int) -> SearchResponse:
    tokens = None
    if result.tokens is not None:
        tokens = TokenFigures(selected=int(result.tokens.selected), catalog=int(result.tokens.catalog),
                              reduction=float(result.tokens.reduction), encoding=str(result.tokens.encoding))
    return SearchResponse(
        decision=result.decision,
        attempt=int(result.attempt),
        best_probability=float(result.best_probability),
        tools=[ToolResult(server=t.tool_id[0], tool=t.tool_id[1], probability=float(t.probability), rank=int(t.rank),
                          source=str(t.source), definition=t.definition,
                          explanation=t.explanation if explain else None) for t in result.tools],
        tokens=tokens,
        message=result.message,
        suggestions=list(result.suggestions),
        restricted_to=list(result.restricted_to),
        index_version=version,
        model=ModelInfo(**_model_info(snap.pipeline)),
    )
