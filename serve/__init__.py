"""The HTTP service: scoring and search endpoints, tenants, catalog updates, metrics."""

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
