"""Probes and metrics: ``/healthz`` (alive), ``/readyz`` (index and model loaded) and ``/metrics``
(Prometheus; admin key unless ``metrics_public``)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from ..deps import AppState, is_admin, tenant_of
from ..errors import ServiceError
from ..metrics import CONTENT_TYPE_LATEST
from ..schemas import Health, Readiness
from .common import ADMIN_ERRORS, ERRORS

__all__ = ["router"]

router = APIRouter()


@router.get("/healthz", response_model=Health, tags=["probes"], summary="The process is alive")
async def healthz(state: AppState) -> JSONResponse:
    if state.status == "failed":
        return JSONResponse({"status": "failed"}, status_code=500)
    return JSONResponse({"status": "ok"})


@router.head("/healthz", include_in_schema=False)
async def healthz_head(state: AppState) -> Response:  # load balancers that probe with HEAD
    return Response(status_code=500 if state.status == "failed" else 200)


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}}, tags=["probes"],
            summary="Index and model loaded (503 until then)")
async def readyz(request: Request, state: AppState) -> JSONResponse:
    ready = state.engine is not None
    # The version number moves with every catalog change: only admins may watch it.
    admin = state.settings.auth_disabled or is_admin(request, state)
    parts = [state.detail] if state.detail else []
    if admin:  # fallbacks and background work name store versions
        parts += list(state.notes.values())
    detail = "; ".join(parts)
    cal = getattr(state.engine.snapshot.pipeline, "catalog_calibration", None) if ready and admin else None
    body = Readiness(ready=ready, status=state.status,
                     index_version=state.engine.snapshot.version if ready and admin else None,
                     scorer=state.scorer, catalog_calibration=cal.to_dict() if cal is not None else None,
                     audits=state.auditor.state() if admin and state.auditor is not None else None, detail=detail)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


@router.get("/metrics", tags=["probes"], summary="Prometheus metrics (admin key, unless metrics_public)",
            response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}},
                                                401: ERRORS[401], 403: ADMIN_ERRORS[403]})
async def prometheus(request: Request, state: AppState) -> Response:
    if not (state.settings.metrics_public or state.settings.auth_disabled) and not tenant_of(request, state).admin:
        # its counters show catalog activity: admins only
        raise ServiceError(403, "admin_required", "/metrics needs an admin API key (or metrics_public for a "
                           "scraper on a private network)")
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
