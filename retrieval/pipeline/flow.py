"""The full request path: eligibility -> shortcuts -> retrieve 100 -> score -> decide.

    from retrieval import load_pipeline
    pipe = load_pipeline()                       # shipped catalog index + shipped scorer
    result = pipe.search("list shard allocation for an index")
    result.decision, [(t.tool_id, t.probability) for t in result.tools]

:meth:`Pipeline.search` is a short flow over named steps: input checks, the request resolved
(policy, eligibility, attempt, one catalog snapshot), shortcuts, retrieval, scoring, confidence,
the decision (pure functions, :mod:`.decision`) and the output.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Literal, Sequence

import numpy as np

from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import Catalog, Tool, ToolId
from retrieval.index.embedded import ToolIndex
from retrieval.index.hits import Hit
from retrieval.shortcuts.always_available import AlwaysAvailable
from retrieval.shortcuts.exact_names import ExactNameMatcher
from retrieval.shortcuts.server_mentions import ServerMentionMatcher

from .confidence import (TAIL_FILE, ConfidenceModel, TailCalibration, combiner_file, default_confidence_path,
                         first_logits)
from .decision import KEPT_MESSAGE, Decided, Policy, best_first, decide_search, keep_first_answer, message
from .definitions import FORMATS, Format, build_definitions
from .explain import explanation, query_terms
from .results import ScoredTool, SearchResult, TokenReport
from .tokens import TokenCounter

if TYPE_CHECKING:
    from scorer import Scorer

__all__ = ["Policy", "Pipeline", "load_pipeline", "check_search", "guarded_need"]

log = logging.getLogger(__name__)


def check_search(request: Any, k: int | None, fmt: str) -> None:
    """The first step of a search: its arguments.

    Raises:
        ValueError: empty request, k < 1, unknown format.
    """
    if not isinstance(request, str) or not request.strip():
        raise ValueError("request must be a non-empty string")
    if k is not None and k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: use mcp, openai or anthropic")


# Bump when the code that turns a scorer's logits into probabilities changes (the confidence features, the
# tail's form, the catalog map's application): part of ``Pipeline.model_key``, so catalog calibrations and
# audits measured under other rules are not read. The models themselves are in the key by content.
PROBABILITY_RULES = 1

_PRODUCT_NOISE = {"mcp", "server", "servers", "official", "api", "tools", "tool", "the", "integration", "connector",
                  "plugin", "app", "client", "sdk", "io", "com", "ai", "by", "for", "remote", "unofficial"}


def product_key(server: str) -> str:
    """A server's product, for telling the same product under another name: lower case, the words
    "mcp", "server", "official", "api" and the like left out, what remains joined ("GitHub MCP Server",
    "github-official" and "GitHub" are one product)."""
    words = [w for w in re.split(r"[^a-z0-9]+", re.sub(r"([a-z])([A-Z])", r"\1 \2", server).lower()) if w]
    kept = [w for w in words if w not in _PRODUCT_NOISE]
    return "".join(kept or words)


def guarded_need(request: str, need: str | None, names: ServerMentionMatcher) -> str | None:
    """The need as searched: blank is none, and a platform it names that contradicts the request is left out.

    The need sharpens the request, never overrides it: where the request names a platform ("post it in
    slack") and the need names another ("send a Discord message"), the other platform's name is removed
    from the need (its action stays). A need that names a platform the request does not mention, where
    the request names none, is kept as written (the agent may know the user's context).
    """
    if need is None or not need.strip():
        return None
    need = " ".join(need.split())
    in_request = set(names.find(request, loose=True))
    if not in_request:
        return need
    for server in set(names.find(need, loose=True)) - in_request:
        need = re.sub(rf"(?i)\b{re.escape(server)}\b", " ", need)
    need = " ".join(need.split())
    return need or None


@dataclass(frozen=True)
class _Request:
    """One search, resolved: what was asked, under which policy and eligibility, at which attempt,
    against one snapshot of the catalog (a concurrent upsert replaces the index's catalog, and
    reading it again later could miss a tool this request holds)."""

    text: str
    need: str | None
    eligible: Eligibility
    policy: Policy
    attempt: int                       # 1, or 2 after search_again
    max_results: int
    fmt: Format
    explain: bool
    learned: Any
    version: int
    catalog: Catalog
    mentions: ServerMentionMatcher     # eligible servers
    exact_names: ExactNameMatcher      # eligible tools
    registry_names: ServerMentionMatcher   # eligible servers and the public registry's
    tail_floor: float | None = None    # the floor past the scored head, on the tail's own scale (a map in effect)


@dataclass(frozen=True)
class _Shortcuts:
    """What the request says outright, on the eligible catalog only (an ineligible server or tool
    behaves exactly like one that does not exist)."""

    always: list[ToolId]               # always-available tools whose keywords it contains
    mentioned: list[str]               # eligible servers it names explicitly: the search is restricted to them
    search_eligible: Eligibility
    exact: list[ToolId]                # tools it names exactly
    named: list[str]                   # servers it names explicitly, eligible or public: evidence
    casual: list[str]                  # "send a slack msg": evidence, not a restriction
    absent: list[str]                  # named but not connected: public registry servers only


def tail_rows(hits: Sequence[Hit], p: np.ndarray, top: int | None,
              lifted: set[ToolId]) -> tuple[tuple[ToolId, float], ...]:
    """A search's candidates past the head the cross-encoder read (the first ``top``) with their shipped
    probabilities, less the tools a shortcut ``lifted`` (shown at its floor, not at the tail's level): what a
    catalog's calibration and an audit draw their tail candidate from."""
    if top is None:
        return ()
    return tuple((h.tool_id, float(p[i])) for i, h in enumerate(hits) if i >= top and h.tool_id not in lifted)


def _on_this_scale(previous: Any, mapping: Any) -> Any:
    """The first answer as the second search reads it: when it came from this process (a :class:`SearchResult`,
    whose ``raw_best`` is its first tool's shipped-scale probability, as the MCP gateway keeps it), that first
    tool's probability on this search's scale, so a map saved, dropped or refitted between the two attempts
    (the catalog's, a tenant's) does not move the floor under it. An HTTP client's ``previous`` carries only
    what it was shown, and is read as it is."""
    raw = getattr(previous, "raw_best", None)
    tools = list(getattr(previous, "tools", None) or ())
    if raw is None or not tools or not dataclasses.is_dataclass(tools[0]):
        return previous
    p = float(mapping.apply([raw])[0]) if mapping is not None else float(raw)
    return SimpleNamespace(attempt=getattr(previous, "attempt", 1),
                           tools=[dataclasses.replace(tools[0], probability=p), *tools[1:]])


class Pipeline:
    """Retrieval + scorer + decision over one index. Safe to share between threads."""

    def __init__(self, index: ToolIndex, scorer: "Scorer | None" = None, *, policy: Policy | None = None,
                 always_available: AlwaysAvailable | None = None, public_index: ToolIndex | None = None,
                 confidence: ConfidenceModel | None = None, token_counter: TokenCounter | None = None):
        self.index = index
        self.scorer = scorer
        self.policy = policy or Policy()
        self.always_available = always_available or AlwaysAvailable(())
        unknown = self.always_available.unknown_tools(index.catalog)
        if unknown:
            log.warning("always-available tools not in the catalog are ignored: %s", unknown)
        self._public_index = public_index
        self._confidence_given = confidence is not None
        # the models of an index with example requests, unless it fuses with the day-one weights (a catalog
        # mostly without examples, however it was built): the day-one models were fitted on lists fused so
        examples_kind = index.with_examples and not index.fusion.day_one_weights
        if confidence is None:
            confidence = self._default_confidence(scorer, examples_kind)
        if confidence.uses_logit and scorer is None:
            raise ValueError("this confidence model needs a scorer's logits; pass scorer= or a retrieval-only model")
        self.confidence = confidence
        # Per tool: an index that holds example requests for some tools only (a user's catalog
        # with generated or learned examples) scores the tools without any with the model
        # fitted for indexes without examples.
        self.confidence_noex = self._noex_confidence(scorer) if not self._confidence_given and examples_kind \
            else None
        # Candidates the cross-encoder does not read (past ``policy.score_top``) take the retrieval-only
        # model's probability (fitted over every candidate of the dev lists), re-calibrated for rank, catalog
        # size and the head's expected fits where a tail_calibration.json is shipped (else capped at the
        # lowest scored one); the order puts every scored tool first (decision.best_first), so no unscored
        # tool passes a scored one (benchmarks/agent_flow.py measures ranks 11-100).
        self.tail_confidence = None if self._confidence_given or not confidence.uses_logit else \
            ConfidenceModel.load(default_confidence_path(examples_kind))
        tail_file = Path(getattr(scorer, "path", None) or "") / TAIL_FILE if scorer is not None else None
        self.tail_calibration = TailCalibration.load(tail_file) \
            if self.tail_confidence is not None and tail_file is not None and tail_file.is_file() else None
        # the catalog's own calibration written at index time (retrieval.pipeline.probes), read from the index
        # at each search (an index updated in place drops it): it moves the probabilities and the zone
        # thresholds together, so no decision changes
        self._calibration_override: Any = None
        self._calibration_read: tuple[Any, Any] = (None, None)
        self.tokens = token_counter or TokenCounter()
        self._matchers_version = -1
        self._catalog_tokens: dict[tuple, int] = {}
        self._scoped: dict[tuple, tuple[ServerMentionMatcher, ExactNameMatcher]] = {}
        self._lock = threading.Lock()
        self._refresh_matchers()

    def with_index(self, index: ToolIndex) -> "Pipeline":
        """The same scorer, policy, shortcuts and public index over another index version."""
        return Pipeline(index, self.scorer, policy=self.policy, always_available=self.always_available,
                        public_index=self.public_index, token_counter=self.tokens,
                        confidence=self.confidence if self._confidence_given else None)

    @staticmethod
    def _default_confidence(scorer: "Scorer | None", with_examples: bool = True) -> ConfidenceModel:
        """The confidence model fitted for this kind of index (with or without example
        requests), falling back to the with-examples one where the other was not fitted."""
        path = getattr(scorer, "path", None)
        if scorer is not None and path is not None:
            for name in dict.fromkeys((combiner_file(with_examples), combiner_file(True))):
                if (Path(path) / name).exists():
                    return ConfidenceModel.load(Path(path) / name)
            log.warning("scorer at %s has no combiner.json: using retrieval-only confidence", path)
        own = default_confidence_path(with_examples)
        return ConfidenceModel.load(own if own.exists() else default_confidence_path())

    @staticmethod
    def _noex_confidence(scorer: "Scorer | None") -> ConfidenceModel | None:
        """The without-examples confidence model beside the default one, or None where none was fitted."""
        path = getattr(scorer, "path", None)
        if scorer is not None and path is not None:
            p = Path(path) / combiner_file(False)
            return ConfidenceModel.load(p) if p.exists() else None
        p = default_confidence_path(False)
        return ConfidenceModel.load(p) if p.exists() else None

    @property
    def public_index(self) -> ToolIndex | None:
        """The never-updated public catalog's index: the registry's server names and the no_fit suggestions."""
        return self._public_index

    @public_index.setter
    def public_index(self, value: ToolIndex | None) -> None:
        """Set once it is built (in the background at a cold start): the name matchers are rebuilt with it."""
        with self._lock:
            self._public_index = value
            self._matchers_version = -1

    def _refresh_matchers(self) -> None:
        """Name matchers follow catalog updates (cheap to rebuild)."""
        with self._lock:
            if self._matchers_version == self.index.version:
                return
            catalog = self.index.catalog
            self._mentions = ServerMentionMatcher(catalog.servers)
            self._exact = ExactNameMatcher([t.id for t in catalog.tools])
            self._named = self._registry_matcher(catalog.servers, self._mentions)
            self._catalog_tokens.clear()
            self._scoped.clear()
            self._matchers_version = self.index.version

    def _registry_matcher(self, eligible_servers: Sequence[str],
                          eligible_matcher: ServerMentionMatcher) -> ServerMentionMatcher:
        """Names the request may mention to count against other servers' tools: the eligible
        servers and the public registry's, never a hidden private server."""
        public = self.public_index.catalog.servers if self.public_index is not None else []
        known = set(eligible_servers)
        extra = [p for p in public if p not in known]
        return ServerMentionMatcher(list(eligible_servers) + extra) if extra else eligible_matcher

    def _matchers(self, eligible: Eligibility) -> tuple[ServerMentionMatcher, ExactNameMatcher, ServerMentionMatcher]:
        """Name matchers over the eligible servers and tools only.

        Matching prefers the longest name and refuses ambiguous typos, so a hidden name
        ("GitHub Enterprise", "api.get_user") would otherwise swallow or block a visible one
        and reveal that it exists: with these, a hidden server behaves exactly like one that
        does not exist. Built once per eligibility and index version (~20 ms on 2,797 tools).
        """
        self._refresh_matchers()
        if eligible.unrestricted:
            return self._mentions, self._exact, self._named
        key = (eligible.servers, eligible.tools)
        with self._lock:
            found = self._scoped.get(key)
            if found is None:
                catalog = self.index.catalog
                servers = [s for s in catalog.servers if eligible.allows_server(s)]
                mentions = ServerMentionMatcher(servers)
                found = (mentions, ExactNameMatcher([t.id for t in catalog.tools if eligible.allows(t.id)]),
                         self._registry_matcher(servers, mentions))
                self._scoped[key] = found
                if len(self._scoped) > 256:  # tenants are few; bound it anyway
                    self._scoped.pop(next(iter(self._scoped)))
        return found

    # ------------------------------------------------------------------ scoring

    def named_servers(self, request: str, eligible: Eligibility | None = None, *, loose: bool = False) -> list[str]:
        """Servers ``request`` names explicitly, among the eligible ones and the public registry's
        (``loose``: also names written casually, "send a slack msg")."""
        return self._matchers(eligible or Eligibility())[2].find(request, loose=loose)

    def probabilities(self, request: str, need: str | None, hits: Sequence[Hit],
                      score_top: int | None = None, eligible: Eligibility | None = None) -> np.ndarray:
        """Calibrated P(the tool itself does what was asked) for each hit of one ranked list
        (retrieved under ``eligible``, which bounds the server names that count)."""
        names = self._matchers(eligible or Eligibility())[2]
        p = self._probabilities(request, need, hits, score_top, names.find(request), names.find(request, loose=True),
                                eligible=eligible)
        cal = self.catalog_calibration
        return self._mapped(p, cal, cal, score_top, self.scorer is not None)[1]

    def _mapped(self, p: np.ndarray, mapping: Any, cal: Any, score_top: int | None,
                read: bool) -> tuple[np.ndarray, np.ndarray]:
        """``p`` (the shipped scale) read with ``mapping`` (the catalog's map or a tenant's, or None): ``(key,
        shown)``. Past the head the cross-encoder ``read`` (the first ``score_top``) no map applies (fitted on best
        probabilities, it says nothing about candidates at 0.0002); the tail shows ``cal``'s own level (the
        catalog's, :meth:`~retrieval.pipeline.probes.CatalogCalibration.tail`, or a tenant's that its audits
        measured; the shipped one without either). ``key`` is what the decision reads: the head as shown, the tail's level through the same
        map as the thresholds, so a tail tool joins an answer where its level passes the shipped floor (at the
        shipped level: as shipped); ``shown`` is what the answer says."""
        if not len(p):
            return p, p
        tail = (read and self.tail_calibration is not None and score_top is not None and score_top < len(p))
        level = np.array(p, dtype=np.float64, copy=True)
        if tail and cal is not None:
            level[score_top:] = cal.tail(p[score_top:])
        key = mapping.apply(level) if mapping is not None else level
        if not tail or mapping is None:
            return key, key
        shown = np.array(key, dtype=np.float64, copy=True)
        shown[score_top:] = level[score_top:]
        return key, shown

    def _probabilities(self, request: str, need: str | None, hits: Sequence[Hit], score_top: int | None,
                       named: Sequence[str], mentioned: Sequence[str], catalog: Catalog | None = None,
                       learned: Any = None, eligible: Eligibility | None = None) -> np.ndarray:
        if not hits:
            return np.zeros(0)
        catalog = catalog if catalog is not None else self.index.catalog
        logits = self._logits(request, need, hits, score_top, catalog)
        return self._calibrated(hits, logits, named, mentioned, catalog, learned, score_top, eligible)

    def _logits(self, request: str, need: str | None, hits: Sequence[Hit], score_top: int | None,
                catalog: Catalog) -> np.ndarray | None:
        """The cross-encoder's logits for the first ``score_top`` hits, or None when the confidence
        model does not read them (retrieval-only) or there is nothing to score."""
        if not hits or not self.confidence.uses_logit:
            return None
        return first_logits(self.scorer, request, need, [catalog[h.tool_id] for h in hits], score_top)

    def _calibrated(self, hits: Sequence[Hit], logits: np.ndarray | None, named: Sequence[str],
                    mentioned: Sequence[str], catalog: Catalog, learned: Any = None,
                    score_top: int | None = None, eligible: Eligibility | None = None) -> np.ndarray:
        """Calibrated probabilities: the confidence model for this kind of index, and the one fitted
        without examples for the tools that have none (shipped or learned); past the first
        ``score_top`` (not read by the cross-encoder) the retrieval-only model's, re-calibrated by the
        shipped tail calibration (or, without one, capped at the lowest scored probability). The order
        that puts every scored tool first is :func:`best_first`'s."""
        if not hits:
            return np.zeros(0)
        noex = self.confidence_noex
        tail_applies = (self.tail_confidence is not None and logits is not None and score_top is not None
                        and score_top < len(hits))
        # the eligible count is looked up only where a model reads the catalog's size
        needs_count = (self.confidence.uses_eligible or (noex is not None and noex.uses_eligible)
                       or (tail_applies and (self.tail_calibration is not None or self.tail_confidence.uses_eligible)))
        n_eligible = self._eligible_count(catalog, eligible) if needs_count else None
        p = self.confidence.probabilities(hits, logits, named, mentioned, n_eligible)
        if noex is not None and (logits is not None or not noex.uses_logit):
            bare = np.array([not catalog[h.tool_id].examples and not (learned and h.tool_id in learned) for h in hits])
            if bare.any():
                p = np.where(bare, noex.probabilities(hits, logits, named, mentioned, n_eligible), p)
        if tail_applies:
            tail = self.tail_confidence.probabilities(hits, None, named, mentioned, n_eligible)[score_top:]
            p = p.copy()
            # Each keeps its own calibrated probability; the order puts every scored tool first
            # (decision.best_first): sorted by probability alone, the calibrated tail overtook scored
            # candidates the cross-encoder had rejected and cost test day-one top 5 2.8 points (76.8 ->
            # 74.0 on 250 questions), and capped at the lowest scored one it read 0.08-0.36x the observed
            # fit rate on multi-tool catalogs (0.9.0's agent-flow report).
            if self.tail_calibration is not None:
                ranks = np.array([h.rank for h in hits[score_top:]])
                count = n_eligible if n_eligible is not None else self._eligible_count(catalog, eligible)
                p[score_top:] = self.tail_calibration.probabilities(tail, ranks, count, p[:score_top])
            else:   # no tail calibration shipped: the retrieval-only probability, under every scored one
                p[score_top:] = np.minimum(tail, p[:score_top].min())
        return p

    def _eligible_count(self, catalog: Catalog, eligible: Eligibility | None) -> int:
        """How many tools of ``catalog`` the search may return (memoised per catalog snapshot and eligibility:
        a snapshot lives while its index version does, and a version change clears the memo)."""
        if eligible is None or eligible.unrestricted:
            return len(catalog.tools)
        return self._memo(("eligible", id(catalog), eligible.servers, eligible.tools),
                          lambda: sum(1 for t in catalog.tools if eligible.allows(t.id)))

    def _memo(self, key: tuple, compute: Any) -> int:
        """A per-catalog figure (token totals, eligible counts), computed once and kept in a bounded memo
        that a catalog update clears (:meth:`_refresh_matchers`)."""
        value = self._catalog_tokens.get(key)  # read once: a concurrent refresh may clear the memo
        if value is None:
            value = compute()
            with self._lock:
                self._catalog_tokens[key] = value
                if len(self._catalog_tokens) > 1024:  # bound the memo: tenants are few, but be safe
                    self._catalog_tokens.pop(next(iter(self._catalog_tokens)))
        return value

    def rank(self, request: str, need: str | None, hits: Sequence[Hit],
             score_top: int | None = None, eligible: Eligibility | None = None) -> list[tuple[ToolId, float]]:
        """Hits in the search's order with their probabilities: the candidates the cross-encoder read first,
        each group by probability (ties keep retrieval order; :func:`best_first`)."""
        p = self.probabilities(request, need, hits, score_top, eligible)
        # as the search orders them: the candidates the cross-encoder read first (a retrieval-only model reads none)
        read = score_top if self.confidence.uses_logit else None
        return [(hits[i].tool_id, float(p[i])) for i in best_first(p, read)]

    def score(self, request: str, need: str | None, tools: Sequence[Tool]) -> list[float]:
        """The scorer's calibrated probability for arbitrary (request, tool) pairs.

        Raises:
            ValueError: no scorer model is loaded.
        """
        if self.scorer is None:
            raise ValueError("no scorer model is loaded: start with a model folder (--model) to use /v1/score")
        return self.scorer.score(request, need, tools)

    @property
    def catalog_calibration(self) -> Any:
        """The index's calibration written at index time (:class:`~retrieval.pipeline.probes.CatalogCalibration`)
        when it was measured with this pipeline's scorer, else None; read again whenever the index's changes.
        Assigning one overrides the index's (None: follow the index again)."""
        if self._calibration_override is not None:
            return self._calibration_override
        data = getattr(self.index, "calibration", None)
        source, cal = self._calibration_read
        if data is not source:
            from .probes import CatalogCalibration
            cal = CatalogCalibration.of_index(self.index, self.model_key) if data is not None else None
            self._calibration_read = (data, cal)
        return cal

    @catalog_calibration.setter
    def catalog_calibration(self, value: Any) -> None:
        self._calibration_override = value

    @property
    def model_key(self) -> str:
        """What a catalog calibration (and a tenant's audits) was measured with: the scorer (``name@version``;
        retrieval-only without one), the rules that turn its logits into probabilities
        (:data:`PROBABILITY_RULES`) and a digest of the models those rules read (the confidence models and the
        tail). A release that changes none of them keeps every calibration and audit (0.19.0; until 0.18.0
        toolrank's release was in the key, so each upgrade dropped them)."""
        models = (self.scorer, self.confidence, self.confidence_noex, self.tail_confidence, self.tail_calibration)
        cached = self.__dict__.get("_model_key")
        if cached is None or cached[0] != tuple(map(id, models)) or cached[1] != PROBABILITY_RULES:
            import hashlib
            from dataclasses import asdict

            parts = [m.to_dict() if m is not None else None
                     for m in (self.confidence, self.confidence_noex, self.tail_confidence)]
            parts.append(asdict(self.tail_calibration) if self.tail_calibration is not None else None)
            digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]
            info = self.model_info
            cached = self.__dict__["_model_key"] = (tuple(map(id, models)), PROBABILITY_RULES,
                                                     f"{info['name']}@{info['version']}/p{PROBABILITY_RULES}-{digest}")
        return cached[2]

    @property
    def model_info(self) -> dict[str, Any]:
        if self.scorer is None:
            return {"name": "retrieval-only", "version": "0"}
        info = self.scorer.info
        return {"name": info.get("name", "toolrank-reranker"), "version": str(info.get("version", "0"))}

    # ------------------------------------------------------------------ the request path

    def search(self, request: str, need: str | None = None, *, eligible: Eligibility | None = None,
               previous: SearchResult | Any | None = None, k: int | None = None, explain: bool = False,
               fmt: Format = "mcp", policy: Policy | None = None, learned: Any = None,
               recalibration: Any = None) -> SearchResult:
        """Find the tools that fit ``request`` among the eligible ones, and decide.

        Args:
            request: the user's request as written.
            need: the way to the best answer: the calling agent's one line, written before it has
                seen any tool, of the action the tool must perform and its object ("create a
                calendar event for a team meeting"; a platform only if the user named it). It is
                searched as a query of its own beside the request and read by the scorer; a
                second attempt sends a sharper one. Without it the request is searched alone.
            eligible: the tenant's allowed servers/tools; nothing else is ever returned.
            previous: the result of the first attempt (anything with ``.attempt``); makes this the second.
            k: how many ranked tools to return at most (default: the policy's max_results);
                always-available and exactly named tools come on top of these.
            explain: attach per-tool explanations.
            fmt: definition format: "mcp", "openai" or "anthropic".
            policy: thresholds for this call (e.g. the tenant's), else the pipeline's.
            learned: the tenant's example requests learned from use
                (:class:`~retrieval.index.learned.LearnedExamples`); they change this search only.
            recalibration: the tenant's recalibration learnt from its feedback
                (:class:`~retrieval.pipeline.recalibration.UseRecalibration`), applied to every calibrated
                probability and, with them, to the thresholds (the order and the decisions never change;
                0.16.0: before, decisions read the recalibrated probabilities against the shipped thresholds).
                It reads the shipped scale and supersedes the catalog's calibration (:attr:`catalog_calibration`)
                for this search; its ``tail_shift``, where its audits measured one (0.18.0), supersedes the
                catalog's level of the candidates past the head too.
        Raises:
            ValueError: empty request, k < 1, unknown format.
        """
        t0 = time.perf_counter()
        check_search(request, k, fmt)
        req = self._resolve(request, need, eligible, previous, k, fmt, policy, explain, learned)
        # the catalog's map, unless the tenant has its own from feedback (which reads the shipped scale); read
        # once: a calibration dropped mid-search must not leave the head and the tail on two scales
        cal = self.catalog_calibration
        mapping = recalibration if recalibration is not None else cal
        if mapping is not None:   # the thresholds move with the probabilities: the same decisions
            req = dataclasses.replace(req, policy=mapping.policy(req.policy), tail_floor=req.policy.floor)
        found, hits, logits, probs = self._scored(req)
        raw = probs   # the shipped scale: a tenant's evidence stays comparable whatever map the catalog has
        # the tail's level: the tenant's own where its audits measured one (0.18.0), else the catalog's
        tail_cal = recalibration if getattr(recalibration, "tail_shift", None) is not None else cal
        probs, shown = self._mapped(probs, mapping, tail_cal, req.policy.score_top, logits is not None)
        decided = decide_search(hits, probs, always=found.always, exact=found.exact, mentioned=found.mentioned,
                                attempt=req.attempt, policy=req.policy, max_results=req.max_results,
                                n_scored=req.policy.score_top if logits is not None else None)
        own_scale: set[ToolId] = set()   # tools past the head shown at the tail's own level (a shortcut's floor stays)
        if shown is not probs:
            row_of = {h.tool_id: i for i, h in enumerate(hits)}
            own_scale = {t for t, p, _ in decided.chosen
                         if t in row_of and shown[row_of[t]] != probs[row_of[t]] and p == float(probs[row_of[t]])}
            decided = dataclasses.replace(decided, chosen=[
                (t, float(shown[row_of[t]]) if t in own_scale else p, source) for t, p, source in decided.chosen])
        undecided = decided
        if req.attempt >= 2:   # unchanged unless this search says no_fit
            decided = keep_first_answer(decided, _on_this_scale(previous, mapping), req.catalog, req.eligible,
                                        req.policy, req.max_results)
        kept = decided is not undecided
        result = self._output(req, found, hits, decided, own_scale)
        if kept:
            result = dataclasses.replace(result, message=result.message + KEPT_MESSAGE, raw_best=None)
        if decided.chosen and decided.chosen[0][2] == "ranked" and not kept:   # a kept tool's is another search's
            first = decided.chosen[0][0]
            result = dataclasses.replace(result, raw_best=next((float(raw[i]) for i, h in enumerate(hits)
                                                                if h.tool_id == first), None))
        if logits is not None and self.tail_calibration is not None:
            result = dataclasses.replace(result, tail=tail_rows(hits, raw, req.policy.score_top,
                                                                {*found.exact, *found.always}))
        log.debug("search: %s best=%.3f attempt=%d in %.1f ms", result.decision, decided.best, req.attempt,
                  (time.perf_counter() - t0) * 1e3)
        return result

    # ------------------------------------------------------------------ the steps of a search

    def candidates(self, request: str, need: str | None = None, *, eligible: Eligibility | None = None
                   ) -> tuple[list[Hit], np.ndarray, int | None, set[ToolId]]:
        """A first search's own candidates and their shipped-scale probabilities, as :meth:`search` computes them
        before any map (the need guarded, the search restricted to a server the request names; no tenant's
        learned examples), how many of the first the cross-encoder read (None: all), and the tools a shortcut
        lifts (named exactly, always available): what a catalog's calibration draws its tail from."""
        found, hits, logits, probs = self._scored(self._resolve(request, need, eligible, None, None, "mcp", None,
                                                                False, None))
        return hits, probs, (self.policy.score_top if logits is not None else None), {*found.exact, *found.always}

    def _scored(self, req: _Request) -> tuple[_Shortcuts, list[Hit], np.ndarray | None, np.ndarray]:
        """One search's shortcuts, candidates, the cross-encoder's logits (None without a scorer) and their
        calibrated probabilities on the shipped scale."""
        found = self._shortcuts(req)
        hits = self._retrieve(req, found)
        logits = self._logits(req.text, req.need, hits, req.policy.score_top, req.catalog)
        return found, hits, logits, self._calibrated(hits, logits, found.named, found.casual, req.catalog,
                                                     req.learned, req.policy.score_top, found.search_eligible)

    def _resolve(self, request: str, need: str | None, eligible: Eligibility | None, previous: Any,
                 k: int | None, fmt: Format, policy: Policy | None, explain: bool, learned: Any) -> _Request:
        """The policy and eligibility of this call, the attempt, the name matchers over what is
        eligible, and one snapshot of the catalog for the whole request."""
        policy = policy or self.policy
        eligible = eligible or Eligibility()
        attempt = 1 if previous is None else min(int(getattr(previous, "attempt", 1)) + 1, 2)
        mentions, exact_names, registry_names = self._matchers(eligible)
        version, catalog = self.index.snapshot()
        need = guarded_need(request, need, registry_names)
        return _Request(request, need, eligible, policy, attempt, k or policy.max_results, fmt, explain, learned,
                        version, catalog, mentions, exact_names, registry_names)

    def _shortcuts(self, req: _Request) -> _Shortcuts:
        """Always-available tools, servers named explicitly (they restrict the search), tools named
        exactly, and the servers the request names at all (evidence for the confidence model)."""
        eligible, catalog = req.eligible, req.catalog
        always = [t for t in self.always_available.match(req.text, eligible) if t in catalog]
        mentioned = [s for s in req.mentions.find(req.text) if eligible.allows_server(s)]
        search_eligible = eligible.narrowed_to(mentioned) if mentioned else eligible
        exact = [t for t in req.exact_names.find(req.text, eligible) if t in catalog]
        named = req.registry_names.find(req.text)
        casual = req.registry_names.find(req.text, loose=True)
        absent = [s for s in named if not eligible.allows_server(s)]
        return _Shortcuts(always, mentioned, search_eligible, exact, named, casual, absent)

    def _retrieve(self, req: _Request, found: _Shortcuts) -> list[Hit]:
        """The policy's number of candidates under the (possibly narrowed) eligibility, kept to the
        tools of the snapshot, and every tool named exactly (scored even if retrieval missed it)."""
        if req.learned:
            from retrieval.index.learned import retrieve_with_learned
            hits = retrieve_with_learned(self.index, req.learned, req.text, req.need, found.search_eligible,
                                         k=req.policy.candidates)
        else:
            hits = self.index.retrieve(req.text, req.need, found.search_eligible, k=req.policy.candidates)
        # retrieval may already see a newer version: keep only the tools this snapshot has
        hits = [h for h in hits if h.tool_id in req.catalog]
        retrieved = {h.tool_id for h in hits}
        for tid in found.exact:
            if tid not in retrieved:
                retrieved.add(tid)
                hits.append(Hit(tid, len(hits) + 1, 0.0))
        return hits

    def _output(self, req: _Request, found: _Shortcuts, hits: Sequence[Hit], decided: Decided,
                own_scale: set[ToolId] = frozenset()) -> SearchResult:
        """The chosen tools with their definitions (and explanations), suggestions on ``no_fit``,
        token counts and the message."""
        selected_tools = [req.catalog[c[0]] for c in decided.chosen]
        defs = build_definitions(selected_tools, req.fmt)
        hit_of = {h.tool_id: h for h in hits}
        terms = query_terms(self.index.query_text(req.text, req.need)) if req.explain else set()
        tools_out = []
        for rank, ((tid, p, src), defn) in enumerate(zip(decided.chosen, defs.definitions), 1):
            # a number on the tail's own scale was compared with the floor on that scale
            policy = dataclasses.replace(req.policy, floor=req.tail_floor) if tid in own_scale else req.policy
            expl = explanation(hit_of.get(tid), req.catalog[tid], p, src, decided.decision, policy, terms,
                               with_examples=self.index.with_examples, named=found.named,
                               casual=found.casual) if req.explain else None
            tools_out.append(ScoredTool(tid, p, rank, src, defn, expl))
        suggestions = self._suggest(req.text, req.need, req.eligible, req.policy, found.absent) \
            if decided.decision == "no_fit" else []
        return SearchResult(
            decision=decided.decision, tools=tools_out, best_probability=float(decided.best), attempt=req.attempt,
            tokens=self._token_report(selected_tools, req.eligible, req.fmt, req.version, req.catalog),
            message=message(decided.decision, decided.best, req.policy, found.mentioned, suggestions, found.absent),
            suggestions=suggestions, restricted_to=found.mentioned,
        )

    # ------------------------------------------------------------------ helpers

    def _token_report(self, selected: list[Tool], eligible: Eligibility, fmt: str, version: int,
                      catalog: Catalog) -> TokenReport:
        # The version is in the key: a request that read an older catalog and finishes after an
        # update must not leave its total behind for the new version.
        total = self._memo((version, eligible.servers, eligible.tools, fmt),
                           lambda: self.tokens.total([t for t in catalog.tools if eligible.allows(t.id)], fmt))
        selected_tokens = self.tokens.total(selected, fmt) if selected else 0
        return TokenReport(selected_tokens, total, self.tokens.encoding)

    def _suggest(self, request: str, need: str | None, eligible: Eligibility, policy: Policy,
                 named: Sequence[str] = ()) -> list[str]:
        """Public servers (never a tenant's private ones) that would most likely answer: first
        those the request names (``named``: public, not connected), then by retrieval."""
        if self.public_index is None:
            return []
        have = {product_key(s) for s in self.index.catalog.servers if eligible.allows_server(s)}
        out: list[str] = [s for s in named if product_key(s) not in have][: policy.suggestions]
        for h in self.public_index.retrieve(request, need, None, k=50):
            if len(out) >= policy.suggestions:  # checked first: suggestions=0 means none
                break
            s = h.tool_id.server
            # never a server the user has, nor the same product under another name ("GitHub" vs
            # "github-mcp-server", "Notion Official")
            if s not in out and not eligible.allows_server(s) and product_key(s) not in have:
                out.append(s)
        return out


def load_pipeline(index_dir: str | Path | ToolIndex | None = None,
                  model_dir: str | Path | None | Literal[False] = None, *,
                  policy: Policy | None = None, always_available: AlwaysAvailable | None = None,
                  threads: int = 2, public_suggestions: bool = True) -> Pipeline:
    """A ready pipeline: the given (or default) index and the given (or shipped) scorer.

    ``index_dir`` may also be a loaded :class:`ToolIndex`. ``model_dir=False`` runs without
    a scorer (retrieval-only confidence).
    """
    from retrieval.index.default import public_index

    public = public_index() if public_suggestions else None
    if isinstance(index_dir, ToolIndex):
        index = index_dir
    elif index_dir:
        index = ToolIndex.load(index_dir)
    else:  # the shipped catalog: one copy per process serves both uses; nothing here updates it
        index = public if public is not None else public_index()
    scorer = None
    if model_dir is not False:
        try:
            from scorer import Scorer, default_model_path
        except ImportError as exc:  # never a silent fall-back to retrieval-only confidence
            raise ImportError(f"the scorer cannot be imported ({exc}); install toolrank's dependencies "
                              "(pip install -r requirements.lock), or pass model_dir=False (--no-model) "
                              "for retrieval-only confidence") from exc
        path = Path(model_dir) if model_dir else default_model_path()
        if model_dir or (path / "model.onnx").exists():
            scorer = Scorer.load(path, threads=threads)
        else:
            log.warning("no shipped scorer at %s: using retrieval-only confidence", path)
    # Suggestions read the never-updated public copy: servers added at run time (a tenant's
    # private ones) must never be suggested to anyone.
    return Pipeline(index, scorer, policy=policy, always_available=always_available, public_index=public)
