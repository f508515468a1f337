"""Quality against speed of whole searches: which scorer, how many candidates scored.

    python benchmarks/frontier.py --model default=models/toolrank-reranker --model fast=models/toolrank-reranker-fast \
        [--score-top 20,30] [--split dev] [--sample 200] [--threads 2]

For each configuration it times `Pipeline.search` end to end (retrieval of 100, scoring,
decision, definitions and tokens) on real requests, one at a time, and reports p50/p90 ms
with rank 1 / top 5 of the labelled tool. Prints a markdown table; `--json` writes it too.
Run it alone on the machine: the other core's load shows in the times.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, median, percentile, stamp_line, write_result  # noqa: E402

from retrieval.evaluation.harness import load_queries  # noqa: E402
from retrieval.index.default import load_or_build_default  # noqa: E402
from retrieval.pipeline.decision import Policy  # noqa: E402
from retrieval.pipeline.flow import Pipeline  # noqa: E402


def measure(pipe: Pipeline, queries, policy: Policy) -> dict:
    times, top1, top5 = [], [], []
    for q in queries:
        t0 = time.perf_counter()
        res = pipe.search(q.query, policy=policy, k=10)
        times.append((time.perf_counter() - t0) * 1e3)
        ranked = [t.tool_id for t in res.tools]
        top1.append(bool(ranked[:1]) and ranked[0] in q.lenient_targets)
        top5.append(bool(set(ranked[:5]) & q.lenient_targets))
    return {"p50_ms": median(times), "p90_ms": percentile(times, 90),
            "top1_lenient": float(np.mean(top1)), "top5_lenient": float(np.mean(top5)), "n": len(queries)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="append", default=[], metavar="NAME=DIR")
    p.add_argument("--score-top", default="", help="comma-separated N: also score only the first N candidates")
    p.add_argument("--split", default="dev")
    p.add_argument("--sample", type=int, default=200)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    from scorer import Scorer

    index = load_or_build_default()
    queries = load_queries(ROOT / "training" / "data" / "questions.jsonl", split=a.split)
    if a.sample and a.sample < len(queries):
        queries = random.Random(0).sample(queries, a.sample)
    configs = [("retrieval only (no model)", Pipeline(index, None), Policy())]
    tops = [int(x) for x in a.score_top.split(",") if x]
    for spec in a.model:
        name, _, path = spec.partition("=")
        pipe = Pipeline(index, Scorer.load(path, threads=a.threads))
        configs.append((f"{name}: all 100 scored", pipe, Policy()))
        for n in tops:
            configs.append((f"{name}: first {n} scored", pipe, Policy(score_top=n)))
    rows = []
    for label, pipe, policy in configs:
        for q in queries[:5]:  # warm-up
            pipe.search(q.query, policy=policy)
        m = measure(pipe, queries, policy)
        rows.append({"config": label, **m})
        print(f"{label}: {m}", file=sys.stderr, flush=True)
    print(f"\n{a.split} questions, request alone, n={len(queries)}, {a.threads} threads\n")
    print("| configuration | search p50 ms | p90 ms | rank 1 (lenient) | top 5 (lenient) |\n|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['config']} | {r['p50_ms']:.0f} | {r['p90_ms']:.0f} | {100 * r['top1_lenient']:.1f} | {100 * r['top5_lenient']:.1f} |")
    print("\n" + stamp_line())
    if a.json:
        write_result(a.json, {"rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
