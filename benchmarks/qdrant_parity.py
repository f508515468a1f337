"""The Qdrant backend against the embedded one (bm25s + FAISS): quality parity on the shipped
test questions, then speed at three catalog sizes. Prints tables; not a test.

    python benchmarks/qdrant_parity.py [--quick] [--qdrant-url URL] [--out benchmarks/results/qdrant_parity.json]

Parity (``parity-ex``, ``parity-noex``): the shipped MCP-Zero catalog with and without example
requests, the 700 test questions (``training/data/questions.jsonl``, split test), request alone,
all servers eligible; ``toolrank eval``'s own harness (:func:`retrieval.evaluation.harness.evaluate`) on
both backends with the same encoder, vectors and fusion. The Qdrant collection is filled from
the embedded index's vectors, so the comparison isolates the search. Both IDF modes are run
(``client``: IDF computed by toolrank over the eligible tools, the default; ``engine``: Qdrant's
IDF modifier with a per-query corpus), and BM25 scores are compared with bm25s' on a sample.

Scale (``mcp-zero`` 2,797 tools, ``+smithery`` ~12,800 tools from the Smithery registry files,
``synthetic`` 100,000 tools of Zipf-distributed synthetic words with random unit vectors, as
``benchmarks/retrieval_speed.py`` makes them): build time, hybrid search p50 with a given query
vector (k=100, all servers / a random organisation of 20 servers), one server upserted (one
tool changed), the first search after it, a second replica catching up, the replica's tool
table in memory, and the bytes a tool takes in Qdrant.

Without ``--qdrant-url`` the collection is Qdrant's embedded local mode (``:memory:``), which is
pure Python: its search scans every point (filters and sparse scoring included), so its
latency grows linearly with the catalog and says nothing about a Qdrant server. Each scenario
runs in its own process.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any, Sequence

import numpy as np

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchmarks.retrieval_speed as rs  # noqa: E402  (its catalogs, as it makes them)
from benchmarks.common import (ROOT, environment_stamp, percentile, print_table, run_scenarios,  # noqa: E402
                               stamp_line, timed, write_result)

QUESTIONS = ROOT / "training" / "data" / "questions.jsonl"
SCENARIOS = ("parity-ex", "parity-noex", "mcp-zero", "+smithery", "synthetic")


def qdrant_config(args: argparse.Namespace, name: str, **kw: Any):
    from retrieval.index.qdrant.schema import QdrantConfig

    collection = f"toolrank-bench-{name.strip('+')}-{os.getpid()}"
    if args.qdrant_url:
        return QdrantConfig(url=args.qdrant_url, api_key=os.environ.get("QDRANT_API_KEY"), collection=collection, **kw)
    return QdrantConfig(path=":memory:", collection=collection, **kw)


def drop(index: Any) -> None:
    if index.collection.config.url:   # leave nothing behind on a server
        index.collection.drop()


class TimedEncoder:
    """Counts the seconds spent embedding (the same work for both backends)."""

    def __init__(self, inner: Any):
        self.inner, self.name, self.dim, self.seconds = inner, inner.name, inner.dim, 0.0

    def encode(self, texts: Sequence[str], **kw: Any) -> np.ndarray:
        t0 = time.perf_counter()
        try:
            return self.inner.encode(texts, **kw)
        finally:
            self.seconds += time.perf_counter() - t0


# --------------------------------------------------------------------------- parity


def run_parity(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from retrieval.evaluation.harness import evaluate, load_queries
    from retrieval.index.default import load_or_build_default
    from retrieval.index.qdrant.index import QdrantToolIndex

    with_examples = name == "parity-ex"
    embedded = load_or_build_default(with_examples=with_examples)
    queries = load_queries(QUESTIONS, split="test")
    if args.quick:
        queries = random.Random(args.seed).sample(queries, 40)
    stages = ("bm25", "dense", "hybrid")
    out: dict[str, Any] = {"scenario": name, "examples": with_examples, "tools": len(embedded.catalog), "n": len(queries)}
    per_query: dict[str, list] = {"embedded": []}
    report, secs = timed(lambda: evaluate(embedded, queries, stages=stages, per_query=per_query["embedded"]))
    out["embedded"] = {s: {"top1": m["top1"], "top5": m["top5"], "recall100": m["recall100"]}
                       for s, m in report["stages"].items()}
    out["embedded"]["eval_s"] = secs
    sample = random.Random(args.seed).sample(queries, min(len(queries), 40 if args.quick else 100))
    for idf in ("client", "engine"):
        index, build_s = timed(lambda: QdrantToolIndex.from_index(embedded, config=qdrant_config(args, f"{name}-{idf}",
                                                                                                   idf=idf)))
        run_stages = stages if idf == "client" else ("hybrid",)
        per_query[idf] = []
        report, secs = timed(lambda: evaluate(index, queries, stages=run_stages, per_query=per_query[idf]))
        row: dict[str, Any] = {s: {"top1": m["top1"], "top5": m["top5"], "recall100": m["recall100"]}
                               for s, m in report["stages"].items()}
        row["eval_s"], row["upload_s"] = secs, build_s
        # question by question: where does the labelled tool's hybrid rank differ?
        row["hybrid_rank_differs"] = sum(a["hybrid"] != b["hybrid"] for a, b in zip(per_query["embedded"], per_query[idf]))
        row["delta_points"] = {s: {k: 100 * (row[s][k] - out["embedded"][s][k]) for k in ("top1", "top5")}
                               for s in run_stages}
        row["bm25_vs_bm25s"] = bm25_agreement(embedded, index, [q.query for q in sample])
        out[f"qdrant_{idf}"] = row
        drop(index)
    return out


def _up_to_ties(hits: list, cut: float) -> list[frozenset]:
    """The list as groups of equal scores (to 1e-5 relative), best first, without the group at the
    cut (tools tied with the 100th may or may not make the list, in either backend)."""
    groups: list[tuple[float, set]] = []
    for h in hits:
        if h.bm25_score <= cut * (1 + 1e-5):
            break
        if groups and abs(groups[-1][0] - h.bm25_score) <= 1e-5 * abs(h.bm25_score):
            groups[-1][1].add(h.tool_id)
        else:
            groups.append((h.bm25_score, {h.tool_id}))
    return [frozenset(g) for _, g in groups]


def bm25_agreement(embedded: Any, index: Any, queries: list[str]) -> dict[str, Any]:
    """BM25 lists of both backends on the same questions: the same ranking up to ties, the same scores?

    bm25s orders equal scores arbitrarily (argpartition), the Qdrant backend by catalog row, so
    tools of equal score are compared as a set, and the tie group at the 100th place is left out.
    """
    same = identical = 0
    worst = 0.0
    for q in queries:
        a = embedded.retrieve(q, stage="bm25", k=100)
        b = index.retrieve(q, stage="bm25", k=100)
        sa = {h.tool_id: h.bm25_score for h in a}
        sb = {h.tool_id: h.bm25_score for h in b}
        cut = min([h.bm25_score for h in a[-1:]] + [h.bm25_score for h in b[-1:]], default=0.0) if len(a) == 100 else 0.0
        same += _up_to_ties(a, cut) == _up_to_ties(b, cut)
        identical += [h.tool_id for h in a] == [h.tool_id for h in b]
        for tid in sa.keys() & sb.keys():
            worst = max(worst, abs(sa[tid] - sb[tid]) / max(abs(sa[tid]), 1e-9))
    return {"queries": len(queries), "same_ranking_up_to_ties": same / len(queries),
            "identical_lists": identical / len(queries), "max_relative_score_difference": worst}


# --------------------------------------------------------------------------- scale


def run_scale(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from retrieval.catalog.eligibility import Eligibility
    from retrieval.index.embedded import ToolIndex
    from retrieval.index.qdrant.index import QdrantToolIndex

    info: dict[str, Any] = {}
    if name == "synthetic":
        n = 2_000 if args.quick else args.synthetic_tools
        catalog, words = rs.synthetic_catalog(n, args.seed)
        encoder = TimedEncoder(rs.RandomEncoder(args.seed))
        qrng = np.random.default_rng(args.seed + 1)
        nq = args.synthetic_queries if not args.quick else 3
        queries = [" ".join(words(int(qrng.integers(6, 13)))) for _ in range(nq + 1)]
        qvec = rs.RandomEncoder(args.seed + 2).encode(queries)
        gold: list = [None] * len(queries)
    else:
        from retrieval.index.encoder import OnnxEncoder
        rows = rs.dev_questions((5 if args.quick else args.queries) + 1, args.seed)
        prefer = [r["server"] for r in rows]
        catalog, info = (rs.mcp_zero_catalog(args.quick, prefer) if name == "mcp-zero"
                         else rs.smithery_catalog(args.quick, args.smithery, prefer))
        encoder = TimedEncoder(OnnxEncoder(threads=args.threads))
        queries = [r["query"] for r in rows]
        qvec = encoder.inner.encode(queries)
        gold = [(r["server"], r["tool"]) for r in rows]

    embedded, embedded_build_s = timed(lambda: ToolIndex.build(catalog, encoder=encoder))
    embed_s = encoder.seconds
    index, upload_s = timed(lambda: QdrantToolIndex.from_index(embedded, config=qdrant_config(args, name)))
    replica = QdrantToolIndex.open(index.collection, encoder=encoder)   # another process's view (shares local mode)

    rng = random.Random(args.seed)
    servers = catalog.servers
    orgs = [Eligibility.of(servers=rng.sample(servers, min(20, len(servers)))) for _ in queries]
    out: dict[str, Any] = {"scenario": name, "tools": len(catalog), "servers": len(servers), "info": info,
                           "queries": len(queries) - 1, "embed_s": embed_s}
    for label, backend in (("embedded", embedded), ("qdrant", index)):
        all_ms, org_ms, hits100 = [], [], []
        for i, (q, v) in enumerate(zip(queries, qvec)):
            t0 = time.perf_counter()
            hits = backend.retrieve(q, k=100, query_vector=v)
            t1 = time.perf_counter()
            backend.retrieve(q, k=100, query_vector=v, eligible=orgs[i])
            t2 = time.perf_counter()
            if i == 0:
                continue   # warm-up
            all_ms.append((t1 - t0) * 1e3)
            org_ms.append((t2 - t1) * 1e3)
            if gold[i] is not None:
                hits100.append(any(tuple(h.tool_id) == gold[i] for h in hits))
        out[label] = {"search_p50_ms": percentile(all_ms, 50), "search_p95_ms": percentile(all_ms, 95),
                      "org20_p50_ms": percentile(org_ms, 50), "hit_at_100": statistics.fmean(hits100) if hits100 else None}
    out["embedded"]["build_s"] = embedded_build_s
    out["qdrant"]["upload_s"] = upload_s
    out["qdrant"]["build_s"] = embed_s + upload_s

    # One server upserted, one tool changed, on both backends.
    first = catalog.servers[0]
    tools = catalog.server_tools(first)
    changed = [dataclasses.replace(t, description=t.description + (" (updated)" if i == 0 else ""))
               for i, t in enumerate(tools)]
    desc = catalog.server_descriptions[first]
    _, out["embedded"]["upsert_s"] = timed(lambda: embedded.upsert_server(first, desc, changed))
    _, out["qdrant"]["upsert_s"] = timed(lambda: index.upsert_server(first, desc, changed))
    _, first_after = timed(lambda: index.retrieve(queries[1], k=100, query_vector=qvec[1]))
    _, catch_up = timed(lambda: replica.refresh())
    _, replica_first = timed(lambda: replica.retrieve(queries[1], k=100, query_vector=qvec[1]))
    out["qdrant"].update({"server_tools": len(tools), "first_search_after_upsert_s": first_after,
                          "replica_catch_up_s": catch_up, "replica_first_search_s": replica_first})
    out["qdrant"].update(tool_table_memory(index, encoder))
    out["qdrant"]["bytes_per_tool"] = bytes_per_tool(index)
    drop(index)
    return out


def tool_table_memory(index: Any, encoder: Any) -> dict[str, float]:
    """What a replica holds: the tool table of every tool (no vectors, no postings), measured as
    Python memory retained by opening the collection (and making its view)."""
    from retrieval.index.qdrant.index import QdrantToolIndex

    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    t0 = time.perf_counter()
    other = QdrantToolIndex.open(index.collection, encoder=encoder)
    _ = other.catalog
    open_s = time.perf_counter() - t0
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    held = sum(s.size_diff for s in after.compare_to(before, "filename"))
    del other
    return {"replica_open_s": open_s, "replica_tool_table_mib": held / 2**20,
            "replica_bytes_per_tool": held / max(len(index.catalog), 1)}


def bytes_per_tool(index: Any) -> dict[str, float]:
    """What one tool takes in Qdrant, before indexes: dense floats, sparse pairs, payload JSON."""
    from retrieval.index.qdrant.schema import DENSE, SPARSE

    entries = index._view.entries
    ids = [e.point for e in random.Random(0).sample(entries, min(500, len(entries)))]
    got = index.collection.call(index.collection.client.retrieve, index.collection.name, ids,
                                with_payload=True, with_vectors=True)
    dense = [len(p.vector[DENSE]) * 4 for p in got]
    sparse = [len(p.vector[SPARSE].indices) * 8 if SPARSE in p.vector else 0 for p in got]
    payload = [len(json.dumps(p.payload, ensure_ascii=False).encode()) for p in got]
    return {"dense": statistics.fmean(dense), "sparse": statistics.fmean(sparse),
            "sparse_terms": statistics.fmean(sparse) / 8, "payload": statistics.fmean(payload),
            "total": statistics.fmean(dense) + statistics.fmean(sparse) + statistics.fmean(payload)}


# --------------------------------------------------------------------------- report


def report(results: list[dict[str, Any]]) -> None:
    parity = [r for r in results if r["scenario"].startswith("parity")]
    if parity:
        print("parity on the test questions (request alone, all servers; top 1 / top 5 in %):")
        rows = []
        for r in parity:
            for label in ("embedded", "qdrant_client", "qdrant_engine"):
                m = r.get(label)
                if m is None:
                    continue
                cells = []
                for s in ("bm25", "dense", "hybrid"):
                    cells.append(f"{100 * m[s]['top1']:.1f} / {100 * m[s]['top5']:.1f}" if s in m else "-")
                d = m.get("delta_points", {}).get("hybrid")
                rows.append([("with" if r["examples"] else "no") + " examples", label.replace("_", " idf="),
                             r["n"], *cells, f"{d['top1']:+.1f} / {d['top5']:+.1f}" if d else "-",
                             m.get("hybrid_rank_differs", "-")])
        print_table(["catalog", "backend", "questions", "bm25", "dense", "hybrid", "hybrid vs embedded",
                     "questions ranked differently"], rows)
        print("\nBM25 lists against bm25s (sample of test questions, top 100):")
        print_table(["catalog", "idf", "queries", "same ranking up to ties", "identical lists",
                     "max relative score diff"],
                    [[("with" if r["examples"] else "no") + " examples", idf, a["queries"],
                      f"{a['same_ranking_up_to_ties']:.1%}", f"{a['identical_lists']:.1%}",
                      f"{a['max_relative_score_difference']:.1e}"]
                     for r in parity for idf in ("client", "engine")
                     for a in [r[f"qdrant_{idf}"]["bm25_vs_bm25s"]]])
    scale = [r for r in results if not r["scenario"].startswith("parity")]
    if scale:
        print("\nscale (hybrid, k=100, given query vector; upsert = one server, one tool changed):")
        rows = []
        for r in scale:
            e, q = r["embedded"], r["qdrant"]
            rows.append([r["scenario"], r["tools"], "embedded", e["build_s"], e["search_p50_ms"], e["org20_p50_ms"],
                         e["upsert_s"], "-", "-"])
            rows.append([r["scenario"], r["tools"], "qdrant", q["build_s"], q["search_p50_ms"], q["org20_p50_ms"],
                         q["upsert_s"], q["first_search_after_upsert_s"], q["replica_catch_up_s"]])
        print_table(["catalog", "tools", "backend", "build s", "search p50 ms", "org of 20 p50 ms", "upsert s",
                     "1st search after s", "replica catch-up s"], rows)
        print("\nper tool (Qdrant, before its own indexes) and per replica:")
        print_table(["catalog", "dense B", "sparse B (terms)", "payload B", "total B", "replica tool table MiB",
                     "replica B/tool", "replica open s", "embed s (both backends)"],
                    [[r["scenario"], r["qdrant"]["bytes_per_tool"]["dense"], f"{r['qdrant']['bytes_per_tool']['sparse']:.0f} "
                      f"({r['qdrant']['bytes_per_tool']['sparse_terms']:.0f})", r["qdrant"]["bytes_per_tool"]["payload"],
                      r["qdrant"]["bytes_per_tool"]["total"], r["qdrant"]["replica_tool_table_mib"],
                      r["qdrant"]["replica_bytes_per_tool"], r["qdrant"]["replica_open_s"], r["embed_s"]] for r in scale])


def child_argv(args: argparse.Namespace, scenario: str) -> list[str]:
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", scenario, "--queries", str(args.queries),
            "--threads", str(args.threads), "--seed", str(args.seed), "--synthetic-tools", str(args.synthetic_tools),
            "--synthetic-queries", str(args.synthetic_queries), "--smithery", str(args.smithery)]
    if args.qdrant_url:
        argv += ["--qdrant-url", args.qdrant_url]
    return argv + (["--quick"] if args.quick else [])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny versions of every scenario (smoke test)")
    p.add_argument("--only", choices=SCENARIOS, action="append", help="run only this scenario (repeat)")
    p.add_argument("--qdrant-url", help="a Qdrant server (default: embedded local mode, in memory)")
    p.add_argument("--queries", type=int, default=50, help="measured searches per real catalog (default 50)")
    p.add_argument("--synthetic-queries", type=int, default=8, help="measured searches at 100k tools (default 8)")
    p.add_argument("--synthetic-tools", type=int, default=100_000)
    p.add_argument("--threads", type=int, default=2, help="onnxruntime threads for the encoder")
    p.add_argument("--smithery", type=Path, default=rs.SMITHERY, help="folder of Smithery server JSON files")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, help="also write the results as JSON here (e.g. benchmarks/results/...)")
    p.add_argument("--child", choices=SCENARIOS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.child:  # one scenario in this process; the last stdout line is its JSON
        run = run_parity if args.child.startswith("parity") else run_scale
        print(json.dumps(run(args.child, args)))
        return 0

    scenarios = [s for s in SCENARIOS if not args.only or s in args.only]
    if "+smithery" in scenarios and not args.smithery.is_dir():
        print(f"skipping +smithery: {args.smithery} not found (pass --smithery DIR)", file=sys.stderr)
        scenarios.remove("+smithery")
    from importlib.metadata import version
    where = args.qdrant_url or "embedded local mode (:memory:, pure Python)"
    stamp = environment_stamp(qdrant_client=version("qdrant-client"))
    print(f"Qdrant backend vs embedded{' (QUICK: tiny catalogs)' if args.quick else ''}: Qdrant {where}, "
          f"qdrant-client {version('qdrant-client')}\n{stamp_line(stamp)}\n", flush=True)
    # written after every scenario, so a long run that is stopped keeps what it measured
    results = run_scenarios(scenarios, lambda s: child_argv(args, s), wall_key="wall_s",
                            after_each=(lambda done: write(args, where, done, stamp)) if args.out else None)
    if results is None:
        return 1
    report(results)
    print("\n" + stamp_line(stamp))
    if args.out:
        print(f"\nwrote {args.out}")
    return 0


def write(args: argparse.Namespace, where: str, results: list[dict[str, Any]], stamp: dict[str, Any]) -> None:
    from importlib.metadata import version

    meta = {"quick": args.quick, "qdrant": where, "qdrant_client": version("qdrant-client"), "queries": args.queries,
            "synthetic_queries": args.synthetic_queries, "threads": args.threads,
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "cpus": os.cpu_count(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_result(args.out, {"meta": meta, "results": results}, stamp=stamp)


if __name__ == "__main__":
    sys.exit(main())
