"""What several routers share: the documented error answers, the server-name path parameter, and
the index version as a tenant may see it."""

from __future__ import annotations

import errno
import hashlib
import logging
from typing import Any, Callable

import anyio
from fastapi import Path as PathParam

from retrieval.jsonl import dumps_line

from ..engine import Snapshot
from ..schemas import MAX_NAME_CHARS, ErrorResponse
from ..tenants import Tenant

log = logging.getLogger(__name__)

__all__ = ["ERRORS", "READ_ERRORS", "ADMIN_ERRORS", "NOT_FOUND", "ServerName", "view_version", "write_to_store"]

ERRORS = {status: {"model": ErrorResponse, "description": text} for status, text in {
    401: "No API key, or a key that is not valid.",
    413: "The body is larger than the limit.",
    422: "Invalid input: the message names the field and the fix.",
    429: "The tenant's request rate is over its limit; retry after Retry-After seconds.",
    503: "Not ready yet (index loading), no scorer model loaded, or overloaded (queue full, deadline passed): "
         "retry after Retry-After seconds.",
}.items()}
READ_ERRORS = {k: v for k, v in ERRORS.items() if k in (401, 422, 429, 503)}
ADMIN_ERRORS = {**ERRORS, 403: {"model": ErrorResponse, "description": "The key is not an admin key."},
                405: {"model": ErrorResponse, "description": "The service serves a read-only copy of the index."},
                507: {"model": ErrorResponse, "description": "The index store is out of disk space; nothing "
                                                             "was changed."}}
NOT_FOUND = {404: {"model": ErrorResponse, "description": "No server of that name is available to the caller."}}

ServerName = PathParam(min_length=1, max_length=MAX_NAME_CHARS, description="Server name (URL-encoded).",
                       examples=["GitHub"])


async def view_version(snap: Snapshot, tenant: Tenant) -> int:
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


_OUT_OF_SPACE = (errno.ENOSPC, errno.EDQUOT)
_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)


async def write_to_store(change: Callable[..., Any], *args: Any, what: str = "the change") -> Any:
    """Run a change that writes to the store in a thread: a full disk is a 507, a read-only store (a
    replica, or a folder this process may not write) a 405, never a 500."""
    from ..errors import ServiceError
    from ..index_store import ReadOnlyStoreError

    try:
        return await anyio.to_thread.run_sync(change, *args)
    except ReadOnlyStoreError as exc:
        raise ServiceError(405, "read_only_store", f"this service serves a read-only copy of the index; {exc}",
                           headers={"Allow": "GET, HEAD"}) from None
    except OSError as exc:
        if exc.errno in _READ_ONLY:
            raise ServiceError(405, "read_only_store", f"this service cannot write its store ({exc.strerror}): "
                               f"{what} was not saved; send it to a writable instance",
                               headers={"Allow": "GET, HEAD"}) from None
        if exc.errno not in _OUT_OF_SPACE:
            raise
        log.error("%s not saved: the store is out of disk space (%s)", what, exc.strerror)
        raise ServiceError(507, "out_of_space", f"the store is out of disk space: {what} was not saved; "
                           "retry once space has been freed") from None
