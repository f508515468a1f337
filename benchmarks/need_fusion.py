"""Choose how the agent's need joins retrieval, on dev questions with needs written blind.

    python benchmarks/need_fusion.py [--split dev] [--needs training/data/needs_blind.jsonl]

Per question the lists are read once (depth 200): BM25 and dense over the request alone, over the
request with the need joined (0.6.0's query), and over the need alone. Each cell of the grid re-fuses
them as :class:`FusionConfig` would: the request's lists (alone or joined) at weights 1 / 2, plus the
need's own lists at ``w_need_bm25`` / ``w_need_dense``. Hybrid rank 1 / top 5 (strict), with and
without example requests; sorted by the mean of the four figures.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, stamp_line, write_result  # noqa: E402

from retrieval.evaluation.harness import load_queries  # noqa: E402
from retrieval.index.default import load_or_build_default  # noqa: E402
from retrieval.index.fusion import reciprocal_rank_fusion  # noqa: E402
from training.needs import read_needs  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--split", default="dev")
    p.add_argument("--needs", type=Path, default=ROOT / "training" / "data" / "needs_blind.jsonl")
    p.add_argument("--field", default="need", help="need or need2")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    needs = read_needs(a.needs)
    qs = [q for q in load_queries(ROOT / "training" / "data" / "questions.jsonl", split=a.split)
          if needs.get(q.id, {}).get(a.field)]
    cells = [("no need", False, 0.0, 0.0)]
    for joint in (True, False):
        for wb in (0.0, 0.5, 1.0):
            for wd in (0.0, 1.0, 2.0, 3.0):
                if not joint and wb == wd == 0:
                    continue
                cells.append((f"{'joined' if joint else 'request'} + need {wb:g}/{wd:g}", joint, wb, wd))
    res: dict[str, dict] = {c[0]: {} for c in cells}
    for ex in (True, False):
        idx = load_or_build_default(with_examples=ex, show_progress=True)
        lists = []
        for q in qs:
            n = needs[q.id][a.field]
            def both(text):
                return ([h.tool_id for h in idx.retrieve(text, None, k=200, stage="bm25")],
                        [h.tool_id for h in idx.retrieve(text, None, k=200, stage="dense")])
            lists.append((both(q.query), both(f"{q.query}\n{n}"), both(n), q.target))
        for name, joint, wb, wd in cells:
            r1 = t5 = 0
            for alone, joined, need, t in lists:
                b, d = joined if joint else alone
                top = [r for r, _ in reciprocal_rank_fusion([b, d, need[0], need[1]], [1.0, 2.0, wb, wd], 10.0)[:5]]
                r1 += top[:1] == [t]
                t5 += t in top
            res[name][ex] = (r1 / len(lists), t5 / len(lists))
    print(f"{a.split}, {len(qs)} questions with blind {a.field}s: hybrid rank 1 / top 5 (strict, %)")
    print("| lists | examples | day one | mean |")
    print("|---|---|---|---:|")
    mean = {k: float(np.mean([*v[True], *v[False]])) for k, v in res.items()}
    for name in sorted(res, key=lambda k: -mean[k]):
        v = res[name]
        print(f"| {name} | {100 * v[True][0]:.1f} / {100 * v[True][1]:.1f} | {100 * v[False][0]:.1f} / "
              f"{100 * v[False][1]:.1f} | {100 * mean[name]:.1f} |")
    print("\n" + stamp_line())
    if a.json:
        write_result(a.json, {k: {"examples": v[True], "day_one": v[False]} for k, v in res.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
