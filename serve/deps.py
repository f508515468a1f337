"""The routes' dependencies: the app's :class:`~serve.state.ServiceState`, the caller's tenant
(API key, rate limit), admin rights, and the snapshot or engine to serve from.

Each is a plain function of the request, so a route names what it needs in its signature
(``tenant: CallerTenant``) and FastAPI resolves it, once per request.
"""

from __future__ import annotations

import logging
import math
from typing import Annotated

from fastapi import Depends, Request

from .engine import Engine, Snapshot
from .errors import ServiceError
from .state import ServiceState
from .tenants import DEV_TENANT, Tenant

__all__ = ["state_of", "tenant_of", "admin_of", "snapshot_of", "engine_of", "presented_key", "is_admin",
           "AppState", "CallerTenant", "AdminTenant", "ServedSnapshot", "ServingEngine"]

log = logging.getLogger(__name__)


def state_of(request: Request) -> ServiceState:
    """The state of the app that is answering this request."""
    return request.app.state.toolrank


AppState = Annotated[ServiceState, Depends(state_of)]


def presented_key(request: Request) -> str | None:
    """The API key the request carries (``Authorization: Bearer`` or ``X-API-Key``), or None."""
    auth = request.headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    key = request.headers.get("x-api-key")
    return key.strip() if key and key.strip() else None


def is_admin(request: Request, state: ServiceState) -> bool:
    """Whether the request carries an admin key (probes take no key, but may be given one)."""
    key = presented_key(request)
    found = state.tenants.authenticate(key) if key and state.tenants is not None else None
    return found is not None and found.admin


def tenant_of(request: Request, state: AppState) -> Tenant:
    """The caller's tenant, from its API key (401 without a valid one), under its rate limit (429)."""
    if state.settings.auth_disabled:
        tenant = DEV_TENANT
    else:
        key = presented_key(request)
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
            state.metrics.rejections.labels("rate_limited").inc()
            raise ServiceError(429, "rate_limited", f"over this key's limit of {tenant.rate_per_s:g} requests a "
                               f"second; retry after {retry} s", headers={"Retry-After": str(retry)})
    return tenant


CallerTenant = Annotated[Tenant, Depends(tenant_of)]


def admin_of(tenant: CallerTenant) -> Tenant:
    """The caller's tenant, which must be an admin (403 otherwise)."""
    if not tenant.admin:
        raise ServiceError(403, "admin_required", "catalog changes need an admin API key")
    return tenant


AdminTenant = Annotated[Tenant, Depends(admin_of)]


def snapshot_of(state: AppState) -> Snapshot:
    """The snapshot to answer from (503 with Retry-After until the service is ready)."""
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


ServedSnapshot = Annotated[Snapshot, Depends(snapshot_of)]


def engine_of(state: AppState) -> Engine:
    """The engine, for catalog changes (503 until the service is ready)."""
    snapshot_of(state)
    assert state.engine is not None
    return state.engine


ServingEngine = Annotated[Engine, Depends(engine_of)]
