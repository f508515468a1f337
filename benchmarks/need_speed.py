"""Whole-search time with and without the agent's need, against 0.6.0's default, on one machine in one run.

    python benchmarks/need_speed.py [--n 200] [--threads 2]

The shipped catalog's index with example requests and the shipped scorer; dev questions with their
blind needs. Four ways, interleaved question by question so drift hits each alike: 0.6.0's default
(no need, no tail calibration), this release without a need, with the need, and with the need on an index
that carries a catalog calibration written at index time (0.15.0: the map applied to every probability and
threshold). Prints the p50 / p90 of each and the ratios of the p50s; stamped with the commit and library
versions. The scorer's pair cache is off (the ways search the same requests).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, environment_stamp, stamp_line, write_result  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "need_speed.json")
    a = p.parse_args(argv)
    import onnxruntime

    from retrieval.evaluation.harness import load_queries
    from retrieval.index.default import load_or_build_default
    from retrieval.pipeline.flow import Pipeline
    from retrieval.pipeline.probes import CatalogCalibration
    from retrieval.version import package_version
    from scorer import Scorer
    from training.needs import read_needs

    needs = read_needs()
    qs = [q for q in load_queries(ROOT / "training" / "data" / "questions.jsonl", split="dev") if q.id in needs][: a.n]
    index = load_or_build_default(with_examples=True)
    # one scorer each, with its pair cache off: the three ways search the same requests, and a logit
    # cached by one must not make another look fast
    def scorer():
        return Scorer.load(ROOT / "models" / "toolrank-reranker", threads=a.threads, cache_size=0)

    now = Pipeline(index, scorer())
    old = Pipeline(index, scorer())
    old.tail_confidence = old.tail_calibration = None
    calibrated = Pipeline(index, scorer())
    calibrated.catalog_calibration = CatalogCalibration(1.2, 1.0, 200, 170, 0.7, calibrated.model_key)
    ways = {"0.6.0 default (no need)": lambda q: old.search(q.query),
            "now, no need": lambda q: now.search(q.query),
            "now, with the need": lambda q: now.search(q.query, needs[q.id]["need"]),
            "now, with the need, catalog calibrated": lambda q: calibrated.search(q.query, needs[q.id]["need"])}
    for f in ways.values():   # warm-up
        f(qs[0])
    times: dict[str, list[float]] = {k: [] for k in ways}
    for q in qs:
        for name, f in ways.items():
            t = time.perf_counter()
            f(q)
            times[name].append(1e3 * (time.perf_counter() - t))
    environment = environment_stamp()
    commit = environment["commit"]
    stamp = {"environment": environment, "commit": commit, "package": package_version(), "onnxruntime": onnxruntime.__version__,
             "python": environment["python"], "machine": platform.processor() or platform.machine(),
             "threads": a.threads, "n": len(qs)}
    base = float(np.median(times["0.6.0 default (no need)"]))
    rows = {k: {"p50_ms": float(np.median(v)), "p90_ms": float(np.percentile(v, 90)),
                "ratio_to_060": float(np.median(v)) / base} for k, v in times.items()}
    rows["need over no need"] = {"ratio": rows["now, with the need"]["p50_ms"] / rows["now, no need"]["p50_ms"]}
    rows["calibrated over not"] = {"ratio": rows["now, with the need, catalog calibrated"]["p50_ms"]
                                   / rows["now, with the need"]["p50_ms"]}
    print(f"whole search, {stamp}")
    print("| way | p50 ms | p90 ms | p50 / 0.6.0's |\n|---|---:|---:|---:|")
    for k, r in rows.items():
        if "p50_ms" in r:
            print(f"| {k} | {r['p50_ms']:.1f} | {r['p90_ms']:.1f} | {r['ratio_to_060']:.2f}x |")
    print(f"\nwith the need / without: {rows['need over no need']['ratio']:.2f}x; a catalog calibration / none: "
          f"{rows['calibrated over not']['ratio']:.2f}x")
    write_result(a.out, {**stamp, "rows": rows})
    print("\n" + stamp_line(stamp["environment"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
