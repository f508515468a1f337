"""Service settings: one frozen object, read from ``TOOLRANK_*`` environment variables.

Built inside :func:`serve.app.create_app` (never at import time), so every uvicorn worker
reads the same environment that ``toolrank serve`` prepared for it; ``toolrank serve``'s options
are made from its fields (:mod:`serve.cli`). :class:`GatewaySettings` is ``toolrank mcp``'s.

:data:`SETTINGS` lists every settings class of the project, so :func:`unknown_variables` knows
every ``TOOLRANK_*`` variable from their fields, with no list of names to keep by hand.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict

from retrieval.settings import BACKENDS, BackendSettings, HarvestSettings, LLMSettings, RetrievalSettings
from scorer.locations import ModelSettings, variable

__all__ = ["SETTINGS", "GatewaySettings", "Settings", "environment_value", "known_variables", "unknown_variables",
           "variable"]

MIB = 1024 * 1024

# A duration in seconds: more than zero; each field adds its own upper bound.
Seconds = Annotated[float, Field(gt=0)]


class RecalibrationSettings(BaseSettings):
    """The recalibration from use, read alike by the service (:class:`Settings`) and the gateway
    (:class:`GatewaySettings`): ``TOOLRANK_USE_RECALIBRATION``, ``_MIN`` and ``_REFIT_S``, and the audits it can
    rest on instead (``TOOLRANK_AUDIT_SHARE``, ``_DAILY_MAX``)."""

    model_config = SettingsConfigDict(env_prefix="TOOLRANK_", env_ignore_empty=True, extra="ignore", frozen=True)

    use_recalibration: bool = Field(
        False, description="Recalibrate each tenant's probabilities from its own feedback once it has enough "
                           "observations, and only where that beats the shipped calibration in cross-validation "
                           "on them (docs/day-one.md); TOOLRANK_USE_RECALIBRATION=1 switches it on.")
    use_recalibration_min: int = Field(
        25, ge=5, le=100_000, description="Observations (audits, or else searches whose offered tool was called "
                                          "successfully) a tenant needs before its recalibration is fitted.")
    use_recalibration_refit_s: float = Field(
        30.0, ge=0, le=86_400, description="A tenant's recalibration is refitted after new feedback at most this "
                                           "often (it reads the tenant's feedback log); the previous fit serves "
                                           "meanwhile.")
    audit_share: float = Field(
        0.0, ge=0.0, le=1.0, description="Share of searches (drawn by request id, before their outcome) whose "
                                         "first tool the LLM endpoint (TOOLRANK_LLM_*) judges in the background: "
                                         "an unbiased sample each tenant's recalibration is fitted on once it has "
                                         "TOOLRANK_USE_RECALIBRATION_MIN of them (docs/day-one.md). 0 (default) "
                                         "is off: an audit sends the request text, secrets masked, to that "
                                         "endpoint; a tenant opts out with audit = false.")
    audit_question: Literal["step", "tool"] = Field(
        "step", description="What an audit asks about the first tool: step (default) — is it a right tool to call, "
                            "for the request or one of its steps (what the agent acts on, and what the benchmarks' "
                            "labels count: chosen on the fit catalogs, docs/day-one.md); tool — does it by itself "
                            "do everything the user asked (the scorer's training question; far stricter on "
                            "requests that are multi-step plans).")
    audit_daily_max: int = Field(
        200, ge=1, le=1_000_000, description="Audits a tenant gets per day and worker at most (each is one short "
                                             "reply of the LLM endpoint).")


class Settings(BackendSettings, RecalibrationSettings):
    """Everything the HTTP service can be told, validated at construction.

    Every field can be set through the environment as ``TOOLRANK_<FIELD>`` (for example
    ``TOOLRANK_CONFIG=/etc/toolrank/tenants.toml``, ``TOOLRANK_AUTH_DISABLED=1``); an empty variable
    counts as unset. The index backend's fields (``backend``, ``qdrant_url``, ``qdrant_api_key``,
    ``qdrant_path``, ``collection``) are :class:`retrieval.settings.BackendSettings`'.
    """

    model_config = SettingsConfigDict(env_prefix="TOOLRANK_", env_ignore_empty=True, frozen=True, extra="forbid")

    config: Path | None = Field(
        None, description="Tenants file (TOML or JSON): API key hashes, allowed servers and tools, thresholds.")
    auth_disabled: bool = Field(
        False, description="Open development mode: no API keys, one admin tenant that sees every server.")
    index_dir: Path | None = Field(
        None, description="Index store: versioned index folders v<N> and a CURRENT pointer, shared by every "
                          "worker and replica. Seeded on first start; a private temporary store when unset.")
    catalog: Path | None = Field(
        None, description="Catalog file to build the first index from when the store is empty "
                          "(default: the shipped MCP-Zero catalog).")
    model_dir: Path | None = Field(
        None, description="Scorer model folder (default: the shipped model, when present).")
    public_suggestions: bool = Field(
        True, description="On no_fit, suggest servers of the shipped public catalog (never a deployment's own).")
    require_scorer: bool = Field(
        False, description="Fail to become ready when no scorer model can be loaded (default: run on "
                           "retrieval scores alone and say so in /readyz).")
    poll_interval_s: Seconds = Field(
        2.0, le=60, description="How often a worker checks the store for a newer index version.")
    keep_versions: int = Field(5, ge=2, le=100, description="Index versions kept on disk (older ones are deleted).")
    max_body_bytes: int = Field(MIB, ge=1024, le=64 * MIB, description="Largest accepted request body (413 above).")
    max_concurrency: int = Field(
        4, ge=1, le=256, description="Pipeline calls run at once per worker; further requests wait their turn.")
    max_queue: int = Field(
        16, ge=0, le=10_000, description="Scoring and search requests that may wait for a pipeline slot per worker; "
                                         "beyond that the answer is 503 with Retry-After.")
    max_queue_wait_s: Seconds = Field(
        5.0, le=600, description="Refuse at once (503 with Retry-After) a request whose expected wait for a "
                                 "pipeline slot, from the recent duration of calls, is longer than this.")
    request_timeout_s: Seconds = Field(
        30.0, le=600, description="Deadline of a scoring or search request, waiting included: past it the "
                                  "work is stopped and the answer is 503 with Retry-After.")
    header_timeout_s: Seconds = Field(
        10.0, le=600, description="A client must send its request line and headers within this many seconds "
                                  "of connecting (or of its previous response); past it: 408 and close.")
    body_timeout_s: Seconds = Field(
        30.0, le=3600, description="A client must send the whole request body within this many seconds of "
                                   "its headers; past it: 408 and close.")
    keep_alive_s: Seconds = Field(
        5.0, le=600, description="An idle kept-alive connection is closed after this many seconds.")
    max_connections: int = Field(
        1000, ge=16, le=1_000_000, description="Open connections per worker (kept below the file-descriptor limit). "
                                               "At the cap a new connection evicts the one that has waited longest "
                                               "for its client; connections being answered are never evicted.")
    read_only: bool = Field(
        False, description="Serve the index store without writing to it (a read-only copy or replica): no lock "
                           "file, no seeding; catalog changes are refused. Detected when the folder is not writable.")
    fail_fast: bool = Field(
        False, description="When start-up fails (unreadable store, model, tenants), log one line and exit the "
                           "process with status 3 instead of staying up unready. `toolrank serve` sets it.")
    failure_file: Path | None = Field(
        None, description="Internal (set by `toolrank serve`): where a worker writes why start-up failed.")
    ui: bool = Field(True, description="Serve the operator console at /ui (the same keys and tenant rules as the "
                                       "API; nothing readable without a key).")
    write_examples_timeout_s: Seconds = Field(
        120.0, description="Bound on the example writing of one PUT /v1/servers/{name}?write_examples=true as a "
                           "whole; tools not written by then are indexed without examples (the answer says so).")
    calibrate_after_change_s: Seconds | None = Field(
        None, le=86_400, description="Keep the served catalog calibrated (docs/day-one.md section 4): this many "
                                     "seconds after the last catalog change, and at start when the served index has "
                                     "no calibration, run POST /v1/calibration's probes through the LLM endpoint "
                                     "(TOOLRANK_LLM_*, required). Off by default.")
    calibrate_probes: int = Field(100, ge=10, le=2000, description="Tools an automatic calibration probes.")
    feedback_max_mb: float = Field(
        8.0, gt=0, le=4096, description="A tenant's feedback log rotates past this size (one older part is kept, "
                                        "so a tenant's log stays under twice it).")
    feedback_keep_days: float | None = Field(
        None, gt=0, description="Feedback events older than this are dropped when the log rotates (default: kept "
                                "until rotated out).")
    offers_per_tenant: int = Field(
        2000, ge=10, le=1_000_000, description="Recent searches remembered per tenant for POST /v1/feedback "
                                               "(one tenant never evicts another's).")
    metrics_public: bool = Field(
        False, description="Serve /metrics without a key (for a scraper on a private network); by default it "
                           "needs an admin key, since its counters show catalog activity.")

    @model_validator(mode="after")
    def _backend_is_configured(self) -> "Settings":
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r} (TOOLRANK_BACKEND, --backend): use "
                             f"{' or '.join(BACKENDS)}")
        if self.backend == "qdrant" and (self.qdrant_url is None) == (self.qdrant_path is None):
            raise ValueError("backend 'qdrant' needs TOOLRANK_QDRANT_URL (a server, e.g. http://localhost:6333) or "
                             "TOOLRANK_QDRANT_PATH (an embedded Qdrant for one worker), exactly one of them")
        if self.backend == "embedded" and (self.qdrant_url is not None or self.qdrant_path is not None):
            raise ValueError("a Qdrant URL or path is set but the backend is 'embedded': set TOOLRANK_BACKEND=qdrant "
                             "(--backend qdrant), or unset TOOLRANK_QDRANT_URL / TOOLRANK_QDRANT_PATH")
        if self.read_only and (self.backend != "embedded" or self.index_dir is None):
            raise ValueError("read_only serves an existing index folder: pass --index DIR (TOOLRANK_INDEX_DIR) with "
                             "the embedded backend (a Qdrant collection is shared, not copied)")
        if self.qdrant_url is not None and not self.qdrant_url.startswith(("http://", "https://")):
            raise ValueError(f"TOOLRANK_QDRANT_URL {self.qdrant_url!r} must start with http:// or https://")
        return self

    @model_validator(mode="after")
    def _auth_is_configured(self) -> "Settings":
        if self.config is None and not self.auth_disabled:
            raise ValueError(
                "no tenants file: set TOOLRANK_CONFIG=FILE (API keys and tenants), or "
                "TOOLRANK_AUTH_DISABLED=1 for an open development service"
            )
        if self.config is not None and self.auth_disabled:
            raise ValueError(
                "TOOLRANK_CONFIG and TOOLRANK_AUTH_DISABLED were both set: choose keys (unset "
                "TOOLRANK_AUTH_DISABLED) or an open development service (unset TOOLRANK_CONFIG)"
            )
        return self


class GatewaySettings(RecalibrationSettings):
    """``toolrank mcp``'s: ``TOOLRANK_MCP_TOKEN``, ``TOOLRANK_LEARN_FROM_USE`` and the recalibration from use."""

    model_config = SettingsConfigDict(env_prefix="TOOLRANK_", env_ignore_empty=True, extra="ignore", frozen=True)

    mcp_token: SecretStr | None = Field(
        None, description="With --http: the bearer token clients must send (default: one kept in the cache).")
    learn_from_use: bool = Field(
        True, description="Learn example requests from the tools the agent calls; TOOLRANK_LEARN_FROM_USE=0 "
                          "switches it off.")


