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
import functools
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import anyio
from fastapi import Depends, FastAPI, Path as PathParam, Request, Response
from fastapi.responses import JSONResponse

from retrieval.catalog import CatalogError, Tool, ToolId, tools_from_mcp_list
from retrieval.results import ScoredTool, SearchResult

from .engine import Engine, Snapshot, load_like, rebind
from .errors import ServiceError, install_error_handlers
from .index_store import IndexStore
from .metrics import CONTENT_TYPE_LATEST, Metrics
from .middleware import BodySizeLimit, RequestContext
from .schemas import (
    MAX_NAME_CHARS, CandidateScore, ErrorResponse, Health, ModelInfo, PreviousAttempt, Readiness,
    ScoreRequest, ScoreResponse, SearchRequest, SearchResponse, ServerChange, ServerDetail, ServerList,
    ServerSummary, ServerUpdate, TokenFigures, ToolResult,
)
from .settings import Settings
from .tenants import DEV_TENANT, Tenant, Tenants, load_tenants

__all__ = ["create_app", "ServiceState"]

log = logging.getLogger(__name__)

_ERRORS = {status: {"model": ErrorResponse, "description": text} for status, text in {
    401: "No API key, or a key that is not valid.",
    413: "The body is larger than the limit.",
    422: "Invalid input: the message names the field and the fix.",
    503: "Not ready yet (index loading), or no scorer model loaded.",
}.items()}
_READ_ERRORS = {k: v for k, v in _ERRORS.items() if k in (401, 422, 503)}
_ADMIN_ERRORS = {**_ERRORS, 403: {"model": ErrorResponse, "description": "The key is not an admin key."}}
_NOT_FOUND = {404: {"model": ErrorResponse, "description": "No server of that name is available to the caller."}}

ServerName = PathParam(min_length=1, max_length=MAX_NAME_CHARS, description="Server name (URL-encoded).",
                       examples=["GitHub"])


