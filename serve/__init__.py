"""The HTTP service: scoring and search endpoints, tenants, catalog updates, metrics; the MCP server
and gateway; and the ``toolrank`` command (:mod:`serve.commands`).

The names below are loaded on first use, so ``toolrank search`` (which starts in
:mod:`serve.commands`) does not load the web stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .app import create_app
    from .errors import ServiceError
    from .index_store import IndexStore
    from .settings import Settings
    from .tenants import Tenant, TenantConfigError, Tenants, hash_key, load_tenants

__all__ = [
    "create_app",
    "Settings",
    "ServiceError",
    "IndexStore",
    "Tenant",
    "Tenants",
    "TenantConfigError",
    "hash_key",
    "load_tenants",
]

def __getattr__(name: str):
    if name in __all__:
        from . import app, errors, index_store, settings, tenants
        for module in (app, errors, index_store, settings, tenants):
            if hasattr(module, name):
                return getattr(module, name)
    raise AttributeError(f"module 'serve' has no attribute {name!r}")
