"""How many audits does a tenant need before its best probability is calibrated? (0.18.0, issue 34)

    python benchmarks/audit_recalibration.py                  # the pull chosen on the fit rows, read on the held-out rows
    python benchmarks/audit_recalibration.py --repeats 10     # quicker, noisier

An audit (``serve/audits.py``) is a search drawn by its request id before anything about it is known, whose first
tool the LLM endpoint judges with the calibration target's own question. A tenant's audits are therefore a
uniform sample of its searches with the judge's verdict — unlike feedback, which sees what the agent chose to
call (``use_recalibration.py --biased``). Simulated here on the searches already run and judged (no model is
run: each row carries its best probability on the shipped scale and whether its first tool fits, labelled or
judged blind): for each catalog kind (one tenant) and mode, the rows are split in five folds; each fold is read
with the map ``fit_audit_recalibration`` fits on ``k`` audits drawn from the other four (pulled towards the
kind's own probes' map, what ``toolrank index --calibrate`` saved), so every row is read by a map that never saw
it and the ECE of the best probability is read on all of a kind's rows at once (where a perfectly calibrated
model reads ``floor``). Medians over ``--repeats`` draws.

The pull (towards the catalog's map) is chosen on the fit catalogs' rows (``agent_flow_fit.json``, their probes'
maps in ``catalog_probes_fit.json``) at 50 audits and read on the held-out rows (``agent_flow_report.json`` and
``wide_calibration_rows.json``: up to 400 a kind, maps from ``wide_calibration.json``), never chosen there. The
thresholds move through the same map, so no decision changes (``recalibration.moved_policy``). What it leaves
out: the judge here is the project's blind judges (labelled first tools count as fits), the product's is the
operator's endpoint; searches are read as the first searches of the agent flow.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, markdown_table, stamp_line, write_result  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
JUDGED = RESULTS / "judged_flow"
MODES = ("need", "request_only")
PULLS = (0.5, 2.0, 8.0)
AUDITS = (25, 50, 100)
FOLDS = 5


def _rows(which: str, twins: bool = False) -> tuple[dict[tuple[str, str], tuple[np.ndarray, np.ndarray]],
                                                    dict[str, tuple[float, float]]]:
    """Per (kind, mode): the answerable first searches' best probabilities and whether the first tool fits (with
    ``twins``: their no-fit twins' instead, the flow's own, every first tool judged); per kind: its probes' map."""
    from benchmarks.catalog_calibration import first_fits
    from benchmarks.catalog_probes import judged_set

    rows, fits, table = judged_set(which)   # the twins: the flow's own, a judge read every first tool
    out: dict[tuple[str, str], tuple[list, list]] = {}
    for r in rows:
        if bool(r.get("answerable")) == twins or r.get("mode") not in MODES or r.get("best1") is None:
            continue
        if not (r.get("right1") or fits(r) is not None):   # neither labelled nor read by a judge
            continue
        p, y = out.setdefault((r["catalog"], r["mode"]), ([], []))
        p.append(float(r["best1"]))
        y.append(float(first_fits(r, fits)))
    maps = {kind: tuple(table[kind]["need"]["params"]["pooled_platt"]) for kind in table}
    return ({k: (np.array(p), np.array(y)) for k, (p, y) in sorted(out.items()) if k[0] in maps}, maps)


def cross_fitted(p: np.ndarray, y: np.ndarray, prior: tuple[float, float], k: int, pull: float,
                 rng: np.random.Generator) -> np.ndarray:
    """Every row's probability through a map fitted on ``k`` audits drawn outside its fold (the rows: the
    tenant's traffic, no-fit requests included when given)."""
    from retrieval.pipeline.recalibration import fit_audit_recalibration

    order = rng.permutation(len(p))
    q = np.empty_like(p)
    for f in range(FOLDS):
        fold = order[f::FOLDS]
        rest = np.setdiff1d(order, fold)
        audits = rng.choice(rest, size=min(k, len(rest)), replace=False)
        fitted = fit_audit_recalibration(p[audits], y[audits], prior=prior, pull=pull, min_observations=5)
        q[fold] = fitted.apply(p[fold])
    return q


