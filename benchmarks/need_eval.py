"""Issue 33's measure: every stage without a need, with the agents' blind needs and (apart) with the
author-written needs, on test and the independent requests, day one and with example requests.

    python benchmarks/need_eval.py [--sets test,independent] [--out benchmarks/results/need_eval.json]

Blind needs: ``training/data/needs_blind.jsonl`` (writers that saw only the request). Author needs:
the ``need`` field of ``questions.jsonl`` (written by the writer who knew the tool: optimistic, shown
apart). Paired exact McNemar at rank 1 (pipeline): blind need against no need, and this release
without a need against 0.6.0's scorer policy (unscored candidates at the lowest scored logit, no tail
calibration). One process; logits cached per (request, need, tool content).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, environment_stamp, stamp_line, write_result  # noqa: E402

from retrieval.evaluation.harness import STAGES, evaluate, load_queries, pipeline_rerankers  # noqa: E402
from retrieval.evaluation.paired import paired_top1  # noqa: E402
from training.needs import read_needs  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sets", default="test,independent")
    p.add_argument("--model", type=Path, default=ROOT / "models" / "toolrank-reranker")
    p.add_argument("--needs", type=Path, default=ROOT / "training" / "data" / "needs_blind.jsonl")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "need_eval.json")
    p.add_argument("--limit", type=int, default=0, help="first N questions of each set (0: all)")
    p.add_argument("--threads", type=int, default=2, help="CPU threads of the scorer (default 2)")
    p.add_argument("--baseline", type=Path, help="a folder with 0.6.0's combiner.json and combiner-noex.json "
                   "(e.g. from git: git show c1428d1:models/toolrank-reranker/combiner.json); the same ONNX "
                   "model's logits are used. Default: this release's confidence models without the tail calibration")
    a = p.parse_args(argv)
    from benchmarks.ablation import CachedScorer
    from retrieval.index.default import load_or_build_default
    from retrieval.pipeline.decision import Policy
    from retrieval.pipeline.flow import Pipeline
    from retrieval.version import package_version
    from scorer import Scorer

    needs = read_needs(a.needs)
    scorer = CachedScorer(Scorer.load(a.model, threads=a.threads))
    policy = Policy()
    results: dict = {"environment": environment_stamp(), "package": package_version(), "model": str(a.model), "score_top": policy.score_top, "runs": {}}
    t0 = time.time()
    for examples in (False, True):
        index = load_or_build_default(with_examples=examples, show_progress=True)
        pipe = Pipeline(index, scorer, policy=policy)
        old_scorer = scorer
        if a.baseline:   # the same logits (one cache), 0.6.0's confidence models
            old_scorer = CachedScorer(scorer.scorer)
            old_scorer.cache, old_scorer.path = scorer.cache, a.baseline
        old = Pipeline(index, old_scorer, policy=policy)
        old.tail_confidence = old.tail_calibration = None          # 0.6.0: the lowest scored logit stands in
        retrieval_only = Pipeline(index, None, policy=policy)
        rerankers = pipeline_rerankers(STAGES, pipe, retrieval_only, policy.score_top)
        rerankers["scorer-0.6.0"] = pipeline_rerankers(["scorer"], old, None, policy.score_top)["scorer"]
        for name in a.sets.split(","):
            path = ROOT / ("benchmarks/data/independent_questions.jsonl" if name == "independent"
                           else "training/data/questions.jsonl")
            qs = load_queries(path, split=name)[: a.limit or None]
            conds = {"no need": [dataclasses.replace(q, need=None) for q in qs],
                     "blind need": [dataclasses.replace(q, need=needs[q.id]["need"]) for q in qs if q.id in needs]}
            if any(q.need for q in qs):
                conds["author need"] = [q for q in qs if q.need]
            for cond, cq in conds.items():
                per: list = []
                stages = list(STAGES) + (["scorer-0.6.0"] if cond == "no need" else [])
                out = evaluate(index, cq, stages=[s for s in stages if s in STAGES], use_need=cond != "no need",
                               rerankers=rerankers, per_query=per, show_progress=True)
                if cond == "no need":   # the 0.6.0 policy, same questions, for the paired test
                    per_old: list = []
                    evaluate(index, cq, stages=["scorer"], rerankers={"scorer": rerankers["scorer-0.6.0"]},
                             per_query=per_old)
                    out["paired_vs_060"] = paired_top1([r["scorer"] for r in per], [r["scorer"] for r in per_old],
                                                       [r["style"] for r in per])
                    out["top5_060"] = sum(r["scorer"] is not None and r["scorer"] <= 5 for r in per_old) / len(per_old)
                out["per_query"] = per
                key = f"{name} {'examples' if examples else 'day one'} / {cond}"
                results["runs"][key] = out
                s = out["stages"]
                print(f"{key} (n={out['n']}): " + "  ".join(
                    f"{st} {100 * s[st]['top1']:.1f}/{100 * s[st]['top5']:.1f}" for st in STAGES), flush=True)
            base = {r["id"]: r["scorer"] for r in results["runs"][f"{name} {'examples' if examples else 'day one'} / no need"]["per_query"]}
            blind = results["runs"][f"{name} {'examples' if examples else 'day one'} / blind need"]
            ids = [r["id"] for r in blind["per_query"]]
            blind["paired_vs_no_need"] = paired_top1([r["scorer"] for r in blind["per_query"]], [base[i] for i in ids],
                                                     [r["style"] for r in blind["per_query"]])
    results["seconds"] = round(time.time() - t0, 1)
    print("\n| set | condition | bm25 | dense | hybrid | logit | retrieval-only confidence | **pipeline** | paired |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key, out in results["runs"].items():
        s = out["stages"]
        pair = out.get("paired_vs_no_need") or out.get("paired_vs_060")
        vs = "vs no need" if "paired_vs_no_need" in out else "vs 0.6.0 policy"
        cell = f"{vs}: +{pair['wins']} / -{pair['losses']} (p {pair['p']:.2g})" if pair else ""
        set_, cond = key.split(" / ")
        print(f"| {set_} | {cond} | " + " | ".join(f"{100 * s[st]['top1']:.1f} / {100 * s[st]['top5']:.1f}"
                                                 for st in STAGES) + f" | {cell} |")
    write_result(a.out, results, indent=0)
    print("\n" + stamp_line(results["environment"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