# Every settings class, each the only reader of its variables (the LLM endpoint's, LLMSettings, through
# retrieval/writing/llm.py's LLMConfig.from_env).
SETTINGS: tuple[type[BaseSettings], ...] = (Settings, GatewaySettings, RetrievalSettings, HarvestSettings,
                                            LLMSettings, ModelSettings)


def known_variables() -> frozenset[str]:
    """Every ``TOOLRANK_*`` variable some settings class reads."""
    return frozenset(variable(cls, name) for cls in SETTINGS for name in cls.model_fields)


def environment_value(cls: type[BaseSettings], field: str) -> Any:
    """One field's value in the environment, read as ``cls()`` reads it (None when unset or empty), before
    the whole object can be built (``toolrank serve`` looks for the tenants file before the settings are
    complete)."""
    variable(cls, field)   # a field of cls
    return EnvSettingsSource(cls)().get(field)


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """One warning per ``TOOLRANK_*`` variable that nothing reads (a misspelling is otherwise silently
    ignored), with the nearest known name when there is one."""
    known = known_variables()
    out = []
    for name in sorted(n for n in environ if n.upper().startswith("TOOLRANK_")):
        if name.upper() in known:
            continue
        near = difflib.get_close_matches(name.upper(), sorted(known), n=1, cutoff=0.7)
        out.append(f"{name} is not a toolrank setting and is ignored" + (f"; did you mean {near[0]}?" if near else ""))
    return out
