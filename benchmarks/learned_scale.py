"""Search time of a tenant that has learned a lot, against a tenant that has learned nothing (issue 36).

    python benchmarks/learned_scale.py [--tools 2797] [--per-tool 20] [--n 40] [--random-vectors]

A tenant with ``--per-tool`` learned requests on each of ``--tools`` shipped tools (the whole catalog by
default), stored the way the service stores them (an ``IndexStore`` version: ``learned.json`` and the
tenant vectors computed at feedback time). Then, as after a restart: the learned examples are read from
disk and the process-wide embedding caches are empty. Measured on the shipped index and scorer (whole
``Pipeline.search``), interleaved request by request:

* the first search after the restart, with and without the learned examples (the pipeline itself is
  warm: both pay the same model start-up, which is not what is compared);
* warm searches: p50 / p90 over ``--n`` dev questions.

The learned requests are the tool's shipped example requests and test-free paraphrases made from them
(``user context`` prefixes, so near-duplicates are not merged); their tenant vectors are computed in
batches here to save set-up time (how they were made does not change what a search reads). Prints a
table stamped with the commit and library versions; JSON in ``benchmarks/results/learned_scale.json``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, environment_stamp, stamp_line, write_result  # noqa: E402

CONTEXTS = ["for the berlin office", "before friday's review", "as the on-call engineer", "for our biggest customer",
            "quickly please", "for the quarterly audit", "from my phone", "for the new intern", "after the outage",
            "in the staging setup", "for the marketing team", "while travelling", "for the board deck",
            "ahead of the launch", "for a support ticket", "on behalf of my manager", "for the weekly sync",
            "during the migration", "for the compliance check", "to close this sprint"]


def learned_requests(tool, n: int) -> list[str]:
    base = list(tool.examples) or [tool.description or tool.name]
    return [f"{CONTEXTS[j % len(CONTEXTS)]}: {base[j % len(base)]}" for j in range(n)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tools", type=int, default=0, help="tools taught (0 = every shipped tool)")
    p.add_argument("--per-tool", type=int, default=20)
    p.add_argument("--n", type=int, default=40, help="dev questions timed warm")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--random-vectors", action="store_true",
                   help="timing only: random tenant vectors under the right keys, the learned requests never "
                        "embedded (set-up in seconds at full size; the answers mean nothing)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "learned_scale.json")
    a = p.parse_args(argv)
    import onnxruntime
    from tqdm import tqdm

    from retrieval.evaluation.harness import load_queries
    from retrieval.index import learned as learned_mod
    from retrieval.index.default import load_or_build_default
    from retrieval.index.learned import LearnedExample, LearnedExamples, vector_key
    from retrieval.index.text import tool_passages
    from retrieval.pipeline.flow import Pipeline
    from retrieval.version import package_version
    from scorer import Scorer
    from serve.index_store import IndexStore

    index = load_or_build_default(with_examples=True)
    tools = list(index.catalog)[: a.tools or None]
    qs = load_queries(ROOT / "training" / "data" / "questions.jsonl", split="dev")[: a.n + 1]
    pipe = Pipeline(index, Scorer.load(ROOT / "models" / "toolrank-reranker", threads=a.threads, cache_size=0))

    t0 = time.perf_counter()
    now = time.time()
    examples = {t.id: [LearnedExample(r, now - i, 1) for i, r in enumerate(learned_requests(t, a.per_tool))]
                for t in tools}
    bounds = {"limit": a.per_tool, "max_total": max(len(tools) * a.per_tool, 1)}
    learned = LearnedExamples(examples, **bounds)
    rng = np.random.default_rng(0)
    vectors = {}
    for t in tqdm(tools, desc="tenant vectors", unit="tool", disable=None):
        reqs = learned.requests(t.id)
        if a.random_vectors:
            c = rng.standard_normal(int(getattr(index.encoder, "dim", 384))).astype(np.float32)
        else:
            c = index.encoder.encode(tool_passages(t, with_examples=index.with_examples) + list(reqs)).mean(0)
        vectors[t.id] = (vector_key(index, t, reqs), c / max(float(np.linalg.norm(c)), 1e-12))
    learned = LearnedExamples(examples, **bounds, vectors=vectors)
    setup_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        store = IndexStore(Path(tmp), LearnedExamples.load, keep=2)
        with store.write_lock():
            store.publish(learned)
        size_mb = sum(f.stat().st_size for f in Path(tmp).rglob("*") if f.is_file()) / 1e6
        pipe.search(qs[0].query)   # the pipeline is warm for both ways
        # "after a restart": the caches are empty and the tenant's examples are read from disk
        learned_mod._VECTORS = learned_mod._TextVectors()
        learned_mod._TOOL_VECTORS.clear()
        t1 = time.perf_counter()
        first_plain = pipe.search(qs[1].query)
        first_plain_s = time.perf_counter() - t1
        t1 = time.perf_counter()
        _, loaded, _ = store.load_newest_readable()
        first = pipe.search(qs[1].query, learned=loaded)
        first_learned_s = time.perf_counter() - t1
    times = {"no learned examples": [], "learned examples": []}
    for q in qs[2:]:
        for name, kw in (("no learned examples", {}), ("learned examples", {"learned": loaded})):
            t1 = time.perf_counter()
            pipe.search(q.query, **kw)
            times[name].append(1000 * (time.perf_counter() - t1))
    p50 = {k: float(np.median(v)) for k, v in times.items()}
    environment = environment_stamp()
    commit = environment["commit"]
    report = {
        "environment": environment, "commit": commit, "toolrank": package_version(), "python": environment["python"],
        "onnxruntime": onnxruntime.__version__, "numpy": np.__version__, "threads": a.threads,
        "tools_taught": len(tools), "per_tool": a.per_tool, "learned_requests": learned.total,
        "store_mb": round(size_mb, 1), "setup_seconds": round(setup_s, 1),
        "first_search_ms": {"no learned examples": round(1000 * first_plain_s, 1),
                            "learned examples (read from disk)": round(1000 * first_learned_s, 1)},
        "first_ratio": round(first_learned_s / first_plain_s, 2),
        "warm_p50_ms": {k: round(v, 1) for k, v in p50.items()},
        "warm_p90_ms": {k: round(float(np.percentile(v, 90)), 1) for k, v in times.items()},
        "warm_ratio": round(p50["learned examples"] / p50["no learned examples"], 2),
        "n": len(qs) - 2, "random_vectors": a.random_vectors,
        "same_first_tool": first.tools[0].tool_id == first_plain.tools[0].tool_id if first.tools and first_plain.tools else None,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    write_result(a.out, report)
    print(f"toolrank {report['toolrank']} @ {commit}; onnxruntime {report['onnxruntime']}, {a.threads} threads")
    print(f"tenant: {learned.total:,} learned requests on {len(tools):,} tools ({a.per_tool} each); store {size_mb:.1f} MB\n")
    print("| | no learned examples | learned examples | ratio | target |")
    print("|---|---:|---:|---:|---:|")
    print(f"| first search after a restart (ms) | {report['first_search_ms']['no learned examples']} | "
          f"{report['first_search_ms']['learned examples (read from disk)']} | {report['first_ratio']} | <= 2 |")
    print(f"| warm p50 (ms, {report['n']} dev questions) | {report['warm_p50_ms']['no learned examples']} | "
          f"{report['warm_p50_ms']['learned examples']} | {report['warm_ratio']} | <= 1.5 |")
    print(f"| warm p90 (ms) | {report['warm_p90_ms']['no learned examples']} | {report['warm_p90_ms']['learned examples']} | | |")
    print("\n" + stamp_line(report["environment"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