def traffic(p: np.ndarray, y: np.ndarray, twins: tuple[np.ndarray, np.ndarray] | None, share: float,
            rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The answerable rows with no-fit twins drawn (with replacement) to make ``share`` of the traffic; and which
    rows are answerable."""
    if twins is None or share <= 0:
        return p, y, np.ones(len(p), dtype=bool)
    m = int(round(share / (1 - share) * len(p)))
    pick = rng.integers(0, len(twins[0]), size=m)
    return (np.concatenate([p, twins[0][pick]]), np.concatenate([y, twins[1][pick]]),
            np.concatenate([np.ones(len(p), dtype=bool), np.zeros(m, dtype=bool)]))


def measure(data, maps, pulls, audits, repeats: int, seed: int, twins: dict | None = None, share: float = 0.0) -> dict:
    from retrieval.evaluation.stats import ece, ece_floor
    from retrieval.pipeline.recalibration import platt

    out: dict = {}
    for (kind, mode), (p, y) in data.items():
        a0, b0 = maps[kind]
        mapped = platt(p, a0, b0)
        cell = {"n": int(len(p)), "fits": float(y.mean()), "shipped": float(ece(p, y)), "catalog_map": float(ece(mapped, y)),
                "floor": float(ece_floor(mapped, draws=300, seed=seed)["median"]), "audits": {}}
        pair = (twins or {}).get((kind, mode))
        if share > 0 and pair is not None:
            cell["twins"] = int(len(pair[0]))
        for pull in pulls:
            for k in audits:
                if k > 0.8 * len(p):
                    continue
                rng = np.random.default_rng([seed, k, int(pull * 100)])
                reads, whole = [], []
                for _ in range(repeats):
                    tp, ty, answerable = traffic(p, y, pair, share, rng)
                    q = cross_fitted(tp, ty, (a0, b0), k, pull, rng)
                    reads.append(float(ece(q[answerable], ty[answerable])))
                    whole.append(float(ece(q, ty)))
                cell["audits"][f"{pull:g}:{k}"] = {"median": float(np.median(reads)),
                                                   "p90": float(np.percentile(reads, 90)),
                                                   "traffic_median": float(np.median(whole))}
        out[f"{kind}/{mode}"] = cell
        print(f"  {kind} {mode}: n {len(p)}, catalog map {cell['catalog_map']:.3f}, "
              + ", ".join(f"{key} {v['median']:.3f}" for key, v in cell["audits"].items()), file=sys.stderr, flush=True)
    return out


def choose_pull(fit: dict, pulls, k: int = 50) -> float:
    """The pull with the lowest mean ECE over the fit rows' kinds and modes at ``k`` audits."""
    def mean(pull: float) -> float:
        return float(np.mean([c["audits"][f"{pull:g}:{k}"]["median"] for c in fit.values() if f"{pull:g}:{k}" in c["audits"]]))
    return min(pulls, key=mean)


def table(cells: dict, pull: float, audits) -> str:
    rows = []
    for name, c in cells.items():
        kind, mode = name.split("/")
        reads = [c["audits"].get(f"{pull:g}:{k}") for k in audits]
        rows.append([kind, mode, str(c["n"]), f"{c['fits']:.0%}", f"{c['floor']:.3f}", f"{c['shipped']:.3f}",
                     f"{c['catalog_map']:.3f}",
                     *[(f"{r['median']:.3f} ({r['p90']:.3f})" + (f"; all {r['traffic_median']:.3f}" if "twins" in c else ""))
                       if r else "–" for r in reads]])
    what = "median (90th pct)" + ("; all traffic" if any("twins" in c for c in cells.values()) else "")
    return markdown_table(["catalog", "mode", "n", "first tool fits", "calibrated reads", "shipped", "catalog's map",
                           *[f"{k} audits: {what}" for k in audits]], rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--nofit-share", type=float, default=0.0,
                    help="the share of the tenant's traffic that no tool fits (the flow's judged no-fit twins, drawn "
                         "with replacement): audits are drawn from all of it; the table reads the answerable rows "
                         "(issue 34's reading) and the whole traffic")
    ap.add_argument("--pull", type=float, help="read the held-out rows with this pull instead of the one the fit "
                                                "rows choose (the choice is still printed)")
    ap.add_argument("--out", type=Path, default=RESULTS / "audit_recalibration.json")
    a = ap.parse_args(argv)
    if a.repeats < 1:
        ap.error("--repeats must be at least 1")
    if not 0.0 <= a.nofit_share < 1.0:
        ap.error("--nofit-share must be within [0, 1)")
    from retrieval.pipeline.recalibration import AUDIT_PULL

    print("fit rows (the pull is chosen here)", file=sys.stderr)
    fit_data, fit_maps = _rows("fit")
    fit_twins = _rows("fit", twins=True)[0] if a.nofit_share > 0 else None
    fit = measure(fit_data, fit_maps, PULLS, (50,), a.repeats, a.seed, fit_twins, a.nofit_share)
    chosen = choose_pull(fit, PULLS)
    pull = a.pull if a.pull is not None else chosen
    print("held-out rows (read with the chosen pull)", file=sys.stderr)
    report_data, report_maps = _rows("report")
    twins = _rows("report", twins=True)[0] if a.nofit_share > 0 else None
    report = measure(report_data, report_maps, (pull,), AUDITS, a.repeats, a.seed, twins, a.nofit_share)
    means = ", ".join(f"{p:g}: {np.mean([c['audits'][f'{p:g}:50']['median'] for c in fit.values()]):.3f}"
                      for p in PULLS)
    traffic_note = (f"the tenant's traffic: answerable requests and {a.nofit_share:.0%} no-fit requests (the flow's "
                    "judged twins, drawn with replacement); audits are drawn from all of it, the ECE is read on the "
                    "answerable requests (issue 34's reading) and, after 'all', on the whole traffic"
                    if a.nofit_share > 0 else "the tenant's traffic: answerable requests only")
    lines = [f"# Recalibration from audits (ECE of the best probability, cross-fitted; {a.repeats} draws)", "",
             traffic_note, "",
             f"pull towards the catalog's map chosen on the fit rows at 50 audits: **{chosen:g}** (mean ECE {means}); "
             f"shipped `AUDIT_PULL` = {AUDIT_PULL:g}" + (f"; read below with {pull:g} (--pull)" if pull != chosen else ""), "",
             "## Fit catalogs (where the pull was chosen)", "", table(fit, pull, (50,)), "",
             "## Held-out catalogs (read once)", "", table(report, pull, AUDITS), "",
             "'calibrated reads': the ECE a perfectly calibrated model with the catalog map's probabilities reads at "
             "that count (median of 300 draws). Decisions are unchanged by construction: the thresholds move "
             "through the same map.", "", stamp_line()]
    text = "\n".join(lines)
    print(text)
    write_result(a.out, {"pull": pull, "chosen_pull": chosen, "pulls": list(PULLS), "audits": list(AUDITS), "repeats": a.repeats,
                         "nofit_share": a.nofit_share,
                         "fit": fit, "report": report}, indent=1)
    a.out.with_suffix(".md").write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
