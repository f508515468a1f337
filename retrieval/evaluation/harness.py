"""The evaluation harness behind ``toolrank eval``: rank-based metrics per stage and style."""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import CatalogError, ToolId
from retrieval.index.embedded import ToolIndex
from retrieval.index.hits import Hit
from retrieval.jsonl import read_jsonl
from .paired import paired_top1

__all__ = ["Query", "load_queries", "evaluate", "format_report", "STAGES", "draw_organisation"]

log = logging.getLogger(__name__)
STAGES = ("bm25", "dense", "hybrid", "logit", "retrieval-confidence", "scorer")
# Stages that re-rank the hybrid's 100: the cross-encoder logit alone, the confidence model
# without the logit (retrieval evidence only, fitted on dev), and the whole scorer.
RERANKING_STAGES = ("logit", "retrieval-confidence", "scorer")

# A reranker takes (request, need, hybrid hits, eligibility) and returns tool ids best first.
Reranker = Callable[[str, "str | None", list[Hit], Eligibility | None], list[ToolId]]


@dataclass(frozen=True)
class Query:
    id: str
    query: str
    target: ToolId
    need: str | None = None
    style: str | None = None
    split: str | None = None
    acceptable: tuple[ToolId, ...] = field(default=())

    @property
    def lenient_targets(self) -> set[ToolId]:
        return {self.target, *self.acceptable}


def load_queries(path: str | Path, split: str | None = None) -> list[Query]:
    """Read a queries JSONL file; ``split`` keeps only that split's lines."""
    path = Path(path)
    if not path.exists():
        raise CatalogError(f"{path}: queries file not found")
    out = []
    try:
        rows = read_jsonl(path)
    except ValueError as exc:  # names the file and the line
        raise CatalogError(str(exc)) from None
    for lineno, row in rows:
        if not isinstance(row, dict):
            raise CatalogError(f"{path}, line {lineno}: not a JSON object")
        missing = [k for k in ("query", "server", "tool") if not isinstance(row.get(k), str)]
        if missing:
            raise CatalogError(f"{path}, line {lineno}: missing or non-string field(s) {', '.join(missing)}")
        if split is not None and row.get("split") != split:
            continue
        acceptable = row.get("acceptable") or []
        if not isinstance(acceptable, list) or not all(
                isinstance(a, dict) and isinstance(a.get("server"), str) and isinstance(a.get("tool"), str)
                for a in acceptable):
            raise CatalogError(f"{path}, line {lineno}: 'acceptable' must be a list of "
                               '{"server": ..., "tool": ...} objects')
        acc = tuple(ToolId(a["server"], a["tool"]) for a in acceptable)
        out.append(Query(str(row.get("id", lineno)), row["query"], ToolId(row["server"], row["tool"]),
                         row.get("need"), row.get("style"), row.get("split"), acc))
    if split is not None and not out:
        raise CatalogError(f"{path}: no queries with split {split!r}")
    return out


def draw_organisation(servers: Sequence[str], must_include: str, size: int, rng: np.random.Generator) -> list[str]:
    """A random organisation of ``size`` servers that includes ``must_include``."""
    others = [s for s in servers if s != must_include]
    size = min(size, len(servers))
    picked = rng.choice(len(others), size=size - 1, replace=False) if size > 1 else []
    return [must_include] + [others[i] for i in picked]


def _rank_of(ranked: list[ToolId], targets: set[ToolId]) -> int | None:
    for i, tid in enumerate(ranked, 1):
        if tid in targets:
            return i
    return None


def _summarise(ranks: list[int | None], lenient: list[int | None], styles: list[str | None]) -> dict:
    def frac(rs, n):
        return float(np.mean([r is not None and r <= n for r in rs])) if rs else 0.0
    by_style: dict[str, dict] = {}
    groups: dict[str, list[int | None]] = defaultdict(list)
    for r, s in zip(ranks, styles):
        groups[s or "-"].append(r)
    for s, rs in sorted(groups.items()):
        by_style[s] = {"top1": frac(rs, 1), "top5": frac(rs, 5), "n": len(rs)}
    return {
        "top1": frac(ranks, 1), "top5": frac(ranks, 5), "top20": frac(ranks, 20), "recall100": frac(ranks, 100),
        "top1_lenient": frac(lenient, 1), "top5_lenient": frac(lenient, 5),
        "by_style": by_style,
    }


