"""Could audits set a tenant's tail level (ranks 11-100) from its own traffic? (0.18.0, issue 34)

    python benchmarks/audit_tail.py                 # the held-out kinds' tail sample (tail_sample.py, 0.17.0)

An audit that also judged one candidate past the scored head of its search (drawn uniformly, as a catalog's
calibration draws its probes' tail candidates) would give the tail's level from the tenant's real requests
instead of probes. Simulated on 0.17.0's judged sample of ranks 11-100 (``judged_flow/tail_sample/report``: the
first searches of 100 requests a kind, each candidate drawn with a known chance and judged blind): an audited
request's one tail candidate is drawn among its judged ones with chance proportional to one over its chance (so
it stands for a uniform draw over the request's tail), and counts for as many candidates as its tail holds. The
level is fitted as a calibration fits its probes' (``probes.tail_evidence`` under ``TAIL_EVIDENCE``, else the
catalog's level; ``fit_tail_shift``, starting from the catalog's level: 0.17.0's probe shift per kind), on ``k``
audited requests drawn outside each fifth of the kind's requests, and read on that fifth: the tail's predicted
fits against the Horvitz-Thompson estimate of the judged ones, pooled over the five fifths (medians over
``--repeats`` draws). Requests with no judged candidate give no audit.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, markdown_table, stamp_line, write_result  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
SAMPLE = RESULTS / "judged_flow" / "tail_sample" / "report"
AUDITS = (25, 50, 80)   # at most the 80 requests outside each fifth
FITS = 0.5


def load() -> tuple[list[dict], dict, dict]:
    from retrieval.evaluation.judged import read_judged

    design = json.loads((SAMPLE / "design.json").read_text())
    judged = read_judged(SAMPLE / "items.jsonl", sorted(SAMPLE.glob("judged_0*.jsonl")))
    shifts = {k: float(v["shift"]) for k, v in json.loads((RESULTS / "tail_probes_report.json").read_text())["report"].items()
              if "shift" in v}
    return design["requests"], judged, shifts


def level(tail_p: np.ndarray, shift: float) -> np.ndarray:
    from retrieval.pipeline.recalibration import platt

    return platt(tail_p, 1.0, shift)


def audit_of(d: dict, judged: dict, rng: np.random.Generator) -> tuple[float, float, bool] | None:
    """One audited request's tail candidate: (shipped probability, candidates it stands for, fits), or None."""
    if not d["judged_at"]:
        return None
    pi = np.array([d["pi"][i] for i in d["judged_at"]])
    j = rng.choice(len(pi), p=(1 / pi) / np.sum(1 / pi))
    i, tool = d["judged_at"][j], tuple(d["judged_ids"][j])
    return float(d["tail_p"][i]), float(len(d["tail_p"])), judged.get(d["id"], {}).get(tool, 0.0) >= FITS


def fitted_shift(audits: list[tuple[float, float, bool]], base: float) -> float:
    """The tenant's tail shift from its audits, starting from the catalog's level ``base`` (the product's)."""
    from retrieval.pipeline.probes import audit_tail_shift

    return audit_tail_shift(audits, base)


def observed(d: dict, judged: dict) -> float:
    """The Horvitz-Thompson estimate of a request's fits past the head."""
    j = judged.get(d["id"], {})
    return float(sum(1.0 / d["pi"][i] for i, t in zip(d["judged_at"], d["judged_ids"]) if j.get(tuple(t), 0.0) >= FITS))


def measure(requests: list[dict], judged: dict, shifts: dict, repeats: int, seed: int) -> dict:
    out = {}
    kinds = sorted({d["catalog"] for d in requests})
    for kind in kinds:
        rs = [d for d in requests if d["catalog"] == kind]
        base = shifts.get(kind, 0.0)
        obs = np.array([observed(d, judged) for d in rs])
        pred_shipped = np.array([level(np.array(d["tail_p"]), 0.0).sum() for d in rs])
        pred_catalog = np.array([level(np.array(d["tail_p"]), base).sum() for d in rs])
        cell = {"requests": len(rs), "found": int(sum(1 for d in rs for i, t in zip(d["judged_at"], d["judged_ids"])
                                                      if judged.get(d["id"], {}).get(tuple(t), 0.0) >= FITS)),
                "observed": float(obs.sum()), "catalog_shift": base,
                "shipped": float(pred_shipped.sum() / obs.sum()) if obs.sum() else None,
                "catalog": float(pred_catalog.sum() / obs.sum()) if obs.sum() else None, "audits": {}}
        for k in AUDITS:
            rng = np.random.default_rng([seed, k])
            ratios, moved = [], []
            for _ in range(repeats):
                order = rng.permutation(len(rs))
                pred = 0.0
                for f in range(5):
                    fold = order[f::5]
                    rest = np.setdiff1d(order, fold)
                    drawn = rng.choice(rest, size=min(k, len(rest)), replace=False)
                    audits = [a for a in (audit_of(rs[i], judged, rng) for i in drawn) if a is not None]
                    shift = fitted_shift(audits, base)
                    moved.append(shift != base)
                    pred += sum(level(np.array(rs[i]["tail_p"]), shift).sum() for i in fold)
                ratios.append(pred / obs.sum() if obs.sum() else float("nan"))
            cell["audits"][str(k)] = {"ratio": float(np.nanmedian(ratios)) if obs.sum() else None,
                                      "p10": float(np.nanpercentile(ratios, 10)) if obs.sum() else None,
                                      "p90": float(np.nanpercentile(ratios, 90)) if obs.sum() else None,
                                      "moved": float(np.mean(moved))}
        out[kind] = cell
        print(f"  {kind}: " + ", ".join(f"{k}: {v['ratio']}" for k, v in cell["audits"].items()), file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS / "audit_tail.json")
    a = ap.parse_args(argv)
    requests, judged, shifts = load()
    cells = measure(requests, judged, shifts, a.repeats, a.seed)

    def r(v):
        return "none observed" if v is None else f"{v:.2f}"

    rows = [[kind, c["requests"], c["found"], f"{c['observed']:.1f}", r(c["shipped"]),
             f"{r(c['catalog'])} ({c['catalog_shift']:+.2f})",
             *[f"{r(c['audits'][str(k)]['ratio'])} [{r(c['audits'][str(k)]['p10'])}-{r(c['audits'][str(k)]['p90'])}]"
               f", moved {c['audits'][str(k)]['moved']:.0%}" for k in AUDITS]] for kind, c in cells.items()]
    text = "\n".join([
        "# The tail's level from audits (ranks 11-100, first search with the need): predicted / observed fits", "",
        markdown_table(["catalog", "requests", "fits found", "fits, estimated", "shipped", "calibrated (probe shift)",
                        *[f"{k} audited requests: median [10th-90th pct], level moved" for k in AUDITS]], rows), "",
        "Each fifth of a kind's requests is read with the level fitted on audits of requests outside it; the ratio "
        "pools the five fifths (sum predicted over the Horvitz-Thompson sum observed). At one fit in thousands a "
        "kind's ratio rests on a handful of fits: read the fits found.", "", stamp_line()])
    print(text)
    write_result(a.out, {"repeats": a.repeats, "kinds": cells}, indent=1)
    a.out.with_suffix(".md").write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
