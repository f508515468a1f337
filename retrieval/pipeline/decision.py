"""The decision: the thresholds (:class:`Policy`) and, as pure functions of the calibrated
probabilities and the shortcuts, what to do and which tools go back.

* :func:`shortcut_floors`: a tool named exactly is raised to ``exact_name_confidence``; the best
  tool of a named server is marked as such (its probability stays the scorer's).
* :func:`decide`: three zones of the best probability. At or above ``proceed_threshold``:
  ``proceed``. Below it, the first attempt is ``search_again``; on the second, ``choose`` (the
  tools go back best first: read their definitions and pick, or ask the user) down to the
  ``no_fit_below`` floor, and ``no_fit`` only under it. Between the floor and the threshold the
  tools always go back: a right tool the scorer was unsure of is never thrown away.
* :func:`best_first`: the order: the candidates the cross-encoder read (and tools named exactly)
  before the rest, each group by probability.
* :func:`choose`: the tools returned: always-available ones first, then in that order those at
  or above the floor, padded under it up to ``min_results`` (at most ``max_results``); exactly
  named ones always stay.
* :func:`decide_search`: the three together; its best probability is the first tool's in that
  order. :func:`message`: the decision in plain words.
* :func:`keep_first_answer`: a second attempt that falls under the no-fit floor while the first answer's
  best was at or above it keeps the first answer's tools (``choose``): a sharper need never takes away
  what the first search found.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from retrieval.catalog.model import ToolId
from retrieval.index.hits import Hit

from .results import Decision, Source

__all__ = ["Policy", "Choice", "Decided", "shortcut_floors", "best_first", "decide", "choose", "decide_search",
           "keep_first_answer", "KEPT_MESSAGE", "message"]

# A returned tool: its id, its probability and how it got into the result.
Choice = tuple[ToolId, float, Source]


@dataclass(frozen=True, kw_only=True)
class Policy:
    """Decision thresholds; per deployment, overridable per tenant.

    ``proceed`` when the best calibrated probability reaches ``proceed_threshold``; below it,
    ``search_again`` on the first attempt and, on the second, ``choose`` (the tools, best first)
    unless the best probability is under ``no_fit_below``, the only zone that says ``no_fit``.
    Both were chosen on dev questions and on held-out catalogs of other writers, with and without
    the agent's need (README, "Decision zones"; ``training/thresholds.py``).
    """

    # chosen on the agent flow over the fit catalogs: no-fit requests proceeding <= 10% on every kind (zones_fit.md);
    # read against a blind judge the same rule picks 0.80 (zones_fit_judged.md), which proceeds 8-16 points
    # more often on the held-out catalogs (right proceeds +7 to +14) but lets RestBench's judged no-fit
    # requests proceed 12%: a tenant override (docs/results.md, "Release 0.13.0")
    proceed_threshold: float = 0.83
    # The second attempt's no-fit floor: under it, no_fit; between it and proceed_threshold, choose.
    # Both chosen on the agent flow over catalogs shaped like users' (MCP-Zero dev organisations and the
    # five training corpora, day one, with and without a need): benchmarks/results/zones_fit.md.
    no_fit_below: float = 0.25
    floor: float = 0.05                 # tools below this join only to reach min_results
    min_results: int = 5
    max_results: int = 10
    candidates: int = 100               # retrieved per request
    # Cross-encoder scores only the first N fused candidates (None: all). The rest take the
    # lowest scored logit, so they rank below every scored one with the same retrieval
    # evidence. 10 is the shipped operating point (docs/results.md, "Speed"): on dev the logit
    # over the hybrid's first 10 ranks as well as over 20, at 0.6x the time; the shipped
    # confidence models are fitted on the logits of the first 10 (combiner.json's fitted_on).
    score_top: int | None = 10
    exact_name_confidence: float = 0.9
    suggestions: int = 3                # public servers named on no_fit

    def __post_init__(self) -> None:
        if not 0.0 <= self.floor <= 1.0 or not 0.0 <= self.proceed_threshold <= 1.0:
            raise ValueError(f"thresholds must lie in [0, 1]: floor={self.floor}, proceed_threshold={self.proceed_threshold}")
        if not 0.0 <= self.no_fit_below <= self.proceed_threshold:
            raise ValueError(f"no_fit_below must lie in [0, proceed_threshold={self.proceed_threshold}], "
                             f"got {self.no_fit_below}")
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
        """A copy with the given fields changed (unknown names raise TypeError). A proceed threshold
        set under the no-fit floor, with no floor of its own, takes the floor down with it."""
        overrides = {k: v for k, v in overrides.items() if v is not None}
        if "proceed_threshold" in overrides and "no_fit_below" not in overrides:
            overrides["no_fit_below"] = min(self.no_fit_below, overrides["proceed_threshold"])
        return replace(self, **overrides)


def score_top_flag(n: int | None) -> int | None:
    """A command's ``--score-top``: absent, the shipped policy's (the candidates its confidence models
    were fitted on); 0, every candidate; otherwise N (validated by :class:`Policy`)."""
    if n is None:
        return Policy().score_top
    return Policy(score_top=n or None).score_top


@dataclass(frozen=True)
class Decided:
    """What :func:`decide_search` concluded for one search."""

    decision: Decision
    best: float                 # the best probability (1.0 when an always-available tool matched)
    chosen: list[Choice]        # the tools to return, in order


def shortcut_floors(hits: Sequence[Hit], probs: np.ndarray, exact: Sequence[ToolId], mentioned: Sequence[str],
                    policy: Policy) -> tuple[np.ndarray, dict[ToolId, Source]]:
    """The probabilities with a tool named exactly raised to ``policy.exact_name_confidence`` (a copy),
    and the source of each tool a shortcut brought in.

    A named server restricts the search; it does not set the probability: the server's tools are
    judged like any others, so "protect the main branch on GitHub" does not proceed with
    create_branch just because GitHub was named. Its best tool is only marked ``server_mention``.
    """
    probs = np.array(probs, copy=True)
    row_of = {h.tool_id: i for i, h in enumerate(hits)}
    source: dict[ToolId, Source] = {}
    for tid in exact:
        i = row_of[tid]
        probs[i] = max(probs[i], policy.exact_name_confidence)
        source[tid] = "exact_name"
    in_scope = [i for i, h in enumerate(hits) if h.tool_id.server in mentioned]
    if in_scope:
        top = max(in_scope, key=lambda i: probs[i])
        source.setdefault(hits[top].tool_id, "server_mention")
    return probs, source


def best_first(probs: np.ndarray, n_scored: int | None = None, lifted: Sequence[int] = ()) -> np.ndarray:
    """Candidate positions best first: the ones the cross-encoder read (the first ``n_scored`` in retrieval
    order, and the ``lifted`` positions: tools named exactly) before the rest, each group by probability,
    ties in retrieval order. A candidate the cross-encoder did not read keeps its own calibrated probability
    but never passes one it read (``n_scored=None``: all were read)."""
    key = np.asarray(probs, dtype=np.float64)
    if n_scored is not None and n_scored < len(key):
        head = np.zeros(len(key), dtype=bool)
        head[:n_scored] = True
        head[list(lifted)] = True
        key = np.where(head, key + 2.0, key)   # probabilities lie in [0, 1]: every read one sorts first
    return np.argsort(-key, kind="stable")


def decide(best: float, attempt: int, policy: Policy) -> Decision:
    """``proceed`` at or above the threshold; below it, ``search_again`` on the first attempt; on the
    second, ``choose`` down to the no-fit floor and ``no_fit`` only under it."""
    if best >= policy.proceed_threshold:
        return "proceed"
    if attempt == 1:
        return "search_again"
    return "choose" if best >= policy.no_fit_below else "no_fit"


def choose(hits: Sequence[Hit], probs: np.ndarray, source: dict[ToolId, Source], *, always: Sequence[ToolId],
           exact: Sequence[ToolId], decision: Decision, policy: Policy, max_results: int,
           order: np.ndarray | None = None) -> list[Choice]:
    """The tools to return: always-available ones (1.0), then, unless ``no_fit``, the hits at or above
    ``policy.floor`` (and any named exactly) in ``order`` (default: by probability, ties keep retrieval
    order) up to ``max_results``, padded with the next ones under the floor up to ``min_results``, all in
    ``order``; a tool named exactly stays even when the list is full. (With the order by probability this
    is "stop below the floor once ``min_results`` are in"; with the read candidates first, a tail tool
    above the floor is not pushed out by read ones under it.)"""
    chosen: list[Choice] = [(t, 1.0, "always_available") for t in always]
    if decision == "no_fit":
        return chosen
    row_of = {h.tool_id: i for i, h in enumerate(hits)}
    ranked = [int(i) for i in (best_first(probs) if order is None else order) if hits[int(i)].tool_id not in always]
    room = max(0, max_results - len(chosen))
    fits = [i for i in ranked if probs[i] >= policy.floor or source.get(hits[i].tool_id) == "exact_name"][:room]
    taken = set(fits)
    pad = [i for i in ranked if i not in taken][:max(0, min(policy.min_results, max_results) - len(chosen) - len(fits))]
    taken.update(pad)
    for i in (i for i in ranked if i in taken):
        tid = hits[i].tool_id
        chosen.append((tid, float(probs[i]), source.get(tid, "ranked")))
    for tid in exact:
        if all(c[0] != tid for c in chosen):
            chosen.append((tid, float(probs[row_of[tid]]), "exact_name"))
    return chosen


def decide_search(hits: Sequence[Hit], probs: np.ndarray, *, always: Sequence[ToolId], exact: Sequence[ToolId],
                  mentioned: Sequence[str], attempt: int, policy: Policy, max_results: int,
                  n_scored: int | None = None) -> Decided:
    """The decision and the tools to return for ranked ``hits`` with calibrated ``probs``.

    Args:
        hits: the retrieved candidates (tools named exactly included), in retrieval order.
        probs: the calibrated probability of each hit.
        always: always-available tools that matched (they make the best probability 1.0).
        exact: tools the request names exactly (each among ``hits``).
        mentioned: servers the request names explicitly (the search was restricted to them).
        attempt: 1 for a first search, 2 after ``search_again``.
        max_results: the most tools to return (tools named exactly may come on top).
        n_scored: how many of the first hits the cross-encoder read (None: all); the rest follow them
            (:func:`best_first`), and the best probability is the first one's.
    """
    probs, source = shortcut_floors(hits, probs, exact, mentioned, policy)
    row_of = {h.tool_id: i for i, h in enumerate(hits)}
    order = best_first(probs, n_scored, [row_of[t] for t in exact])
    best = float(probs[order[0]]) if len(order) else 0.0
    if always:
        best = 1.0
    decision = decide(best, attempt, policy)
    chosen = choose(hits, probs, source, always=always, exact=exact, decision=decision, policy=policy,
                    max_results=max_results, order=order)
    return Decided(decision, best, chosen)


def message(decision: Decision, best: float, policy: Policy, mentioned: Sequence[str], suggestions: Sequence[str],
            absent: Sequence[str] = ()) -> str:
    """The decision in plain words for the agent (and its user)."""
    scope = f" (restricted to {', '.join(mentioned)}, as the request names it)" if mentioned else ""
    not_connected = (f"the request names {', '.join(absent)}, "
                     f"{'which are' if len(absent) > 1 else 'which is'} not connected") if absent else ""
    if not_connected and decision != "proceed":
        scope += f"; {not_connected}"
    if decision == "proceed":
        return f"Best match {best:.2f} >= {policy.proceed_threshold:.3g}: proceed with these tools{scope}."
    if decision == "search_again":
        return (f"Best match {best:.2f} < {policy.proceed_threshold:.3g}: no tool clearly fits{scope}. "
                "Search again with a sharper need (the exact action and its object), passing this result as "
                "`previous`; these tools are the best so far.")
    if decision == "choose":
        return (f"Best match {best:.2f} after two searches: these tools may fit but none clearly does{scope}. "
                "Read their definitions and use the one that does what was asked; if none does, or two "
                "could, ask the user.")
    named = f" {not_connected[0].upper()}{not_connected[1:]}." if not_connected else ""
    tail = f" Servers that could do it: {', '.join(suggestions)}." if suggestions else ""
    return f"No connected tool fits this request (best {best:.2f} after two searches).{named}{tail}"


KEPT_MESSAGE = (" The sharper need found nothing as likely, so these are the first search's tools, with the"
                " probabilities it gave them.")


def keep_first_answer(decided: Decided, previous: Any, catalog: Any, eligible: Any, policy: Policy,
                      max_results: int) -> Decided:
    """A second attempt's ``no_fit`` turned into ``choose`` with the first answer's tools, when that answer's
    decision probability (its first tool's) was at or above the no-fit floor; otherwise ``decided`` unchanged.
    (A first answer at or above ``proceed_threshold``, searched again anyway, keeps ``proceed``.)

    ``previous`` is the first attempt's answer (anything with ``.tools`` of ``.tool_id``, ``.probability``
    and ``.source``; an HTTP client's ``previous.tools`` with their probabilities): only tools still in
    ``catalog`` and allowed by ``eligible`` are kept, in the order the first answer gave them, each with
    the probability it gave (an absent one counts 0); always-available ones come from this search. A
    second search that reaches the floor itself keeps its own answer: the floor reads the sharper need
    first. Measured in the agent-flow benchmark (the right first answers a second search would have
    emptied: README, "Decision zones").
    """
    if decided.decision != "no_fit":
        return decided
    kept: list[Choice] = []
    for t in getattr(previous, "tools", None) or ():
        tid = getattr(t, "tool_id", None)
        source = getattr(t, "source", "ranked")
        try:
            p = float(getattr(t, "probability", 0.0) or 0.0)
        except (TypeError, ValueError):
            continue
        if tid is None or source == "always_available" or not 0.0 <= p <= 1.0:
            continue
        if tid in catalog and eligible.allows(tid) and all(k[0] != tid for k in kept):
            kept.append((tid, p, source))
    always = [c for c in decided.chosen if c[2] == "always_available"]
    kept = kept[:max(0, max_results - len(always))]
    # the first answer's decision probability is its first tool's (what the agent was shown, and what the
    # zone replay reads); a first answer that proceeded proceeds again
    if not kept or kept[0][1] < policy.no_fit_below:
        return decided
    return Decided(decide(kept[0][1], 2, policy), kept[0][1], always + kept)
