"""Calibration of the best probability at a count that can test it (issue 34's ECE <= 0.05 per catalog kind).

    python benchmarks/calibration_report.py [--n 400] [--modes need,request_only] [--threads 2]

With 100 requests a perfectly calibrated model reads ECE ~0.08 on ten bins (``stats.ece_floor``): the agent-flow
benchmark's 100 per kind cannot show 0.05. This runs the first search alone (the decision's probability does
not depend on the second) on up to ``--n`` answerable requests per held-out catalog kind (the agent flow's
catalogs, ``training/flow_cases.py``: MCP-Zero test organisations and the held-out corpora, day one), with the
agent's blind need and without, and prints per kind: the count, rank 1, the mean best probability, the ECE, the
ECE a calibrated model would read at that count (median and 95th percentile of 1,000 draws) and its p-value,
and the signed gap (mean probability minus rank 1: negative is under-confident). Blind needs come from
``training/data/needs_blind.jsonl`` and, for the corpora's requests past the first 150, from
``benchmarks/data/corpus_needs_calibration.jsonl`` (written the same way: request only, never the catalog).
Writes JSON and a reliability diagram per mode.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from pathlib import Path

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, environment_stamp, stamp_line, write_result  # noqa: E402

EXTRA_NEEDS = ROOT / "benchmarks" / "data" / "corpus_needs_calibration.jsonl"


def summarise(rows: list[dict], seed: int = 0) -> dict[str, dict[str, dict]]:
    """Per catalog kind and mode: count, rank 1, mean best probability, ECE and a calibrated model's ECE."""
    import numpy as np

    from retrieval.evaluation.stats import ece, ece_floor

    out: dict[str, dict[str, dict]] = {}
    for kind in sorted({r["catalog"] for r in rows}):
        for mode in sorted({r["mode"] for r in rows}):
            rs = [r for r in rows if r["catalog"] == kind and r["mode"] == mode and r["answerable"]]
            if not rs:
                continue
            p = np.array([r["best1"] for r in rs])
            y = np.array([r["right1"] for r in rs], dtype=float)
            e = float(ece(p, y))
            floor = ece_floor(p, observed=e, seed=seed)
            out.setdefault(kind, {})[mode] = {
                "n": len(rs), "rank1": float(y.mean()), "mean_best": float(p.mean()), "gap": float(p.mean() - y.mean()),
                "ece": e, "ece_calibrated_median": floor["median"], "ece_calibrated_p95": floor["p95"],
                "p_value": floor["p_value"]}
    return out


def judged_rows(rows: list[dict], items: Path, judged: list[Path]) -> tuple[list[dict], int]:
    """The rows with ``right1`` read as "labelled or judged to fit" where the judge read the first tool (how many
    first tools it accepted beside the labels is returned too)."""
    from benchmarks.catalog_calibration import load_fits

    fits = load_fits(items, judged)
    out, accepted = [], 0
    for r in rows:
        f = fits(r) if r["answerable"] and not r["right1"] else None
        accepted += bool(f)
        out.append(dict(r, right1=True) if f else r)
    return out, accepted


def resummarise(a: argparse.Namespace) -> int:
    data = json.loads(a.rows.read_text())
    rows = data["rows"]
    note = "labels"
    if a.judged_items:
        rows, accepted = judged_rows(rows, a.judged_items, a.judged)
        note = f"labelled or judged to fit ({accepted} first tools the judge accepted beside the labels)"
    rep = summarise(rows)
    environment = environment_stamp()
    print(f"calibration of the best probability, first search, day one, against {note}; rows of {a.rows.name} "
          f"(commit {data.get('commit')})\n")
    print(format_summary(rep))
    print(stamp_line(environment))
    write_result(a.out, {"rows_from": a.rows.name, "rows_commit": data.get("commit"), "against": note,
                         "environment": environment, "report": rep}, indent=1)
    return 0


def format_summary(rep: dict[str, dict[str, dict]]) -> str:
    lines = ["| catalog | mode | n | rank 1 | mean best | gap | ECE | calibrated model: median (p95) | p |",
             "|---|---|---:|---:|---:|---:|---:|---|---:|"]
    for kind, modes in rep.items():
        for mode, r in modes.items():
            lines.append(f"| {kind} | {mode} | {r['n']} | {r['rank1']:.1%} | {r['mean_best']:.3f} | {r['gap']:+.3f} | "
                         f"{r['ece']:.3f} | {r['ece_calibrated_median']:.3f} ({r['ece_calibrated_p95']:.3f}) | "
                         f"{r['p_value']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=400, help="answerable requests per catalog kind, at most")
    p.add_argument("--modes", default="need,request_only")
    p.add_argument("--model", type=Path, default=ROOT / "models" / "toolrank-reranker")
    p.add_argument("--corpora", help="comma-separated corpora (default: the held-out ones)")
    p.add_argument("--no-mcpzero", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "calibration_report.json")
    p.add_argument("--rows", type=Path, help="re-read an earlier run's rows instead of searching again")
    p.add_argument("--judged-items", type=Path, help="a judge's items (benchmarks/judged_flow.py mine --misses-only)")
    p.add_argument("--judged", type=Path, nargs="*", help="its answers: a first tool counts as right when labelled "
                   "or judged to fit (what the probability claims); requests it did not read keep their label")
    a = p.parse_args(argv)
    if bool(a.judged_items) != bool(a.judged):
        p.error("--judged-items and --judged go together")
    if a.rows:
        return resummarise(a)
    logging.basicConfig(level=logging.WARNING)
    from benchmarks.ablation import CachedScorer
    from benchmarks.agent_flow import flow_rows, plot_reliability
    from retrieval.pipeline.decision import Policy
    from scorer import Scorer
    from training.flow_cases import SETS, load_needs

    needs = load_needs()
    if EXTRA_NEEDS.exists():
        needs = {**load_needs(EXTRA_NEEDS), **needs}
    split, corpora = SETS["report"]
    corpora = a.corpora.split(",") if a.corpora else corpora
    modes = a.modes.split(",")
    policy = Policy()
    scorer = CachedScorer(Scorer.load(a.model, threads=a.threads))
    t0 = time.time()
    rows = flow_rows(split, corpora, needs, a.n, modes, scorer, policy, random.Random(a.seed),
                     mcpzero=not a.no_mcpzero, answerable_only=True, tail=False, first_only=True)
    rep = summarise(rows, a.seed)
    environment = environment_stamp()
    stamp = {"n": a.n, "modes": modes, "seconds": round(time.time() - t0, 1), "commit": environment["commit"],
             "policy": {"proceed_threshold": policy.proceed_threshold, "score_top": policy.score_top}}
    print(f"calibration of the best probability, first search, day one: {stamp}\n")
    print(format_summary(rep))
    print(stamp_line(environment))
    from retrieval.evaluation.agent_flow import shippable_rows

    write_result(a.out, {**stamp, "environment": environment, "report": rep, "rows": shippable_rows(rows)}, indent=0)
    for mode in modes:
        png = plot_reliability(rows, a.out.with_name(f"{a.out.stem}_reliability_{mode}.png"), mode)
        if png:
            print(f"reliability diagram: {png.relative_to(ROOT) if png.is_relative_to(ROOT) else png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
