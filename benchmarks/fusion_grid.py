"""Choose the fusion constants on dev: a grid of RRF k x dense weight, printed as a table.

    python benchmarks/fusion_grid.py [--encoder models/toolrank-encoder] [--split dev]

Each question's BM25 and dense lists (depth 200) are read once per index (with and
without example requests); every grid cell then only re-fuses them. Sorted by the mean
of rank 1 and top 5 over the request alone, with and without examples.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, stamp_line  # noqa: E402

from retrieval.catalog.formats import load_default_catalog  # noqa: E402
from retrieval.evaluation.harness import load_queries  # noqa: E402
from retrieval.index.embedded import ToolIndex  # noqa: E402
from retrieval.index.encoder import OnnxEncoder, default_encoder_path  # noqa: E402
from retrieval.index.fusion import reciprocal_rank_fusion  # noqa: E402

SETTINGS = [(True, False), (True, True), (False, False), (False, True)]  # (examples, need)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encoder", type=Path, default=default_encoder_path())
    p.add_argument("--split", default="dev")
    p.add_argument("--ks", default="5,10,20,40,60")
    p.add_argument("--weights", default="0.7,1,1.5,2,3,5", help="dense weights (BM25's is 1)")
    a = p.parse_args(argv)
    enc = OnnxEncoder(a.encoder)
    qs = load_queries(ROOT / "training" / "data" / "questions.jsonl", split=a.split)
    grid = [(float(k), float(w)) for k in a.ks.split(",") for w in a.weights.split(",")]
    res: dict[tuple, dict] = {cell: {} for cell in grid}
    for ex in (True, False):
        idx = ToolIndex.build(load_default_catalog(with_examples=ex), encoder=enc, with_examples=ex)
        for need in (False, True):
            lists = []
            for q in qs:
                n = q.need if need else None
                b = [h.tool_id for h in idx.retrieve(q.query, n, k=200, stage="bm25")]
                d = [h.tool_id for h in idx.retrieve(q.query, n, k=200, stage="dense")]
                lists.append((b, d, q.target))
            for k, w in grid:
                r1 = t5 = 0
                for b, d, t in lists:
                    top = [r for r, _ in reciprocal_rank_fusion([b, d], [1.0, w], k)[:5]]
                    r1 += top[:1] == [t]
                    t5 += t in top
                res[(k, w)][(ex, need)] = (r1 / len(lists), t5 / len(lists))

    def headline(v):
        return float(np.mean([x for key in ((True, False), (False, False)) for x in v[key]]))

    print(f"{a.split}, {len(qs)} questions, encoder {enc.name}: rank 1 / top 5 of the hybrid (strict)")
    print("| k | dense weight | examples | examples + need | no examples | no examples + need | headline mean |")
    print("|---:|---:|---|---|---|---|---:|")
    for (k, w), v in sorted(res.items(), key=lambda kv: -headline(kv[1])):
        cells = " | ".join(f"{100 * v[s][0]:.1f} / {100 * v[s][1]:.1f}" for s in SETTINGS)
        print(f"| {k:g} | {w:g} | {cells} | {100 * headline(v):.1f} |")
    print("\n" + stamp_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
