"""Does a cross-encoder help the whole pipeline? Dev folds by server, confidence model refitted per fold.

    python benchmarks/pipeline_cv.py --model models/toolrank-reranker --model runs/cand-enc [--no-examples]

A better reranking MRR does not mean a better pipeline: the shipped probability combines the
cross-encoder's logit with the retrieval evidence, and that evidence already carries much of what a
cross-encoder learns (README, "Training and releasing a model"). So each model is judged where it
would be used. The dev questions are searched three ways (request alone, request + need, and with the
right tools' servers removed, where nothing fits), every candidate of every list is scored, and the
confidence model (`training.calibrate.fit_confidence`, the shipped features) is fitted on the lists of
half the dev servers and applied to the other half, both ways round, for several random halvings.
Printed: rank 1 and top 5 (lenient) with the request alone and with the need, abstention AUROC of the
best probability, and the logit alone at rank 1, each averaged over the halvings. Several models share
the same lists, so their rows compare question by question.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, stamp_line  # noqa: E402

from retrieval.evaluation.abstention import auroc  # noqa: E402
from retrieval.evaluation.harness import load_queries  # noqa: E402
from retrieval.index.default import load_or_build_default  # noqa: E402
from retrieval.pipeline.confidence import EXPERIMENTAL_FEATURES, FEATURES  # noqa: E402
from training.calibrate import MODES, Collected, collect, fit_confidence  # noqa: E402

# the features of the shipped confidence models (the experimental ones do not vary over one catalog's lists)
SHIPPED_FEATURES = tuple(f for f in FEATURES if f not in EXPERIMENTAL_FEATURES)

QUESTIONS = ROOT / "training" / "data" / "questions.jsonl"


def halvings(servers: list[str], draws: int) -> list[dict[str, int]]:
    """``draws`` random assignments of the servers to fold 0 or 1 (seeded, so every model gets the same)."""
    out = []
    for seed in range(draws):
        order = sorted(set(servers))
        np.random.default_rng(seed).shuffle(order)
        out.append({s: i % 2 for i, s in enumerate(order)})
    return out


def cross_validate(col: Collected, servers: list[str], draws: int) -> dict[str, float]:
    """Held-out rank 1 / top 5 per mode and abstention AUROC, averaged over the halvings."""
    n = len(col.labels)
    rows: dict[str, list[float]] = {}
    for fold_of in halvings(servers, draws):
        fold = np.array([fold_of[s] for s in servers])
        scores: list[np.ndarray | None] = [None] * n
        for held in (0, 1):
            train = [g for g in range(n) if fold[g] != held]
            if not train or len(train) == n:
                raise ValueError(f"the questions cover {len(set(servers))} server(s), too few for two halves "
                                 "that both hold some; use more questions (a larger --limit, or none)")
            feats = {f: np.concatenate([col.feats[f][g] for g in train]) for f in SHIPPED_FEATURES}
            model = fit_confidence(feats, np.concatenate([col.labels[g] for g in train]), SHIPPED_FEATURES)
            for g in range(n):
                if fold[g] == held:
                    scores[g] = model.first_stage({f: col.feats[f][g] for f in SHIPPED_FEATURES})
        result: dict[str, float] = {}
        for mode in ("request", "need"):
            lists = [g for g in range(n) if col.modes[g] == mode]
            order = [np.argsort(-scores[g], kind="stable") for g in lists]
            result[f"{mode} top1"] = 100 * np.mean([col.labels[g][o[0]] > 0 for g, o in zip(lists, order)])
            result[f"{mode} top5"] = 100 * np.mean([col.labels[g][o[:5]].max() > 0 for g, o in zip(lists, order)])
        fit = [scores[g].max() for g in range(n) if col.modes[g] == "request"]
        none = [scores[g].max() for g in range(n) if col.modes[g] == "abstain"]
        result["AUROC"] = auroc(fit, none)
        for k, v in result.items():
            rows.setdefault(k, []).append(float(v))
    out = {k: float(np.mean(v)) for k, v in rows.items()}
    # The logit alone needs no fit, so no halving changes it.
    for mode in ("request", "need"):
        out[f"{mode} logit top1"] = float(100 * np.mean([col.labels[g][np.argmax(col.feats["logit"][g])] > 0
                                                         for g in range(n) if col.modes[g] == mode]))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, action="append", required=True, help="a scorer folder; repeat to compare")
    p.add_argument("--no-examples", action="store_true", help="index without example requests (day one)")
    p.add_argument("--draws", type=int, default=3, help="random halvings of the dev servers")
    p.add_argument("--limit", type=int, default=0, help="first N dev questions only (a quick look)")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    if a.draws < 1:
        p.error(f"--draws must be at least 1, got {a.draws}")
    for m in a.model:
        if not (m / "config.json").is_file():
            p.error(f"--model {m}: not a scorer folder (no config.json)")
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from scorer import Scorer

    index = load_or_build_default(with_examples=not a.no_examples, show_progress=True)
    queries = load_queries(QUESTIONS, split="dev")
    if a.limit:
        queries = queries[: a.limit]
    servers = [q.target.server for q in queries for _ in MODES]
    results = {}
    for m in a.model:
        col = collect(index, queries, Scorer.load(m, threads=a.threads), modes=MODES)
        if len(col.labels) != len(servers):  # an empty list was skipped: folds would misalign
            raise SystemExit(f"{m}: {len(col.labels)} lists for {len(servers)} searches; cannot assign folds")
        try:
            results[str(m)] = cross_validate(col, servers, a.draws)
        except ValueError as exc:
            p.error(str(exc))
    keys = ["request top1", "request top5", "need top1", "need top5", "AUROC", "request logit top1", "need logit top1"]
    print(f"\ndev, {len(queries)} questions, {a.draws} halvings by server, index "
          f"{'without' if a.no_examples else 'with'} example requests\n")
    print("| model | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for m, r in results.items():
        print(f"| {m} | " + " | ".join(f"{r[k]:.3f}" if k == "AUROC" else f"{r[k]:.1f}" for k in keys) + " |")
    print("\n" + stamp_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
