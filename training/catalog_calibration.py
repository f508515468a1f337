"""Fit the day-one catalog calibration: the read candidates' probabilities carried to catalogs shaped like users'.

    python benchmarks/agent_flow.py --set fit --always-second --out benchmarks/results/agent_flow_fit.json
    python -m training.catalog_calibration benchmarks/results/agent_flow_fit.json \
        --out models/toolrank-reranker/catalog_calibration.json

Rows: the first searches of the fit catalogs' answerable requests (MCP-Zero dev organisations of 10-30 servers
and the training corpora, day one; with the agent's need and without, each first search once). Each variant,
``q = sigmoid(a * logit(p) + b)`` ("platt") and with ``+ c * log(eligible tools)`` ("size"), is fitted with a
pull towards the identity (``training`` never sees the catalogs the README reports) and measured by leaving one
catalog kind out: fitted on the other kinds, the ECE of the best probability on the one left out. The variant
with the lowest mean is written, and only if it beats the identity's mean by at least ``--margin``; otherwise
nothing is written and any earlier file is removed (the pipeline then serves the confidence model as it is).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

VARIANTS = ("identity", "platt", "size")


def first_searches(rows: list[dict]) -> list[dict]:
    """Each answerable request's first search once per need condition (``late_need`` and ``request_only``
    share theirs: the request alone)."""
    return [r for r in rows if r.get("answerable") and r.get("mode") in ("need", "request_only")]


def _matrix(rows: list[dict], variant: str) -> np.ndarray:
    p = np.clip(np.array([r["best1"] for r in rows], dtype=np.float64), 1e-6, 1 - 1e-6)
    cols = [np.log(p / (1 - p))]
    if variant == "size":
        cols.append(np.log(np.maximum([int(r["n_eligible"]) for r in rows], 1).astype(np.float64)))
    return np.stack([*cols, np.ones(len(rows))], axis=1)


def fit(rows: list[dict], variant: str, pull: float = 0.5) -> tuple[float, float, float]:
    """``(a, b, c)``: the log loss of the variant plus ``pull`` times the squared distance from the identity."""
    from scipy.optimize import minimize

    if variant == "identity":
        return 1.0, 0.0, 0.0
    x, y = _matrix(rows, variant), np.array([r["right1"] for r in rows], dtype=np.float64)
    w0 = np.zeros(x.shape[1])
    w0[0] = 1.0

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        z = x @ w
        g = 1.0 / (1.0 + np.exp(-z)) - y
        return float(np.sum(np.logaddexp(0, z) - y * z) + pull * np.sum((w - w0) ** 2)), x.T @ g + 2 * pull * (w - w0)

    bounds = [(0.05, 20.0)] + [(-50.0, 50.0)] * (x.shape[1] - 1)
    w = minimize(loss, w0, jac=True, method="L-BFGS-B", bounds=bounds).x
    return float(w[0]), float(w[-1]), float(w[1]) if variant == "size" else 0.0


def carried(rows: list[dict], a: float, b: float, c: float, key: str = "best1") -> np.ndarray:
    from retrieval.pipeline.confidence import CatalogCalibration

    cal = CatalogCalibration(a, b, c)
    return np.array([float(cal.apply([r[key]], int(r.get("n_eligible", 1)))[0]) for r in rows])


def leave_one_kind_out(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per variant, per kind left out: the ECE of the best probability fitted on the other kinds."""
    from retrieval.evaluation.stats import ece

    kinds = sorted({r["catalog"] for r in rows})
    out: dict[str, dict[str, float]] = {}
    for variant in VARIANTS:
        per = {}
        for kind in kinds:
            train = [r for r in rows if r["catalog"] != kind]
            test = [r for r in rows if r["catalog"] == kind]
            q = carried(test, *fit(train, variant))
            per[kind] = float(ece(q, np.array([r["right1"] for r in test], dtype=float)))
        per["mean"] = float(np.mean([per[k] for k in kinds]))
        per["worst"] = float(max(per[k] for k in kinds))
        out[variant] = per
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("flow", type=Path, help="agent-flow rows of the fit set (benchmarks/agent_flow.py --set fit)")
    p.add_argument("--out", type=Path, required=True, help="the model folder's catalog_calibration.json")
    p.add_argument("--margin", type=float, default=0.01, help="the least mean ECE gain over the identity to ship one")
    p.add_argument("--json", type=Path, help="also write the leave-one-kind-out table here")
    a = p.parse_args(argv)
    data = json.loads(a.flow.read_text())
    if data.get("set") not in (None, "fit"):
        print(f"error: {a.flow} is the {data.get('set')!r} set; fit on the fit set only", file=sys.stderr)
        return 2
    rows = first_searches(data["rows"])
    if not rows or any("n_eligible" not in r for r in rows):
        print(f"error: {a.flow} has no first searches with n_eligible: rerun benchmarks/agent_flow.py --set fit",
              file=sys.stderr)
        return 2
    table = leave_one_kind_out(rows)
    kinds = sorted({r["catalog"] for r in rows})
    print(f"ECE of the best probability, each catalog kind left out of the fit ({len(rows)} first searches):")
    print("| variant | " + " | ".join(kinds) + " | mean | worst |\n|---|" + "---:|" * (len(kinds) + 2))
    for variant, per in table.items():
        print(f"| {variant} | " + " | ".join(f"{per[k]:.3f}" for k in kinds) + f" | {per['mean']:.3f} | {per['worst']:.3f} |")
    best = min((v for v in VARIANTS if v != "identity"), key=lambda v: table[v]["mean"])
    gain = table["identity"]["mean"] - table[best]["mean"]
    if a.json:
        a.json.write_text(json.dumps({"source": a.flow.name, "rows": len(rows), "table": table, "chosen": best,
                                      "gain": gain}, indent=1))
    if gain < a.margin:
        print(f"\nno variant beats the identity by {a.margin} (best: {best}, {gain:+.3f}): nothing written")
        if a.out.exists():
            a.out.unlink()
        return 0
    from retrieval.pipeline.confidence import CatalogCalibration

    w = fit(rows, best)
    CatalogCalibration(*w, fitted_on=f"{a.flow.name}: {len(rows)} first searches of {len(kinds)} fit catalog kinds; "
                                     f"variant '{best}', leave-one-kind-out mean ECE {table['identity']['mean']:.3f} "
                                     f"-> {table[best]['mean']:.3f}").save(a.out)
    print(f"\nchosen: {best} (a={w[0]:.3f}, b={w[1]:.3f}, c={w[2]:.3f}) -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
