"""Learning from use: ``POST /v1/feedback`` and ``GET`` / ``DELETE /v1/examples[/{server}/{tool}]``
(docs/day-one.md)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from retrieval.index.learned import LearnedExamples, tenant_vector

from ..deps import AppState, CallerTenant, ServedSnapshot
from ..errors import ServiceError
from .common import write_to_store
from ..usage import (FeedbackRequest, FeedbackResponse, LearnedExampleOut, LearnedList, LearnedTool, Removed,
                     UseCalibration)

__all__ = ["router"]

router = APIRouter()


def _learning(tenant: Any) -> bool:
    return bool(getattr(tenant, "learn_from_use", True))


@router.post("/v1/feedback", response_model=FeedbackResponse, tags=["learning"],
             summary="Which tool the agent called for a search, and whether it worked",
             description="A successful call to a tool that the search offered makes the search's request an "
                         "example request of that tool, for the caller only. Failed calls and tools that were "
                         "not offered are recorded, not learned from.")
async def feedback(body: FeedbackRequest, state: AppState, tenant: CallerTenant,
                   snap: ServedSnapshot) -> FeedbackResponse:
    book = state.usage
    offer = book.offer(tenant.name, body.request_id)
    if offer is None:
        raise ServiceError(404, "unknown_request_id",
                           f"no search of yours with request_id {body.request_id!r} in the last "
                           f"{book.offer_ttl_s / 60:g} minutes; send feedback for a recent "
                           "/v1/search answer, quoting its request_id")
    outcome = await write_to_store(
        lambda: book.feedback(tenant.name, offer, body.request_id, (body.server, body.tool),
                              body.outcome == "success", learn=_learning(tenant), error=body.error,
                              vectorize=lambda t, reqs: tenant_vector(snap.index, t, reqs)),
        what="the feedback")
    return FeedbackResponse(learned=outcome.learned, reason=outcome.reason, examples=outcome.examples)


@router.get("/v1/examples", response_model=LearnedList, tags=["learning"],
            summary="The example requests learned from your use")
async def list_examples(state: AppState, tenant: CallerTenant) -> LearnedList:
    learned = state.usage.learned(tenant.name) or LearnedExamples()
    tools = [LearnedTool(server=t.server, tool=t.tool, examples=[LearnedExampleOut(**e.to_dict()) for e in ex])
             for t, ex in sorted(learned.items()) if tenant.sees_tool(t)]
    return LearnedList(learning=_learning(tenant), tools=tools)


@router.get("/v1/metrics/use", response_model=UseCalibration, tags=["learning"],
            summary="How calibrated the answers were in real use: reliability and decisions from your feedback",
            description="From the feedback on your searches: for each successful call to an offered tool, every "
                        "tool that search offered with the probability it had (1 for the tool called, 0 for the "
                        "others), binned; the expected calibration error; searches and successful calls per "
                        "day and decision; and the recalibration from use this feedback supports. Admins may ask "
                        "for another tenant with ?tenant=.")
async def use_calibration(state: AppState, tenant: CallerTenant,
                          of: str | None = Query(None, alias="tenant", max_length=200)) -> UseCalibration:
    name = tenant.name
    if of is not None and of != tenant.name:
        if not tenant.admin:
            raise ServiceError(403, "admin_required", "only an admin key may read another tenant's figures")
        name = of
    import anyio

    figures = await anyio.to_thread.run_sync(state.usage.use_calibration, name)
    from ..audits import recalibration_state

    figures["recalibration"] = await anyio.to_thread.run_sync(recalibration_state, state, name, tenant)
    return UseCalibration(**figures)


@router.delete("/v1/examples", response_model=Removed, tags=["learning"],
               summary="Forget every example request learned from your use")
async def delete_all(state: AppState, tenant: CallerTenant) -> Removed:
    return Removed(removed=await write_to_store(state.usage.remove, tenant.name, what="the removal"))


@router.delete("/v1/examples/{server}/{tool}", response_model=Removed, tags=["learning"],
               summary="Forget a tool's learned example requests (one, with ?request=)")
async def delete_tool(server: str, tool: str, state: AppState, tenant: CallerTenant,
                      request: str | None = Query(None, max_length=2000)) -> Removed:
    n = await write_to_store(state.usage.remove, tenant.name, (server, tool), request, what="the removal")
    if not n:
        raise ServiceError(404, "no_learned_examples",
                           f"you have no learned example requests for {server!r} / {tool!r}"
                           + (" matching that request" if request else "") + "; GET /v1/examples lists them")
    return Removed(removed=n)
