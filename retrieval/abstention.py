"""``toolrank eval --abstain``: does the best probability tell "a tool fits" from "none does"?

Each query runs twice through the pipeline: once with every server eligible, once with the
labelled server and every acceptable alternative's server removed (nothing fits). Each run
is the agent loop: the request alone first; on ``search_again``, a second attempt with the need.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable

import numpy as np

from .eligibility import Eligibility
from .evaluate import Query

__all__ = ["auroc", "abstention_report", "coverage_risk", "format_abstention", "plot_coverage_risk"]

log = logging.getLogger(__name__)


def auroc(scores_pos: Iterable[float], scores_neg: Iterable[float]) -> float:
    """P(a random positive scores above a random negative), ties counting half."""
    pos, neg = np.asarray(list(scores_pos), float), np.asarray(list(scores_neg), float)
    if not len(pos) or not len(neg):
        return float("nan")
    allv = np.concatenate([pos, neg])
    order = allv.argsort(kind="mergesort")
    ranks = np.empty(len(allv))
    sorted_v = allv[order]
    i = 0
    while i < len(allv):  # average ranks over ties
        j = i
        while j + 1 < len(allv) and sorted_v[j + 1] == sorted_v[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return float((ranks[:len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def coverage_risk(best: np.ndarray, correct: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Answering only above each threshold: share answered vs share of answers that are wrong.

    One point per query, best first; tied scores are answered together (a threshold cannot
    split them), so each point of a tie group reports the whole group and the curve does not
    depend on the input order.
    """
    best = np.asarray(best, dtype=float)
    order = np.argsort(-best, kind="stable")
    c = np.asarray(correct)[order].astype(float)
    n = np.arange(1, len(c) + 1)
    cov, risk = n / max(len(c), 1), 1.0 - np.cumsum(c) / n
    s = best[order]
    last = np.searchsorted(-s, -s, side="right") - 1   # last index of each point's tie group
    return cov[last], risk[last]


def abstention_report(pipeline, queries: list[Query], *, show_progress: bool = False) -> dict:
    servers = pipeline.index.catalog.servers
    rows = []
    it = queries
    if show_progress:
        from tqdm import tqdm
        it = tqdm(queries, desc="abstain", unit="q", disable=None)
    for q in it:
        drop = {t.server for t in q.lenient_targets}
        for fits, eligible in ((True, Eligibility()), (False, Eligibility.of(servers=[s for s in servers if s not in drop]))):
            first = pipeline.search(q.query, None, eligible=eligible)
            final = first
            if first.decision == "search_again":
                final = pipeline.search(q.query, q.need, eligible=eligible, previous=first)
            top5 = {t.tool_id for t in final.tools[:5]}
            rows.append({
                "fits": fits, "best1": first.best_probability, "best2": final.best_probability,
                "decision1": first.decision, "decision": final.decision,
                "right": fits and bool(top5 & q.lenient_targets),
            })
    fit = [r for r in rows if r["fits"]]
    nofit = [r for r in rows if not r["fits"]]
    best1 = np.array([r["best1"] for r in rows])
    # An answer is right when a fitting tool is eligible and in the top 5; any answer is wrong when none is.
    correct = np.array([r["right"] for r in rows])
    cov, risk = coverage_risk(best1, correct)
    return {
        "n_queries": len(queries),
        "auroc_request": auroc([r["best1"] for r in fit], [r["best1"] for r in nofit]),
        "auroc_final": auroc([r["best2"] for r in fit], [r["best2"] for r in nofit]),
        "no_fit_share_when_fit": float(np.mean([r["decision"] == "no_fit" for r in fit])) if fit else 0.0,
        "no_fit_share_when_none": float(np.mean([r["decision"] == "no_fit" for r in nofit])) if nofit else 0.0,
        "proceed_first_when_fit": float(np.mean([r["decision1"] == "proceed" for r in fit])) if fit else 0.0,
        "proceed_first_when_none": float(np.mean([r["decision1"] == "proceed" for r in nofit])) if nofit else 0.0,
        "top5_when_fit": float(np.mean([r["right"] for r in fit])) if fit else 0.0,
        "coverage": cov.tolist(), "risk": risk.tolist(),
    }


def format_abstention(rep: dict) -> str:
    return "\n".join([
        f"abstention over {rep['n_queries']} queries x 2 (fitting tool eligible / none eligible)",
        f"  AUROC of best probability, request alone:      {rep['auroc_request']:.3f}",
        f"  AUROC of best probability, after the 2nd try:  {rep['auroc_final']:.3f}",
        f"  proceed on 1st try:   fit {rep['proceed_first_when_fit']:.1%}   none {rep['proceed_first_when_none']:.1%}",
        f"  final no_fit share:   fit {rep['no_fit_share_when_fit']:.1%}   none {rep['no_fit_share_when_none']:.1%}",
        f"  top-5 hit when a tool fits (final): {rep['top5_when_fit']:.1%}",
    ])


def plot_coverage_risk(rep: dict, path: str | Path) -> Path | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed (pip install 'toolrank[train]'): no coverage-risk plot")
        return None
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.plot(rep["coverage"], rep["risk"])
    ax.set_xlabel("coverage (share of requests answered)")
    ax.set_ylabel("risk (answered, but no fitting tool in top 5)")
    ax.set_title(f"coverage-risk, AUROC {rep['auroc_request']:.3f}")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
