"""The served catalog's own calibration: ``POST /v1/calibration`` starts it in the background (admin),
``GET /v1/calibration`` says how it goes, ``DELETE /v1/calibration`` stops it (admin). See
:mod:`serve.calibration`."""

from __future__ import annotations

import anyio
from fastapi import APIRouter, Response

from retrieval.writing.llm import GenerationError

from ..calibration import CalibrationJobs, CalibrationRunning, jobs_of, jobs_to_read
from ..deps import AdminTenant, AppState, ServedSnapshot, ServingEngine
from ..errors import ServiceError
from ..schemas import CalibrationJob, CalibrationRequest, ErrorResponse
from .common import ADMIN_ERRORS, write_to_store

__all__ = ["router"]

router = APIRouter()

_RUNNING = {409: {"model": ErrorResponse, "description": "A calibration of this catalog is already running."},
            501: {"model": ErrorResponse, "description": "This index backend cannot carry a calibration (Qdrant)."}}
_DESCRIPTION = (
    "The LLM endpoint the service writes example requests with (`TOOLRANK_LLM_*`) writes one request for each of "
    "up to `probes` of the catalog's tools and a one-line need from each request alone; each is searched with and "
    "without its need and first tools that are not the probe's own are judged; one map of the probabilities is "
    "fitted and saved with the served index as a new version (decisions do not change: the zone thresholds move "
    "with the probabilities). It runs in the background (a few minutes for 100 probes; the searches share this "
    "worker's CPU); poll `GET /v1/calibration`. A catalog change drops the calibration: calibrate again after "
    "one (docs/day-one.md).")


def _jobs(state: AppState, engine: ServingEngine) -> CalibrationJobs:
    jobs = jobs_of(state, engine)
    if jobs is not None:
        return jobs
    if getattr(engine.store, "read_only", False) and getattr(engine.store, "root", None) is not None:
        raise ServiceError(405, "read_only_store", "this service serves a read-only copy of the index: the "
                           "calibration could not be saved; send it to a writable instance",
                           headers={"Allow": "GET, HEAD"})
    raise ServiceError(501, "calibration_unsupported", "this index backend cannot carry a catalog calibration "
                       "(Qdrant): calibrate an embedded index (`toolrank index --calibrate`) or serve one")


def _answer(job: dict, snap: ServedSnapshot) -> CalibrationJob:
    cal = getattr(snap.pipeline, "catalog_calibration", None)
    known = set(CalibrationJob.model_fields)
    return CalibrationJob(**{k: v for k, v in job.items() if k in known},
                          catalog_calibration=cal.to_dict() if cal is not None else None)


@router.post("/v1/calibration", response_model=CalibrationJob, status_code=202, tags=["catalog"],
             responses={**ADMIN_ERRORS, **_RUNNING},
             summary="Calibrate the served catalog's probabilities from requests written for its tools (admin)",
             description=_DESCRIPTION)
async def start_calibration(state: AppState, tenant: AdminTenant, engine: ServingEngine, snap: ServedSnapshot,
                            response: Response, body: CalibrationRequest | None = None) -> CalibrationJob:
    jobs = _jobs(state, engine)
    try:
        job = await write_to_store(jobs.start, engine, (body or CalibrationRequest()).probes, what="the calibration")
    except CalibrationRunning as exc:
        raise ServiceError(409, "calibration_running", f"{exc}; GET /v1/calibration says how it goes") from None
    except GenerationError as exc:   # no endpoint configured (TOOLRANK_LLM_*)
        raise ServiceError(422, "calibration_unavailable",
                           f"a calibration needs an LLM endpoint on the service: {exc}") from None
    response.headers["Location"] = "/v1/calibration"
    return _answer(job, snap)


_READ_ERRORS = {k: v for k, v in ADMIN_ERRORS.items() if k in (401, 403, 429, 503)}


@router.get("/v1/calibration", response_model=CalibrationJob, tags=["catalog"], responses=_READ_ERRORS,
            summary="How the last calibration of the served catalog went, and the one in effect (admin)")
async def calibration_state(state: AppState, tenant: AdminTenant, engine: ServingEngine,
                            snap: ServedSnapshot) -> CalibrationJob:
    jobs = jobs_to_read(state, engine)
    job = await anyio.to_thread.run_sync(jobs.state) if jobs is not None else \
        {"state": "none", "message": "this index backend cannot carry a catalog calibration (Qdrant)"}
    return _answer(job, snap)


@router.delete("/v1/calibration", response_model=CalibrationJob, tags=["catalog"],
               responses={**_READ_ERRORS, 404: {"model": ErrorResponse, "description": "No calibration is running."}},
               summary="Stop the running calibration of the served catalog (admin)",
               description="The job stops after the LLM endpoint calls in flight (what they wrote is kept for the "
                           "next run) and saves nothing; it reads `stopped` once it has.")
async def stop_calibration(state: AppState, tenant: AdminTenant, engine: ServingEngine,
                           snap: ServedSnapshot) -> CalibrationJob:
    jobs = jobs_to_read(state, engine)
    if jobs is None or not await write_to_store(jobs.request_stop, what="the stop request"):
        raise ServiceError(404, "calibration_not_running", "no calibration of this catalog is running; "
                           "GET /v1/calibration says how the last one ended")
    return _answer(await anyio.to_thread.run_sync(jobs.state), snap)
