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

# each public name and the module that defines it: only that module is imported on first use
_HOME = {
    "create_app": "app",
    "Settings": "settings",
    "ServiceError": "errors",
    "IndexStore": "index_store",
    "Tenant": "tenants",
    "Tenants": "tenants",
    "TenantConfigError": "tenants",
    "hash_key": "tenants",
    "load_tenants": "tenants",
}
__all__ = list(_HOME)


def __getattr__(name: str):
    home = _HOME.get(name)
    if home == "app":          # plain imports, one per module, so the import contracts see every arrow
        from . import app as module
    elif home == "settings":
        from . import settings as module
    elif home == "errors":
        from . import errors as module
    elif home == "index_store":
        from . import index_store as module
    elif home == "tenants":
        from . import tenants as module
    else:
        raise AttributeError(f"module 'serve' has no attribute {name!r}")
    return getattr(module, name)
