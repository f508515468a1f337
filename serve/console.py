"""The operator console at ``/ui``: try a request as a tenant, see why tools rank, the tenant's catalog
and examples, how calibrated the answers were in real use, and (admins) the service's state.

Server-rendered (Jinja2 with autoescape; no build step, no CDN, no script): every page is plain HTML
and a stylesheet shipped in the wheel. The same API keys and tenant rules as the API: the key is
given once on ``/ui/login`` and kept in an HttpOnly, SameSite=Strict cookie (never in a URL or a log);
every page resolves the tenant from it, and every catalog string is escaped and has its control and
bidirectional characters shown as ``⟨U+XXXX⟩`` so a hostile description renders inert. Every answer
carries a strict Content-Security-Policy. Off with ``TOOLRANK_UI=0``.
"""

from __future__ import annotations

import functools
import json
import math
import time
import unicodedata
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from .deps import snapshot_of, state_of
from .errors import ServiceError
from .tenants import DEV_TENANT, Tenant

__all__ = ["router", "COOKIE", "SECURITY_HEADERS"]

HERE = Path(__file__).resolve().parent
COOKIE = "toolrank_key"
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
router = APIRouter(include_in_schema=False)
_ENV: Any = None


def inert(value: Any) -> str:
    """Text with control, format (bidi) and line/paragraph-separator characters made visible: what a
    hostile tool description can hide or reorder is shown as ``⟨U+XXXX⟩`` (autoescape does the rest)."""
    text = "" if value is None else str(value)
    out = []
    for ch in text:
        cat = unicodedata.category(ch)
        if (cat in ("Cc", "Cf", "Zl", "Zp", "Co", "Cs") and ch not in "\n\t") or ch == "\u2028":
            out.append(f"⟨U+{ord(ch):04X}⟩")
        else:
            out.append(ch)
    return "".join(out)


