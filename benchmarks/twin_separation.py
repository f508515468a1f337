"""Which part of the score tells an answerable request from its no-fit twin? (issue 34's calibration bound)

    python benchmarks/twin_separation.py --flow benchmarks/results/agent_flow_report.json [--mode need]

Every answerable request of the agent flow has a twin: the same request with its labelled tools made
ineligible, so the first tool of the twin is a look-alike (mostly a same-API neighbour doing another
operation). A probability can be calibrated on answerable requests and safe where nothing fits only as far
as it tells the two apart. Per catalog kind, the AUROC (answerable = positive) of: the decision's best
probability (the confidence model over the cross-encoder's logit and the retrieval evidence); the
cross-encoder's logit of that first tool alone; the logit's gap to the second tool. With the need:
the same first tool scored with the request alone and with the need alone in the request's place, and their
sum with the pipeline's logit (does the scorer read the two texts better apart than together?); and the
first tool's **crowd**, its dense cosine to the nearest of the answer's next four tools (a look-alike left in
the list: in a twin the tool asked for, its nearest look-alike, is gone). Re-scores the first tools of each
row with the shipped scorer and encoder (the rows keep tool ids; the requests and needs are re-read from
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

SIGNALS = ("best_probability", "logit", "logit_gap", "crowd")
NEED_SIGNALS = ("request_alone_logit", "need_alone_logit", "three_logits")   # with the need only
LABELS = {"best_probability": "best probability", "logit": "cross-encoder logit", "logit_gap": "logit gap to the second",
          "crowd": "crowd (nearest of tools 2-5)", "request_alone_logit": "logit, request alone",
          "need_alone_logit": "logit, need alone", "three_logits": "sum of the three logits"}


class ToolVectors:
    """Each catalog kind's tool vectors as the agent flow's index holds them (``_Catalogs.index``: day one;
    MCP-Zero organisations search the default index). Not re-encoded tool by tool: the encoder is int8 with
    dynamic quantization, so a vector depends on the batch it was encoded in (re-encoded alone, cosines between
    tools move by up to 0.05)."""

    def __init__(self, catalogs) -> None:
        self.catalogs = catalogs          # benchmarks.judged_flow._Catalogs

    def __call__(self, kind: str, tool_id) -> np.ndarray:
        v = self.catalogs.index(kind).tool_vector(tool_id)
        if v is None:
            raise KeyError(f"{kind}: {tool_id} is not in the index")
        return v


def answer_tools(catalogs, kind: str, tools: list, k: int = 5) -> list | None:
    """The first ``k`` tools of a result row's answer as catalog ``ToolId`` s, in the answer's order; None when
    the first two do not resolve (the first tool would move); later tools no longer in the catalog are skipped."""
    from retrieval.catalog.model import ToolId

    names = [catalogs.real(kind, t) for t in tools[:k]]
    if len(names) < 2 or None in names[:2]:
        return None
    return [ToolId(*n) for n in names if n is not None]


def crowd(vectors: list[np.ndarray]) -> float:
    """The first tool's cosine to the nearest of the others (the answer's next tools; NaN with none)."""
    if len(vectors) < 2:
        return float("nan")
    return float(max(float(vectors[0] @ v) for v in vectors[1:]))


def separation(points: list[dict], signals: tuple[str, ...] = SIGNALS) -> dict[str, dict[str, float]]:
    """Per catalog kind: n answerable, n twins and the AUROC of each signal (points: ``catalog``,
    ``answerable`` and one value per signal; a point without a finite value of a signal is left out of
    that signal's AUROC)."""
    from sklearn.metrics import roc_auc_score

    out: dict[str, dict[str, float]] = {}
    for kind in sorted({p["catalog"] for p in points}):
        ps = [p for p in points if p["catalog"] == kind]
        y = np.array([p["answerable"] for p in ps], dtype=float)
        if len(set(y)) < 2:
            continue
        cell: dict[str, float] = {"answerable": int(y.sum()), "twins": int(len(y) - y.sum())}
        for s in signals:
            v = np.array([p.get(s, np.nan) for p in ps], dtype=float)
            ok = np.isfinite(v)
            cell[s] = float(roc_auc_score(y[ok], v[ok])) if len(set(y[ok])) == 2 else float("nan")
        out[kind] = cell
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
    from retrieval.evaluation.judged import base_id
    from scorer import Scorer
    from training.flow_cases import load_needs

    from retrieval.catalog.model import CatalogError
    from scorer import ScorerLoadError

    try:
        rows = [r for r in json.loads(a.flow.read_text())["rows"] if r["mode"] == a.mode and len(r.get("tools1", [])) >= 2]
        for r in rows:
            missing = {"id", "catalog", "answerable", "best1"} - set(r)
            if missing:
                raise KeyError(f"a row lacks {sorted(missing)}")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        print(f"error: {a.flow}: not an agent-flow run ({exc})", file=sys.stderr)
        return 2
    needs = load_needs() if a.mode == "need" else {}
    queries = _queries(a.flow, {base_id(r["id"]) for r in rows})
    catalogs = _Catalogs()
    try:
        scorer = Scorer.load(a.model, threads=a.threads)
        for kind in sorted({r["catalog"] for r in rows}):
            catalogs.catalog(kind)
    except (ScorerLoadError, CatalogError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    vectors = ToolVectors(catalogs)
    signals = SIGNALS + (NEED_SIGNALS if a.mode == "need" else ())
    points = []
    for r in tqdm(rows, desc="re-scoring first tools", unit="request"):
        ids = answer_tools(catalogs, r["catalog"], r["tools1"])
        if ids is None:
            continue
        cat = catalogs.catalog(r["catalog"])
        tools = [cat.get(t) for t in ids]
        base = base_id(r["id"])
        need = needs.get(base, {}).get("need") if a.mode == "need" else None
        z = scorer.logits(queries[base], need, tools[:2])
        point = {"catalog": r["catalog"], "answerable": bool(r["answerable"]), "best_probability": r["best1"],
                 "logit": float(z[0]), "logit_gap": float(z[0] - z[1]),
                 "crowd": crowd([vectors(r["catalog"], t) for t in ids])}
        if a.mode == "need" and need:
            alone = float(scorer.logits(queries[base], None, tools[:1])[0])
            need_alone = float(scorer.logits(need, None, tools[:1])[0])
            point.update({"request_alone_logit": alone, "need_alone_logit": need_alone,
                          "three_logits": float(z[0]) + alone + need_alone})
        points.append(point)
    table = separation(points, signals)
    print(f"answerable requests against their no-fit twins, mode {a.mode}: AUROC of each signal of the first tool\n")
    print("| catalog | answerable / twins | " + " | ".join(LABELS[s] for s in signals) + " |\n|---|---|"
          + "---:|" * len(signals))
    for kind, c in table.items():
        print(f"| {kind} | {c['answerable']} / {c['twins']} | " + " | ".join(f"{c[s]:.3f}" for s in signals) + " |")
    environment = environment_stamp()
    print(stamp_line(environment))
    write_result(a.out, {"environment": environment, "flow": a.flow.name, "mode": a.mode, "separation": table}, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
