"""Request and response bodies of the HTTP API. Every field is bounded and described.

Bounds are checked before any model runs, so bad input is a 422 that names the field and the
fix; they are also what the OpenAPI document at ``/openapi.json`` shows.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from retrieval.catalog.rules import (MAX_NAME_CHARS, MAX_SCHEMA_BYTES, MAX_SCHEMA_DEPTH, check_json, check_name,
                                     check_schema)

__all__ = [
    "MAX_REQUEST_CHARS", "MAX_NEED_CHARS", "MAX_DESCRIPTION_CHARS", "MAX_CANDIDATES", "MAX_K",
    "MAX_NAME_CHARS", "MAX_SCHEMA_DEPTH", "MAX_SCHEMA_BYTES", "MAX_BODY_DEPTH",
    "Candidate", "ScoreRequest", "CandidateScore", "ModelInfo", "ScoreResponse",
    "ToolRef", "PreviousAttempt", "SearchRequest", "ToolResult", "TokenFigures", "SearchResponse",
    "McpTool", "ServerUpdate", "ServerSummary", "ServerList", "ServerDetail", "ServerChange",
    "CalibrationRequest", "CalibrationJob",
    "ErrorBody", "ErrorResponse", "Health", "Readiness",
]

MAX_REQUEST_CHARS = 4000
MAX_NEED_CHARS = 500
MAX_DESCRIPTION_CHARS = 4000
MAX_CANDIDATES = 200
MAX_K = 50
MAX_SERVER_TOOLS = 1000
MAX_EXAMPLES = 50
# A PUT body is {"tools": [{"inputSchema": <schema>}]}: three levels around the deepest schema,
# and one more so that a schema one level too deep is reported against the schema's own limit.
MAX_BODY_DEPTH = MAX_SCHEMA_DEPTH + 4

Decision = Literal["proceed", "search_again", "choose", "no_fit"]
_VERSION_TEXT = ("The catalog version that answered, as the caller sees it: for an admin (or a tenant allowed every "
                 "server) the store's version number; for a tenant restricted to some servers an opaque number "
                 "that changes when, and only when, something it can see changes (compare it for equality only).")
Format = Literal["mcp", "openai", "anthropic"]


def _not_blank(value: str | None, what: str) -> str | None:
    if value is not None and not value.strip():
        raise ValueError(f"{what} is blank; write it in words, or leave it out where it is optional")
    return value


class _Request(BaseModel):
    # strict: "k": "5" or "k": true is refused, not read as 5 or 1 (an integer field takes integers only)
    model_config = ConfigDict(extra="forbid", strict=True)


class _Body(_Request):
    """A whole request body: checked once, without recursion, before any field is read."""

    @model_validator(mode="before")
    @classmethod
    def _plain_json(cls, data: Any) -> Any:
        # Lone surrogates (not storable, and the tokenizers refuse them), NaN and infinities,
        # integers beyond 64 bits and deep nesting are refused here, naming the path.
        if isinstance(data, bytes):   # a body the framework did not parse: not sent as JSON
            raise ValueError("the body was not read as JSON: send a JSON object with Content-Type: application/json")
        if not isinstance(data, dict):
            raise ValueError("the body must be a JSON object")
        check_json(data, "body", max_depth=MAX_BODY_DEPTH)
        return data


class _Asking(_Body):
    """A body with a ``request`` and an optional ``need`` (score and search): neither may be blank."""

    @field_validator("request", check_fields=False)
    @classmethod
    def _request_text(cls, v: str) -> str:
        return _not_blank(v, "request")  # type: ignore[return-value]

    @field_validator("need", check_fields=False)
    @classmethod
    def _need_text(cls, v: str | None) -> str | None:
        return _not_blank(v, "need")


# ------------------------------------------------------------------ /v1/score


class Candidate(_Request):
    """One tool to score, described as the model will read it."""

    id: str = Field(min_length=1, max_length=MAX_NAME_CHARS,
                    description="Your identifier for this candidate; echoed back with its probability.",
                    examples=["c1"])
    server: str = Field("", max_length=MAX_NAME_CHARS, description="Name of the server offering the tool.",
                        examples=["GitHub"])
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS, description="Tool name.",
                      examples=["create_issue"])
    description: str = Field("", max_length=MAX_DESCRIPTION_CHARS, description="Tool description.",
                             examples=["Create a new issue in a GitHub repository."])


class ScoreRequest(_Asking):
    """Score candidate tools against one request."""

    request: str = Field(min_length=1, max_length=MAX_REQUEST_CHARS,
                         description="The user's request, as written.",
                         examples=["open a bug about the login page crashing"])
    need: str | None = Field(None, max_length=MAX_NEED_CHARS,
                             description="Optional: what the assistant is looking for, in one line.",
                             examples=["a tool that files an issue in a repository"])
    candidates: list[Candidate] = Field(min_length=1, max_length=MAX_CANDIDATES,
                                        description=f"1 to {MAX_CANDIDATES} tools to score.")


SCORER_PROBABILITY = (
    "The scorer's probability for this (request, tool) pair alone: the cross-encoder's calibrated output, with no "
    "retrieval evidence and no comparison with other tools. Not on the same scale as /v1/search's `probability` "
    "(which adds retrieval evidence and is calibrated over the ranked list), so the two differ for the same tool; "
    "use /v1/search's to decide whether to proceed.")
DECISION_PROBABILITY = (
    "Decision probability that this tool does what was asked: the cross-encoder's logit combined with retrieval "
    "evidence (ranks, server mentions) and calibrated over the ranked list; the scale of best_probability and of the "
    "proceed threshold. Differs from /v1/score's `scorer_probability` (the cross-encoder alone) for the same tool.")


class CandidateScore(BaseModel):
    id: str = Field(description="The candidate's id, as sent.", examples=["c1"])
    scorer_probability: float = Field(ge=0.0, le=1.0, description=SCORER_PROBABILITY, examples=[0.87])


class ModelInfo(BaseModel):
    name: str | None = Field(description="Scorer model name.", examples=["toolrank-minilm-ce"])
    version: str | None = Field(description="Scorer model version.", examples=["1"])


class ScoreResponse(BaseModel):
    scores: list[CandidateScore] = Field(description="One scorer probability per candidate, in the order sent.")
    model: ModelInfo = Field(description="The model that produced the probabilities.")


# ------------------------------------------------------------------ /v1/search


class ToolRef(_Request):
    server: str = Field(min_length=1, max_length=MAX_NAME_CHARS, description="Server name.", examples=["GitHub"])
    tool: str = Field(min_length=1, max_length=MAX_NAME_CHARS, description="Tool name.", examples=["create_issue"])
    probability: float | None = Field(None, ge=0.0, le=1.0, description="Its probability in that answer.")
    source: Literal["ranked", "always_available", "server_mention", "exact_name"] | None = Field(
        None, description="Its 'source' in that answer (an always-available tool is not kept from it).")


class PreviousAttempt(_Request):
    """What the first search answered, sent back with the second so the service knows it is the second."""

    attempt: int = Field(ge=1, le=5, description="The 'attempt' field of the earlier answer.", examples=[1])
    decision: Decision = Field(description="The 'decision' field of the earlier answer.", examples=["search_again"])
    tools: list[ToolRef] = Field(default_factory=list, max_length=MAX_K,
                                 description="Optional: the tools the earlier answer offered, with their "
                                             "probabilities. Given them, a second search that finds less than the "
                                             "first (under the no-fit floor while the first was not) answers "
                                             "`choose` with these tools instead of an empty `no_fit`.")


class SearchRequest(_Asking):
    """Find the tools that fit a request among the caller's servers."""

    request: str = Field(min_length=1, max_length=MAX_REQUEST_CHARS,
                         description="The user's request, as written.",
                         examples=["open a bug about the login page crashing"])
    need: str | None = Field(None, max_length=MAX_NEED_CHARS,
                             description="The way to the best answer: one line, written by the calling agent "
                                         "before it has seen any tool, of the action the tool must perform and "
                                         "its object (the platform only if the user named it). It is searched "
                                         "as a query of its own beside the request, never instead of it. A "
                                         "second search sends a sharper one. Optional: without it the request "
                                         "is searched alone.",
                             examples=["file a bug report in a code repository's issue tracker"])
    k: int | None = Field(None, ge=1, le=MAX_K,
                          description=f"At most this many tools (1 to {MAX_K}); default: the service's policy.",
                          examples=[5])
    previous: PreviousAttempt | None = Field(None, description="Set on a second search: the earlier answer.")
    explain: bool = Field(False, description="Add why each tool was chosen (retrieval ranks, scores).")
    format: Format = Field("mcp", description="Shape of each tool definition: MCP, OpenAI or Anthropic tools.",
                           examples=["mcp"])
    legacy_decisions: bool = Field(False, description="For clients written for 0.6 and earlier, which know only "
                                   "proceed, search_again and no_fit: a `choose` answer comes back as `proceed`, "
                                   "with the same tools and message.")


