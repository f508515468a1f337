"""Would a per-tenant recalibration learned from use fix the best probability's calibration? A simulation
over the agent-flow rows (no model is run: the rows carry each request's best probability and whether the
first tool was right).

    python benchmarks/use_recalibration.py                       # lambda chosen on the fit rows, measured on the report rows
    python benchmarks/use_recalibration.py --feedback 25,50 --repeats 200

For each catalog kind (one tenant each) and the flow's mode (default ``need``), ``k`` answerable requests
drawn at random play the tenant's feedback (the tool the agent called is the right one, so the first tool's
label is known); the service's recalibration (``retrieval/pipeline/recalibration.py``,
``sigmoid(a * logit(p) + b)``) is fitted on them with a pull towards the identity (``lam * ((a - 1)^2 + b^2)``) and applied to the kind's other answerable requests (ECE of
the best probability, 10 bins) and to its no-fit requests (share at or above the proceed threshold). The
pull ``lam`` is chosen on the fit catalogs' rows (``--fit``) and the table is measured on the report
catalogs' rows (``--report``), never chosen there. Medians over ``--repeats`` draws.

"gated": the recalibration is applied only where it beats the identity on the tenant's own feedback, by
five-fold cross-validated log loss (a tenant whose probabilities are already near its rates keeps them).

Since 0.16.0 the thresholds move through the tenant's map too, so no decision changes: the "no-fit" columns say
what reading the map against the shipped thresholds (as before 0.16.0) would have cost — the share of the kind's
no-fit twins that would proceed; with the thresholds moved it stays the "before" share.

What it leaves out, said plainly: real feedback is biased (searches where the agent called nothing, as on a
no-fit request, give no observation), and an agent does not always call the right tool. ``--biased SHARE``
(0.17.0) models the flow's own bias: a search that proceeds has its first tool called and counted as a fit
whether it fits or not, one under the threshold has its fitting tool called, and no-fit requests (``SHARE`` of
the traffic) are observed only when they proceed (as fits); the pull is then the service's.
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
from retrieval.evaluation.stats import ece  # noqa: E402
from retrieval.pipeline.recalibration import (DEFAULT_PULL, UseRecalibration, beats_identity,  # noqa: E402
                                              fit_recalibration)

RESULTS = ROOT / "benchmarks" / "results"
LAMBDAS = (0.0, 0.5, 2.0, 8.0, 32.0)


def apply(p: np.ndarray, ab: tuple[float, float]) -> np.ndarray:
    return UseRecalibration(*ab).apply(p)


def observed(p: np.ndarray, y: np.ndarray, pn: np.ndarray, threshold: float, nofit_share: float,
             rng: np.random.Generator, k: int, answerable: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``k`` feedback observations as a service records them when an agent follows the flow (``--biased``): a
    search that proceeds has its first tool called, and a call that returns counts as the first tool fitting
    whether it fits or not; one that does not proceed has the fitting tool called when one is offered (its
    label: whether that was the first tool). A no-fit request (a share ``nofit_share`` of the traffic) gives an
    observation only when it proceeds, and then a "fit". ``answerable``: the indices the draw may use."""
    ps, ys = [], []
    while len(ps) < k:
        if len(pn) and rng.random() < nofit_share:
            q = pn[rng.integers(len(pn))]
            if q >= threshold:
                ps.append(q)
                ys.append(1.0)
            continue
        i = answerable[rng.integers(len(answerable))]
        ps.append(p[i])
        ys.append(1.0 if p[i] >= threshold else y[i])
    return np.array(ps), np.array(ys)


def simulate(rows: list[dict], k: int, lam: float, repeats: int, threshold: float, mode: str,
             seed: int = 0, biased: float | None = None) -> dict[str, dict]:
    """Per catalog kind: median ECE before/after and the no-fit share at the threshold before/after.
    ``biased``: the observations follow the flow (:func:`observed`) with this share of no-fit traffic."""
    rng = np.random.default_rng(seed)
    out: dict[str, dict] = {}
    for kind in sorted({r["catalog"] for r in rows}):
        rs = [r for r in rows if r["catalog"] == kind and r["mode"] == mode]
        ans = [r for r in rs if r["answerable"]]
        if len(ans) < k + 20:
            continue
        p = np.array([r["best1"] for r in ans])
        y = np.array([r["right1"] for r in ans], dtype=np.float64)
        pn = np.array([r["best1"] for r in rs if not r["answerable"]])
        before, after, nf_after, gated, nf_gated, applied = [], [], [], [], [], []
        for _ in range(repeats):
            perm = rng.permutation(len(ans))
            seen, rest = perm[:k], perm[k:]
            if biased is None:
                po, yo = p[seen], y[seen]
            else:   # the observations a flow-following agent leaves, from the requests not read after
                po, yo = observed(p, y, pn, threshold, biased, rng, k, seen)
            ab = fit_recalibration(po, yo, lam)
            use = beats_identity(po, yo, lam)
            applied.append(use)
            before.append(ece(p[rest], y[rest]))
            after.append(ece(apply(p[rest], ab), y[rest]))
            gated.append(after[-1] if use else before[-1])
            if len(pn):
                nf_after.append(float(np.mean(apply(pn, ab) >= threshold)))
                nf_gated.append(nf_after[-1] if use else float(np.mean(pn >= threshold)))
        out[kind] = {"n": len(ans), "ece_before": float(np.median(before)), "ece_after": float(np.median(after)),
                     "nofit_proceed_before": float(np.mean(pn >= threshold)) if len(pn) else float("nan"),
                     "nofit_proceed_after": float(np.median(nf_after)) if nf_after else float("nan"),
                     "ece_gated": float(np.median(gated)), "applied": float(np.mean(applied)),
                     "nofit_proceed_gated": float(np.median(nf_gated)) if nf_gated else float("nan")}
    return out


