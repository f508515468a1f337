"""Choose the default proceed threshold on dev questions, and print the trade-off table.

    python -m training.thresholds --model models/toolrank-reranker

Each dev question is searched twice with the request alone: with every server eligible
(a tool fits) and with the labelled and acceptable tools' servers removed (none fits).
For each threshold: how often the first search proceeds in each case. The default is the
threshold that maximises (proceed | fits) - (proceed | none fits), i.e. Youden's J.

With ``--nofit training/data/nofit.jsonl``, "none fits" is the real thing: requests of the
same split written to have no tool (every server eligible), the headline since near misses
echo a request far more than a removed server does; the simulated column stays beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from retrieval.catalog.eligibility import Eligibility
from retrieval.evaluation.harness import load_queries

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
    p.add_argument("--nofit", type=Path, help="requests written to have no tool; their split --split is used")
    p.add_argument("--limit", type=int, help="only the first N questions (the calibration fit's subset)")
    a = p.parse_args(argv)
    from retrieval.pipeline.flow import load_pipeline

    pipe = load_pipeline(model_dir=a.model or None)  # with the public registry, as deployed
    fit, none = best_probabilities(pipe, load_queries(DATA / "questions.jsonl", split=a.split)[: a.limit or None])
    real = None
    if a.nofit:
        from retrieval.evaluation.abstention import load_nofit
        real = np.asarray([pipe.search(r.query).best_probability for r in load_nofit(a.nofit, a.split)])
    rows = []
    for t in np.round(np.arange(0.05, 0.96, 0.05), 2):
        row = {"threshold": float(t), "proceed_when_fit": float((fit >= t).mean()),
               "proceed_when_none": float((none >= t).mean())}
        if real is not None:
            row["proceed_when_real_none"] = float((real >= t).mean())
        rows.append(row)
    key = "proceed_when_real_none" if real is not None else "proceed_when_none"
    best = max(rows, key=lambda r: r["proceed_when_fit"] - r[key])
    head = "| threshold | proceed, a tool fits | proceed, none fits (simulated) |"
    print(head + (" proceed, none fits (written) |" if real is not None else "") + " J |")
    print("|---:|---:|---:|" + ("---:|" if real is not None else "") + "---:|")
    for r in rows:
        mark = " **chosen**" if r is best else ""
        real_cell = f" {r['proceed_when_real_none']:.1%} |" if real is not None else ""
        print(f"| {r['threshold']:.2f}{mark} | {r['proceed_when_fit']:.1%} | {r['proceed_when_none']:.1%} |"
              f"{real_cell} {r['proceed_when_fit'] - r[key]:.3f} |")
    if a.json:
        a.json.write_text(json.dumps({"rows": rows, "chosen": best}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
