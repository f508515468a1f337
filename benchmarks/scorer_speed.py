"""Scorer latency on real records, and int8-vs-fp32 agreement. Prints tables; not a test.

Speed (one or more model folders)::

    python benchmarks/scorer_speed.py models/toolrank-reranker [more folders] --n 30 --threads 2

For each of N dev questions (training/data/questions.jsonl, split "dev"), scores 100 real
MCP-Zero candidates (the labelled tool + 99 random others, seeded) with ``Scorer.score``
(tokenise + ONNX + calibrate) and reports p50/p90 milliseconds per request.

Agreement::

    python benchmarks/scorer_speed.py --compare FP32_DIR INT8_DIR --n 200 [--index INDEX_DIR]

For each dev question, both models score the same 100 candidates: the hybrid top-100 of
``retrieval.index.embedded.ToolIndex`` (loaded from --index, else built) when importable, else the
labelled tool + 99 random tools (the output says which). Reports how often both pick the
same top-1 and the same top-5 set, probability deltas, and each model's hit@1.

Run from the repository root (``PYTHONPATH=.``); set OMP_NUM_THREADS to the thread count.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, median, percentile, print_table, stamp_line  # noqa: E402
from retrieval.catalog.formats import load_default_catalog  # noqa: E402
from retrieval.catalog.model import Catalog, Tool, ToolId  # noqa: E402
from retrieval.jsonl import read_jsonl  # noqa: E402
from scorer import Scorer  # noqa: E402

QUESTIONS = ROOT / "training" / "data" / "questions.jsonl"


def dev_questions(catalog: Catalog, n: int, seed: int) -> list[dict[str, Any]]:
    rows = [row for _, row in read_jsonl(QUESTIONS)]
    rows = [r for r in rows if r.get("split") == "dev" and ToolId(r["server"], r["tool"]) in catalog]
    random.Random(seed).shuffle(rows)
    return rows[:n] if n else rows


def random_candidates(catalog: Catalog, gold: ToolId, k: int, rng: random.Random) -> list[Tool]:
    others = [t for t in rng.sample(catalog.tools, min(len(catalog), k + 1)) if t.id != gold][: k - 1]
    tools = [catalog[gold], *others]
    rng.shuffle(tools)
    return tools


# --------------------------------------------------------------------------- speed


def speed(args: argparse.Namespace) -> int:
    catalog = load_default_catalog(with_examples=True)
    questions = dev_questions(catalog, args.n + args.warmup, args.seed)
    rng = random.Random(args.seed)
    workload = [(q["query"], None if args.no_need else q.get("need"),
                 random_candidates(catalog, ToolId(q["server"], q["tool"]), args.candidates, rng))
                for q in questions]
    print(f"{len(workload) - args.warmup} dev requests x {args.candidates} candidates "
          f"(labelled tool + {args.candidates - 1} random MCP-Zero tools, seed {args.seed}), "
          f"{args.threads} threads, need {'off' if args.no_need else 'on'}, {args.warmup} warm-up requests\n")
    rows = []
    for folder in args.models:
        scorer = Scorer.load(folder, threads=args.threads, batch_size=args.batch_size)
        totals, tokenise, lengths = [], [], []
        for i, (request, need, tools) in enumerate(workload):
            t0 = time.perf_counter()
            scorer.score(request, need, tools)
            elapsed = (time.perf_counter() - t0) * 1000
            t1 = time.perf_counter()
            encodings = scorer.encoder.encode(scorer.records(request, need, tools))
            tok_ms = (time.perf_counter() - t1) * 1000
            if i >= args.warmup:
                totals.append(elapsed)
                tokenise.append(tok_ms)
                lengths.extend(len(e.ids) for e in encodings)
        info = scorer.info
        quant = info["quantization"]
        quant = quant if isinstance(quant, str) else quant.get("weight_type", json.dumps(quant))
        rows.append([f"{info['name']} {info['version']}", str(quant), info["max_length"], len(totals),
                     percentile(totals, 50), percentile(totals, 90), statistics.fmean(totals),
                     percentile(tokenise, 50), statistics.fmean(lengths), max(lengths)])
    print_table(["model", "quantization", "max_len", "requests", "p50 ms", "p90 ms", "mean ms",
                 "tokenise p50 ms", "mean tokens/pair", "max tokens"], rows, digits=3)
    print("\n" + stamp_line())
    return 0


# --------------------------------------------------------------------------- agreement


def candidate_source(args: argparse.Namespace, catalog: Catalog):
    """A function request, need, gold -> candidate tools, and a description of it."""
    if args.source in ("auto", "index"):
        try:
            from retrieval.index.embedded import ToolIndex
        except ImportError as exc:
            if args.source == "index":
                raise SystemExit(f"--source index: retrieval.index.embedded is not importable ({exc})") from None
        else:
            if args.index:
                index = ToolIndex.load(args.index)
                where = f"ToolIndex hybrid top-{args.candidates} (loaded from {args.index})"
            else:
                t0 = time.perf_counter()
                index = ToolIndex.build(catalog)
                where = f"ToolIndex hybrid top-{args.candidates} (built in {time.perf_counter() - t0:.0f}s)"

            def from_index(request: str, need: str | None, gold: ToolId) -> list[Tool]:
                return [index.tool(h.tool_id) for h in index.retrieve(request, need, k=args.candidates)]

            return from_index, where
    rng = random.Random(args.seed)

    def from_random(request: str, need: str | None, gold: ToolId) -> list[Tool]:
        return random_candidates(catalog, gold, args.candidates, rng)

    return from_random, f"labelled tool + {args.candidates - 1} random MCP-Zero tools (seed {args.seed})"


def compare(args: argparse.Namespace) -> int:
    fp32_dir, int8_dir = args.compare
    catalog = load_default_catalog(with_examples=True)
    questions = dev_questions(catalog, args.n, args.seed)
    candidates_for, where = candidate_source(args, catalog)
    a = Scorer.load(fp32_dir, threads=args.threads, batch_size=args.batch_size)
    b = Scorer.load(int8_dir, threads=args.threads, batch_size=args.batch_size)
    same1 = same5 = gold_in = hit_a = hit_b = 0
    overlap5, max_dp, mean_dp, max_dlogit = [], [], [], []
    for q in questions:
        gold = ToolId(q["server"], q["tool"])
        need = None if args.no_need else q.get("need")
        tools = candidates_for(q["query"], need, gold)
        if not tools:
            continue
        la, lb = a.logits(q["query"], need, tools), b.logits(q["query"], need, tools)
        pa, pb = a.calibration.apply(la), b.calibration.apply(lb)
        top_a, top_b = np.argsort(-la, kind="stable"), np.argsort(-lb, kind="stable")
        same1 += int(top_a[0] == top_b[0])
        same5 += int(set(top_a[:5].tolist()) == set(top_b[:5].tolist()))
        overlap5.append(len(set(top_a[:5].tolist()) & set(top_b[:5].tolist())) / 5)
        ids = [t.id for t in tools]
        if gold in ids:
            gold_in += 1
            hit_a += int(ids[top_a[0]] == gold)
            hit_b += int(ids[top_b[0]] == gold)
        dp = np.abs(pa - pb)
        max_dp.append(float(dp.max()))
        mean_dp.append(float(dp.mean()))
        max_dlogit.append(float(np.abs(la - lb).max()))
    n = len(max_dp)
    if not n:
        print("no dev questions scored")
        return 1
    print(f"{n} dev questions; candidates: {where}; {args.threads} threads\n"
          f"A = {fp32_dir} ({a.info['quantization']}), B = {int8_dir} ({b.info['quantization']})\n")
    print_table(["metric", "value"], [
        ["same top-1", f"{same1 / n:.1%}"],
        ["same top-5 set", f"{same5 / n:.1%}"],
        ["mean top-5 overlap", f"{statistics.fmean(overlap5):.1%}"],
        ["max |dp| (calibrated), worst question", max(max_dp)],
        ["max |dp|, median over questions", median(max_dp)],
        ["mean |dp|", statistics.fmean(mean_dp)],
        ["max |d logit|", max(max_dlogit)],
        [f"hit@1 A (gold among candidates in {gold_in})", f"{hit_a / max(gold_in, 1):.1%}"],
        [f"hit@1 B (gold among candidates in {gold_in})", f"{hit_b / max(gold_in, 1):.1%}"],
    ], digits=3)
    print("\n" + stamp_line())
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="*", type=Path, help="model folders to time")
    p.add_argument("--compare", nargs=2, type=Path, metavar=("FP32_DIR", "INT8_DIR"))
    p.add_argument("--n", type=int, default=30, help="dev requests (speed) or questions (compare); 0 = all")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--candidates", type=int, default=100)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-need", action="store_true", help="score without the assistant's need line")
    p.add_argument("--source", choices=["auto", "index", "random"], default="auto",
                   help="candidates for --compare")
    p.add_argument("--index", type=Path, help="saved ToolIndex folder for --compare")
    args = p.parse_args(argv)
    if args.compare:
        return compare(args)
    if not args.models:
        p.error("give at least one model folder, or --compare FP32_DIR INT8_DIR")
    return speed(args)


if __name__ == "__main__":
    sys.exit(main())
