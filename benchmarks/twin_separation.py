"""Which part of the score tells an answerable request from its no-fit twin? (issue 34's calibration bound)

    python benchmarks/twin_separation.py --flow benchmarks/results/agent_flow_report.json [--mode need]

Every answerable request of the agent flow has a twin: the same request with its labelled tools made
ineligible, so the first tool of the twin is a look-alike (mostly a same-API neighbour doing another
operation). A probability can be calibrated on answerable requests and safe where nothing fits only as far
as it tells the two apart. Per catalog kind, the AUROC (answerable = positive) of: the decision's best
probability (the confidence model over the cross-encoder's logit and the retrieval evidence); the
cross-encoder's logit of that first tool alone; the logit's gap to the second tool. Re-scores the first two
tools of each row with the shipped scorer (the rows keep tool ids; the requests and needs are re-read from
their sources). Prints a table; writes JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, environment_stamp, stamp_line, write_result  # noqa: E402

SIGNALS = ("best_probability", "logit", "logit_gap")


def separation(points: list[dict]) -> dict[str, dict[str, float]]:
    """Per catalog kind: n answerable, n twins and the AUROC of each signal (points: ``catalog``,
    ``answerable`` and one value per signal)."""
    from sklearn.metrics import roc_auc_score

    out: dict[str, dict[str, float]] = {}
    for kind in sorted({p["catalog"] for p in points}):
        ps = [p for p in points if p["catalog"] == kind]
        y = np.array([p["answerable"] for p in ps], dtype=float)
        if len(set(y)) < 2:
            continue
        out[kind] = {"answerable": int(y.sum()), "twins": int(len(y) - y.sum()),
                     **{s: float(roc_auc_score(y, [p[s] for p in ps])) for s in SIGNALS}}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--flow", type=Path, default=ROOT / "benchmarks" / "results" / "agent_flow_report.json")
    p.add_argument("--mode", default="need", choices=("need", "request_only"))
    p.add_argument("--model", type=Path, default=ROOT / "models" / "toolrank-reranker")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "twin_separation.json")
    a = p.parse_args(argv)
    from tqdm import tqdm

    from benchmarks.judged_flow import _Catalogs, _queries
    from retrieval.catalog.model import ToolId
    from retrieval.evaluation.judged import base_id
    from scorer import Scorer
    from training.flow_cases import load_needs

    try:
        rows = [r for r in json.loads(a.flow.read_text())["rows"] if r["mode"] == a.mode and len(r.get("tools1", [])) >= 2]
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {a.flow}: not an agent-flow run ({exc})", file=sys.stderr)
        return 2
    needs = load_needs() if a.mode == "need" else {}
    queries = _queries(a.flow, {base_id(r["id"]) for r in rows})
    catalogs = _Catalogs()
    scorer = Scorer.load(a.model, threads=a.threads)
    points = []
    for r in tqdm(rows, desc="re-scoring first tools", unit="request"):
        names = [catalogs.real(r["catalog"], t) for t in r["tools1"][:2]]
        if None in names:
            continue
        cat = catalogs.catalog(r["catalog"])
        tools = [cat.get(ToolId(*n)) for n in names]
        base = base_id(r["id"])
        need = needs.get(base, {}).get("need") if a.mode == "need" else None
        z = scorer.logits(queries[base], need, tools)
        points.append({"catalog": r["catalog"], "answerable": bool(r["answerable"]), "best_probability": r["best1"],
                       "logit": float(z[0]), "logit_gap": float(z[0] - z[1])})
    table = separation(points)
    print(f"answerable requests against their no-fit twins, mode {a.mode}: AUROC of each signal of the first tool\n")
    print("| catalog | answerable / twins | best probability | cross-encoder logit | logit gap to the second |\n"
          "|---|---|---:|---:|---:|")
    for kind, c in table.items():
        print(f"| {kind} | {c['answerable']} / {c['twins']} | {c['best_probability']:.3f} | {c['logit']:.3f} | "
              f"{c['logit_gap']:.3f} |")
    environment = environment_stamp()
    print(stamp_line(environment))
    write_result(a.out, {"environment": environment, "flow": a.flow.name, "mode": a.mode, "separation": table}, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
