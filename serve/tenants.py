"""Tenants: API keys (stored as SHA-256 hashes), allowed servers and tools, thresholds.

A tenants file is TOML or JSON with a ``tenants`` list::

    [[tenants]]
    name = "ops"
    admin = true                      # may change the catalog; sees every server
    key_sha256 = ["<64 hex digits>"]  # sha256 of each API key (see `toolrank serve --new-key`)
    servers = "*"                     # every server of the deployment

    [[tenants]]
    name = "acme"
    key_sha256 = ["<64 hex digits>"]
    servers = ["GitHub", "Slack"]     # only these servers exist for this tenant
    tools = [["GitHub", "create_issue"], ["Slack", "post_message"]]   # optional narrowing
    rate_per_s = 5                    # optional: at most 5 requests a second per worker ...
    burst = 20                        # ... with bursts of up to 20 (429 and Retry-After beyond)
    learn_from_use = false            # optional: do not learn example requests from its calls (default true)
    audit = false                     # optional: never send its requests to the LLM endpoint for audits
    [tenants.policy]                  # optional threshold overrides
    proceed_threshold = 0.7
    no_fit_below = 0.05               # the second attempt says no_fit only under this (else: choose)
    floor = 0.2
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from retrieval.catalog.eligibility import Eligibility

__all__ = ["Tenant", "Tenants", "TenantConfigError", "hash_key", "new_key", "load_tenants", "DEV_TENANT"]

log = logging.getLogger(__name__)


class TenantConfigError(ValueError):
    """A tenants file that cannot be used as it is."""


def hash_key(key: str) -> str:
    """The SHA-256 hex digest under which an API key is stored."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> tuple[str, str]:
    """A fresh random API key and its hash, for writing into a tenants file."""
    key = "tr_" + secrets.token_urlsafe(32)
    return key, hash_key(key)


@dataclass(frozen=True)
class Tenant:
    """One caller of the service, as its API key resolves."""

    name: str
    eligibility: Eligibility = field(default_factory=Eligibility)
    admin: bool = False
    policy: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    rate_per_s: float | None = None   # requests a second per worker (None: unlimited)
    burst: int | None = None          # bucket size (default: one second's worth, at least 1)
    learn_from_use: bool = True       # successful calls to offered tools become its example requests
    audit: bool = True                # with TOOLRANK_AUDIT_SHARE > 0, a share of its searches is judged (serve/audits.py)

    @property
    def sees_everything(self) -> bool:
        """Admins and tenants allowed every server: nothing is hidden from them."""
        return self.admin or self.eligibility.unrestricted

    def sees_server(self, server: str) -> bool:
        """Whether this tenant may know that ``server`` exists (admins see every server)."""
        return self.admin or self.eligibility.allows_server(server)

    def sees_tool(self, tool_id: tuple[str, str]) -> bool:
        return self.admin or self.eligibility.allows(tool_id)


DEV_TENANT = Tenant(name="dev", eligibility=Eligibility(), admin=True)


# ------------------------------------------------------------------ file schema


class _PolicySpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # admin = "yes", floor = "0.2": refused
    proceed_threshold: float | None = Field(None, ge=0.0, le=1.0)
    no_fit_below: float | None = Field(None, ge=0.0, le=1.0)   # the second attempt's no-fit floor
    floor: float | None = Field(None, ge=0.0, le=1.0)
    min_results: int | None = Field(None, ge=1, le=50)
    max_results: int | None = Field(None, ge=1, le=50)
    candidates: int | None = Field(None, ge=1, le=1000)
    score_top: int | None = Field(None, ge=1, le=1000)   # the fast operating point: score only the first N

    @model_validator(mode="after")
    def _ordered(self) -> "_PolicySpec":
        if self.floor is not None and self.proceed_threshold is not None and self.floor > self.proceed_threshold:
            raise ValueError(f"floor {self.floor} is above proceed_threshold {self.proceed_threshold}; "
                             "the floor must not exceed the proceed threshold")
        if self.no_fit_below is not None and self.proceed_threshold is not None \
                and self.no_fit_below > self.proceed_threshold:
            raise ValueError(f"no_fit_below {self.no_fit_below} is above proceed_threshold {self.proceed_threshold}")
        if self.min_results is not None and self.max_results is not None and self.min_results > self.max_results:
            raise ValueError(f"min_results {self.min_results} is above max_results {self.max_results}")
        return self


