"""The agent flow end to end: what an agent following the documented protocol ends up with.

For each request, on a given catalog (an eligibility over an index), the flow an agent follows:
attempt 1; on ``search_again``, attempt 2 with a sharper need (``previous`` = attempt 1). Three
ways of calling, the ``mode``:

* ``need``: the agent's need on both attempts (``need`` first, the sharper ``need2`` second), as
  ``find_tools`` asks for it;
* ``late_need``: the request alone first, the need only on the second attempt (0.6.0's flow);
* ``request_only``: an old caller that never sends a need.

Answerable requests (a labelled tool is eligible) and no-fit requests (none is) are run alike.
:func:`flow_report` gives the shares that matter to an agent: the right tool in the final answer,
answers that end empty, right first answers that end empty, no-fit requests that proceed; the ECE
of the best probability; and, over every candidate past the scored head of the first attempt (ranks
11-100 at the default ``score_top``), the mean
predicted probability against the observed share that fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Iterable, Literal, Sequence

import numpy as np

from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import ToolId
from .stats import ece

__all__ = ["Case", "Mode", "MODES", "run_case", "run_flow", "replay", "flow_report", "format_flow", "shippable_rows"]

Mode = Literal["need", "late_need", "request_only"]
MODES: tuple[Mode, ...] = ("need", "late_need", "request_only")


@dataclass(frozen=True)
class Case:
    """One request on one catalog: ``targets`` empty means nothing eligible fits (a no-fit case)."""

    id: str
    request: str
    catalog: str                       # the catalog kind it is reported under
    eligible: Eligibility = field(default_factory=Eligibility)
    targets: frozenset[ToolId] = frozenset()
    need: str | None = None
    need2: str | None = None

    @property
    def answerable(self) -> bool:
        return bool(self.targets)


def _needs(case: Case, mode: Mode) -> tuple[str | None, str | None]:
    if mode == "need":
        return case.need, case.need2 or case.need
    if mode == "late_need":
        return None, case.need
    return None, None


def run_case(pipe: Any, case: Case, mode: Mode, *, tail: bool = True, always_second: bool = False,
             first_only: bool = False) -> dict:
    """One request through the flow; ``tail``: also every first-attempt candidate's probability (past the scored head);
    ``always_second``: run the second attempt even after a first ``proceed`` and record its best probability
    and whether it holds the right tool (``best2``, ``right2``: for choosing thresholds offline; that search is
    told only the attempt, so its answer is its own: :func:`replay` keeps the first answer as the pipeline would);
    ``first_only``: the first attempt alone (its decision stands as the final one: for calibration at scale)."""
    n1, n2 = _needs(case, mode)
    first = pipe.search(case.request, n1, eligible=case.eligible)
    # for the replay (always_second) the second search's own answer: the first answer is kept by replay()
    previous = SimpleNamespace(attempt=first.attempt) if always_second else first
    second = pipe.search(case.request, n2, eligible=case.eligible, previous=previous) \
        if not first_only and (first.decision == "search_again" or always_second) else None
    final = second if second is not None and first.decision == "search_again" else first
    ranked = [t for t in first.tools if t.source != "always_available"]
    final_tools = [t.tool_id for t in final.tools if t.source != "always_available"]
    n_eligible = sum(1 for t in pipe.index.catalog.tools if case.eligible.allows(t.id))
    row = {
        "id": case.id, "catalog": case.catalog, "mode": mode, "answerable": case.answerable,
        "best1": float(first.best_probability), "decision1": first.decision, "decision": final.decision,
        "right1": bool(ranked) and ranked[0].tool_id in case.targets,
        "right_any1": any(t.tool_id in case.targets for t in ranked),
        "right_final": any(t in case.targets for t in final_tools),
        "empty": not final_tools, "attempts": final.attempt, "n_eligible": n_eligible,
        "tools1": [[t.tool_id.server, t.tool_id.tool] for t in ranked[:5]],   # what a judge reads (benchmarks/judged_flow.py)
    }
    if second is not None:
        row["best2"] = float(second.best_probability)
        row["right2"] = any(t.tool_id in case.targets for t in second.tools)
        row["tools2"] = [[t.tool_id.server, t.tool_id.tool] for t in second.tools if t.source != "always_available"][:5]
    if tail and case.answerable and pipe.policy.score_top is not None:   # no head read alone: no tail
        hits = pipe.index.retrieve(case.request, n1, case.eligible, k=pipe.policy.candidates)
        p = pipe.probabilities(case.request, n1, hits, pipe.policy.score_top, case.eligible)
        top = pipe.policy.score_top   # the head: the candidates the cross-encoder reads
        row["head_p"] = [round(float(x), 6) for x in p[:top]]
        row["tail_p"] = [round(float(x), 6) for x in p[top:]]
        row["tail_fit"] = [h.tool_id in case.targets for h in hits[top:]]
        row["tail_ids"] = [[h.tool_id.server, h.tool_id.tool] for h in hits[top:top + 10]]   # a judge reads these
        past = [(i + 1, h.tool_id) for i, h in enumerate(hits) if i >= top and h.tool_id in case.targets]
        row["tail_labelled"] = [[t.server, t.tool] for _, t in past]   # the labelled tools past the head
        row["tail_labelled_ranks"] = [rank for rank, _ in past]        # (a judge reads those past tail_ids)
        tail_model = getattr(pipe, "tail_confidence", None)
        if tail_model is not None:   # the retrieval-only probability, uncapped (what a tail fit reads), as served
            names = pipe._matchers(case.eligible)[2]
            r = tail_model.probabilities(hits, None, names.find(case.request), names.find(case.request, loose=True),
                                         n_eligible)
            row["tail_r"] = [round(float(x), 6) for x in r[top:]]
        row["fit_rank"] = next((i + 1 for i, h in enumerate(hits) if h.tool_id in case.targets), None)
    return row


def run_flow(pipe: Any, cases: Iterable[Case], modes: Sequence[Mode] = MODES, *, show_progress: bool = False,
             desc: str = "flow", tail: bool = True, always_second: bool = False, first_only: bool = False) -> list[dict]:
    cases = list(cases)
    it = [(c, m) for m in modes for c in cases]
    if show_progress:
        from tqdm import tqdm
        it = tqdm(it, desc=desc, unit="request", disable=None)
    return [run_case(pipe, c, m, tail=tail, always_second=always_second, first_only=first_only) for c, m in it]


def replay(rows: Sequence[dict], proceed: float, floor: float) -> list[dict]:
    """What the flow would have ended with under other thresholds (rows run with ``always_second``;
    the probabilities do not depend on the thresholds): per row the final decision and whether the
    answer holds the right tool or is empty. A second attempt under the floor after a first at or above
    it keeps the first answer (:func:`~retrieval.pipeline.decision.keep_first_answer`; rows written before
    0.13.0 lack ``right_any1`` and count its first tool only)."""
    out = []
    for r in rows:
        if r["best1"] >= proceed:
            d, right, empty = "proceed", r["right1"], False
        else:
            b2 = r.get("best2", r["best1"])
            d = "proceed" if b2 >= proceed else ("choose" if b2 >= floor else "no_fit")
            right, empty = (r.get("right2", False), False) if d != "no_fit" else (False, True)
            if d == "no_fit" and r["best1"] >= floor:   # decision.keep_first_answer: the first answer's tools
                d, right, empty = "choose", r.get("right_any1", r["right1"]), False
        out.append({**r, "decision": d, "right_final": right, "empty": empty,
                    "decision1": "proceed" if r["best1"] >= proceed else "search_again"})
    return out


def _share(xs: Sequence[bool]) -> float:
    return float(np.mean(xs)) if len(xs) else float("nan")


def flow_report(rows: Sequence[dict]) -> dict[str, dict[str, dict]]:
    """Per catalog kind and mode: the agent-flow shares, ECE and the calibration past the scored head."""
    out: dict[str, dict[str, dict]] = {}
    for kind in sorted({r["catalog"] for r in rows}):
        for mode in MODES:
            rs = [r for r in rows if r["catalog"] == kind and r["mode"] == mode]
            if not rs:
                continue
            ans = [r for r in rs if r["answerable"]]
            none = [r for r in rs if not r["answerable"]]
            right1 = [r for r in ans if r["right1"]]
            proceed = [r for r in ans if r["decision1"] == "proceed" or r["decision"] == "proceed"]
            rep: dict[str, Any] = {
                "answerable": len(ans), "no_fit_requests": len(none),
                "rank1": _share([r["right1"] for r in ans]),
                "proceed": _share([r["decision"] == "proceed" for r in ans]),
                "proceed_right": _share([r["right1"] if r["decision1"] == "proceed" else r["right_final"]
                                         for r in proceed]),
                "right_in_final": _share([r["right_final"] for r in ans]),
                "end_empty": _share([r["empty"] for r in ans]),
                "right_first_end_empty": _share([r["empty"] for r in right1]),
                "right_first_end_empty_n": sum(r["empty"] for r in right1),
                "right1_n": len(right1),
                "decisions": {d: _share([r["decision"] == d for r in ans])
                              for d in ("proceed", "choose", "no_fit", "search_again")},
                "nofit_proceed": _share([r["decision"] == "proceed" or r["decision1"] == "proceed" for r in none]),
                "nofit_end_no_fit": _share([r["decision"] == "no_fit" for r in none]),
                "nofit_end_choose": _share([r["decision"] == "choose" for r in none]),
            }
            # ECE of the best probability over the answerable requests: P(the first tool is right)
            best = np.array([r["best1"] for r in ans])
            y = np.array([r["right1"] for r in ans], dtype=float)
            rep["ece_best"] = float(ece(best, y)) if len(ans) else float("nan")
            rep["nofit_mean_best"] = float(np.mean([r["best1"] for r in none])) if none else float("nan")
            tp = [p for r in ans for p in r.get("tail_p", [])]
            tf = [f for r in ans for f in r.get("tail_fit", [])]
            if tp:
                observed = float(np.mean(tf))
                rep["tail_predicted"], rep["tail_observed"] = float(np.mean(tp)), observed
                rep["tail_ratio"] = float(np.mean(tp) / observed) if observed > 0 else float("inf")
                rep["tail_fit_n"] = int(sum(tf))
            ranks = [r.get("fit_rank") for r in ans]
            rep["fit_past_10"] = _share([rk is not None and rk > 10 for rk in ranks])
            out.setdefault(kind, {})[mode] = rep
    return out


def format_flow(rep: dict[str, dict[str, dict]]) -> str:
    """A Markdown table, one row per catalog kind and mode."""
    head = ("| catalog | mode | answerable / no-fit | rank 1 | proceed (right) | right tool in final | ends empty | "
            "right first, ends empty | no-fit: proceed / no_fit | ECE best | past the head (11-100) pred/obs |")
    lines = [head, "|" + "---|" * 11]
    for kind, modes in rep.items():
        for mode, r in modes.items():
            tail = (f"{r['tail_predicted']:.4f}/{r['tail_observed']:.4f} ({r['tail_ratio']:.2f}x)"
                    if "tail_ratio" in r else "-")
            lines.append(
                f"| {kind} | {mode} | {r['answerable']} / {r['no_fit_requests']} | {r['rank1']:.1%} | "
                f"{r['proceed']:.1%} ({r['proceed_right']:.1%}) | {r['right_in_final']:.1%} | {r['end_empty']:.1%} | "
                f"{r['right_first_end_empty']:.1%} ({r['right_first_end_empty_n']}/{r['right1_n']}) | "
                f"{r['nofit_proceed']:.1%} / {r['nofit_end_no_fit']:.1%} | {r['ece_best']:.3f} | {tail} |")
    return "\n".join(lines)


def shippable_rows(rows: Sequence[dict]) -> list[dict]:
    """The rows as a result file in the repository may hold them: the tool names of a corpus without a licence
    (``corpora.shippable``) replaced by stable digests, which still match the judge's items (same digests)."""
    from .corpora import shippable_tool

    return [{**r, **{key: [shippable_tool(r["catalog"], t) for t in r[key]]
                     for key in ("tools1", "tools2", "tail_ids", "tail_labelled") if key in r}} for r in rows]

