"""Choose the default proceed threshold on dev questions, and print the trade-off table.

    python -m training.thresholds --model models/toolrank-reranker

Each dev question is searched twice with the request alone: with every server eligible
(a tool fits) and with the labelled and acceptable tools' servers removed (none fits).
For each threshold: how often the first search proceeds in each case. The default is the
threshold that maximises (proceed | fits) - (proceed | none fits), i.e. Youden's J.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from retrieval.eligibility import Eligibility
from retrieval.evaluate import load_queries

DATA = Path(__file__).resolve().parent / "data"


def best_probabilities(pipe, queries) -> tuple[np.ndarray, np.ndarray]:
    servers = pipe.index.catalog.servers
    fit, none = [], []
    for q in queries:
        drop = {t.server for t in q.lenient_targets}
        fit.append(pipe.search(q.query).best_probability)
        none.append(pipe.search(q.query, eligible=Eligibility.of(servers=[s for s in servers if s not in drop])).best_probability)
    return np.asarray(fit), np.asarray(none)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path)
    p.add_argument("--split", default="dev")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    from retrieval.pipeline import load_pipeline

    pipe = load_pipeline(model_dir=a.model or None)  # with the public registry, as deployed
    fit, none = best_probabilities(pipe, load_queries(DATA / "questions.jsonl", split=a.split))
    rows = []
    for t in np.round(np.arange(0.05, 0.96, 0.05), 2):
        rows.append({"threshold": float(t), "proceed_when_fit": float((fit >= t).mean()),
                     "proceed_when_none": float((none >= t).mean())})
    best = max(rows, key=lambda r: r["proceed_when_fit"] - r["proceed_when_none"])
    print("| threshold | proceed, a tool fits | proceed, none fits | J |\n|---:|---:|---:|---:|")
    for r in rows:
        mark = " **chosen**" if r is best else ""
        print(f"| {r['threshold']:.2f}{mark} | {r['proceed_when_fit']:.1%} | {r['proceed_when_none']:.1%} | "
              f"{r['proceed_when_fit'] - r['proceed_when_none']:.3f} |")
    if a.json:
        a.json.write_text(json.dumps({"rows": rows, "chosen": best}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
