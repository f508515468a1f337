"""Retrieval speed and memory at three catalog sizes. Prints tables; not a test.

    python benchmarks/retrieval_speed.py [--quick] [--out benchmarks/results/retrieval_speed.json]

Scenarios, each run in a fresh subprocess so its memory is its own:

(a) ``mcp-zero``: the shipped MCP-Zero catalog with its example requests (2,797 tools,
    6 passages each), real ONNX MiniLM encoder.
(b) ``+smithery``: MCP-Zero plus the Smithery registry files in
    ``/work/shared/data/smithery/servers`` (about 12,800 tools; Smithery tools have no
    examples, so one passage each), real encoder.
(c) ``synthetic``: 100,000 tools whose texts are drawn from a Zipf-distributed synthetic
    vocabulary (so BM25 has real postings to walk) and whose vectors are random unit
    vectors from a fake encoder; queries use a random ``query_vector=``, so the search
    time is BM25 + FAISS + fusion without the query embedding.

For each: build time (embedding + BM25 + FAISS), search latency for k=100 (p50/p95; for
(a) and (b) including the query embedding, with a breakdown), search inside a random
organisation of 20 servers, one incremental ``upsert_server`` (one tool changed),
save and load times, and process memory (RSS after build and peak). A last table gives
the growth of each number relative to (a).

``--quick`` runs tiny versions of all three (for smoke-testing the script). Set
OMP_NUM_THREADS and ``--threads`` to the cores you want measured (default 1 and 2).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import (ROOT, environment_stamp, percentile, print_table, run_scenarios,  # noqa: E402
                               stamp_line, timed, write_result)

QUESTIONS = ROOT / "training" / "data" / "questions.jsonl"
# ../shared beside the checkout (as laid for sessions and CI), else the absolute path.
SMITHERY = next((p for p in (Path(__file__).resolve().parents[2] / "shared" / "data" / "smithery" / "servers",
                              Path("/work/shared/data/smithery/servers")) if p.exists()),
                Path("/work/shared/data/smithery/servers"))
SCENARIOS = ("mcp-zero", "+smithery", "synthetic")


# --------------------------------------------------------------------------- measuring


def memory_mib() -> dict[str, float]:
    """Current and peak resident memory of this process, in MiB."""
    out = {"rss": float("nan"), "peak": float("nan")}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["rss"] = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                out["peak"] = int(line.split()[1]) / 1024
    except OSError:  # not Linux: peak only
        import resource
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out["peak"] = peak / (1024 * 1024 if sys.platform == "darwin" else 1024)
    return out


def dev_questions(n: int, seed: int) -> list[dict[str, Any]]:
    from retrieval.jsonl import read_jsonl

    rows = [row for _, row in read_jsonl(QUESTIONS)]
    dev = [r for r in rows if r.get("split") == "dev"] or rows
    random.Random(seed).shuffle(dev)
    return dev[:n]


def index_bytes(index) -> int:
    """Bytes held by the index's arrays (FAISS vectors are stored twice: numpy + FAISS)."""
    dense = index._dense
    total = dense.vectors.nbytes * 2 + dense.owner.nbytes
    scores = getattr(index._bm25.retriever, "scores", None) or {}
    total += sum(v.nbytes for v in scores.values() if hasattr(v, "nbytes"))
    return int(total)


# --------------------------------------------------------------------------- catalogs


def subset(catalog, servers: int, prefer: Sequence[str] = ()):
    """The first ``servers`` servers, taking those in ``prefer`` first."""
    from retrieval.catalog.model import Catalog
    order = [s for s in dict.fromkeys(prefer) if s in catalog.server_descriptions] + catalog.servers
    keep = set(list(dict.fromkeys(order))[:servers])
    return Catalog([t for t in catalog if t.server in keep],
                   {s: d for s, d in catalog.server_descriptions.items() if s in keep})


def merged(a, b):
    from retrieval.catalog.model import Catalog
    return Catalog(list(a.tools) + list(b.tools), {**a.server_descriptions, **b.server_descriptions})


def mcp_zero_catalog(quick: bool, prefer: Sequence[str] = ()):
    from retrieval.catalog.formats import load_default_catalog
    cat = load_default_catalog(with_examples=True)
    return (subset(cat, 15, prefer) if quick else cat), {}


def smithery_catalog(quick: bool, smithery_dir: Path, prefer: Sequence[str] = ()):
    from retrieval.catalog.formats import load_default_catalog
    from retrieval.catalog.smithery import read_smithery
    zero = load_default_catalog(with_examples=True)
    res = read_smithery(smithery_dir, reserved=zero.servers)
    smith = res.catalog
    if quick:
        zero, smith = subset(zero, 15, prefer), subset(smith, 30)
    info = {"smithery_files": res.files, "smithery_servers": len(res.catalog.servers),
            "smithery_tools": len(res.catalog), "skipped_without_tools": res.skipped_without_tools,
            "skipped_duplicate_tools": res.skipped_duplicate_tools, "renamed_servers": len(res.renamed)}
    return merged(zero, smith), info


