"""One domain error type for the service, and the handlers that turn errors into JSON.

Every error body has the same shape::

    {"error": {"code": "invalid_request", "message": "...", "fields": [...], "request_id": "..."}}

Domain errors (:class:`ServiceError`) and validation errors answer 4xx with a message that says
what to fix. Anything else is caught by :class:`serve.middleware.RequestContext`, logged with its
traceback (never the request body), and answers a generic 500.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

__all__ = ["ServiceError", "install_error_handlers", "error_body", "INTERNAL_ERROR_MESSAGE"]

INTERNAL_ERROR_MESSAGE = (
    "the server failed to handle this request; it was logged: retry, or report the request_id"
)

log = logging.getLogger(__name__)


class ServiceError(Exception):
    """A request the service refuses, with the HTTP status and a message that says what to fix."""

    def __init__(self, status: int, code: str, message: str, *, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


def error_body(code: str, message: str, request: Request | None = None, **extra: Any) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message, **extra}
    rid = getattr(getattr(request, "state", None), "request_id", None) if request is not None else None
    if rid:
        err["request_id"] = rid
    return {"error": err}


def _field_path(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for p in loc:
        if isinstance(p, int):
            parts.append(f"[{p}]")
        else:
            parts.append(("." if parts else "") + str(p))
    return "".join(parts)


_HINTS = {
    "missing": "add this field",
    "extra_forbidden": "remove this field (check its spelling)",
    "string_too_long": "shorten it",
    "string_too_short": "send a non-empty value",
    "too_long": "send fewer items",
    "too_short": "send at least the minimum number of items",
    "json_invalid": "send valid JSON with Content-Type: application/json",
    "model_attributes_type": "send a JSON object",
    "dict_type": "send a JSON object",
    "literal_error": "use one of the allowed values",
    "int_type": "send a JSON integer (not a string or true/false)",
    "float_type": "send a JSON number (not a string)",
    "bool_type": "send true or false (not a string or number)",
    "string_type": "send a JSON string",
}


MAX_FIELD_ERRORS = 20  # a body of thousands of unknown fields must not get a megabytes-long answer


def _readable(errors: list[dict[str, Any]]) -> tuple[str, list[dict[str, str]]]:
    fields = []
    for e in errors[:MAX_FIELD_ERRORS]:
        path = _field_path(tuple(e.get("loc", ())))[:200]
        msg = str(e.get("msg", "invalid value"))[:500]
        hint = _HINTS.get(str(e.get("type", "")))
        fields.append({"path": path, "message": f"{msg}; {hint}" if hint else msg})
    head = fields[0] if fields else {"path": "body", "message": "invalid request"}
    if len(errors) > MAX_FIELD_ERRORS:
        more = f" (and {len(errors) - 1} more problem(s); 'fields' lists the first {MAX_FIELD_ERRORS})"
    else:
        more = f" (and {len(fields) - 1} more problem(s), see 'fields')" if len(fields) > 1 else ""
    return f"{head['path']}: {head['message']}{more}", fields


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers for domain, validation and HTTP errors."""

    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message, request), status_code=exc.status,
                            headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        # Never echo the offending input: it may be large, and it is the caller's own anyway.
        message, fields = _readable(list(exc.errors()))
        return JSONResponse(error_body("invalid_request", message, request, fields=fields), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        codes = {404: "not_found", 405: "method_not_allowed", 400: "bad_request"}
        detail = exc.detail if isinstance(exc.detail, str) else "request refused"
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no such endpoint: {request.method} {request.url.path}; see /docs for the API"
        return JSONResponse(error_body(codes.get(exc.status_code, "http_error"), detail, request),
                            status_code=exc.status_code, headers=getattr(exc, "headers", None))