class _TenantSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(min_length=1, max_length=100)
    key_sha256: list[str] = Field(min_length=1)
    admin: bool = False
    servers: Literal["*"] | list[str]
    tools: list[list[str]] | None = Field(None, description="[server, tool] pairs")
    policy: _PolicySpec = Field(default_factory=_PolicySpec)
    rate_per_s: float | None = Field(None, gt=0, le=100_000)
    burst: int | None = Field(None, ge=1, le=1_000_000)
    learn_from_use: bool = True
    audit: bool = True

    @model_validator(mode="after")
    def _hashes(self) -> "_TenantSpec":
        for h in self.key_sha256:
            if len(h) != 64 or any(c not in "0123456789abcdef" for c in h):
                raise ValueError(f"key_sha256 entry {h[:12]!r}... is not a lowercase SHA-256 hex digest "
                                 "(64 characters); store sha256(key), never the key itself")
        for pair in self.tools or ():
            if len(pair) != 2:
                raise ValueError(f"tools entry {pair[:3]!r} must be a [server, tool] pair")
        if self.burst is not None and self.rate_per_s is None:
            raise ValueError("burst is set without rate_per_s; set rate_per_s (requests a second) too")
        return self


class _FileSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    tenants: list[_TenantSpec] = Field(min_length=1)


class Tenants:
    """API key hash → tenant, loaded once at start-up."""

    def __init__(self, tenants: dict[str, Tenant]):
        self._by_hash = dict(tenants)

    def __len__(self) -> int:
        return len(set(t.name for t in self._by_hash.values()))

    def all(self) -> list[Tenant]:
        """Every tenant once, in file order."""
        return list({t.name: t for t in self._by_hash.values()}.values())

    def authenticate(self, key: str) -> Tenant | None:
        """The tenant whose key this is, or None for an unknown key."""
        return self._by_hash.get(hash_key(key))

    @classmethod
    def from_dict(cls, data: Any, where: str = "tenants config") -> "Tenants":
        """Validate a parsed tenants file.

        Raises:
            TenantConfigError: a field is missing or malformed, or a name or key hash repeats.
        """
        try:
            spec = _FileSpec.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            path = ".".join(str(p) for p in first["loc"])
            raise TenantConfigError(f"{where}: {path}: {first['msg']} ({exc.error_count()} problem(s) in all)") from None
        by_hash: dict[str, Tenant] = {}
        names: set[str] = set()
        for t in spec.tenants:
            if t.name in names:
                raise TenantConfigError(f"{where}: tenant name {t.name!r} appears twice; names must be unique")
            names.add(t.name)
            eligibility = Eligibility.of(
                servers=None if t.servers == "*" else t.servers,
                tools=None if t.tools is None else [(server, tool) for server, tool in t.tools],
            )
            burst = t.burst if t.burst is not None or t.rate_per_s is None else max(1, math.ceil(t.rate_per_s))
            tenant = Tenant(t.name, eligibility, t.admin, t.policy.model_dump(exclude_none=True),
                            rate_per_s=t.rate_per_s, burst=burst, learn_from_use=t.learn_from_use, audit=t.audit)
            for h in t.key_sha256:
                if h in by_hash:
                    raise TenantConfigError(
                        f"{where}: tenant {t.name!r} reuses a key hash of tenant {by_hash[h].name!r}; "
                        "every API key must belong to one tenant")
                by_hash[h] = tenant
        return cls(by_hash)


def _toml() -> Any:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            raise TenantConfigError("TOML tenants files need Python 3.11+ or `pip install tomli`; "
                                    "or write the file as JSON") from None
    return tomllib


def load_tenants(path: str | Path) -> Tenants:
    """Load a tenants file (``.toml`` or ``.json``).

    Raises:
        TenantConfigError: the file is missing, unparsable or invalid.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise TenantConfigError(f"{path}: tenants file not found") from None
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".json"):
        raise TenantConfigError(f"{path}: unknown tenants file type; name it *.toml or *.json")
    parse = _toml().loads if suffix == ".toml" else json.loads
    try:
        data = parse(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:  # TOMLDecodeError and JSONDecodeError are ValueErrors
        raise TenantConfigError(f"{path}: cannot parse: {exc}") from None
    tenants = Tenants.from_dict(data, str(path))
    log.info("loaded %d tenants from %s", len(tenants), path)
    return tenants
