"""The speed/quality frontier of the scorer: candidates scored x max length, in one run. Prints tables.

    python benchmarks/scorer_frontier.py --model models/toolrank-reranker --n 100 --timing 30

Quality: for N dev questions (seeded sample of ``training/data/questions.jsonl``, split dev), the
hybrid's top 100 over the shipped catalog, with and without example requests indexed. The cross-
encoder's logit re-ranks the first K (the rest keep the hybrid order after them): rank 1 and top 5
of the labelled tool, per K and per max length. A pair's logit does not depend on the other pairs
of its call (each pair is its own batch), so one scoring of the 100 gives every K exactly.

Speed: whole ``Pipeline.search`` (retrieval, scoring of the first K, confidence, decision, output)
for ``--timing`` other dev questions, p50 / p90 milliseconds, on ``--threads`` threads with the
scorer's cache off. Same machine, same run, so the rows compare.

``--needs`` (the agents' blind needs, ``training/data/needs_blind.jsonl``) adds a quality row set where the
hybrid and the cross-encoder read each dev question's blind need beside the request, over both indexes
(the questions without a blind need are left out there): how many candidates to score when the agent
writes its need.

The model folder's ``config.json`` gives the trained max length; shorter ones are served by a
copy of the folder whose config says so (the tool side is cut first, the request keeps its budget).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, markdown_table, median, percentile, stamp_line, write_result  # noqa: E402
from retrieval.catalog.model import ToolId  # noqa: E402
from retrieval.evaluation.harness import load_queries  # noqa: E402
from retrieval.index.default import load_or_build_default  # noqa: E402
from retrieval.pipeline.decision import Policy  # noqa: E402
from retrieval.pipeline.flow import Pipeline  # noqa: E402
from scorer import Scorer  # noqa: E402

QUESTIONS = ROOT / "training" / "data" / "questions.jsonl"


def model_at_length(model: Path, max_length: int, tmp: Path) -> Path:
    """The model folder, or a copy whose config serves a shorter max length."""
    config = json.loads((model / "config.json").read_text())
    if config["max_length"] == max_length:
        return model
    out = tmp / f"len{max_length}"
    out.mkdir()
    for f in model.iterdir():
        if f.is_file() and f.name != "config.json":
            (out / f.name).symlink_to(f.resolve())
    request = config.get("record", {}).get("request_tokens", 0)
    if request and request >= max_length - 8:
        config["record"]["request_tokens"] = max(16, max_length // 2)
    config["max_length"] = max_length
    (out / "config.json").write_text(json.dumps(config))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--n", type=int, default=100, help="dev questions for quality")
    p.add_argument("--timing", type=int, default=30, help="other dev questions for the speed rows")
    p.add_argument("--k", default="10,20,30,50,100", help="candidates scored")
    p.add_argument("--lengths", default="", help="max lengths (default: the trained one and 96)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--workers", default="",
                   help="comma-separated Scorer workers to time (pairs side by side); default: the Scorer's default")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--needs", type=Path, help="blind needs (JSONL by question id): also rank with the need")
    p.add_argument("--json", type=Path, help="also write the rows here")
    a = p.parse_args(argv)
    ks = [int(k) for k in a.k.split(",")]
    trained = json.loads((a.model / "config.json").read_text())["max_length"]
    lengths = [int(x) for x in a.lengths.split(",")] if a.lengths else sorted({trained, 96}, reverse=True)
    questions = load_queries(QUESTIONS, split="dev")
    random.Random(a.seed).shuffle(questions)
    quality_q, timing_q = questions[: a.n], questions[a.n: a.n + a.timing]
    indexes = {"with examples": load_or_build_default(with_examples=True),
               "day one (no examples)": load_or_build_default(with_examples=False)}
    needs: dict[str, str] = {}
    if a.needs:
        from training.needs import read_needs

        try:
            needs = {rid: r["need"] for rid, r in read_needs(a.needs).items()}
        except (OSError, ValueError) as exc:
            p.error(f"--needs: {exc}")
    conditions = [(label, index, False) for label, index in indexes.items()]
    if needs:
        conditions += [(f"{label}, blind need", index, True) for label, index in indexes.items()]
    rows, out, timings = [], [], []
    worker_counts = [int(w) for w in a.workers.split(",")] if a.workers else [None]
    with tempfile.TemporaryDirectory() as tmp:
        for length in lengths:
            folder = model_at_length(a.model, length, Path(tmp))
            scorer = Scorer.load(folder, threads=a.threads)
            for label, index, with_need in conditions:
                ranks = {k: [] for k in ks}
                hybrid = []
                for q in quality_q:
                    need = needs.get(q.id) if with_need else None
                    if with_need and need is None:
                        continue
                    hits = index.retrieve(q.query, need, None, k=100)
                    ids = [h.tool_id for h in hits]
                    z = scorer.logits(q.query, need, [index.catalog[t] for t in ids[: max(ks)]])
                    gold = q.lenient_targets
                    hybrid.append(next((i + 1 for i, t in enumerate(ids) if t in gold), None))
                    for k in ks:
                        order = list(np.argsort(-z[:k], kind="stable")) + list(range(min(k, len(ids)), len(ids)))
                        ranks[k].append(next((r + 1 for r, i in enumerate(order) if ids[i] in gold), None))
                for k in ks:
                    r1 = 100 * np.mean([r == 1 for r in ranks[k]])
                    r5 = 100 * np.mean([r is not None and r <= 5 for r in ranks[k]])
                    out.append({"max_length": length, "index": label, "k": k, "top1": r1, "top5": r5,
                                "n": len(ranks[k])})
                out.append({"max_length": length, "index": label, "k": 0,
                            "top1": 100 * np.mean([r == 1 for r in hybrid]),
                            "top5": 100 * np.mean([r is not None and r <= 5 for r in hybrid])})
            # speed: the whole search, the cache off so every pair is really scored
            for workers in worker_counts:
                timed = Scorer.load(folder, threads=a.threads, cache_size=0, workers=workers)
                for k in ks:
                    pipe = Pipeline(indexes["with examples"], timed, policy=Policy(score_top=k))
                    if not pipe.confidence.uses_logit:   # the search would never call the scorer
                        raise SystemExit(f"{folder}: no confidence model that reads the logit (combiner.json); "
                                         "fit one first (training/calibrate.py), or the timing is retrieval's alone")
                    pipe.search(timing_q[0].query)
                    ms = []
                    for q in timing_q:
                        t0 = time.perf_counter()
                        pipe.search(q.query)
                        ms.append(1000 * (time.perf_counter() - t0))
                    timings.append({"max_length": length, "k": k, "workers": timed.workers,
                                    "p50_ms": median(ms), "p90_ms": percentile(ms, 90)})
                    if workers == worker_counts[0]:
                        for row in out:
                            if row["max_length"] == length and row["k"] == k:
                                row["p50_ms"], row["p90_ms"] = timings[-1]["p50_ms"], timings[-1]["p90_ms"]
        retrieval_only = Pipeline(indexes["with examples"], None)
        ms = []
        for q in timing_q:
            t0 = time.perf_counter()
            retrieval_only.search(q.query)
            ms.append(1000 * (time.perf_counter() - t0))
        base_ms = median(ms)
    for label, _, _ in conditions:
        rows = [[r["max_length"], r["k"] or "hybrid only", r["top1"], r["top5"], r.get("p50_ms", base_ms),
                 r.get("p90_ms", float("nan"))] for r in out if r["index"] == label]
        n_label = next((r["n"] for r in out if r["index"] == label and "n" in r), len(quality_q))
        print(f"\n{label}: {n_label} dev questions (logit re-ranks the first K of the hybrid's 100); "
              f"whole search on {a.threads} threads over {len(timing_q)} other dev questions\n")
        print(markdown_table(["max length", "K scored", "rank 1 %", "top 5 %", "search p50 ms", "p90 ms"], rows,
                             digits=1))
    print(f"\nretrieval-only search p50: {base_ms:.1f} ms")
    if len(worker_counts) > 1:
        print(f"\nwhole search by Scorer workers (pairs side by side), {a.threads} threads\n")
        print(markdown_table(["max length", "K scored", "workers", "search p50 ms", "p90 ms"],
                             [[t["max_length"], t["k"], t["workers"], t["p50_ms"], t["p90_ms"]] for t in timings],
                             digits=1))
    print("\n" + stamp_line())
    if a.json:
        write_result(a.json, {"rows": out, "retrieval_only_p50_ms": base_ms, "n": len(quality_q),
                              "timing": len(timing_q), "threads": a.threads, "timings": timings, "model": str(a.model)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
