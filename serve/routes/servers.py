"""The catalog: ``GET /v1/servers[/{name}]`` (the caller's servers) and ``PUT`` / ``DELETE
/v1/servers/{name}`` (admin: add, replace or remove a server, saved as a new index version)."""

from __future__ import annotations

import logging
import unicodedata
from typing import Any, Callable

import anyio
from fastapi import APIRouter, Query, Response

from retrieval.catalog.formats import tools_from_mcp_list
from retrieval.catalog.model import CatalogError
from retrieval.catalog.rules import check_name
from retrieval.jsonl import round_trips

from ..calibration import keep_calibrated
from ..deps import AdminTenant, AppState, CallerTenant, ServedSnapshot, ServingEngine
from ..errors import ServiceError
from ..schemas import ServerChange, ServerDetail, ServerList, ServerSummary, ServerUpdate
from .common import ADMIN_ERRORS, ERRORS, NOT_FOUND, READ_ERRORS, ServerName, view_version, write_to_store

__all__ = ["router"]

log = logging.getLogger(__name__)

router = APIRouter()


@router.get("/v1/servers", response_model=ServerList, responses={k: v for k, v in ERRORS.items() if k in (401, 503)},
            tags=["catalog"], summary="The caller's servers (every server for an admin)")
async def list_servers(tenant: CallerTenant, snap: ServedSnapshot) -> ServerList:
    catalog = snap.catalog
    counts: dict[str, int] = {}
    for t in catalog.tools:
        if tenant.sees_tool(t.id):
            counts[t.server] = counts.get(t.server, 0) + 1
    servers = [ServerSummary(name=s, description=catalog.server_descriptions.get(s, ""), tools=counts.get(s, 0))
               for s in catalog.servers if tenant.sees_server(s)]
    return ServerList(servers=servers, index_version=await view_version(snap, tenant))


@router.get("/v1/servers/{name}", response_model=ServerDetail, responses={**READ_ERRORS, **NOT_FOUND},
            tags=["catalog"], summary="One of the caller's servers, with its tools")
async def get_server(tenant: CallerTenant, snap: ServedSnapshot, name: str = ServerName) -> ServerDetail:
    catalog = snap.catalog
    found = _stored_name(name, catalog)
    tools = [t for t in catalog.server_tools(found) if tenant.sees_tool(t.id)] if tenant.sees_server(found) else []
    if not tools:
        raise _no_such_server(name)
    return ServerDetail(name=found, description=catalog.server_descriptions.get(found, ""),
                        tools=[{"name": t.name, "description": t.description, "inputSchema": t.input_schema}
                               for t in tools],
                        index_version=await view_version(snap, tenant))


@router.put("/v1/servers/{name}", response_model=ServerChange, tags=["catalog"], response_model_exclude_none=True,
            responses={**ADMIN_ERRORS, 201: {"model": ServerChange, "description": "The server was new."}},
            summary="Add or replace a server from its MCP tools/list result (admin)",
            description="Only tools whose text changed are embedded again. The change is saved as a new "
                        "index version; every worker serves it within the pick-up bound.")
async def put_server(body: ServerUpdate, response: Response, state: AppState, tenant: AdminTenant,
                     engine: ServingEngine, name: str = ServerName,
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
        from ..usage import written_examples
        examples, note = await anyio.to_thread.run_sync(written_examples, state.settings, name, body.description,
                                                        tools, examples)
    try:
        outcome = await _write(engine.upsert_server, name, body.description, tools, examples)
    except CatalogError as exc:
        raise ServiceError(422, "invalid_catalog", str(exc)) from None
    state.metrics.catalog_updates.labels("upsert").inc()
    if outcome.changed:
        await anyio.to_thread.run_sync(keep_calibrated, state, engine, "a catalog change")
    response.status_code = 201 if outcome.created else 200
    return ServerChange(name=name, created=outcome.created, changed=outcome.changed, tools=outcome.tools,
                        re_embedded=outcome.re_embedded, index_version=outcome.version, examples_note=note)


@router.delete("/v1/servers/{name}", response_model=ServerChange,
               responses={**{k: v for k, v in ADMIN_ERRORS.items() if k != 413}, **NOT_FOUND},
               tags=["catalog"], summary="Remove a server and its tools (admin)")
async def delete_server(state: AppState, tenant: AdminTenant, engine: ServingEngine,
                        name: str = ServerName) -> ServerChange:
    outcome = await _write(engine.remove_server, _stored_name(name, engine.snapshot.catalog))
    if not outcome.changed:
        raise _no_such_server(name)
    state.metrics.catalog_updates.labels("delete").inc()
    await anyio.to_thread.run_sync(keep_calibrated, state, engine, "a catalog change")
    return ServerChange(name=name, changed=True, tools=outcome.tools, index_version=outcome.version)


async def _write(change: Callable[..., Any], *args: Any) -> Any:
    """A catalog change through :func:`write_to_store` (507 on a full disk, 405 on a read-only store)."""
    return await write_to_store(change, *args, what="the catalog change")


def _stored_name(name: str, catalog: Any) -> str:
    """The server a path names: as given, or its NFC form (names are stored NFC-normalised)."""
    if name in catalog.server_descriptions:
        return name
    return unicodedata.normalize("NFC", name)


def _no_such_server(name: str) -> ServiceError:
    # Exactly the same answer for a server that does not exist and one the caller may not see.
    return ServiceError(404, "server_not_found", f"no server named {name!r} is available to you; "
                        "GET /v1/servers lists yours")