def pipeline_rerankers(stages: Sequence[str], pipe: Any = None, retrieval_only: Any = None,
                       score_top: int | None = None) -> dict[str, Reranker]:
    """The re-ranking stages of ``stages`` over pipelines: ``scorer`` (``pipe``'s probabilities),
    ``logit`` (``pipe``'s cross-encoder logit alone) and ``retrieval-confidence`` (the probabilities
    of ``retrieval_only``, the same confidence model without the logit)."""
    out: dict[str, Reranker] = {}

    def ranked_by(pipeline: Any) -> Reranker:
        return lambda request, need, hits, eligible: [
            tid for tid, _ in pipeline.rank(request, need, hits, score_top, eligible)]

    if "scorer" in stages:
        out["scorer"] = ranked_by(pipe)
    if "logit" in stages:
        if pipe is None or pipe.scorer is None:
            raise ValueError("the 'logit' stage needs a scorer model (not --no-model)")

        def logit_alone(request, need, hits, eligible):
            # the logit re-ranks the candidates the pipeline scores (the first score_top); the rest follow
            n = len(hits) if score_top is None else min(score_top, len(hits))
            z = np.asarray(pipe.scorer.logits(request, need, [pipe.index.catalog[h.tool_id] for h in hits[:n]]))
            return [hits[i].tool_id for i in np.argsort(-z, kind="stable")] + [h.tool_id for h in hits[n:]]
        out["logit"] = logit_alone
    if "retrieval-confidence" in stages:
        out["retrieval-confidence"] = ranked_by(retrieval_only)
    return out


def evaluate(index: ToolIndex, queries: Iterable[Query], *, stages: Sequence[str] = ("bm25", "dense", "hybrid"),
             use_need: bool = False, org_size: int | None = None, seed: int = 0,
             reranker: Reranker | None = None, show_progress: bool = False,
             per_query: list | None = None, rerankers: dict[str, Reranker] | None = None) -> dict:
    """Rank every query through each stage and report the labelled tool's position.

    Raises:
        ValueError: an unknown stage, the ``scorer`` stage without a reranker, or an
            ``org_size`` below 1.
    """
    queries = list(queries)
    if org_size is not None and org_size < 1:
        raise ValueError(f"org_size must be at least 1 server (or None for all servers), got {org_size}")
    bad = [s for s in stages if s not in STAGES]
    if bad:
        raise ValueError(f"unknown stage(s) {bad}; choose from {', '.join(STAGES)}")
    rerankers = dict(rerankers or {})
    if reranker is not None:
        rerankers["scorer"] = reranker
    for stage in stages:
        if stage in RERANKING_STAGES and stage not in rerankers:
            raise ValueError(f"the {stage!r} stage needs a model: pass --model DIR or ship one in models/")
    missing = [q.target for q in queries if q.target not in index.catalog]
    if missing:
        raise CatalogError(f"{len(missing)} queries name tools not in the index, e.g. {missing[0]}")
    rng = np.random.default_rng(seed)
    servers = index.catalog.servers
    ranks = {s: [] for s in stages}
    lenient = {s: [] for s in stages}
    it: Iterable[Query] = queries
    if show_progress:
        from tqdm import tqdm
        it = tqdm(queries, desc="eval", unit="q", disable=None)
    for q in it:
        need = q.need if use_need else None
        eligible = None
        if org_size:
            eligible = Eligibility.of(servers=draw_organisation(servers, q.target.server, org_size, rng))
        qv = index.embed_query(q.query, need) if any(s in stages for s in ("dense", "hybrid", *RERANKING_STAGES)) else None
        hybrid_hits = None
        row = {"id": q.id, "style": q.style}
        for stage in stages:
            if stage in RERANKING_STAGES:
                if hybrid_hits is None:
                    hybrid_hits = index.retrieve(q.query, need, eligible, k=100, query_vector=qv)
                ranked = rerankers[stage](q.query, need, hybrid_hits, eligible)
            else:
                hits = index.retrieve(q.query, need, eligible, k=100, stage=stage, query_vector=qv)
                if stage == "hybrid":
                    hybrid_hits = hits
                ranked = [h.tool_id for h in hits]
            r = _rank_of(ranked, {q.target})
            ranks[stage].append(r)
            lenient[stage].append(_rank_of(ranked, q.lenient_targets))
            row[stage] = r
            row[f"{stage}_lenient"] = lenient[stage][-1]
        if per_query is not None:
            per_query.append(row)
    styles = [q.style for q in queries]
    report = {
        "n": len(queries), "org_size": org_size, "seed": seed, "use_need": use_need,
        "examples": index.with_examples,
        "stages": {s: _summarise(ranks[s], lenient[s], styles) for s in stages},
    }
    # The last stage (the scorer, when asked for) against each earlier one, question by question.
    if len(stages) > 1:
        last = stages[-1]
        report["paired_top1"] = {"stage": last, "against": {
            s: paired_top1(ranks[last], ranks[s], styles) for s in stages[:-1]}}
    return report


