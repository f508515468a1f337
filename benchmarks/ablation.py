"""Every figure of the README's quality tables in one process; JSON per run in benchmarks/results/.

    python benchmarks/ablation.py --model models/toolrank-reranker [--runs test_ex,test_abstain ...]

Same code path as `toolrank eval` (retrieval.evaluation.harness / retrieval.evaluation.abstention), but one process
shares the cross-encoder's logits between runs: a (request, need, tool) pair scored for one
run is not scored again for another (the abstention run re-searches the same requests).
The cache changes nothing but time: logits are deterministic.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, stamp_line, write_result  # noqa: E402

from retrieval.evaluation.abstention import (abstention_report, format_abstention, format_nofit, load_nofit,  # noqa: E402
                                             nofit_report, plot_coverage_risk)
from retrieval.evaluation.harness import evaluate, format_report, load_queries, pipeline_rerankers  # noqa: E402
from retrieval.index.default import load_or_build_default  # noqa: E402
from retrieval.pipeline.decision import Policy, score_top_flag  # noqa: E402
from retrieval.pipeline.flow import Pipeline  # noqa: E402

QUESTIONS = ROOT / "training" / "data" / "questions.jsonl"
# Requests written apart from the catalog's example requests and from questions.jsonl, over the
# test servers only (benchmarks/data/README.md): a check against the echo between the two.
INDEPENDENT = ROOT / "benchmarks" / "data" / "independent_questions.jsonl"
# Requests written to have no tool (training/data/TEACHER_CARD.md), split by server like the questions.
NOFIT = ROOT / "training" / "data" / "nofit.jsonl"
STAGES = ["bm25", "dense", "hybrid", "logit", "retrieval-confidence", "scorer"]


def questions_file(split: str) -> Path:
    return INDEPENDENT if split == "independent" else QUESTIONS

# name: (split, use_need, examples, org_size, sample)
RUNS = {
    "test_ex": ("test", False, True, None, None),
    "test_ex_need": ("test", True, True, None, None),
    "test_noex": ("test", False, False, None, None),
    "test_noex_need": ("test", True, False, None, None),
    "test_org30": ("test", False, True, 30, None),
    "dev_ex": ("dev", False, True, None, None),
    "train_sample": ("train", False, True, None, 200),
    "independent_ex": ("independent", False, True, None, None),
    "independent_noex": ("independent", False, False, None, None),
}


class CachedScorer:
    """Wraps a Scorer: logits are memoised per (request, need, tool content).

    The key holds the tool's content hash (description, schema, **example requests**): the record the
    cross-encoder reads includes examples when the index has them, so the same tool with and without
    examples is two different pairs. (Keyed on the name alone until 0.5.0, a day-one run after a run
    with examples in the same process reused the with-examples logits.)"""

    def __init__(self, scorer):
        self.scorer = scorer
        self.cache: dict[tuple, float] = {}
        self.info = scorer.info
        self.path = scorer.path

    def logits(self, request, need, tools):
        keys = [(request, need, t.server, t.name, t.content_hash()) for t in tools]
        todo = [i for i, k in enumerate(keys) if k not in self.cache]
        if todo:
            out = self.scorer.logits(request, need, [tools[i] for i in todo])
            for i, z in zip(todo, out):
                self.cache[keys[i]] = float(z)
        return np.array([self.cache[k] for k in keys])

    def score(self, request, need, tools):
        return self.scorer.score(request, need, tools)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=ROOT / "models" / "toolrank-reranker")
    p.add_argument("--runs", default="test_ex,test_ex_need,test_noex,test_noex_need,test_org30,train_sample,test_abstain,"
                   "test_nofit,independent_ex,independent_noex,independent_abstain",
                   help="order matters only for time: later runs reuse earlier runs' logits")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--score-top", type=int, default=None,
                   help="candidates the cross-encoder scores (default: the shipped Policy's; 0 = all of them)")
    p.add_argument("--thresholds", type=Path, default=ROOT / "benchmarks" / "results" / "thresholds_dev.json",
                   help="the dev threshold table (training/thresholds.py --json); read when the abstention run starts")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from scorer import Scorer

    a.out.mkdir(parents=True, exist_ok=True)
    scorer = CachedScorer(Scorer.load(a.model, threads=a.threads))
    public = load_or_build_default()
    indexes = {True: public, False: None}
    a.score_top = score_top_flag(a.score_top)
    policy = Policy(score_top=a.score_top)
    for name in a.runs.split(","):
        t0 = time.time()
        if name in ("test_nofit", "dev_nofit"):   # real no-fit requests against the same split's questions
            if a.thresholds.exists():
                chosen = json.loads(a.thresholds.read_text())["chosen"]["threshold"]
                policy = Policy(score_top=a.score_top, proceed_threshold=chosen)
            pipe = Pipeline(indexes[True], scorer, public_index=public, policy=policy)
            split = name.removesuffix("_nofit")
            rep = nofit_report(pipe, load_queries(QUESTIONS, split=split), load_nofit(NOFIT, split), show_progress=True)
            out = {"abstention_real": {k: v for k, v in rep.items() if k not in ("coverage", "risk")},
                   "proceed_threshold": policy.proceed_threshold}
            print(format_nofit(rep))
        elif name in ("test_abstain", "independent_abstain"):
            if a.thresholds.exists():  # decisions use the threshold chosen on dev
                chosen = json.loads(a.thresholds.read_text())["chosen"]["threshold"]
                policy = Policy(score_top=a.score_top, proceed_threshold=chosen)
            pipe = Pipeline(indexes[True], scorer, public_index=public, policy=policy)
            split = name.removesuffix("_abstain")
            queries = load_queries(questions_file(split), split=split)
            rep = abstention_report(pipe, queries, show_progress=True)
            png = plot_coverage_risk(rep, a.out / f"coverage_risk_{split}.png")
            red = [pipe.search(q.query).tokens.reduction for q in queries]
            out = {"abstention": {k: v for k, v in rep.items() if k not in ("coverage", "risk")},
                   "proceed_threshold": policy.proceed_threshold,
                   "token_reduction_mean": float(np.mean(red))}
            if png:
                out["abstention"]["plot"] = str(png.relative_to(ROOT))
            print(format_abstention(rep))
        else:
            split, use_need, examples, org, sample = RUNS[name]
            if indexes[examples] is None:
                indexes[examples] = load_or_build_default(with_examples=examples, show_progress=True)
            index = indexes[examples]
            pipe = Pipeline(index, scorer, public_index=public, policy=policy)
            queries = load_queries(questions_file(split), split=split)
            if sample:
                queries = random.Random(0).sample(queries, sample)

            retrieval_only = Pipeline(index, None, public_index=public, policy=policy)
            rerankers = pipeline_rerankers(STAGES, pipe, retrieval_only, a.score_top)
            out = evaluate(index, queries, stages=STAGES, use_need=use_need,
                           org_size=org, seed=0, rerankers=rerankers, show_progress=True)
            print(f"\n== {name}\n{format_report(out)}")
        out["seconds"] = round(time.time() - t0, 1)
        out["model"] = str(a.model)
        out["score_top"] = a.score_top   # candidates the cross-encoder scored (None: all)
        write_result(a.out / f"{name}.json", out)
        print(f"[{name}: {out['seconds']} s, {len(scorer.cache)} cached pairs]", flush=True)
    print(stamp_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