def _env() -> Any:
    global _ENV
    if _ENV is None:
        import jinja2

        _ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE / "templates")),
                                  autoescape=jinja2.select_autoescape(["html"], default=True),
                                  undefined=jinja2.StrictUndefined)
        _ENV.filters["inert"] = inert
        _ENV.filters["pct"] = lambda p: "" if p is None else f"{100 * float(p):.1f}%"
        _ENV.filters["tojson_pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False, default=str)
    return _ENV


def _page(name: str, request: Request, status: int = 200, headers: dict[str, str] | None = None,
          **context: Any) -> HTMLResponse:
    html = _env().get_template(name).render(path=request.url.path, **context)
    return HTMLResponse(html, status_code=status, headers={**SECURITY_HEADERS, **(headers or {})})


def _tenant(request: Request) -> Tenant | None:
    """The tenant of the console's cookie (None: log in first)."""
    state = state_of(request)
    if state.settings.auth_disabled:
        return DEV_TENANT
    key = request.cookies.get(COOKIE)
    if not key or state.tenants is None:
        return None
    return state.tenants.authenticate(key)


def _as(request: Request, tenant: Tenant, name: str | None) -> Tenant:
    """An admin may look as another tenant; anyone else is always themselves."""
    state = state_of(request)
    if not name or name == tenant.name or not tenant.admin or state.tenants is None:
        return tenant
    found = next((t for t in state.tenants.all() if t.name == name), None)
    if found is None:
        raise ServiceError(404, "unknown_tenant", f"no tenant named {name!r}")
    return found


def _viewer(request: Request, as_tenant: str = "") -> tuple[Tenant, Tenant] | None:
    """(the logged-in tenant, the tenant looked at: itself, or for an admin any tenant); None: log in first."""
    tenant = _tenant(request)
    return None if tenant is None else (tenant, _as(request, tenant, as_tenant))


def _login_redirect() -> RedirectResponse:
    return RedirectResponse("/ui/login", status_code=303, headers=SECURITY_HEADERS)


def _common(request: Request, tenant: Tenant) -> dict[str, Any]:
    state = state_of(request)
    names = sorted(t.name for t in state.tenants.all()) if tenant.admin and state.tenants is not None else []
    return {"tenant": tenant, "tenant_names": names, "auth": not state.settings.auth_disabled}


# ------------------------------------------------------------------ log in / out


@router.get("/ui", response_class=HTMLResponse)
async def home(request: Request) -> Response:
    return RedirectResponse("/ui/search", status_code=303, headers=SECURITY_HEADERS)


@router.get("/ui/login", response_class=HTMLResponse)
async def login_form(request: Request) -> Response:
    return _page("login.html", request, error=None)


@router.post("/ui/login", response_class=HTMLResponse)
async def login(request: Request, key: str = Form("", max_length=500)) -> Response:
    state = state_of(request)
    found = state.tenants.authenticate(key.strip()) if key.strip() and state.tenants is not None else None
    if found is None and not state.settings.auth_disabled:
        return _page("login.html", request, status=401, error="That key is not valid.")
    out = RedirectResponse("/ui/search", status_code=303, headers=SECURITY_HEADERS)
    out.set_cookie(COOKIE, key.strip(), httponly=True, samesite="strict", path="/ui",
                   secure=request.url.scheme == "https", max_age=8 * 3600)
    return out


@router.post("/ui/logout", response_class=HTMLResponse)
async def logout(request: Request) -> Response:
    out = _login_redirect()
    out.delete_cookie(COOKIE, path="/ui")
    return out


# ------------------------------------------------------------------ try a request


@router.get("/ui/search", response_class=HTMLResponse)
async def search_form(request: Request) -> Response:
    tenant = _tenant(request)
    if tenant is None:
        return _login_redirect()
    return _page("search.html", request, **_common(request, tenant), form={}, answer=None, error=None, seconds=None)


@router.post("/ui/search", response_class=HTMLResponse)
async def search_run(request: Request, req: str = Form("", alias="request", max_length=4000),
                     need: str = Form("", max_length=1000), k: int = Form(5, ge=1, le=50),
                     as_tenant: str = Form("", max_length=200)) -> Response:
    viewer = _viewer(request, as_tenant)
    if viewer is None:
        return _login_redirect()
    tenant, who = viewer
    state = state_of(request)
    form = {"request": req, "need": need, "k": k, "as_tenant": who.name}
    if not req.strip():
        return _page("search.html", request, status=422, **_common(request, tenant), form=form, answer=None,
                     error="Write a request.", seconds=None)
    from .routes.ranking import _search_response, _visible_result, tenant_policy
    from retrieval.pipeline.definitions import definition

    snap = snapshot_of(state)
    learned = state.usage.learned(who.name) if who.learn_from_use else None
    t0 = time.perf_counter()
    result = await state.run(request, snap.pipeline.search, req, need.strip() or None, eligible=who.eligibility,
                             k=k, explain=True, fmt="mcp", policy=tenant_policy(snap.pipeline, who),
                             **({"learned": learned} if learned else {}))
    seconds = time.perf_counter() - t0
    result = _visible_result(result, who, snap)
    from .routes.common import view_version

    answer = _search_response(result, snap, True, await view_version(snap, who))
    catalog = snap.catalog
    formats = {}
    for t in answer.tools:
        tool = catalog.get((t.server, t.tool))
        if tool is not None:
            formats[(t.server, t.tool)] = {f: definition(tool, f) for f in ("mcp", "openai", "anthropic")}
    return _page("search.html", request, **_common(request, tenant), form=form, answer=answer, formats=formats,
                 error=None, seconds=seconds, headers={"Server-Timing": f"search;dur={1000 * seconds:.1f}"})


# ------------------------------------------------------------------ the tenant's catalog


def _visible_servers(snap: Any, who: Tenant) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in snap.catalog:
        if who.eligibility.allows(t.id):
            counts[t.server] = counts.get(t.server, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: kv[0].lower()))


