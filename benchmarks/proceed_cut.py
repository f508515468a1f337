"""Could a tenant's own searches lower its proceed threshold safely? A simulation over the agent-flow rows
(no model is run), for issue 34's "calibration that transfers": a measured design, not a shipped feature.

    python benchmarks/proceed_cut.py [--history 100] [--repeats 200]

Why only the searches that did not proceed: after a ``proceed`` an agent calls the first tool whether it fits
or not, so those calls say little; after ``search_again`` or ``choose`` it reads the definitions and calls the
tool that fits, or none (a request nothing fits). So each search under the threshold is one clean observation:
its best probability and whether the tool the agent then called was the first one offered (the simulation
takes "the first tool fits", labelled or accepted by the blind judge, as that call; a no-fit twin's first tool
fits only where the judge accepted it). The learnt cut is the lowest best probability ``c`` under the
shipped threshold where those observations in ``[c, threshold)`` number at least ``min_n``, their Wilson lower
bound (95%, one-sided) on the first tool's rate reaches ``target``, and so does the rate of the lowest
``min_n`` of them; none qualifies: the shipped threshold stays.

Per catalog kind (one tenant each, its answerable requests and their no-fit twins, 1:1), ``--history``
searches drawn at random are what the tenant has seen; the rest are read at the learnt cut: the answerable
share proceeding and the twins proceeding with a first tool the judge rejects, beside the shipped threshold's.
``target`` and ``min_n`` are chosen on the fit catalogs (``--fit``: the largest median answerable proceeds with
the twins' wrong proceeds at most 10% on every fit kind) and the table is measured on the report catalogs.
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

RESULTS = ROOT / "benchmarks" / "results"
TARGETS = (0.8, 0.85, 0.9, 0.95)
MIN_NS = (10, 20, 30)


def wilson_lower(successes: float, n: int, z: float = 1.645) -> float:
    """One-sided 95% Wilson lower bound of a rate."""
    if n <= 0:
        return 0.0
    p = successes / n
    centre = p + z * z / (2 * n)
    margin = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return float((centre - margin) / (1 + z * z / n))


def learn_cut(p: np.ndarray, y: np.ndarray, threshold: float, target: float, min_n: int) -> float:
    """The lowest cut under ``threshold`` the observations ``(p, y)`` of searches that did not proceed support
    (see the module's text); ``threshold`` where none does."""
    under = p < threshold
    ps, ys = p[under], y[under]
    order = np.argsort(-ps)           # from the threshold down
    ps, ys = ps[order], ys[order]
    best = threshold
    for i in range(min_n - 1, len(ps)):
        band = ys[:i + 1]             # the observations in [ps[i], threshold)
        lowest = ys[i + 1 - min_n:i + 1]
        if wilson_lower(band.sum(), len(band)) >= target and lowest.mean() >= target:
            best = float(ps[i])
    return best


def tenant_rows(rows: list[dict], fits, mode: str) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per kind: the first searches' best probabilities, whether the first tool fits, whether answerable."""
    from benchmarks.catalog_calibration import first_fits

    out: dict[str, list[tuple[float, float, bool]]] = {}
    for r in rows:
        if r.get("mode") != mode or not r.get("tools1"):
            continue
        out.setdefault(r["catalog"], []).append((float(r["best1"]), float(first_fits(r, fits)), bool(r["answerable"])))
    return {k: (np.array([a for a, _, _ in v]), np.array([b for _, b, _ in v]), np.array([c for _, _, c in v]))
            for k, v in sorted(out.items())}


def simulate(data: dict, threshold: float, target: float, min_n: int, history: int, repeats: int,
             seed: int = 0) -> dict[str, dict[str, float]]:
    rng = np.random.default_rng(seed)
    out: dict[str, dict[str, float]] = {}
    for kind, (p, y, ans) in data.items():
        if len(p) <= history + 20:
            continue
        cuts, proceed, wrong, proceed0, wrong0 = [], [], [], [], []
        for _ in range(repeats):
            perm = rng.permutation(len(p))
            seen, rest = perm[:history], perm[history:]
            cut = learn_cut(p[seen], y[seen], threshold, target, min_n)
            pr, yr, ar = p[rest], y[rest], ans[rest]
            cuts.append(cut)
            proceed.append(float(np.mean(pr[ar] >= cut)))
            wrong.append(float(np.mean((pr[~ar] >= cut) & (yr[~ar] == 0))))
            proceed0.append(float(np.mean(pr[ar] >= threshold)))
            wrong0.append(float(np.mean((pr[~ar] >= threshold) & (yr[~ar] == 0))))
        out[kind] = {"cut": float(np.median(cuts)), "lowered": float(np.mean(np.array(cuts) < threshold)),
                     "proceed": float(np.median(proceed)), "twins_wrong": float(np.median(wrong)),
                     "twins_wrong_p90": float(np.percentile(wrong, 90)),
                     "proceed_default": float(np.median(proceed0)), "twins_wrong_default": float(np.median(wrong0))}
    return out


def _fits(items: Path | None, judged: list[Path] | None):
    """Whether a row's first tool is judged to fit (``catalog_calibration.load_fits``), or None without a judge."""
    from benchmarks.catalog_calibration import load_fits

    return load_fits(items, judged) if items and judged else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    jf = RESULTS / "judged_flow"
    ap.add_argument("--fit", type=Path, default=RESULTS / "agent_flow_fit.json")
    ap.add_argument("--fit-items", type=Path, default=jf / "fit" / "items.jsonl")
    ap.add_argument("--fit-judged", type=Path, nargs="*", default=sorted((jf / "fit").glob("judged_*.jsonl")))
    ap.add_argument("--report", type=Path, default=RESULTS / "agent_flow_report.json")
    ap.add_argument("--report-items", type=Path, default=jf / "report" / "items.jsonl")
    ap.add_argument("--report-judged", type=Path, nargs="*", default=sorted((jf / "report").glob("judged_*.jsonl")))
    ap.add_argument("--history", type=int, default=100, help="searches a tenant has seen (answerable and no-fit)")
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--mode", default="need")
    ap.add_argument("--safe", type=float, default=0.10, help="the twins' wrong proceeds a choice may reach")
    ap.add_argument("--out", type=Path, default=RESULTS / "proceed_cut.json")
    a = ap.parse_args(argv)
    try:
        fit = tenant_rows(json.loads(a.fit.read_text())["rows"], _fits(a.fit_items, a.fit_judged), a.mode)
        rep = tenant_rows(json.loads(a.report.read_text())["rows"], _fits(a.report_items, a.report_judged), a.mode)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: cannot read the rows or the judge: {exc}", file=sys.stderr)
        return 2
    if a.history < 10 or a.repeats < 1:
        print("error: --history needs at least 10 searches and --repeats at least 1", file=sys.stderr)
        return 2
    from retrieval.pipeline.decision import Policy

    threshold = Policy().proceed_threshold
    grid = {}
    for target in TARGETS:
        for min_n in MIN_NS:
            sim = simulate(fit, threshold, target, min_n, a.history, a.repeats)
            ok = all(v["twins_wrong"] <= a.safe for v in sim.values())
            grid[(target, min_n)] = (ok, float(np.mean([v["proceed"] for v in sim.values()])), sim)
    allowed = [k for k, (ok, _, _) in grid.items() if ok]
    if not allowed:
        print("no (target, min_n) keeps the fit kinds' wrong proceeds within --safe", file=sys.stderr)
        return 1
    chosen = max(allowed, key=lambda k: (grid[k][1], k[0]))
    print(f"chosen on the fit catalogs ({a.history} searches seen, {a.repeats} draws): target {chosen[0]}, "
          f"min_n {chosen[1]}; fit kinds' mean answerable proceeds {grid[chosen][1]:.0%}\n")
    report = simulate(rep, threshold, chosen[0], chosen[1], a.history, a.repeats, seed=1)
    print(f"held out: each kind one tenant; after {a.history} searches the cut learnt from those that did not "
          f"proceed, read on the rest (medians over {a.repeats} draws)\n")
    print(f"| catalog | learnt cut (share of draws lowered) | answerable proceeding: {threshold} -> learnt | "
          "twins proceeding wrongly: before -> learnt (90th percentile) |\n|---|---|---|---|")
    for kind, v in report.items():
        print(f"| {kind} | {v['cut']:.2f} ({v['lowered']:.0%}) | {v['proceed_default']:.0%} -> {v['proceed']:.0%} | "
              f"{v['twins_wrong_default']:.0%} -> {v['twins_wrong']:.0%} ({v['twins_wrong_p90']:.0%}) |")
    environment = environment_stamp()
    print(stamp_line(environment))
    write_result(a.out, {"environment": environment, "history": a.history, "repeats": a.repeats, "mode": a.mode,
                         "threshold": threshold, "chosen": {"target": chosen[0], "min_n": chosen[1]},
                         "fit_grid": {f"{t}/{n}": {"ok": ok, "mean_proceed": m} for (t, n), (ok, m, _) in grid.items()},
                         "report": report}, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
