"""Are the pipeline's wrong first answers wrong? A blind judge reads each test request whose first tool is
not the labelled one, beside the labelled tool(s) and the rest of the first five, and says of each whether
it would itself do what the user asked (the teacher's question, ``training/data/briefs/teacher_judge.md``).

    python benchmarks/judged_misses.py mine --out runs/judged/misses.jsonl --batches runs/judged/batches --n-batches 4
    # judges answer each batch with the teacher brief (one JSON line per request), then
    python benchmarks/judged_misses.py report --misses runs/judged/misses.jsonl --judged runs/judged/judged_*.jsonl \
        [--second runs/judged/second_*.jsonl] --out benchmarks/results/judged_misses.json

The judge sees the request alone (never the need, the label, or the order the pipeline gave): the candidates
are shuffled with a seed per request. The labelled tools are among them, so the judge's yes-rate on them is
measured on the same lists (how often the label itself is judged to fit). This is a diagnostic of the
labels and the ranking's errors, not a replacement for the strict figure: rank 1 stays what the README
reports; the "judged" rank 1 counts a first tool the judge accepts as right.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, environment_stamp, stamp_line, write_result  # noqa: E402


def mine(a: argparse.Namespace) -> int:
    from retrieval.evaluation.harness import load_queries
    from retrieval.index.default import load_or_build_default
    from retrieval.pipeline.decision import Policy
    from retrieval.pipeline.flow import Pipeline
    from scorer import Scorer
    from training.needs import read_needs
    from retrieval.jsonl import write_jsonl
    from training.refresh_lists import batch_text, seed_of

    needs = read_needs(a.needs)
    qs = [q for q in load_queries(ROOT / "training/data/questions.jsonl", split=a.split) if q.id in needs]
    index = load_or_build_default(with_examples=False, show_progress=True)
    policy = Policy()
    pipe = Pipeline(index, Scorer.load(a.model, threads=a.threads), policy=policy)
    rows, n = [], 0
    from tqdm import tqdm
    for q in tqdm(qs, desc="mine", unit="q", disable=None):
        need = needs[q.id]["need"]
        hits = index.retrieve(q.query, need, None, k=100, query_vector=index.embed_query(q.query, need))
        ranked = [tid for tid, _ in pipe.rank(q.query, need, hits, policy.score_top, None)]
        n += 1
        if ranked and ranked[0] == q.target:
            continue
        cands = list(dict.fromkeys([*ranked[: a.k], *sorted(q.lenient_targets)]))
        random.Random(seed_of(q.id)).shuffle(cands)
        rows.append({"id": q.id, "query": q.query, "style": q.style,
                     "candidates": [{"server": t.server, "tool": t.tool} for t in cands],
                     "first": {"server": ranked[0].server, "tool": ranked[0].tool} if ranked else None,
                     "target": {"server": q.target.server, "tool": q.target.tool},
                     "lenient": [{"server": t.server, "tool": t.tool} for t in sorted(q.acceptable)],
                     "target_rank": ranked.index(q.target) + 1 if q.target in ranked else None})
    a.out.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(a.out, rows)
    print(f"{len(rows)} of {n} {a.split} requests have another first tool (blind need, day one) -> {a.out}",
          file=sys.stderr)
    if a.batches:
        a.batches.mkdir(parents=True, exist_ok=True)
        size = -(-len(rows) // a.n_batches)
        for b in range(a.n_batches):
            part = rows[b * size:(b + 1) * size]
            if part:
                (a.batches / f"batch_{b + 1:02d}.txt").write_text(batch_text(part, index.catalog), encoding="utf-8")
        print(f"{a.n_batches} judge batches -> {a.batches}", file=sys.stderr)
    return 0


def _answers(paths: list[Path]) -> dict[str, dict]:
    """The judges' answers by request id (a later file's answer replaces an earlier one)."""
    from retrieval.jsonl import read_jsonl

    return {str(r["id"]): r for path in paths for _, r in read_jsonl(path)}


def judged_view(rows: list[dict], answers: dict[str, dict], threshold: float = 0.5) -> dict:
    """For each mined request the judge answered: is the first tool judged to fit, is a labelled tool judged
    to fit; the counts of the four cells, and the share of first tools judged right."""
    cells = {"first fits, label fits": 0, "first fits, label does not": 0,
             "first does not, label fits": 0, "neither": 0}
    by_style: dict[str, list[int]] = {}
    label_p, first_p, used = [], [], 0
    for r in rows:
        ans = answers.get(r["id"])
        if ans is None or int(ans["n"]) != len(r["candidates"]):
            continue
        used += 1
        n = len(r["candidates"])   # candidate numbers are 1..n; anything else is the judge's slip, dropped
        p = {r["candidates"][int(k) - 1]["server"] + "/" + r["candidates"][int(k) - 1]["tool"]: float(v)
             for k, v in ans["p"].items() if str(k).isdigit() and 1 <= int(k) <= n}
        key = lambda t: t["server"] + "/" + t["tool"]   # noqa: E731
        pf = p.get(key(r["first"]), 0.0) if r["first"] else 0.0
        pl = max(p.get(key(t), 0.0) for t in [r["target"], *r["lenient"]])
        first_p.append(pf)
        label_p.append(p.get(key(r["target"]), 0.0))
        f_ok, l_ok = pf >= threshold, pl >= threshold
        cells[("first fits" if f_ok else "first does not") + ", " + ("label fits" if l_ok else "label does not")
              if (f_ok or l_ok) else "neither"] += 1
        by_style.setdefault(r.get("style") or "?", []).append(int(f_ok))
    return {"requests": used, "cells": cells,
            "first_judged_fit": sum(x >= threshold for x in first_p) / max(used, 1),
            "label_judged_fit": sum(x >= threshold for x in label_p) / max(used, 1),
            "by_style": {s: {"n": len(v), "first_judged_fit": sum(v) / len(v)} for s, v in sorted(by_style.items())}}


def report(a: argparse.Namespace) -> int:
    from training.refresh_lists import agreement

    from retrieval.jsonl import read_jsonl

    rows = [r for _, r in read_jsonl(a.misses)]
    answers = _answers(a.judged)
    view = judged_view(rows, answers)
    out = {"environment": environment_stamp(), "split": a.split, "mined": len(rows), "total": a.total, **view}
    if a.second:
        second = _answers(a.second)
        out["second_judge"] = {"agreement": agreement(list(answers.values()), list(second.values())),
                               **judged_view([r for r in rows if r["id"] in second], second)}
    strict_right = a.total - len(rows)
    if a.total:
        out["rank1_strict"] = strict_right / a.total
        out["rank1_judged"] = (strict_right + view["first_judged_fit"] * len(rows)) / a.total
    write_result(a.out, out, indent=1)
    print(f"| {a.split} requests, day one, blind need | n |\n|---|---:|")
    print(f"| first tool not the labelled one | {len(rows)} of {a.total} |")
    print(f"| judged (request alone) | {view['requests']} |")
    for k, v in view["cells"].items():
        print(f"| {k} | {v} ({100 * v / max(view['requests'], 1):.0f}%) |")
    if a.total:
        print(f"\nrank 1: strict {100 * out['rank1_strict']:.1f}%; counting a first tool the judge accepts "
              f"{100 * out['rank1_judged']:.1f}% (estimate: judged share of the mined misses)")
    if a.second:
        ag = out["second_judge"]["agreement"]
        print(f"second judge: {ag}")
    print("\n" + stamp_line(out["environment"]))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("mine")
    m.add_argument("--split", default="test")
    m.add_argument("--model", type=Path, default=ROOT / "models" / "toolrank-reranker")
    m.add_argument("--needs", type=Path, default=ROOT / "training" / "data" / "needs_blind.jsonl")
    m.add_argument("--k", type=int, default=5, help="the first k of the pipeline's order join the labelled tools")
    m.add_argument("--threads", type=int, default=1)
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--batches", type=Path)
    m.add_argument("--n-batches", type=int, default=4)
    r = sub.add_parser("report")
    r.add_argument("--split", default="test")
    r.add_argument("--misses", type=Path, required=True)
    r.add_argument("--judged", type=Path, nargs="+", required=True)
    r.add_argument("--second", type=Path, nargs="*")
    r.add_argument("--total", type=int, required=True,
                   help="how many requests were mined (mine prints it: 'N of TOTAL ... have another first tool')")
    r.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "judged_misses.json")
    a = p.parse_args(argv)
    if a.cmd == "mine" and (a.k < 1 or a.n_batches < 1):
        p.error("--k and --n-batches must be at least 1")
    for path in getattr(a, "judged", None) or []:
        if not path.is_file():
            p.error(f"{path}: no such file")
    return mine(a) if a.cmd == "mine" else report(a)


if __name__ == "__main__":
    sys.exit(main())