def _rows(path: Path) -> list[dict]:
    return json.loads(path.read_text())["rows"]


def _judged_wide(fit_rows: list[dict], report_rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """The fit rows and the report rows with the wide measure's added requests, each answerable row's ``right1``
    now "its first tool is labelled or judged to fit" (what the probability claims); rows no judge read are left
    out (every first tool of these sets was read)."""
    from benchmarks.catalog_calibration import first_fits, load_fits

    judged = RESULTS / "judged_flow"

    def relabel(rows: list[dict], items: list[Path], answers: list[Path]) -> list[dict]:
        fits = load_fits(items, answers)
        return [dict(r, right1=first_fits(r, fits)) if r["answerable"] else r for r in rows
                if not r["answerable"] or r.get("right1") or fits(r) is not None]

    wide = _rows(RESULTS / "wide_calibration_rows.json")
    report = relabel([r for r in report_rows if r.get("mode") in ("need", "request_only")] + wide,
                     [judged / "report" / "items.jsonl", judged / "wide" / "items.jsonl"],
                     sorted((judged / "report").glob("judged_0*.jsonl")) + sorted((judged / "wide").glob("judged_0*.jsonl")))
    fit = relabel(fit_rows, [judged / "fit" / "items.jsonl"], sorted((judged / "fit").glob("judged_0*.jsonl")))
    return fit, report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fit", type=Path, default=RESULTS / "agent_flow_fit.json",
                    help="agent-flow rows the pull is chosen on (default: the fit catalogs')")
    ap.add_argument("--report", type=Path, default=RESULTS / "agent_flow_report.json",
                    help="agent-flow rows the table is measured on (default: the report catalogs')")
    ap.add_argument("--feedback", default="25,50", help="feedback observations per tenant, comma-separated")
    ap.add_argument("--repeats", type=int, default=100, help="random draws per figure (median reported)")
    ap.add_argument("--mode", default="need", help="the flow's mode (request_only, need, late_need)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--biased", type=float, metavar="NOFIT_SHARE",
                    help="observations as a flow-following agent leaves them (a proceed's first tool counted as a "
                         "fit whether it fits or not; no-fit requests, this share of the traffic, observed only "
                         "when they proceed); the pull is then the service's")
    ap.add_argument("--wide", action="store_true",
                    help="read the report kinds on up to 400 answerable requests each (benchmarks/wide_calibration.py's "
                         "rows added to the flow's), and every first tool as labelled or judged to fit (the fit rows too, "
                         "with their judge); modes need and request_only")
    a = ap.parse_args(argv)
    if a.wide and a.mode not in ("need", "request_only"):
        ap.error("--wide reads the need and request_only modes only (its added requests have no late_need search)")
    try:
        ks = [int(x) for x in a.feedback.split(",") if x.strip()]
        fit_rows, report_rows = _rows(a.fit), _rows(a.report)
        if a.wide:
            fit_rows, report_rows = _judged_wide(fit_rows, report_rows)
    except (OSError, ValueError, KeyError) as exc:
        ap.error(f"cannot read the rows: {exc}")
    if not ks or min(ks) < 5 or a.repeats < 1:
        ap.error("--feedback needs counts of at least 5 and --repeats at least 1")
    from retrieval.pipeline.decision import Policy

    threshold = Policy().proceed_threshold   # the shipped default
    result: dict = {"threshold": threshold, "mode": a.mode, "lambda_by_k": {}, "report": {}}
    if a.biased is not None and not 0 <= a.biased < 1:
        ap.error("--biased takes the no-fit share of the traffic, in [0, 1)")
    result["biased"] = a.biased
    for k in ks:
        # the pull: the one with the lowest mean ECE after, over the fit catalogs
        scores = {lam: np.mean([v["ece_after"] for v in simulate(fit_rows, k, lam, a.repeats, threshold,
                                                                  a.mode).values()]) for lam in LAMBDAS} \
            if a.biased is None else {}
        finite = {x: v for x, v in scores.items() if np.isfinite(v)}
        # too few fit rows for this many observations (or biased feedback): the pull the service uses
        lam = min(finite, key=finite.get) if finite else DEFAULT_PULL
        result["lambda_by_k"][k] = {"chosen": lam, "fit_mean_ece_after": {str(x): float(s) for x, s in scores.items()}}
        rep = simulate(report_rows, k, lam, a.repeats, threshold, a.mode, seed=1, biased=a.biased)
        result["report"][k] = rep
        how = ('chosen on the fit catalogs' if finite else 'as the service uses: the fit catalogs have too few rows'
               if a.biased is None else f'as the service uses; observations as a flow-following agent leaves them, '
               f'{a.biased:.0%} of the traffic no-fit')
        print(f"\n{k} feedback observations per tenant (pull {lam} {how}"
              + (f"; fit mean ECE after by pull: {', '.join(f'{x}: {s:.3f}' for x, s in scores.items())})"
                 if scores else ")"))
        print(markdown_table(["held-out catalog", "answerable", "ECE best before", "after (median)",
                              "gated: applied", "gated ECE", f"no-fit >= {threshold} (decisions now)",
                              "if decisions read the map", "gated, if so"],
                             [[kind, v["n"], f"{v['ece_before']:.3f}", f"{v['ece_after']:.3f}", f"{v['applied']:.0%}",
                               f"{v['ece_gated']:.3f}", f"{v['nofit_proceed_before']:.2f}",
                               f"{v['nofit_proceed_after']:.2f}", f"{v['nofit_proceed_gated']:.2f}"]
                              for kind, v in rep.items()]))
    print(stamp_line())
    if a.json:
        write_result(a.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
