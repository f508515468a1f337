"""Would a per-tenant recalibration learned from use fix the best probability's calibration? A simulation
over the agent-flow rows (no model is run: the rows carry each request's best probability and whether the
first tool was right).

    python benchmarks/use_recalibration.py                       # lambda chosen on the fit rows, measured on the report rows
    python benchmarks/use_recalibration.py --feedback 25,50 --repeats 200

For each catalog kind (one tenant each) and the flow's mode (default ``need``), ``k`` answerable requests
drawn at random play the tenant's feedback (the tool the agent called is the right one, so the first tool's
label is known); a two-parameter recalibration ``sigmoid(a * logit(p) + b)`` is fitted on them with a pull
towards the identity (``lam * ((a - 1)^2 + b^2)``) and applied to the kind's other answerable requests (ECE of
the best probability, 10 bins) and to its no-fit requests (share at or above the proceed threshold). The
pull ``lam`` is chosen on the fit catalogs' rows (``--fit``) and the table is measured on the report
catalogs' rows (``--report``), never chosen there. Medians over ``--repeats`` draws.

"gated": the recalibration is applied only where it beats the identity on the tenant's own feedback, by
five-fold cross-validated log loss (a tenant whose probabilities are already near its rates keeps them).

What it leaves out, said plainly: real feedback is biased (searches where the agent called nothing, as on a
no-fit request, give no observation), and an agent does not always call the right tool.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, markdown_table, stamp_line  # noqa: E402
from retrieval.evaluation.stats import ece  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
LAMBDAS = (0.0, 0.5, 2.0, 8.0, 32.0)


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-6, 1 - 1e-6)
    return np.log(p / (1 - p))


def fit_recalibration(p: np.ndarray, y: np.ndarray, lam: float) -> tuple[float, float]:
    """``(a, b)`` minimising the log loss of ``sigmoid(a * logit(p) + b)`` plus ``lam * ((a-1)^2 + b^2)``."""
    from scipy.optimize import minimize
    from scipy.special import expit

    x, y = _logit(p), np.asarray(y, dtype=np.float64)

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        z = w[0] * x + w[1]
        q = expit(z)
        ll = np.sum(np.logaddexp(0, z) - y * z)
        g = q - y
        return (float(ll + lam * ((w[0] - 1) ** 2 + w[1] ** 2)),
                np.array([np.sum(g * x) + 2 * lam * (w[0] - 1), np.sum(g) + 2 * lam * w[1]]))

    w = minimize(loss, np.array([1.0, 0.0]), jac=True, method="L-BFGS-B").x
    return float(w[0]), float(w[1])


def apply(p: np.ndarray, ab: tuple[float, float]) -> np.ndarray:
    from scipy.special import expit

    return expit(ab[0] * _logit(p) + ab[1])


def _log_loss(q: np.ndarray, y: np.ndarray) -> float:
    q = np.clip(q, 1e-6, 1 - 1e-6)
    return float(-np.mean(y * np.log(q) + (1 - y) * np.log(1 - q)))


def beats_identity(p: np.ndarray, y: np.ndarray, lam: float, folds: int = 5, seed: int = 0) -> bool:
    """Whether the recalibration's cross-validated log loss on these observations is below the identity's."""
    order = np.random.default_rng(seed).permutation(len(p))
    fitted, same = [], []
    for f in range(folds):
        test = order[f::folds]
        train = np.setdiff1d(order, test)
        if not len(test) or not len(train):
            continue
        ab = fit_recalibration(p[train], y[train], lam)
        fitted.append(_log_loss(apply(p[test], ab), y[test]) * len(test))
        same.append(_log_loss(p[test], y[test]) * len(test))
    return sum(fitted) < sum(same)


def simulate(rows: list[dict], k: int, lam: float, repeats: int, threshold: float, mode: str,
             seed: int = 0) -> dict[str, dict]:
    """Per catalog kind: median ECE before/after and the no-fit share at the threshold before/after."""
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
            ab = fit_recalibration(p[seen], y[seen], lam)
            use = beats_identity(p[seen], y[seen], lam)
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
    a = ap.parse_args(argv)
    try:
        ks = [int(x) for x in a.feedback.split(",") if x.strip()]
        fit_rows, report_rows = _rows(a.fit), _rows(a.report)
    except (OSError, ValueError, KeyError) as exc:
        ap.error(f"cannot read the rows: {exc}")
    if not ks or min(ks) < 5 or a.repeats < 1:
        ap.error("--feedback needs counts of at least 5 and --repeats at least 1")
    from retrieval.pipeline.decision import Policy

    threshold = Policy().proceed_threshold   # the shipped default
    result: dict = {"threshold": threshold, "mode": a.mode, "lambda_by_k": {}, "report": {}}
    for k in ks:
        # the pull: the one with the lowest mean ECE after, over the fit catalogs
        scores = {lam: np.mean([v["ece_after"] for v in simulate(fit_rows, k, lam, a.repeats, threshold,
                                                                  a.mode).values()]) for lam in LAMBDAS}
        lam = min(scores, key=scores.get)
        result["lambda_by_k"][k] = {"chosen": lam, "fit_mean_ece_after": {str(x): float(s) for x, s in scores.items()}}
        rep = simulate(report_rows, k, lam, a.repeats, threshold, a.mode, seed=1)
        result["report"][k] = rep
        print(f"\n{k} feedback observations per tenant (pull {lam} chosen on the fit catalogs; "
              f"fit mean ECE after by pull: {', '.join(f'{x}: {s:.3f}' for x, s in scores.items())})")
        print(markdown_table(["held-out catalog", "answerable", "ECE best before", "after (median)",
                              "gated: applied", "gated ECE", f"no-fit >= {threshold} before", "after", "gated"],
                             [[kind, v["n"], f"{v['ece_before']:.3f}", f"{v['ece_after']:.3f}", f"{v['applied']:.0%}",
                               f"{v['ece_gated']:.3f}", f"{v['nofit_proceed_before']:.2f}",
                               f"{v['nofit_proceed_after']:.2f}", f"{v['nofit_proceed_gated']:.2f}"]
                              for kind, v in rep.items()]))
    print(stamp_line())
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