class ToolResult(BaseModel):
    server: str = Field(description="Server name.", examples=["GitHub"])
    tool: str = Field(description="Tool name.", examples=["create_issue"])
    probability: float = Field(ge=0.0, le=1.0, description=DECISION_PROBABILITY, examples=[0.91])
    rank: int = Field(ge=1, description="1 for the best tool.", examples=[1])
    source: str = Field(description="How it got here: ranked, always_available, server_mention or exact_name.",
                        examples=["ranked"])
    definition: dict[str, Any] | None = Field(None, description="The tool definition, in the requested format.")
    explanation: dict[str, Any] | None = Field(None, description="Why it was chosen (only with explain=true).")


class TokenFigures(BaseModel):
    selected: int = Field(ge=0, description="Tokens of the returned definitions.", examples=[420])
    catalog: int = Field(ge=0, description="Tokens of every definition the caller may use.", examples=[61234])
    reduction: float = Field(description="1 - selected / catalog.", examples=[0.993])
    encoding: str = Field(description="Tokenizer used for the counts.", examples=["cl100k_base"])


class SearchResponse(BaseModel):
    decision: Decision = Field(description="proceed: use the tools; search_again: retry once with a sharper "
                                           "need (the tools are the best so far); choose (second search only): "
                                           "the tools may fit but none clearly does: read their definitions and "
                                           "pick, or ask the user; no_fit: none of the caller's tools fits.",
                               examples=["proceed"])
    attempt: int = Field(ge=1, description="1 for a first search, 2 for the retry.", examples=[1])
    best_probability: float = Field(ge=0.0, le=1.0, description="The decision probability: the first tool's (the best of those the "
                                                "cross-encoder read; 1.0 when an always-available tool matched).",
                                    examples=[0.91])
    tools: list[ToolResult] = Field(description="Ranked tools, best first.")
    tokens: TokenFigures | None = Field(None, description="Token cost of the answer against the whole catalog.")
    message: str = Field("", description="Plain words for the agent or the user.")
    suggestions: list[str] = Field(default_factory=list,
                                   description="On no_fit: public servers that could be connected to do it.")
    restricted_to: list[str] = Field(default_factory=list,
                                     description="Servers the request's text names explicitly (\"... in GitHub\"), to which "
                                                 "the search was restricted; empty when it names none (a "
                                                 "server restriction set by the caller is not listed).")
    index_version: int = Field(description=_VERSION_TEXT, examples=[3])
    model: ModelInfo = Field(description="The scorer model that produced the probabilities.")
    recalibrated_from: int | None = Field(
        None, description="When the service recalibrates from use (TOOLRANK_USE_RECALIBRATION) and this tenant's "
                          "probabilities were recalibrated: how many of its feedback observations that was fitted on.")
    request_id: str | None = Field(None, description="Quote it in POST /v1/feedback to say which tool was called "
                                                     "for this request (the X-Request-ID header's value).")