class ServiceState:
    """Per-app state: status, engine, scorer status and the limiter for pipeline calls."""

    def __init__(self, settings: Settings, tenants: Tenants | None, metrics: Metrics):
        self.settings = settings
        self.tenants = tenants
        self.metrics = metrics
        self.status = "loading"
        self.detail = "loading the index and the model"
        self.engine: Engine | None = None
        self.scorer: dict[str, Any] = {}
        self._limiter: anyio.CapacityLimiter | None = None

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.settings.max_concurrency)
        return self._limiter

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run blocking pipeline work in a thread, at most ``max_concurrency`` at once."""
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), limiter=self.limiter)


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
        store = IndexStore(root, load, keep=state.settings.keep_versions)
    engine = Engine(store, make, seed)

    def on_swap(snap: Snapshot) -> None:
        state.metrics.index_version.set(snap.version)
        state.metrics.index_swaps.inc()

    engine.on_swap = on_swap
    engine.start()
    for tenant in state.tenants.all() if state.tenants is not None else ():
        try:
            _policy(engine.snapshot.pipeline, tenant)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"tenant {tenant.name!r}: policy overrides {tenant.policy} do not fit the "
                             f"pipeline's policy: {exc}; fix the tenants file") from None
    state.scorer = scorer
    state.engine = engine
    state.status = "ready"
    state.detail = "" if scorer.get("loaded") else str(scorer.get("detail", "no scorer model loaded"))


# ------------------------------------------------------------------ the app


def create_app(settings: Settings | None = None, *, pipeline: Any | None = None,
               tenants: Tenants | None = None) -> FastAPI:
    """Build the service.

    Args:
        settings: the service settings; read from ``TOOLRANK_*`` environment variables when None.
        pipeline: an object with ``search``, ``score``, ``model_info`` and an ``index`` (with
            ``catalog``, ``upsert_server``, ``remove_server``, ``save``, ``load``). When None the
            lifespan builds the real ``retrieval.pipeline.Pipeline``.
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
            except Exception:
                log.exception("start-up failed: the service stays unready")
                state.status, state.detail = "failed", "the index or the model failed to load; see the server log"

        async def poll() -> None:
            while True:
                await asyncio.sleep(settings.poll_interval_s)
                if state.engine is None:
                    continue
                try:
                    await anyio.to_thread.run_sync(state.engine.refresh)
                except Exception:
                    log.warning("could not pick up a newer index version; retrying", exc_info=True)

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
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
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
              summary="Probability that each candidate tool fits the request")
    async def score(body: ScoreRequest, tenant: Tenant = Depends(tenant_of),
                    snap: Snapshot = Depends(snapshot_of)) -> ScoreResponse:
        if not state.scorer.get("loaded", False):
            raise ServiceError(503, "no_scorer", "no scorer model is loaded on this service; start it with --model DIR")
        tools = [Tool(c.server, c.name, c.description) for c in body.candidates]
        probs = await state.run(snap.pipeline.score, body.request, body.need, tools)
        probs = [float(p) for p in probs]
        if len(probs) != len(tools) or any(not 0.0 <= p <= 1.0 for p in probs):
            raise RuntimeError(f"scorer returned {len(probs)} values for {len(tools)} candidates, or values outside [0, 1]")
        return ScoreResponse(scores=[CandidateScore(id=c.id, probability=p) for c, p in zip(body.candidates, probs)],
                             model=ModelInfo(**_model_info(snap.pipeline)))

    @app.post("/v1/search", response_model=SearchResponse, responses=_ERRORS, tags=["ranking"],
              summary="The caller's tools that fit the request, ranked, with a decision")
    async def search(body: SearchRequest, tenant: Tenant = Depends(tenant_of),
                     snap: Snapshot = Depends(snapshot_of)) -> SearchResponse:
        pipeline = snap.pipeline
        result = await state.run(
            pipeline.search, body.request, body.need,
            eligible=tenant.eligibility, previous=_previous(body.previous, tenant), k=body.k,
            explain=body.explain, fmt=body.format, policy=_policy(pipeline, tenant))
        result = _visible_result(result, tenant, snap)
        metrics.decisions.labels(result.decision).inc()
        return _search_response(result, snap, body.explain)

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
        return ServerList(servers=servers, index_version=snap.version)

    @app.get("/v1/servers/{name}", response_model=ServerDetail, responses={**_READ_ERRORS, **_NOT_FOUND},
             tags=["catalog"], summary="One of the caller's servers, with its tools")
    async def get_server(name: str = ServerName, tenant: Tenant = Depends(tenant_of),
                         snap: Snapshot = Depends(snapshot_of)) -> ServerDetail:
        catalog = snap.catalog
        tools = [t for t in catalog.server_tools(name) if tenant.sees_tool(t.id)] if tenant.sees_server(name) else []
        if not tools:
            raise _no_such_server(name)
        return ServerDetail(name=name, description=catalog.server_descriptions.get(name, ""),
                            tools=[{"name": t.name, "description": t.description, "inputSchema": t.input_schema}
                                   for t in tools],
                            index_version=snap.version)

    @app.put("/v1/servers/{name}", response_model=ServerChange, tags=["catalog"],
             responses={**_ADMIN_ERRORS, 201: {"model": ServerChange, "description": "The server was new."}},
             summary="Add or replace a server from its MCP tools/list result (admin)",
             description="Only tools whose text changed are embedded again. The change is saved as a new "
                         "index version; every worker serves it within the pick-up bound.")
    async def put_server(body: ServerUpdate, response: Response, name: str = ServerName,
                         tenant: Tenant = Depends(admin_of), engine: Engine = Depends(engine_of)) -> ServerChange:
        if not name.strip() or "/" in name:
            raise ServiceError(422, "invalid_server_name", f"server name {name!r} must be non-blank and contain no '/'")
        where = f"PUT /v1/servers/{name}"
        try:
            tools = tools_from_mcp_list(name, body.description, {"tools": [t.model_dump() for t in body.tools]}, where)
        except CatalogError as exc:
            raise ServiceError(422, "invalid_catalog", str(exc)) from None
        names = [t.name for t in tools]
        dup = next((n for i, n in enumerate(names) if n in names[:i]), None)
        if dup is not None:
            raise ServiceError(422, "invalid_catalog", f"{where}: tool name {dup!r} appears twice in 'tools'; "
                               "tool names must be unique on a server")
        unknown = sorted(set(body.examples or {}) - set(names))
        if unknown:
            raise ServiceError(422, "invalid_catalog", f"{where}: 'examples' names {unknown[0]!r}, which is not in "
                               "'tools'; key examples by the names of the tools you send")
        try:
            outcome = await anyio.to_thread.run_sync(engine.upsert_server, name, body.description, tools, body.examples)
        except CatalogError as exc:
            raise ServiceError(422, "invalid_catalog", str(exc)) from None
        metrics.catalog_updates.labels("upsert").inc()
        response.status_code = 201 if outcome.created else 200
        return ServerChange(name=name, created=outcome.created, changed=outcome.changed, tools=outcome.tools,
                            re_embedded=outcome.re_embedded, index_version=outcome.version)

    @app.delete("/v1/servers/{name}", response_model=ServerChange,
                responses={**{k: v for k, v in _ADMIN_ERRORS.items() if k != 413}, **_NOT_FOUND},
                tags=["catalog"], summary="Remove a server and its tools (admin)")
    async def delete_server(name: str = ServerName, tenant: Tenant = Depends(admin_of),
                            engine: Engine = Depends(engine_of)) -> ServerChange:
        outcome = await anyio.to_thread.run_sync(engine.remove_server, name)
        if not outcome.changed:
            raise _no_such_server(name)
        metrics.catalog_updates.labels("delete").inc()
        return ServerChange(name=name, changed=True, tools=outcome.tools, index_version=outcome.version)

    # -------------------------------------------------------------- probes

    @app.get("/healthz", response_model=Health, tags=["probes"], summary="The process is alive")
    async def healthz() -> JSONResponse:
        if state.status == "failed":
            return JSONResponse({"status": "failed"}, status_code=500)
        return JSONResponse({"status": "ok"})

    @app.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}}, tags=["probes"],
             summary="Index and model loaded (503 until then)")
    async def readyz() -> JSONResponse:
        ready = state.engine is not None
        body = Readiness(ready=ready, status=state.status,
                         index_version=state.engine.snapshot.version if ready else None,
                         scorer=state.scorer, detail=state.detail)
        return JSONResponse(body.model_dump(), status_code=200 if ready else 503)

    @app.get("/metrics", tags=["probes"], summary="Prometheus metrics",
             response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return app


# ------------------------------------------------------------------ helpers


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


def _search_response(result: SearchResult, snap: Snapshot, explain: bool) -> SearchResponse:
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
        index_version=snap.version,
        model=ModelInfo(**_model_info(snap.pipeline)),
    )