class RandomEncoder:
    """A stand-in embedder: a random unit vector per text (seeded), at MiniLM's width."""

    name = "random-unit-vectors"
    dim = 384

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)

    def encode(self, texts: Sequence[str], *, batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
        v = self.rng.standard_normal((len(texts), self.dim), dtype=np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True).clip(1e-12)


def synthetic_vocabulary(size: int, rng: np.random.Generator) -> list[str]:
    consonants, vowels = list("bcdfghjklmnprstvz"), list("aeiou")
    words: set[str] = set()
    while len(words) < size:
        n = int(rng.integers(2, 5))
        words.add("".join(str(rng.choice(consonants)) + str(rng.choice(vowels)) for _ in range(n)))
    return sorted(words)


class ZipfWords:
    """Draw words with probability proportional to 1 / rank (a natural-language-like skew)."""

    def __init__(self, vocab: list[str], rng: np.random.Generator):
        self.vocab = vocab
        p = 1.0 / np.arange(1, len(vocab) + 1)
        self.cdf = np.cumsum(p / p.sum())
        self.rng = rng

    def __call__(self, n: int) -> list[str]:
        idx = np.searchsorted(self.cdf, self.rng.random(n) * self.cdf[-1], side="right")
        return [self.vocab[min(int(i), len(self.vocab) - 1)] for i in idx]


def synthetic_catalog(n_tools: int, seed: int):
    from retrieval.catalog.model import Catalog, Tool
    rng = np.random.default_rng(seed)
    words = ZipfWords(synthetic_vocabulary(20_000, rng), rng)
    per_server = 10
    tools = []
    for s in range(0, n_tools, per_server):
        server = f"srv-{s // per_server:05d}-{'-'.join(words(2))}"
        sdesc = " ".join(words(12))
        for j in range(min(per_server, n_tools - s)):
            name = "_".join(words(2)) + f"_{j}"
            tools.append(Tool(server, name, " ".join(words(int(rng.integers(12, 41)))), None, sdesc))
    return Catalog(tools), words


# --------------------------------------------------------------------------- one scenario


def run_scenario(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from retrieval.catalog.eligibility import Eligibility
    from retrieval.index.embedded import ToolIndex

    base = memory_mib()
    info: dict[str, Any] = {}
    queries: list[tuple[str, tuple[str, str] | None]]
    if name == "synthetic":
        n = 2_000 if args.quick else args.synthetic_tools
        (catalog, words), load_s = timed(lambda: synthetic_catalog(n, args.seed))
        encoder = RandomEncoder(args.seed)
        qrng = np.random.default_rng(args.seed + 1)
        queries = [(" ".join(words(int(qrng.integers(6, 13)))), None) for _ in range(args.queries + args.warmup)]
        qvec = {q: encoder.encode([q])[0] for q, _ in queries}
    else:
        from retrieval.index.encoder import OnnxEncoder
        queries = [(q["query"], (q["server"], q["tool"])) for q in dev_questions(args.queries + args.warmup, args.seed)]
        prefer = [gold[0] for _, gold in queries]      # --quick keeps the questions' servers
        if name == "mcp-zero":
            (catalog, info), load_s = timed(lambda: mcp_zero_catalog(args.quick, prefer))
        else:
            (catalog, info), load_s = timed(lambda: smithery_catalog(args.quick, args.smithery, prefer))
        encoder = OnnxEncoder(threads=args.threads)
        qvec = None
    passages = len(catalog) + sum(len(t.examples) for t in catalog)

    index, build_s = timed(lambda: ToolIndex.build(catalog, encoder=encoder))
    after_build = memory_mib()

    # Every variant runs on each request in turn, so machine noise hits them alike.
    rng = random.Random(args.seed)
    servers = catalog.servers
    orgs = {q: Eligibility.of(servers=rng.sample(servers, min(20, len(servers)))) for q, _ in queries}
    variants: dict[str, Callable[[str, np.ndarray | None], Any]] = {
        # what a caller pays: the query embedding (a, b) or a given random vector (c), BM25, FAISS, fusion
        "total": lambda q, v: index.retrieve(q, k=100, query_vector=None if qvec is None else qvec[q]),
        "embed": (lambda q, v: index.embed_query(q)) if qvec is None else None,
        "bm25": lambda q, v: index.retrieve(q, k=100, stage="bm25"),
        "dense": lambda q, v: index.retrieve(q, k=100, stage="dense", query_vector=v),
        "hybrid_given_vector": lambda q, v: index.retrieve(q, k=100, query_vector=v),
        # inside a random organisation of 20 servers: eligibility applied in both searches
        "org20": lambda q, v: index.retrieve(q, k=100, query_vector=v, eligible=orgs[q]),
    }
    times: dict[str, list[float]] = {variant: [] for variant, fn in variants.items() if fn is not None}
    hits_at_100 = []
    for i, (q, gold) in enumerate(queries):
        v = qvec[q] if qvec is not None else index.embed_query(q)
        for variant in times:
            t0 = time.perf_counter()
            out = variants[variant](q, v)
            ms = (time.perf_counter() - t0) * 1000
            if i >= args.warmup:
                times[variant].append(ms)
                if variant == "total" and gold is not None and gold in catalog:
                    hits_at_100.append(any(tuple(h.tool_id) == gold for h in out))
    total = times["total"]

    # One incremental update: the first server with one tool's description changed.
    from retrieval.catalog.model import Tool
    first = catalog.servers[0]
    tools = catalog.server_tools(first)
    changed = [Tool(t.server, t.name, t.description + (" (updated)" if i == 0 else ""), t.input_schema,
                    t.server_description, t.examples) for i, t in enumerate(tools)]
    (re_embedded, upsert_s) = timed(lambda: index.upsert_server(first, catalog.server_descriptions[first], changed))

    with tempfile.TemporaryDirectory(prefix="toolrank-bench-") as tmp:
        _, save_s = timed(lambda: index.save(Path(tmp) / "idx"))
        disk = sum(p.stat().st_size for p in (Path(tmp) / "idx").rglob("*") if p.is_file())
        loaded, load_index_s = timed(lambda: ToolIndex.load(Path(tmp) / "idx", encoder=encoder))
        del loaded
    end = memory_mib()

    return {
        "scenario": name, "tools": len(catalog), "servers": len(catalog.servers), "passages": passages,
        "catalog_load_s": load_s, "build_s": build_s,
        "search_ms": {"p50": percentile(total, 50), "p95": percentile(total, 95), "mean": statistics.fmean(total),
                      "n": len(total), "includes_query_embedding": qvec is None},
        "breakdown_p50_ms": {"embed": percentile(times.get("embed", []), 50), "bm25": percentile(times["bm25"], 50),
                             "dense": percentile(times["dense"], 50),
                             "hybrid_given_vector": percentile(times["hybrid_given_vector"], 50)},
        "org20_p50_ms": percentile(times["org20"], 50),
        "hit_at_100": (sum(hits_at_100) / len(hits_at_100)) if hits_at_100 else None,
        "upsert": {"seconds": upsert_s, "re_embedded": re_embedded, "server_tools": len(tools)},
        "save_s": save_s, "load_s": load_index_s, "disk_mib": disk / 2**20,
        "memory_mib": {"baseline": base["rss"], "after_build": after_build["rss"],
                       "build_delta": after_build["rss"] - base["rss"], "peak": end["peak"],
                       "index_arrays": index_bytes(index) / 2**20},
        "info": info,
    }


# --------------------------------------------------------------------------- report


def report(results: list[dict[str, Any]]) -> None:
    print_table(["scenario", "tools", "servers", "passages", "build s", "tools/s", "search p50 ms", "p95 ms",
                 "incl. embed", "hit@100"],
                [[r["scenario"], r["tools"], r["servers"], r["passages"], r["build_s"], r["tools"] / r["build_s"],
                  r["search_ms"]["p50"], r["search_ms"]["p95"], "yes" if r["search_ms"]["includes_query_embedding"]
                  else "no (random vector)", "-" if r["hit_at_100"] is None else f"{r['hit_at_100']:.1%}"]
                 for r in results])
    print("\nsearch breakdown, p50 ms (k=100; fusion reads 200 deep):")
    print_table(["scenario", "embed query", "bm25 only", "dense only", "hybrid given vector", "org of 20 servers"],
                [[r["scenario"], r["breakdown_p50_ms"]["embed"], r["breakdown_p50_ms"]["bm25"],
                  r["breakdown_p50_ms"]["dense"], r["breakdown_p50_ms"]["hybrid_given_vector"], r["org20_p50_ms"]]
                 for r in results])
    print("\nupdates, persistence and memory:")
    print_table(["scenario", "upsert 1 server s", "re-embedded", "save s", "load s", "disk MiB",
                 "RSS base MiB", "RSS built MiB", "build delta MiB", "peak MiB", "index arrays MiB"],
                [[r["scenario"], r["upsert"]["seconds"], r["upsert"]["re_embedded"], r["save_s"], r["load_s"],
                  r["disk_mib"], r["memory_mib"]["baseline"], r["memory_mib"]["after_build"],
                  r["memory_mib"]["build_delta"], r["memory_mib"]["peak"], r["memory_mib"]["index_arrays"]]
                 for r in results])
    for r in results:
        if r["info"]:
            print(f"\n{r['scenario']}: " + ", ".join(f"{k} {v:,}" for k, v in r["info"].items()))
    if len(results) > 1:
        growth(results)


def growth(results: list[dict[str, Any]]) -> None:
    """Each number relative to the first scenario, and the exponent b in ``cost ~ tools ** b``."""
    a = results[0]
    metrics: list[tuple[str, Callable[[dict[str, Any]], float]]] = [
        ("build", lambda r: r["build_s"]),
        ("search p50", lambda r: r["search_ms"]["p50"]),
        ("bm25 p50", lambda r: r["breakdown_p50_ms"]["bm25"]),
        ("dense p50", lambda r: r["breakdown_p50_ms"]["dense"]),
        ("hybrid|vector p50", lambda r: r["breakdown_p50_ms"]["hybrid_given_vector"]),
        ("org20 p50", lambda r: r["org20_p50_ms"]),
        ("upsert", lambda r: r["upsert"]["seconds"]),
        ("load", lambda r: r["load_s"]),
        ("index arrays", lambda r: r["memory_mib"]["index_arrays"]),
        ("RSS build delta", lambda r: r["memory_mib"]["build_delta"]),
    ]

    def ratio(x: float, y: float) -> float:
        return x / y if y and x == x and y == y else float("nan")

    def exponent(x: float, n: float) -> float:
        return float(np.log(x) / np.log(n)) if x > 0 and n > 1 else float("nan")

    print(f"\ngrowth relative to {a['scenario']}: ratio (x times), and b in cost ~ tools^b "
          "(b~0 flat, b~1 linear):")
    rows = []
    for r in results[1:]:
        n = ratio(r["tools"], a["tools"])
        rows.append([r["scenario"], "ratio", n, ratio(r["passages"], a["passages"])]
                    + [ratio(f(r), f(a)) for _, f in metrics])
        rows.append([r["scenario"], "b", 1.0, "-"] + [exponent(ratio(f(r), f(a)), n) for _, f in metrics])
    print_table(["scenario", "", "tools", "passages"] + [m for m, _ in metrics], rows)
    print("notes: 'build' and 'RSS build delta' of the synthetic row use random vectors (no encoder), and its\n"
          "'search p50' has no query embedding: compare its bm25 / dense / hybrid|vector columns. 'upsert' is\n"
          "one changed tool: one embedding plus a full BM25 + FAISS rebuild of the whole catalog.")


def child_argv(args: argparse.Namespace, scenario: str) -> list[str]:
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", scenario, "--queries", str(args.queries),
            "--warmup", str(args.warmup), "--threads", str(args.threads), "--seed", str(args.seed),
            "--synthetic-tools", str(args.synthetic_tools), "--smithery", str(args.smithery)]
    return argv + (["--quick"] if args.quick else [])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny versions of every scenario (smoke test)")
    p.add_argument("--only", choices=SCENARIOS, action="append", help="run only this scenario (repeat)")
    p.add_argument("--queries", type=int, default=None, help="measured search requests (default 200; quick 20)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=2, help="onnxruntime threads for the encoder")
    p.add_argument("--synthetic-tools", type=int, default=100_000)
    p.add_argument("--smithery", type=Path, default=SMITHERY, help="folder of Smithery server JSON files")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, help="also write the results as JSON here (e.g. benchmarks/results/...)")
    p.add_argument("--child", choices=SCENARIOS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.queries is None:
        args.queries = 20 if args.quick else 200

    if args.child:  # run one scenario in this process; the last stdout line is its JSON
        print(json.dumps(run_scenario(args.child, args)))
        return 0

    scenarios = [s for s in SCENARIOS if not args.only or s in args.only]
    if "+smithery" in scenarios and not args.smithery.is_dir():
        print(f"skipping +smithery: {args.smithery} not found (pass --smithery DIR)", file=sys.stderr)
        scenarios.remove("+smithery")
    stamp = environment_stamp()
    print(f"retrieval speed{' (QUICK: tiny catalogs)' if args.quick else ''}: {args.queries} measured requests "
          f"after {args.warmup} warm-up, k=100, encoder threads {args.threads}\n{stamp_line(stamp)}\n", flush=True)
    results = run_scenarios(scenarios, lambda s: child_argv(args, s))
    if results is None:
        return 1
    report(results)
    print("\n" + stamp_line(stamp))
    if args.out:
        meta = {"quick": args.quick, "queries": args.queries, "warmup": args.warmup, "threads": args.threads,
                "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "cpus": os.cpu_count(),
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        write_result(args.out, {"meta": meta, "results": results}, stamp=stamp)
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