# ------------------------------------------------------------------ /v1/servers


class McpTool(BaseModel):
    """One tool of an MCP ``tools/list`` result (other MCP fields are accepted and ignored)."""

    model_config = ConfigDict(extra="allow", strict=True)
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS,
                      description="Tool name, unique on the server: printable characters only (no controls, "
                                  "bidi overrides or zero-width characters), one script of look-alike letters, "
                                  "stored NFC-normalised.",
                      examples=["create_issue"])
    description: str | None = Field(None, max_length=MAX_DESCRIPTION_CHARS, description="Tool description.",
                                    examples=["Create a new issue in a GitHub repository."])
    inputSchema: dict[str, Any] | None = Field(
        None, description=f"JSON Schema of the tool's arguments: at most {MAX_SCHEMA_DEPTH} levels deep and "
                          f"{MAX_SCHEMA_BYTES} bytes as compact JSON, finite numbers, 64-bit integers.")

    @field_validator("name")
    @classmethod
    def _printable_name(cls, v: str) -> str:
        return check_name(v, "tool name")

    @field_validator("inputSchema")
    @classmethod
    def _bounded_schema(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        return check_schema(v, "this tool")


class ServerUpdate(_Body):
    """An MCP ``tools/list`` result for one server, plus optional description and example requests."""

    tools: list[McpTool] = Field(min_length=1, max_length=MAX_SERVER_TOOLS,
                                 description=f"The server's tools (1 to {MAX_SERVER_TOOLS}); "
                                             "to remove a server use DELETE.")
    description: str = Field("", max_length=MAX_DESCRIPTION_CHARS, description="What the server is for.",
                             examples=["Issues, pull requests and repositories on GitHub."])
    examples: dict[str, list[str]] | None = Field(
        None, description="Example requests per tool name (at most 50 per tool, each up to 4000 "
                          "characters). Tools not named keep their current examples; [] clears them.",
        examples=[{"create_issue": ["file a bug about the login page"]}])
    nextCursor: str | None = Field(None, description="Ignored (MCP pagination); send every page's tools at once.")

    @field_validator("examples")
    @classmethod
    def _bounded_examples(cls, v: dict[str, list[str]] | None) -> dict[str, list[str]] | None:
        for tool, ex in (v or {}).items():
            if len(ex) > MAX_EXAMPLES:
                raise ValueError(f"tool {tool!r} has {len(ex)} examples; send at most {MAX_EXAMPLES}")
            if any(len(e) > MAX_REQUEST_CHARS or not e.strip() for e in ex):
                raise ValueError(f"tool {tool!r}: each example must be non-blank and at most "
                                 f"{MAX_REQUEST_CHARS} characters")
        return v


class ServerSummary(BaseModel):
    name: str = Field(description="Server name.", examples=["GitHub"])
    description: str = Field(description="What the server is for.")
    tools: int = Field(ge=0, description="Number of tools the caller may use on it.", examples=[12])


class ServerList(BaseModel):
    servers: list[ServerSummary] = Field(description="The caller's servers (every server for an admin).")
    index_version: int = Field(description=_VERSION_TEXT, examples=[3])


class ServerDetail(BaseModel):
    name: str = Field(description="Server name.", examples=["GitHub"])
    description: str = Field(description="What the server is for.")
    tools: list[dict[str, Any]] = Field(description="The tools the caller may use: name, description, inputSchema.")
    index_version: int = Field(description=_VERSION_TEXT, examples=[3])


class ServerChange(BaseModel):
    name: str = Field(description="Server name.", examples=["GitHub"])
    created: bool = Field(False, description="The server was new.")
    changed: bool = Field(description="The catalog changed (false when the same definition was sent again).")
    tools: int = Field(ge=0, description="Tools on the server after a PUT; tools removed by a DELETE.")
    re_embedded: int = Field(0, ge=0, description="Tools whose text changed and were embedded again.")
    index_version: int = Field(description="Index version that includes the change; every worker serves "
                                           "it within the store's pick-up bound.", examples=[4])
    examples_note: str | None = Field(None, description="With write_examples: how many tools got example requests "
                                                        "written or from the cache, and which were left without.")


# ------------------------------------------------------------------ the catalog's calibration


class CalibrationRequest(_Body):
    probes: int = Field(100, ge=10, le=2000, description="How many of the catalog's tools to probe (drawn uniformly; "
                                                         "a catalog of fewer tools is probed more than once per tool, "
                                                         "in other styles).")


class CalibrationJob(BaseModel):
    state: Literal["none", "running", "done", "failed", "stopped", "interrupted"] = Field(
        description="none: never started on this store; running; done: the map was saved as `saved_version`; "
                    "failed: nothing saved (`message` says why); stopped: stopped on request (DELETE, or its worker "
                    "shutting down), nothing saved; interrupted: the worker running it died.")
    message: str = Field("", description="What it measured and fitted, or why it stopped, in words.")
    phase: str | None = Field(None, description="starting, writing (probe requests and needs), searching, judging "
                                                "(first tools that are not the probe's own), saving.")
    worker: str | None = Field(None, description="The worker that runs or ran it (host:pid).")
    trigger: str | None = Field(None, description="What started it: request (POST), a catalog change or start "
                                                  "(the automatic calibration, TOOLRANK_CALIBRATE_AFTER_CHANGE_S).")
    done: int = Field(0, ge=0, description="Work of the current phase finished.")
    total: int = Field(0, ge=0, description="Work of the current phase in all.")
    probes: int | None = Field(None, description="Tools asked to probe.")
    probed_version: int | None = Field(None, description="The index version probed.")
    saved_version: int | None = Field(None, description="The index version that carries the new calibration.")
    started_at: str | None = Field(None, description="UTC, ISO 8601.")
    finished_at: str | None = Field(None, description="UTC, ISO 8601.")
    calibration: dict[str, Any] | None = Field(None, description="The map this job fitted (when done).")
    catalog_calibration: dict[str, Any] | None = Field(
        None, description="The calibration the served index carries now (as /readyz shows it): a later catalog "
                          "change drops it, a calibration measured with another scorer or other probability models "
                          "(confidence models, tail) is not used.")


# ------------------------------------------------------------------ errors and probes


class ErrorBody(BaseModel):
    code: str = Field(description="Machine-readable reason.", examples=["invalid_request"])
    message: str = Field(description="What went wrong and how to fix it.",
                         examples=["body.candidates: List should have at most 200 items after validation, not 201"])
    fields: list[dict[str, str]] | None = Field(None, description="For invalid input: each bad field's path and problem.")
    request_id: str | None = Field(None, description="Quote it when reporting a problem.")


class ErrorResponse(BaseModel):
    error: ErrorBody


class Health(BaseModel):
    status: str = Field(description="'ok' while the process is alive.", examples=["ok"])


class Readiness(BaseModel):
    ready: bool = Field(description="Index (and model, if required) loaded; requests will be served.")
    status: str = Field(description="loading, ready or failed.", examples=["ready"])
    index_version: int | None = Field(None, description="Index version served (shown to admin keys only).")
    scorer: dict[str, Any] = Field(default_factory=dict, description="Whether a scorer model is loaded, and which.")
    catalog_calibration: dict[str, Any] | None = Field(
        None, description="The catalog calibration the served index carries (`toolrank index --calibrate`): the map "
                          "`sigmoid(a * logit(p) + b)` the scored candidates' probabilities and the zone thresholds "
                          "go through (decisions unchanged; a tenant's own recalibration supersedes it), the level "
                          "of the candidates past the scored head (`tail_shift`, logits, from `tail_judged` judged "
                          "candidates of which `tail_fits` fit; `tail_waiting` candidates still to judge: the shipped level "
                          "until the next run; 0.17.0 on), and what it was measured on. None "
                          "without one. Shown to admin keys only.")
    audits: dict[str, Any] | None = Field(
        None, description="This worker's audits (TOOLRANK_AUDIT_SHARE > 0; serve/audits.py): the share, the daily "
                          "maximum per tenant, and how many were queued, judged, are waiting, were dropped (queue "
                          "full), over the daily maximum or failed. None when audits are off. Admin keys only.")
    detail: str = Field("", description="What is missing, in words.")
