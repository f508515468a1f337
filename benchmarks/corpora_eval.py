"""Every stage on the held-out corpora of other writers, day one, without and with the agents' blind need
(issue 35's measure: hybrid rank 1, and the pipeline against the hybrid, paired).

    python benchmarks/corpora_eval.py [--n 300] [--model models/toolrank-reranker] [--out FILE]

Each held-out corpus (``retrieval.evaluation.corpora``, use ``dev``: never trained or tuned on) is its own
catalog, indexed without example requests (day one); its requests are the questions, any labelled tool a
hit (lenient: multi-tool requests keep every labelled tool). ``--n`` requests of each (seeded sample); the
blind-need rows are the requests of that sample that have a blind need (``training/data/needs_blind.jsonl``,
150 per corpus). Exact McNemar at rank 1 (lenient): the pipeline against the hybrid. Stamped with the
commit and versions; per-question ranks kept, so two models' runs compare with ``benchmarks/compare_runs.py``
(``--stage scorer_lenient``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from pathlib import Path

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, environment_stamp, stamp_line, write_result  # noqa: E402

STAGES = ("bm25", "dense", "hybrid", "logit", "scorer")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpora", help="comma-separated (default: every held-out corpus)")
    p.add_argument("--n", type=int, default=300, help="requests per corpus (seeded sample)")
    p.add_argument("--model", type=Path, default=ROOT / "models" / "toolrank-reranker")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "corpora_eval.json")
    a = p.parse_args(argv)
    import onnxruntime
    from scipy.stats import binomtest

    from benchmarks.ablation import CachedScorer
    from retrieval.evaluation.corpora import DEV_CORPORA, load_corpus
    from retrieval.evaluation.harness import evaluate, pipeline_rerankers
    from retrieval.index.embedded import ToolIndex
    from retrieval.index.encoder import OnnxEncoder
    from retrieval.pipeline.decision import Policy
    from retrieval.pipeline.flow import Pipeline
    from retrieval.version import package_version
    from scorer import Scorer
    from training.needs import read_needs

    names = a.corpora.split(",") if a.corpora else list(DEV_CORPORA)
    needs = read_needs()
    scorer = CachedScorer(Scorer.load(a.model, threads=a.threads))
    encoder = OnnxEncoder()
    policy = Policy()
    environment = environment_stamp()
    commit = environment["commit"]
    out: dict = {"environment": environment, "commit": commit, "package": package_version(), "model": str(a.model),
                 "model_version": json.loads((a.model / "config.json").read_text()).get("version"),
                 "onnxruntime": onnxruntime.__version__, "python": environment["python"], "n": a.n,
                 "score_top": policy.score_top, "runs": {}}
    t0 = time.time()
    rows = []
    for name in names:
        corpus = load_corpus(name)
        index = ToolIndex(corpus.catalog, encoder, with_examples=False)
        pipe = Pipeline(index, scorer, policy=policy)
        rerankers = pipeline_rerankers(["logit", "scorer"], pipe, None, policy.score_top)
        qs = list(corpus.questions)
        random.Random(a.seed).shuffle(qs)
        qs = qs[: a.n]
        conds = {"no need": [dataclasses.replace(q, need=None) for q in qs],
                 "blind need": [dataclasses.replace(q, need=needs[q.id]["need"]) for q in qs if q.id in needs]}
        for cond, cq in conds.items():
            if not cq:
                continue
            per: list = []
            rep = evaluate(index, cq, stages=list(STAGES), use_need=cond != "no need", rerankers=rerankers,
                           per_query=per, show_progress=False)
            h = [r["hybrid_lenient"] == 1 for r in per]
            s = [r["scorer_lenient"] == 1 for r in per]
            wins = sum(x and not y for x, y in zip(s, h))
            losses = sum(y and not x for x, y in zip(s, h))
            pval = binomtest(wins, wins + losses).pvalue if wins + losses else 1.0
            figs = {st: {"top1": 100 * sum(r[f"{st}_lenient"] == 1 for r in per) / len(per),
                         "top5": 100 * sum(r[f"{st}_lenient"] is not None and r[f"{st}_lenient"] <= 5 for r in per) / len(per)}
                    for st in STAGES}
            key = f"{name} / {cond}"
            out["runs"][key] = {"n": len(per), "stages": figs, "pipeline_vs_hybrid": {"wins": wins, "losses": losses,
                                                                                    "p": pval},
                                "per_query": per}
            rows.append((key, len(per), figs, wins, losses, pval))
            print(f"{key} (n={len(per)}): " + "  ".join(f"{st} {figs[st]['top1']:.1f}/{figs[st]['top5']:.1f}"
                                                      for st in STAGES), flush=True)
    out["seconds"] = round(time.time() - t0, 1)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    write_result(a.out, out, indent=0)
    print(f"\ntoolrank {out['package']} @ {commit}, model {out['model_version']}; lenient rank 1 / top 5 (%), day one\n")
    print("| corpus / need | n | bm25 | dense | hybrid | logit | **pipeline** | pipeline vs hybrid at rank 1 |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for key, n, figs, wins, losses, pval in rows:
        print(f"| {key} | {n} | " + " | ".join(f"{figs[st]['top1']:.1f} / {figs[st]['top5']:.1f}" for st in STAGES)
              + f" | +{wins} / −{losses} (p {pval:.2g}) |")
    print("\n" + stamp_line(out["environment"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
