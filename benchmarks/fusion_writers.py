"""Day-one fusion weights chosen on the mean over writers (issue 35: "choose on the mean over writers, not on
MCP-Zero alone"), then checked once on the sets nothing was chosen on.

    python benchmarks/fusion_writers.py [--n 300] [--json benchmarks/results/fusion_writers.json]

Choosing sets (day one, no example requests): MCP-Zero dev (request alone, and with the blind need) and the
held-out dev corpora API-Bank, RestBench and MCPToolBench++ (request alone, lenient: any labelled tool), each
one writer with equal weight. Each request's four lists (BM25 and dense over the request, and over the need)
are read once at depth 200 with the shipped encoder; every grid cell only re-fuses them (RRF k x dense weight
x the need's dense weight; BM25's weight 1, the need's BM25 0.5). The cells are sorted by the mean rank 1
over the choosing sets; the check sets (MCP-Zero test, UltraTool, ToolAlpaca, Gorilla: never used to choose
anything) are printed for the shipped cell and the chosen one only.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, environment_stamp, stamp_line, write_result  # noqa: E402

CHOOSE = ("mcpzero_dev", "mcpzero_dev_need", "api_bank", "restbench", "mcptoolbenchpp")
CHECK = ("mcpzero_test", "mcpzero_test_need", "ultratool", "toolalpaca", "gorilla_apibench")


def _lists(index, queries, need_of) -> list[tuple]:
    """Each query's (bm25, dense, need_bm25, need_dense) row lists and its acceptable rows."""
    import retrieval.index.embedded as emb

    seen: list = []
    real = emb.fused_lists

    def record(b, d, nb, nd, cfg, learned=None):
        seen.append((b, d, nb, nd))
        return real(b, d, nb, nd, cfg, learned)

    row_of = {t.id: i for i, t in enumerate(index.catalog.tools)}
    out = []
    emb.fused_lists = record
    try:
        for q in queries:
            seen.clear()
            index.retrieve(q.query, need_of(q), k=100)
            b, d, nb, nd = seen[-1]
            out.append((b, d, nb, nd, {row_of[t] for t in q.lenient_targets if t in row_of}))
    finally:
        emb.fused_lists = real
    return out