@router.get("/ui/catalog", response_class=HTMLResponse)
async def catalog_page(request: Request, as_tenant: str = "") -> Response:
    viewer = _viewer(request, as_tenant)
    if viewer is None:
        return _login_redirect()
    tenant, who = viewer
    state = state_of(request)
    snap = snapshot_of(state)
    learned = state.usage.learned(who.name)
    learned_by_server: dict[str, int] = {}
    for tid in (learned or {}):
        if who.eligibility.allows(tid):
            learned_by_server[tid.server] = learned_by_server.get(tid.server, 0) + len(learned[tid])
    return _page("catalog.html", request, **_common(request, tenant), who=who, servers=_visible_servers(snap, who),
                 learned=learned_by_server, version=snap.version)


@router.get("/ui/catalog/{server}", response_class=HTMLResponse)
async def server_page(request: Request, server: str, as_tenant: str = "") -> Response:
    viewer = _viewer(request, as_tenant)
    if viewer is None:
        return _login_redirect()
    tenant, who = viewer
    state = state_of(request)
    snap = snapshot_of(state)
    tools = [t for t in snap.catalog if t.server == server and who.eligibility.allows(t.id)]
    if not tools:   # unknown and not yours read the same: nothing says whether it exists
        return _page("missing.html", request, status=404, **_common(request, tenant),
                     what="No server of that name in your catalog.")
    learned = state.usage.learned(who.name) or {}
    rows = [{"tool": t, "learned": list(learned.get(t.id, ()))} for t in tools]
    description = snap.catalog.server_descriptions.get(server, "")
    return _page("server.html", request, **_common(request, tenant), who=who, server=server,
                 description=description, rows=rows)


@router.post("/ui/examples/remove", response_class=HTMLResponse)
async def remove_example(request: Request, server: str = Form(..., max_length=300), tool: str = Form(..., max_length=300),
                         example: str = Form(..., max_length=4000), as_tenant: str = Form("", max_length=200)) -> Response:
    viewer = _viewer(request, as_tenant)
    if viewer is None:
        return _login_redirect()
    tenant, who = viewer
    from .routes.common import write_to_store

    state = state_of(request)
    if not who.eligibility.allows((server, tool)):
        return _page("missing.html", request, status=404, **_common(request, tenant),
                     what="No tool of that name in your catalog.")
    await write_to_store(state.usage.remove, who.name, (server, tool), example, what="the removal")
    suffix = f"?as_tenant={who.name}" if who.name != tenant.name else ""
    from urllib.parse import quote

    return RedirectResponse(f"/ui/catalog/{quote(server, safe='')}{suffix}", status_code=303, headers=SECURITY_HEADERS)


# ------------------------------------------------------------------ real-use calibration


def _reliability_svg(bins: list[dict[str, Any]], size: int = 260) -> dict[str, Any]:
    """Geometry of a reliability diagram (the template draws it as inline SVG: no script, no image file)."""
    pad = 30
    span = size - 2 * pad
    points = [{"x": pad + span * b["mean_probability"], "y": pad + span * (1 - b["called"]),
               "r": 2 + 6 * math.sqrt(b["n"] / max(1, max(x["n"] for x in bins))), "n": b["n"],
               "p": b["mean_probability"], "called": b["called"]} for b in bins]
    return {"size": size, "pad": pad, "span": span, "points": points}


@router.get("/ui/calibration", response_class=HTMLResponse)
async def calibration_page(request: Request, as_tenant: str = "") -> Response:
    viewer = _viewer(request, as_tenant)
    if viewer is None:
        return _login_redirect()
    tenant, who = viewer
    import anyio

    state = state_of(request)
    figures = await anyio.to_thread.run_sync(state.usage.use_calibration, who.name)
    from .audits import recalibration_state

    recal = await anyio.to_thread.run_sync(recalibration_state, state, who.name, who)
    recal["audit_share"] = state.settings.audit_share
    return _page("calibration.html", request, **_common(request, tenant), who=who, figures=figures, recal=recal,
                 svg=_reliability_svg(figures["bins"]) if figures["bins"] else None)


# ------------------------------------------------------------------ service state (admins)


