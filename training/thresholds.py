"""Choose the decision zones: the proceed threshold and the second attempt's no-fit floor.

    python benchmarks/agent_flow.py --set fit --always-second      # MCP-Zero dev organisations + training corpora
    python -m training.thresholds --flow benchmarks/results/agent_flow_fit.json --json benchmarks/results/zones_fit.json

With ``--flow``, both are chosen on the agent flow over catalogs shaped like users' (10-30 server
organisations of the dev split, other writers' corpora; day one; with and without the agent's need),
never on the catalogs the README reports: the threshold (a 0.01 grid) that proceeds most often rightly
(wrong proceeds count twice) while no-fit requests proceed at most 10% on every kind (issue 34's target is
per catalog; 0.8.0 allowed 10% on average and 15% on one, and proceeded for 15-23% of no-fit requests
on four held-out catalogs), then the highest floor at which no right first answer ends empty on any kind.

The older mode (0.3.0-0.6.0), on the shipped catalog's dev questions alone:

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


def zone_table(rows: list[dict], proceeds=None, floors=None, fits=None) -> list[dict]:
    """Every (proceed threshold, no-fit floor) pair replayed over agent-flow rows run with
    ``--always-second`` (benchmarks/agent_flow.py --set fit): per pair, over all catalog kinds and modes
    pooled with equal weight per kind, the shares an agent sees.

    ``fits(row, tool)``: a blind judge's verdict on the tool a row proceeded with (True, False, or None when
    not judged); with it a proceed is right when the tool is labelled *or* judged to fit, so a no-fit twin that
    proceeds with a look-alike the judge accepts is no wrong proceed (an unjudged one counts as wrong)."""
    from retrieval.evaluation.agent_flow import replay
    from retrieval.evaluation.judged import proceeded_with

    def right(r: dict) -> bool:
        return bool(r["right_final"]) or (fits is not None and bool(fits(r, proceeded_with(r))))

    proceeds = proceeds if proceeds is not None else np.round(np.arange(0.50, 0.955, 0.01), 2)
    floors = floors if floors is not None else np.round([0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5], 2)
    kinds = sorted({r["catalog"] for r in rows})
    out = []
    for t in proceeds:
        for f in floors:
            if f > t:
                continue
            per = []
            for kind in kinds:
                rs = replay([r for r in rows if r["catalog"] == kind], float(t), float(f))
                ans = [r for r in rs if r["answerable"]]
                none = [r for r in rs if not r["answerable"]]
                right1 = [r for r in ans if r["right1"]]
                per.append({
                    "proceed_right": np.mean([r["decision"] == "proceed" and right(r) for r in ans]),
                    "proceed_wrong": np.mean([r["decision"] == "proceed" and not right(r) for r in ans]),
                    "right_first_end_empty": np.mean([r["empty"] for r in right1]) if right1 else 0.0,
                    "end_empty": np.mean([r["empty"] for r in ans]),
                    "nofit_proceed": np.mean([r["decision"] == "proceed" and not right(r) for r in none]) if none else 0.0,
                    "nofit_no_fit": np.mean([r["decision"] == "no_fit" for r in none]) if none else 0.0,
                })
            row = {"proceed_threshold": float(t), "no_fit_below": float(f)}
            for key in per[0]:
                row[key] = float(np.mean([x[key] for x in per]))
                row[key + "_worst"] = float(max(x[key] for x in per) if "wrong" in key or "empty" in key
                                            or key == "nofit_proceed" else min(x[key] for x in per))
            out.append(row)
    return out


def choose_zones(table: list[dict], *, max_right_empty: float = 0.0, max_nofit_proceed: float = 0.10,
                 max_nofit_proceed_worst: float = 0.10) -> dict:
    """The proceed threshold: the most right proceeds net of wrong ones (counted twice), with no-fit requests
    proceeding at most ``max_nofit_proceed`` over the catalog kinds and ``max_nofit_proceed_worst`` on any one
    (the target is per catalog: a user's catalog is one kind, not the average of several); then the no-fit
    floor: the most no-fit requests ending ``no_fit`` while right first answers end empty at most
    ``max_right_empty`` on every kind (none, by default: a floor chosen at 1.5% on these catalogs emptied
    11% of right first answers on a held-out one, MCPToolBench++; an empty hand costs more than a
    `choose` where nothing fits)."""
    ok = [r for r in table if r["nofit_proceed"] <= max_nofit_proceed
          and r["nofit_proceed_worst"] <= max_nofit_proceed_worst] or table
    t = max(ok, key=lambda r: (r["proceed_right"] - 2 * r["proceed_wrong"], -r["proceed_threshold"]))["proceed_threshold"]
    at_t = [r for r in table if r["proceed_threshold"] == t]
    safe = [r for r in at_t if r["right_first_end_empty_worst"] <= max_right_empty] or \
        [min(at_t, key=lambda r: r["no_fit_below"])]
    return max(safe, key=lambda r: (r["nofit_no_fit"], -r["no_fit_below"]))


def judged_fits(items: Path, judged: list[Path]):
    """``fits(row, tool)`` from a blind judge's answers (``benchmarks/judged_flow.py``; None: not judged)."""
    from retrieval.evaluation.judged import fits, read_judged

    probs = read_judged(items, judged)
    return (lambda row, tool: fits(probs, row["id"], tool)), len(probs)


def flow_main(path: Path, json_out: Path | None, items: Path | None = None, judged: list[Path] | None = None) -> int:
    data = json.loads(path.read_text())
    rows = data["rows"]
    fits = None
    if items and judged:
        fits, n = judged_fits(items, judged)
        print(f"(proceeds read against a blind judge: {n} requests judged; a no-fit request proceeding with a tool "
              "the judge accepts is not a wrong proceed)")
    table = zone_table(rows, fits=fits)
    chosen = choose_zones(table)
    print(f"decision zones replayed over {len(rows)} agent-flow rows ({path.name}; catalog kinds: "
          f"{', '.join(sorted({r['catalog'] for r in rows}))}; means over kinds, worst kind in brackets)")
    print("| proceed at | no_fit below | proceed, right | proceed, wrong | right first -> empty | "
          "no-fit: proceed | no-fit: no_fit |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in table:   # every threshold from 0.70 at the chosen floor, and every floor at the chosen threshold
        at_floor = r["no_fit_below"] == chosen["no_fit_below"] and r["proceed_threshold"] >= 0.7
        if not (at_floor or r["proceed_threshold"] == chosen["proceed_threshold"]):
            continue
        mark = " **chosen**" if r is chosen else ""
        print(f"| {r['proceed_threshold']:.2f}{mark} | {r['no_fit_below']:.2f} | {r['proceed_right']:.1%} | "
              f"{r['proceed_wrong']:.1%} | {r['right_first_end_empty']:.1%} ({r['right_first_end_empty_worst']:.1%}) | "
              f"{r['nofit_proceed']:.1%} ({r['nofit_proceed_worst']:.1%}) | {r['nofit_no_fit']:.1%} |")
    print(f"\nchosen: proceed_threshold={chosen['proceed_threshold']}, no_fit_below={chosen['no_fit_below']} "
          "(most right proceeds, wrong ones counted twice, with no-fit requests proceeding at most 10% on every kind; "
          "then the highest floor at which no right first answer ends empty on any kind)")
    if json_out:
        json_out.write_text(json.dumps({"source": path.name, "table": table, "chosen": chosen}, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--flow", type=Path, help="agent-flow rows (benchmarks/agent_flow.py --set fit --always-second): "
                   "choose the proceed threshold and the no-fit floor on them instead")
    p.add_argument("--judged-items", type=Path, help="with --flow: the judge's items (benchmarks/judged_flow.py mine)")
    p.add_argument("--judged", type=Path, nargs="*", help="with --flow: the judge's answers; proceeds are read against them")
    p.add_argument("--model", type=Path)
    p.add_argument("--split", default="dev")
    p.add_argument("--json", type=Path)
    p.add_argument("--nofit", type=Path, help="requests written to have no tool; their split --split is used")
    p.add_argument("--limit", type=int, help="only the first N questions (the calibration fit's subset)")
    a = p.parse_args(argv)
    if bool(a.judged_items) != bool(a.judged):
        p.error("--judged-items and --judged go together (the judge's items and its answers)")
    if a.flow:
        return flow_main(a.flow, a.json, a.judged_items, a.judged)
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