def _rank1_top5(lists, k: float, w_dense: float, w_need_dense: float, w_need_bm25: float = 0.5) -> tuple[float, float]:
    from retrieval.index.fusion import reciprocal_rank_fusion

    r1 = r5 = 0
    for b, d, nb, nd, ok in lists:
        ranked = [r for r, _ in reciprocal_rank_fusion([b, d, nb, nd], [1.0, w_dense, w_need_bm25, w_need_dense], k)[:5]]
        r1 += bool(ranked) and ranked[0] in ok
        r5 += bool(set(ranked) & ok)
    return 100 * r1 / len(lists), 100 * r5 / len(lists)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=300, help="requests per set (seeded sample; MCP-Zero dev/test: all)")
    p.add_argument("--ks", default="5,10,20")
    p.add_argument("--weights", default="1.5,2,3,4,6,10", help="the request's dense weights (BM25's is 1)")
    p.add_argument("--need-weights", default="1,half", help="the need's dense weights ('half': half the request's)")
    p.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "fusion_writers.json")
    a = p.parse_args(argv)
    from retrieval.catalog.formats import load_default_catalog
    from retrieval.evaluation.corpora import load_corpus
    from retrieval.evaluation.harness import load_queries
    from retrieval.index.embedded import ToolIndex
    from retrieval.index.encoder import OnnxEncoder
    from retrieval.index.fusion import FusionConfig
    from training.needs import read_needs

    needs = read_needs()
    enc = OnnxEncoder()
    lists: dict[str, list] = {}
    mcp = ToolIndex.build(load_default_catalog(with_examples=False), encoder=enc, with_examples=False)
    for split in ("dev", "test"):
        qs = [q for q in load_queries(ROOT / "training" / "data" / "questions.jsonl", split=split) if q.id in needs]
        lists[f"mcpzero_{split}"] = _lists(mcp, qs, lambda q: None)
        lists[f"mcpzero_{split}_need"] = _lists(mcp, qs, lambda q: needs[q.id]["need"])
        print(f"MCP-Zero {split}: {len(qs)} questions", file=sys.stderr, flush=True)
    for name in ("api_bank", "restbench", "mcptoolbenchpp", "ultratool", "toolalpaca", "gorilla_apibench"):
        corpus = load_corpus(name)
        index = ToolIndex(corpus.catalog, enc, with_examples=False)
        qs = list(corpus.questions)
        random.Random(0).shuffle(qs)       # corpora_eval.py's sample
        qs = [dataclasses.replace(q, need=None) for q in qs[: a.n]]
        lists[name] = _lists(index, qs, lambda q: None)
        print(f"{name}: {len(qs)} requests", file=sys.stderr, flush=True)
    shipped = FusionConfig()
    grid = []
    for k in (float(x) for x in a.ks.split(",")):
        for w in (float(x) for x in a.weights.split(",")):
            for nw in a.need_weights.split(","):
                grid.append((k, w, w / 2 if nw == "half" else float(nw)))
    cell_shipped = (shipped.k, shipped.w_dense, shipped.w_need_dense)
    grid = list(dict.fromkeys([*grid, cell_shipped]))   # each cell once ("half" of 2 is 1; the shipped one)
    rows = []
    for cell in grid:
        figs = {s: _rank1_top5(lists[s], *cell) for s in CHOOSE}
        rows.append({"k": cell[0], "w_dense": cell[1], "w_need_dense": cell[2], "sets": figs,
                     "mean_top1": float(np.mean([figs[s][0] for s in CHOOSE])),
                     "mean_top5": float(np.mean([figs[s][1] for s in CHOOSE]))})
    rows.sort(key=lambda r: (-r["mean_top1"], -r["mean_top5"]))
    print("Choosing sets, day one, hybrid rank 1 / top 5 (%, lenient: any labelled or acceptable tool)")
    print("| k | dense w | need dense w | " + " | ".join(CHOOSE) + " | mean rank 1 | mean top 5 |")
    print("|---:|---:|---:|" + "---|" * len(CHOOSE) + "---:|---:|")
    for r in rows:
        mark = " (shipped)" if (r["k"], r["w_dense"], r["w_need_dense"]) == cell_shipped else ""
        print(f"| {r['k']:g} | {r['w_dense']:g}{mark} | {r['w_need_dense']:g} | "
              + " | ".join(f"{r['sets'][s][0]:.1f} / {r['sets'][s][1]:.1f}" for s in CHOOSE)
              + f" | {r['mean_top1']:.1f} | {r['mean_top5']:.1f} |")
    best = rows[0]
    chosen = (best["k"], best["w_dense"], best["w_need_dense"])
    check = {name: {s: _rank1_top5(lists[s], *cell) for s in CHECK} for name, cell in
             (("shipped", cell_shipped), ("chosen", chosen))}
    print(f"\nCheck sets (never used to choose): shipped k={cell_shipped[0]:g}, dense {cell_shipped[1]:g}, need dense "
          f"{cell_shipped[2]:g} against chosen k={chosen[0]:g}, dense {chosen[1]:g}, need dense {chosen[2]:g}")
    print("| set | n | shipped | chosen |\n|---|---:|---:|---:|")
    for s in CHECK:
        print(f"| {s} | {len(lists[s])} | {check['shipped'][s][0]:.1f} / {check['shipped'][s][1]:.1f} | "
              f"{check['chosen'][s][0]:.1f} / {check['chosen'][s][1]:.1f} |")
    env = environment_stamp()
    write_result(a.json, {"environment": env, "choose": CHOOSE, "check": CHECK, "grid": rows, "chosen": chosen,
                          "shipped": cell_shipped, "check_sets": check,
                          "n": {s: len(v) for s, v in lists.items()}}, indent=1)
    print("\n" + stamp_line(env))
    return 0


if __name__ == "__main__":
    sys.exit(main())
