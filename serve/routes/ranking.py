"""``POST /v1/score`` and ``POST /v1/search``: the scorer alone, and the caller's tools that fit
a request with a decision."""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any

import anyio
from fastapi import APIRouter, Request

from retrieval.catalog.model import Tool, ToolId
from retrieval.pipeline.results import ScoredTool, SearchResult
from retrieval.pipeline.serialize import earlier_answer

from ..audits import recalibration_args
from ..deps import AppState, CallerTenant, ServedSnapshot
from ..engine import Snapshot, model_info
from ..errors import ServiceError
from ..schemas import (CandidateScore, ModelInfo, PreviousAttempt, ScoreRequest, ScoreResponse, SearchRequest,
                       SearchResponse, TokenFigures, ToolResult)
from ..tenants import Tenant
from .common import ERRORS, view_version

__all__ = ["router", "tenant_policy"]

log = logging.getLogger(__name__)

router = APIRouter()


@router.post("/v1/score", response_model=ScoreResponse, responses=ERRORS, tags=["ranking"],
             summary="The scorer's probability for each (request, candidate tool) pair, alone",
             description="`scorer_probability` is the cross-encoder's calibrated probability for each pair, with "
                         "no retrieval evidence: it is not the decision probability of /v1/search (named "
                         "`probability` there) and differs from it for the same tool.")
async def score(body: ScoreRequest, request: Request, state: AppState, tenant: CallerTenant,
                snap: ServedSnapshot) -> ScoreResponse:
    if not state.scorer.get("loaded", False):
        raise ServiceError(503, "no_scorer", "no scorer model is loaded on this service; start it with --model DIR")
    tools = [Tool(c.server, c.name, c.description) for c in body.candidates]
    probs = await state.run(request, snap.pipeline.score, body.request, body.need, tools)
    probs = [float(p) for p in probs]
    if len(probs) != len(tools) or any(not 0.0 <= p <= 1.0 for p in probs):
        raise RuntimeError(f"scorer returned {len(probs)} values for {len(tools)} candidates, or values outside [0, 1]")
    return ScoreResponse(scores=[CandidateScore(id=c.id, scorer_probability=p) for c, p in zip(body.candidates, probs)],
                         model=ModelInfo(**model_info(snap.pipeline)))


@router.post("/v1/search", response_model=SearchResponse, responses=ERRORS, tags=["ranking"],
             summary="The caller's tools that fit the request, ranked, with a decision")
async def search(body: SearchRequest, request: Request, state: AppState, tenant: CallerTenant,
                 snap: ServedSnapshot) -> SearchResponse:
    pipeline = snap.pipeline
    learned = state.usage.learned(tenant.name) if tenant.learn_from_use else None
    # a refit reads the tenant's feedback log and audits: in a thread, never on the event loop
    asked = recalibration_args(state.settings, tenant, pipeline)
    recalibration = None
    if asked is not None:
        try:
            recalibration = await anyio.to_thread.run_sync(functools.partial(
                state.usage.recalibration, tenant.name, state.settings.use_recalibration_min,
                state.settings.use_recalibration_refit_s, **asked))
        except Exception:   # the evidence unreadable: the search goes on with the catalog's own numbers
            log.warning("tenant %r: its recalibration could not be read; searching without it", tenant.name,
                        exc_info=True)
    result = await state.run(
        request, pipeline.search, body.request, body.need,
        eligible=tenant.eligibility, previous=_previous(body.previous, tenant, body.legacy_decisions), k=body.k,
        explain=body.explain, fmt=body.format, policy=tenant_policy(pipeline, tenant),
        **({"learned": learned} if learned else {}),
        **({"recalibration": recalibration} if recalibration is not None else {}))
    result = _visible_result(result, tenant, snap)
    state.metrics.decisions.labels(result.decision).inc()
    request_id = getattr(request.state, "request_id", None)
    state.usage.offered(tenant.name, request_id, body.request, body.need, [t.tool_id for t in result.tools],
                        decision=result.decision, probabilities=[t.probability for t in result.tools],
                        raw_best=result.raw_best)
    if state.auditor is not None:   # drawn by request id, judged after the answer went out
        state.auditor.offer(tenant, request_id, body.request, result, snap.catalog, snap.version,
                            getattr(pipeline, "model_key", None))
    response = _search_response(result, snap, body.explain, await view_version(snap, tenant))
    response.request_id = request_id
    response.recalibrated_from = recalibration.observations if recalibration is not None else None
    if body.legacy_decisions and response.decision == "choose":   # 0.6 clients know three decisions
        response.decision = "proceed"
    return response


def tenant_policy(pipeline: Any, tenant: Tenant) -> Any | None:
    """The pipeline's policy with the tenant's overrides, or None (the pipeline's own) without any.

    Raises:
        TypeError, ValueError: the overrides do not fit the pipeline's policy.
    """
    if not tenant.policy:
        return None
    base = getattr(pipeline, "policy", None)
    if base is None:
        log.warning("tenant %r has policy overrides but the pipeline exposes no .policy; using its defaults",
                    tenant.name)
        return None
    if hasattr(base, "with_overrides"):
        return base.with_overrides(**tenant.policy)
    return dataclasses.replace(base, **tenant.policy)


def _previous(previous: PreviousAttempt | None, tenant: Tenant, legacy: bool = False) -> SearchResult | None:
    """The earlier answer a client sent back, its tools kept to what the tenant may use. A client that asks for
    0.6's decisions keeps 0.12's second search: no earlier tools, so nothing under the floor comes back (its
    ``choose`` would read as ``proceed``)."""
    if previous is None:
        return None
    tools = [ScoredTool(ToolId(r.server, r.tool), float(r.probability or 0.0), i + 1, r.source or "ranked")
             for i, r in enumerate(previous.tools) if not legacy and tenant.eligibility.allows((r.server, r.tool))]
    return earlier_answer(previous.decision, previous.attempt, tools)


_GENERIC_MESSAGES = {
    "proceed": "Proceed with these tools.",
    "search_again": "No tool clearly fits. Search again with a more specific need, passing this result (attempt, decision, tools with their probabilities) as `previous`.",
    "choose": "These tools may fit but none clearly does: read their definitions and pick one, or ask the user.",
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
    tail = tuple(row for row in result.tail if tenant.eligibility.allows(row[0]))   # what an audit may draw
    if len(tools) == len(result.tools) and suggestions == result.suggestions and restricted == result.restricted_to:
        return result if len(tail) == len(result.tail) else dataclasses.replace(result, tail=tail)
    log.warning("search result named servers or tools outside tenant %r's eligibility; removed them", tenant.name)
    # the first tool left decides, as in the pipeline (the order puts the read candidates first)
    best = result.best_probability if len(tools) == len(result.tools) else next((t.probability for t in tools), 0.0)
    return dataclasses.replace(result, tools=tools, suggestions=suggestions, restricted_to=restricted, tail=tail,
                               best_probability=best, message=_GENERIC_MESSAGES.get(result.decision, ""),
                               raw_best=result.raw_best if len(tools) == len(result.tools) else None)


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
        model=ModelInfo(**model_info(snap.pipeline)),
    )
