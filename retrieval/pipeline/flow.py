"""The full request path: eligibility -> shortcuts -> retrieve 100 -> score -> decide.

    from retrieval import load_pipeline
    pipe = load_pipeline()                       # shipped catalog index + shipped scorer
    result = pipe.search("list shard allocation for an index")
    result.decision, [(t.tool_id, t.probability) for t in result.tools]
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Sequence

import numpy as np

from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import Catalog, Tool, ToolId
from retrieval.index.bm25 import tokenize
from retrieval.index.embedded import ToolIndex
from retrieval.index.hits import Hit
from retrieval.index.text import tool_document
from retrieval.shortcuts.always_available import AlwaysAvailable
from retrieval.shortcuts.exact_names import ExactNameMatcher
from retrieval.shortcuts.server_mentions import ServerMentionMatcher
from .confidence import ConfidenceModel, combiner_file, default_confidence_path
from .definitions import build_definitions
from .results import ScoredTool, SearchResult, TokenReport
from .tokens import TokenCounter

if TYPE_CHECKING:
    from scorer import Scorer

__all__ = ["Policy", "Pipeline", "load_pipeline"]

log = logging.getLogger(__name__)
Format = Literal["mcp", "openai", "anthropic"]


@dataclass(frozen=True, kw_only=True)
class Policy:
    """Decision thresholds; per deployment, overridable per tenant.

    Defaults were chosen on dev questions (README, "Decision thresholds"): ``proceed``
    when the best calibrated probability reaches ``proceed_threshold``; otherwise
    ``search_again`` once, then ``no_fit``.
    """

    proceed_threshold: float = 0.85   # chosen on dev for 0.3.0 (Youden J against written no-fit requests)
    floor: float = 0.05                 # tools below this join only to reach min_results
    min_results: int = 5
    max_results: int = 10
    candidates: int = 100               # retrieved per request
    # Cross-encoder scores only the first N fused candidates (None: all). The rest take the
    # lowest scored logit, so they rank below every scored one with the same retrieval
    # evidence. 20 is the shipped operating point (docs/results.md, "Speed"): the hybrid's
    # first 20 hold the right tool for ~97% of test questions with examples indexed.
    score_top: int | None = 20
    exact_name_confidence: float = 0.9
    suggestions: int = 3                # public servers named on no_fit

    def __post_init__(self) -> None:
        if not 0.0 <= self.floor <= 1.0 or not 0.0 <= self.proceed_threshold <= 1.0:
            raise ValueError(f"thresholds must lie in [0, 1]: floor={self.floor}, proceed_threshold={self.proceed_threshold}")
        for name in ("exact_name_confidence",):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} is a probability and must lie in [0, 1], got {getattr(self, name)}")
        if self.suggestions < 0:
            raise ValueError(f"suggestions must be 0 or more (0 turns them off), got {self.suggestions}")
        if not 1 <= self.min_results <= self.max_results:
            raise ValueError(f"need 1 <= min_results <= max_results, got {self.min_results} and {self.max_results}")
        if not 1 <= self.candidates <= 1000:
            raise ValueError(f"candidates must be 1..1000, got {self.candidates}")
        if self.score_top is not None and self.score_top < 1:
            raise ValueError(f"score_top must be None (score all) or at least 1, got {self.score_top}")

    def with_overrides(self, **overrides: Any) -> "Policy":
        """A copy with the given fields changed (unknown names raise TypeError)."""
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


def first_logits(scorer: "Scorer", request: str, need: str | None, tools: Sequence[Tool],
                 score_top: int | None) -> np.ndarray:
    """The logits the confidence model reads for ranked ``tools``: the scorer's for the first
    ``score_top`` (all when None), the lowest of those for the rest, so an unscored tool ranks below
    every scored one with the same retrieval evidence."""
    n = len(tools) if score_top is None else min(score_top, len(tools))
    scored = np.asarray(scorer.logits(request, need, list(tools[:n])), dtype=np.float64)
    logits = np.full(len(tools), scored.min() if len(scored) else 0.0)
    logits[:n] = scored
    return logits


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
        self.public_index = public_index
        self._confidence_given = confidence is not None
        if confidence is None:
            confidence = self._default_confidence(scorer, index.with_examples)
        if confidence.uses_logit and scorer is None:
            raise ValueError("this confidence model needs a scorer's logits; pass scorer= or a retrieval-only model")
        self.confidence = confidence
        # Per tool: an index that holds example requests for some tools only (a user's catalog
        # with generated or learned examples) scores the tools without any with the model
        # fitted for indexes without examples.
        self.confidence_noex = self._noex_confidence(scorer) if not self._confidence_given and index.with_examples \
            else None
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
        return self._probabilities(request, need, hits, score_top, names.find(request), names.find(request, loose=True))

    def _probabilities(self, request: str, need: str | None, hits: Sequence[Hit], score_top: int | None,
                       named: Sequence[str], mentioned: Sequence[str], catalog: Catalog | None = None,
                       learned: Any = None) -> np.ndarray:
        if not hits:
            return np.zeros(0)
        catalog = catalog if catalog is not None else self.index.catalog
        logits = None
        if self.confidence.uses_logit:
            logits = first_logits(self.scorer, request, need, [catalog[h.tool_id] for h in hits], score_top)
        p = self.confidence.probabilities(hits, logits, named, mentioned)
        noex = self.confidence_noex
        if noex is not None and (logits is not None or not noex.uses_logit):
            bare = np.array([not catalog[h.tool_id].examples and not (learned and h.tool_id in learned) for h in hits])
            if bare.any():
                p = np.where(bare, noex.probabilities(hits, logits, named, mentioned), p)
        return p

    def rank(self, request: str, need: str | None, hits: Sequence[Hit],
             score_top: int | None = None, eligible: Eligibility | None = None) -> list[tuple[ToolId, float]]:
        """Hits re-ordered by probability, best first (ties keep retrieval order)."""
        p = self.probabilities(request, need, hits, score_top, eligible)
        order = np.argsort(-p, kind="stable")
        return [(hits[i].tool_id, float(p[i])) for i in order]

    def score(self, request: str, need: str | None, tools: Sequence[Tool]) -> list[float]:
        """The scorer's calibrated probability for arbitrary (request, tool) pairs.

        Raises:
            ValueError: no scorer model is loaded.
        """
        if self.scorer is None:
            raise ValueError("no scorer model is loaded: start with a model folder (--model) to use /v1/score")
        return self.scorer.score(request, need, tools)

    @property
    def model_info(self) -> dict[str, Any]:
        if self.scorer is None:
            return {"name": "retrieval-only", "version": "0"}
        info = self.scorer.info
        return {"name": info.get("name", "toolrank-reranker"), "version": str(info.get("version", "0"))}

    # ------------------------------------------------------------------ the request path

    def search(self, request: str, need: str | None = None, *, eligible: Eligibility | None = None,
               previous: SearchResult | Any | None = None, k: int | None = None, explain: bool = False,
               fmt: Format = "mcp", policy: Policy | None = None, learned: Any = None) -> SearchResult:
        """Find the tools that fit ``request`` among the eligible ones, and decide.

        Args:
            request: the user's request as written.
            need: the agent's one-line need, if any.
            eligible: the tenant's allowed servers/tools; nothing else is ever returned.
            previous: the result of the first attempt (anything with ``.attempt``); makes this the second.
            k: how many ranked tools to return at most (default: the policy's max_results);
                always-available and exactly named tools come on top of these.
            explain: attach per-tool explanations.
            fmt: definition format: "mcp", "openai" or "anthropic".
            policy: thresholds for this call (e.g. the tenant's), else the pipeline's.
            learned: the tenant's example requests learned from use
                (:class:`~retrieval.index.learned.LearnedExamples`); they change this search only.
        Raises:
            ValueError: empty request, k < 1, unknown format.
        """
        t0 = time.perf_counter()
        if not isinstance(request, str) or not request.strip():
            raise ValueError("request must be a non-empty string")
        if k is not None and k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        if fmt not in ("mcp", "openai", "anthropic"):
            raise ValueError(f"unknown format {fmt!r}: use mcp, openai or anthropic")
        policy = policy or self.policy
        eligible = eligible or Eligibility()
        attempt = 1 if previous is None else min(int(getattr(previous, "attempt", 1)) + 1, 2)
        max_results = k or policy.max_results
        mentions, exact_names, registry_names = self._matchers(eligible)
        # One snapshot of the catalog for the whole request: a concurrent upsert replaces the
        # index's catalog, and reading it again later could miss a tool this request holds.
        version, catalog = self.index.snapshot()

        # Shortcuts. Each matches the eligible catalog only: an ineligible server or tool
        # behaves exactly like one that does not exist.
        always = [t for t in self.always_available.match(request, eligible) if t in catalog]
        mentioned = [s for s in mentions.find(request) if eligible.allows_server(s)]
        search_eligible = eligible.narrowed_to(mentioned) if mentioned else eligible
        exact = [t for t in exact_names.find(request, eligible) if t in catalog]

        # retrieval may already see a newer version: keep only the tools this snapshot has
        if learned:
            from retrieval.index.learned import retrieve_with_learned
            hits = retrieve_with_learned(self.index, learned, request, need, search_eligible, k=policy.candidates)
        else:
            hits = self.index.retrieve(request, need, search_eligible, k=policy.candidates)
        hits = [h for h in hits if h.tool_id in catalog]
        row_of = {h.tool_id: i for i, h in enumerate(hits)}
        for tid in exact:  # a tool named exactly is always scored, even if retrieval missed it
            if tid not in row_of:
                row_of[tid] = len(hits)
                hits.append(Hit(tid, len(hits) + 1, 0.0))
        named = registry_names.find(request)
        casual = registry_names.find(request, loose=True)   # "send a slack msg": evidence, not a restriction
        probs = self._probabilities(request, need, hits, policy.score_top, named, casual, catalog, learned)
        # Named but not connected: only public registry servers can be here.
        absent = [s for s in named if not eligible.allows_server(s)]

        source: dict[ToolId, str] = {}
        for tid in exact:
            i = row_of[tid]
            probs[i] = max(probs[i], policy.exact_name_confidence)
            source[tid] = "exact_name"
        # A named server restricts the search (above); it does not set the probability: the
        # server's tools are judged like any others, so "protect the main branch on GitHub"
        # does not proceed with create_branch just because GitHub was named.
        in_scope = [i for i, h in enumerate(hits) if h.tool_id.server in mentioned]
        if in_scope:
            top = max(in_scope, key=lambda i: probs[i])
            source.setdefault(hits[top].tool_id, "server_mention")

        order = [int(i) for i in np.argsort(-probs, kind="stable")]
        best = float(probs[order[0]]) if order else 0.0
        if always:
            best = 1.0

        if best >= policy.proceed_threshold:
            decision = "proceed"
        elif attempt == 1:
            decision = "search_again"
        else:
            decision = "no_fit"

        chosen: list[tuple[ToolId, float, str]] = [(t, 1.0, "always_available") for t in always]
        if decision != "no_fit":
            for i in order:
                if len(chosen) >= max_results:
                    break
                tid = hits[i].tool_id
                if tid in always:
                    continue
                p = float(probs[i])
                if p < policy.floor and len(chosen) >= policy.min_results and source.get(tid) != "exact_name":
                    break
                chosen.append((tid, p, source.get(tid, "ranked")))
            for tid in exact:  # named tools stay even when the list is full
                if all(c[0] != tid for c in chosen):
                    chosen.append((tid, float(probs[row_of[tid]]), "exact_name"))

        selected_tools = [catalog[c[0]] for c in chosen]
        defs = build_definitions(selected_tools, fmt)
        hit_of = {h.tool_id: h for h in hits}
        query_terms = set(tokenize([self.index.query_text(request, need)])[0]) if explain else set()
        tools_out = []
        for rank, ((tid, p, src), defn) in enumerate(zip(chosen, defs.definitions), 1):
            expl = (self._explain(hit_of.get(tid), catalog[tid], p, src, decision, policy, query_terms, named,
                                  casual) if explain else None)
            tools_out.append(ScoredTool(tid, p, rank, src, defn, expl))

        suggestions = self._suggest(request, need, eligible, policy, absent) if decision == "no_fit" else []
        result = SearchResult(
            decision=decision, tools=tools_out, best_probability=float(best), attempt=attempt,
            tokens=self._token_report(selected_tools, eligible, fmt, version, catalog),
            message=self._message(decision, best, policy, mentioned, suggestions, absent),
            suggestions=suggestions, restricted_to=mentioned,
        )
        log.debug("search: %s best=%.3f attempt=%d in %.1f ms", decision, best, attempt, (time.perf_counter() - t0) * 1e3)
        return result

    # ------------------------------------------------------------------ helpers

    def _token_report(self, selected: list[Tool], eligible: Eligibility, fmt: str, version: int,
                      catalog: Catalog) -> TokenReport:
        # The version is in the key: a request that read an older catalog and finishes after an
        # update must not leave its total behind for the new version.
        key = (version, eligible.servers, eligible.tools, fmt)
        total = self._catalog_tokens.get(key)  # read once: a concurrent refresh may clear the cache
        if total is None:
            pool = [t for t in catalog.tools if eligible.allows(t.id)]
            total = self.tokens.total(pool, fmt)
            with self._lock:
                self._catalog_tokens[key] = total
                if len(self._catalog_tokens) > 1024:  # bound the cache: tenants are few, but be safe
                    self._catalog_tokens.pop(next(iter(self._catalog_tokens)))
        selected_tokens = self.tokens.total(selected, fmt) if selected else 0
        return TokenReport(selected_tokens, total, self.tokens.encoding)

    def _explain(self, hit: Hit | None, tool: Tool, p: float, src: str, decision: str, policy: Policy,
                 query_terms: set[str], named: Sequence[str] = (), casual: Sequence[str] = ()) -> dict[str, Any]:
        doc_terms = set(tokenize([tool_document(tool, with_examples=self.index.with_examples)])[0])
        out: dict[str, Any] = {
            "probability": round(p, 4),
            "source": src,
            "fused_rank": hit.rank if hit and hit.score else None,
            "fused_score": round(hit.score, 6) if hit and hit.score else None,
            "bm25_rank": hit.bm25_rank if hit else None,
            "bm25_score": round(hit.bm25_score, 4) if hit and hit.bm25_score is not None else None,
            "dense_rank": hit.dense_rank if hit else None,
            "dense_score": round(hit.dense_score, 4) if hit and hit.dense_score is not None else None,
            "matched_terms": sorted(query_terms & doc_terms),
        }
        reasons = {
            "always_available": "always-available tool whose keywords the request contains",
            "server_mention": "best tool of the server the request names (the search was restricted to it; "
                              "the probability is the scorer's own)",
            "exact_name": "the request names this tool exactly",
            "ranked": f"ranked by calibrated probability; decision {decision} "
                      f"(proceed at >= {policy.proceed_threshold}, list floor {policy.floor})",
        }
        out["reason"] = reasons[src]
        if named and tool.server not in named:  # names are public or the tenant's own
            out["reason"] += f"; lowered: the request names {', '.join(named)}, not this tool's server"
        elif tool.server in casual and src == "ranked":
            out["reason"] += f"; raised: the request mentions {tool.server}"
        return out

    def _suggest(self, request: str, need: str | None, eligible: Eligibility, policy: Policy,
                 named: Sequence[str] = ()) -> list[str]:
        """Public servers (never a tenant's private ones) that would most likely answer: first
        those the request names (``named``: public, not connected), then by retrieval."""
        if self.public_index is None:
            return []
        out: list[str] = list(named)[: policy.suggestions]
        for h in self.public_index.retrieve(request, need, None, k=50):
            if len(out) >= policy.suggestions:  # checked first: suggestions=0 means none
                break
            s = h.tool_id.server
            if s not in out and not eligible.allows_server(s):
                out.append(s)
        return out

    @staticmethod
    def _message(decision: str, best: float, policy: Policy, mentioned: list[str], suggestions: list[str],
                 absent: Sequence[str] = ()) -> str:
        scope = f" (restricted to {', '.join(mentioned)}, as the request names it)" if mentioned else ""
        not_connected = (f"the request names {', '.join(absent)}, "
                         f"{'which are' if len(absent) > 1 else 'which is'} not connected") if absent else ""
        if not_connected and decision != "proceed":
            scope += f"; {not_connected}"
        if decision == "proceed":
            return f"Best match {best:.2f} >= {policy.proceed_threshold}: proceed with these tools{scope}."
        if decision == "search_again":
            return (f"Best match {best:.2f} < {policy.proceed_threshold}: no tool clearly fits{scope}. "
                    "Search again with a more specific need, passing this result as `previous`.")
        named = f" {not_connected[0].upper()}{not_connected[1:]}." if not_connected else ""
        tail = f" Servers that could do it: {', '.join(suggestions)}." if suggestions else ""
        return f"No connected tool fits this request (best {best:.2f} after two searches).{named}{tail}"


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
