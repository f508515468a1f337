"""``toolrank eval --abstain``: does the best probability tell "a tool fits" from "none does"?

Each query runs twice through the pipeline: once with every server eligible, once with the
labelled server and every acceptable alternative's server removed (nothing fits). Each run
is the agent loop: the request alone first; on ``search_again``, a second attempt with the need.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from retrieval.catalog.eligibility import Eligibility
from .harness import Query
from .stats import auroc, ece

__all__ = ["auroc", "abstention_report", "coverage_risk", "format_abstention", "plot_coverage_risk",
           "NoFitRequest", "load_nofit", "nofit_report", "format_nofit"]

log = logging.getLogger(__name__)


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


# --------------------------------------------------------------------------- real no-fit requests

class NoFitRequest:
    """A request written so that no tool of the catalog fulfils it (benchmarks/data/nofit/)."""

    __slots__ = ("id", "query", "kind", "split", "style")

    def __init__(self, id: str, query: str, kind: str, split: str, style: str):
        self.id, self.query, self.kind, self.split, self.style = id, query, kind, split, style


def load_nofit(path: str | Path, split: str | None = None) -> list[NoFitRequest]:
    """No-fit requests from JSONL (``id``, ``query``, ``kind``, ``split``, ``style``), one split or all."""
    from retrieval.jsonl import read_jsonl

    out = []
    for n, r in read_jsonl(path):
        try:
            req = NoFitRequest(str(r["id"]), str(r["query"]), str(r.get("kind", "")), str(r.get("split", "")),
                               str(r.get("style", "")))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{n}: not a no-fit request line ({exc})") from None
        if split is None or req.split == split:
            out.append(req)
    if not out:
        raise ValueError(f"{path}: no no-fit requests" + (f" in split {split!r}" if split else ""))
    return out


def nofit_report(pipeline, queries: list[Query], nofit: list[NoFitRequest], *, show_progress: bool = False) -> dict:
    """Answerable questions against requests written to have no tool, every server eligible.

    The first search's best probability separates them (AUROC); decisions are the first
    search's (the agent loop's second try needs a need line, which written no-fit requests
    do not have). A proceed on an answerable question is right when a fitting tool is in the top 5.
    """
    items = [("fit", q.query, q) for q in queries] + [("none", r.query, r) for r in nofit]
    if show_progress:
        from tqdm import tqdm
        items = tqdm(items, desc="no-fit", unit="q", disable=None)
    rows = []
    for side, text, item in items:
        res = pipeline.search(text, None)
        top5 = {t.tool_id for t in res.tools[:5]}
        rows.append({"side": side, "kind": getattr(item, "kind", "fit"), "best": res.best_probability,
                     "decision": res.decision,
                     "right": side == "fit" and bool(top5 & item.lenient_targets),
                     "best_fits": side == "fit" and bool(res.tools) and res.tools[0].tool_id in item.lenient_targets})
    fit = [r for r in rows if r["side"] == "fit"]
    none = [r for r in rows if r["side"] == "none"]
    share = lambda rs, d: float(np.mean([r["decision"] == d for r in rs])) if rs else float("nan")
    out = {"n_fit": len(fit), "n_none": len(none),
           "auroc": auroc([r["best"] for r in fit], [r["best"] for r in none]),
           "decisions": {side: {d: share(rs, d) for d in ("proceed", "search_again", "no_fit")}
                         for side, rs in (("fit", fit), ("none", none))},
           "top5_among_proceed_fit": (float(np.mean([r["right"] for r in fit if r["decision"] == "proceed"]))
                                      if any(r["decision"] == "proceed" for r in fit) else float("nan")),
           "by_kind": {}}
    for kind in sorted({r["kind"] for r in none}):
        rs = [r for r in none if r["kind"] == kind]
        out["by_kind"][kind] = {"n": len(rs), "auroc": auroc([r["best"] for r in fit], [r["best"] for r in rs]),
                                "proceed": share(rs, "proceed")}
    best = np.array([r["best"] for r in rows])
    cov, risk = coverage_risk(best, np.array([r["right"] for r in rows]))
    out["coverage"], out["risk"] = cov.tolist(), risk.tolist()
    # ECE of the best probability on the mixture: it claims "the best tool fits", true only where
    # the request is answerable and the first tool is a fitting one
    out["ece_best"] = ece(best, np.array([r["best_fits"] for r in rows], float), n_bins=10)
    return out


def format_nofit(rep: dict) -> str:
    d = rep["decisions"]
    lines = [f"real no-fit requests: {rep['n_none']} written to have no tool vs {rep['n_fit']} answerable (first search)",
             f"  AUROC of best probability: {rep['auroc']:.3f}   ECE of best probability (mixture): {rep['ece_best']:.3f}",
             f"  answerable: proceed {d['fit']['proceed']:.1%}  search_again {d['fit']['search_again']:.1%}  "
             f"no_fit {d['fit']['no_fit']:.1%}   top-5 among proceeds {rep['top5_among_proceed_fit']:.1%}",
             f"  no tool:    proceed {d['none']['proceed']:.1%}  search_again {d['none']['search_again']:.1%}  "
             f"no_fit {d['none']['no_fit']:.1%}"]
    for kind, k in rep["by_kind"].items():
        lines.append(f"  {kind:10s} n={k['n']:4d}  AUROC {k['auroc']:.3f}  proceed {k['proceed']:.1%}")
    return "\n".join(lines)