def format_report(report: dict) -> str:
    """The report as a readable table."""
    w = max(8, *(len(s) for s in report["stages"]))
    lines = [
        f"queries: {report['n']}   org size: {report['org_size'] or 'all servers'}   seed: {report['seed']}   "
        f"need: {'yes' if report['use_need'] else 'no (request alone)'}   examples indexed: {'yes' if report['examples'] else 'no'}",
        "",
        f"{'stage':<{w}} {'top1':>7} {'top5':>7} {'top20':>7} {'rec100':>7} {'top1 len':>9} {'top5 len':>9}",
    ]
    for stage, m in report["stages"].items():
        lines.append(f"{stage:<{w}} {m['top1']:>7.1%} {m['top5']:>7.1%} {m['top20']:>7.1%} {m['recall100']:>7.1%} "
                     f"{m['top1_lenient']:>9.1%} {m['top5_lenient']:>9.1%}")
    styles = sorted({s for m in report["stages"].values() for s in m["by_style"]})
    if styles and styles != ["-"]:
        lines += ["", "by style (top1 / top5):", f"{'stage':<{w}} " + " ".join(f"{s:>17}" for s in styles)]
        for stage, m in report["stages"].items():
            cells = []
            for s in styles:
                v = m["by_style"].get(s)
                cells.append(f"{v['top1']:>7.1%} / {v['top5']:>6.1%}" if v else f"{'-':>17}")
            lines.append(f"{stage:<{w}} " + " ".join(cells))
        counts = next(iter(report["stages"].values()))["by_style"]
        lines.append(f"{'n':<{w}} " + " ".join(f"{counts.get(s, {}).get('n', 0):>17}" for s in styles))
    paired = report.get("paired_top1")
    if paired:
        lines += ["", f"paired, top 1: {paired['stage']} against each stage, questions won / lost "
                      "(exact McNemar p), overall" + (" and by style" if styles and styles != ["-"] else "") + ":"]
        shown = styles if styles and styles != ["-"] else []
        lines.append(f"{'against':<{w}} {'all':>17} " + " ".join(f"{s:>17}" for s in shown))
        for other, c in paired["against"].items():
            cells = [c] + [c["by_style"].get(s) for s in shown]
            lines.append(f"{other:<{w}} " + " ".join(
                f"{'+%d / -%d (%.2g)' % (v['wins'], v['losses'], v['p']):>17}" if v else f"{'-':>17}" for v in cells))
    return "\n".join(lines)