def _admin(request: Request, what: str) -> Tenant | Response:
    """The logged-in admin, or the answer to give instead (log in first; a 403 page saying ``what``)."""
    tenant = _tenant(request)
    if tenant is None:
        return _login_redirect()
    if not tenant.admin:
        return _page("missing.html", request, status=403, **_common(request, tenant), what=what)
    return tenant


@router.get("/ui/service", response_class=HTMLResponse)
async def service_page(request: Request) -> Response:
    tenant = _admin(request, "The service page needs an admin key.")
    if isinstance(tenant, Response):
        return tenant
    state = state_of(request)
    settings = state.settings
    engine = state.engine
    info = {
        "status": state.status, "detail": state.detail, "notes": dict(state.notes),
        "index_version": engine.snapshot.version if engine is not None else None,
        "tools": len(engine.snapshot.catalog) if engine is not None else None,
        "model": dict(getattr(engine.snapshot.pipeline, "model_info", {}) or {}) if engine is not None else {},
        "scorer": dict(state.scorer),
        "limits": {k: getattr(settings, k) for k in ("max_concurrency", "max_queue", "max_queue_wait_s",
                                                    "request_timeout_s", "max_body_bytes", "read_only", "backend")},
        "queue": {"running": getattr(state.admission, "running", None), "waiting": getattr(state.admission, "waiting", None)},
        "tenants": len(state.tenants) if state.tenants is not None else 0,
    }
    import anyio

    calibration = await anyio.to_thread.run_sync(_calibration_info, state, engine) if engine is not None else None
    return _page("service.html", request, **_common(request, tenant), info=info, calibration=calibration,
                 calibrate_probes=settings.calibrate_probes)


def _calibration_info(state: Any, engine: Any) -> dict[str, Any]:
    """The catalog calibration in effect, and the last calibration job's record (``POST /v1/calibration``)."""
    from .calibration import jobs_to_read

    cal = getattr(engine.snapshot.pipeline, "catalog_calibration", None)
    jobs = jobs_to_read(state, engine)
    return {"in_effect": cal.to_dict() if cal is not None else None, "job": jobs.state() if jobs is not None else None}


@router.post("/ui/calibration/{action}", response_class=HTMLResponse)
async def calibration_action(request: Request, action: str) -> Response:
    """Start or stop the served catalog's calibration (admins; what POST / DELETE /v1/calibration do)."""
    tenant = _admin(request, "Calibrating the catalog needs an admin key.")
    if isinstance(tenant, Response):
        return tenant
    if action not in ("start", "stop"):
        return _page("missing.html", request, status=404, **_common(request, tenant), what="No such action.")
    from retrieval.writing.llm import GenerationError

    from .calibration import CalibrationRunning, jobs_of
    from .routes.common import write_to_store

    state = state_of(request)
    engine = state.engine
    jobs = jobs_of(state, engine) if engine is not None else None
    if jobs is None:
        return _page("missing.html", request, status=409, **_common(request, tenant),
                     what="This service cannot calibrate its catalog now (still loading, a read-only copy, or Qdrant).")
    if action == "stop":
        await write_to_store(jobs.request_stop, what="the stop request")
        return RedirectResponse("/ui/service", status_code=303, headers=SECURITY_HEADERS)
    try:
        await write_to_store(jobs.start, engine, state.settings.calibrate_probes, what="the calibration")
    except CalibrationRunning as exc:
        return _page("missing.html", request, status=409, **_common(request, tenant), what=f"{exc}.")
    except GenerationError as exc:   # no endpoint configured (TOOLRANK_LLM_*)
        return _page("missing.html", request, status=422, **_common(request, tenant),
                     what=f"A calibration needs an LLM endpoint on the service: {exc}")
    return RedirectResponse("/ui/service", status_code=303, headers=SECURITY_HEADERS)


@functools.cache
def static_css() -> bytes:
    """The stylesheet, read once (it ships in the wheel and never changes under a running service)."""
    return (HERE / "static" / "console.css").read_bytes()


@router.get("/ui/static/console.css")
async def css() -> Response:
    return Response(static_css(), media_type="text/css", headers={**SECURITY_HEADERS, "Cache-Control": "max-age=3600"})


