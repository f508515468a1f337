"""Can one recalibration carry the day-one probabilities to users' catalogs? (issue 34, "calibration that transfers")

    python benchmarks/catalog_calibration.py --fit runs/s13/flow_fit.json --report benchmarks/results/agent_flow_report.json \
        [--judged-items benchmarks/results/judged_flow/items.jsonl --judged benchmarks/results/judged_flow/judged_*.jsonl]

The day-one confidence model is fitted on MCP-Zero dev questions over the whole shipped catalog (about 3,000
tools); on catalogs of 10-300 tools its best probability reads under the observed rate. The experiment: a
post-hoc map of the best probability, ``sigmoid(a * logit(p) + b)`` ("platt") or with ``+ c * log(eligible
tools)`` ("size"), fitted on the first searches of the fit catalogs' agent-flow rows (MCP-Zero dev
organisations and the training corpora) with a pull towards the identity, chosen by leaving one fit kind out
(the mean ECE over the kinds left out), then checked once on the report catalogs (MCP-Zero test organisations
and the held-out corpora): ECE against the labels and, with ``--judged``, against the first tool fitting
(labelled or accepted by the blind judge, ``benchmarks/judged_flow.py``). Each ECE comes with the ECE a
calibrated model would read at that count (``stats.ece_floor``).

What a map costs where nothing fits: the same map read on each answerable request's no-fit twin (its labelled
tools made ineligible): the share of twins that would proceed (best at or over ``--proceed``) before and after,
and, with ``--judged``, the share proceeding with a first tool the judge does not accept. ``--mixture`` fits on
the twins too (a first tool fits when labelled or, with ``--fit-judged``, judged to fit), the population the
decision reads: a probability calibrated on answerable requests alone is under it on them by construction,
since it cannot be calibrated on both unless it tells them apart. ``--oracle``: what a map fitted on each
report kind's *own* rows could do (in-sample, so an optimistic reading): the finest map calibrated on its
answerable requests (isotonic) read on its twins, one fitted on both read on its answerable requests, and
the map that proceeds most while calibrated on the answerable requests and letting at most ``--safe`` of the
twins proceed wrongly (two levels: the answerable rate above a cut and below it), beside today's proceeds.
``--crowd`` adds a variant with the first tool's crowd (its dense cosine to the nearest of the
answer's next four tools, ``twin_separation.crowd``: a feature of the list, computed from eligible tools
only) and, per report kind, the error of the best probability in the half of the answerable first searches
with the least crowded first tools and in the most crowded half. Prints the tables; writes JSON.
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

VARIANTS = ("identity", "platt", "size")
CROWD_VARIANTS = ("crowd",)   # with --crowd
MODES = ("need", "request_only")   # late_need's first search is request_only's


def first_searches(rows: list[dict], twins: bool = False) -> list[dict]:
    """The first searches of the answerable requests (``twins``: and of their no-fit twins)."""
    return [r for r in rows if (twins or r.get("answerable")) and r.get("mode") in MODES]


LATER = "#later"   # the id suffix of a request's later judgment (its own answer line: ids must not collide)


def load_fits(items: Path | list[Path], judged: list[Path]):
    """``fits(row)``: whether a row's first tool is judged to fit (None: the request was not judged; a tool the
    judge did not read for a judged request counts as not fitting, and ``fits.read(row)`` says whether it read
    it). Several items files are read with the answers of all ``judged`` files; a request judged again later (of
    tools another search found: its id ends in ``LATER``) has the union of what was read."""
    from retrieval.evaluation.judged import base_id, fits, read_judged

    probs: dict = {}
    for path in [items] if isinstance(items, Path) else items:
        for rid, p in read_judged(path, judged).items():
            rid = rid.split(LATER, 1)[0]   # a later judgment of the same request (wide_calibration.mine_unread)
            probs[rid] = {**p, **probs.get(rid, {})}   # a tool judged twice keeps its first judgment

    def first(r: dict) -> bool | None:
        return fits(probs, r["id"], (r.get("tools1") or [None])[0])

    def read(r: dict) -> bool:
        tool = (r.get("tools1") or [None])[0]
        return tool is not None and tuple(tool) in probs.get(base_id(r["id"]), {})

    first.read = read
    first.judged = probs   # per request, each tool the judges read and its probability
    return first


def first_fits(r: dict, fits=None) -> bool:
    """Whether a row's first tool fits: labelled, or (``fits``, :func:`load_fits`) accepted by the judge."""
    return bool(r.get("right1")) or (fits is not None and bool(fits(r)))


def judged_target(rows: list[dict], fits) -> list[dict]:
    """The rows a judge read, each ``right1`` now "labelled or judged to fit" (what the probability claims)."""
    return [dict(r, right1=first_fits(r, fits)) for r in rows if fits(r) is not None]


def _x(rows: list[dict], variant: str) -> np.ndarray:
    p = np.clip(np.array([r["best1"] for r in rows], dtype=np.float64), 1e-6, 1 - 1e-6)
    cols = [np.log(p / (1 - p))]
    if variant == "crowd":
        cols.append(np.array([r["crowd"] for r in rows], dtype=np.float64))
    if variant == "size":
        cols.append(np.log(np.maximum([int(r.get("n_eligible", 1)) for r in rows], 1).astype(np.float64)))
    return np.stack([*cols, np.ones(len(rows))], axis=1)


def fit(rows: list[dict], variant: str, pull: float = 0.5) -> np.ndarray:
    """The variant's weights: log loss plus ``pull`` times the squared distance from the identity."""
    from scipy.optimize import minimize

    x = _x(rows, variant)
    w0 = np.zeros(x.shape[1])
    w0[0] = 1.0
    if variant == "identity":
        return w0
    y = np.array([r["right1"] for r in rows], dtype=np.float64)

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        z = x @ w
        g = 1.0 / (1.0 + np.exp(-z)) - y
        return float(np.sum(np.logaddexp(0, z) - y * z) + pull * np.sum((w - w0) ** 2)), x.T @ g + 2 * pull * (w - w0)

    bounds = [(0.05, 20.0)] + [(-50.0, 50.0)] * (x.shape[1] - 1)
    return minimize(loss, w0, jac=True, method="L-BFGS-B", bounds=bounds).x


def apply(rows: list[dict], variant: str, w: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-(_x(rows, variant) @ w)))


def add_crowd(rows: list[dict], catalogs=None, vectors=None) -> tuple[list[dict], int]:
    """The rows whose first answer has a first and a second tool still in their catalog, each with ``crowd``
    (``twin_separation.crowd`` of its first five tools, read from the flow's index), and how many rows were
    left out (an answer of one tool has no look-alike to read)."""
    from benchmarks.judged_flow import _Catalogs
    from benchmarks.twin_separation import ToolVectors, answer_tools, crowd

    catalogs = catalogs or _Catalogs()
    vectors = vectors or ToolVectors(catalogs)
    out = []
    for r in rows:
        ids = answer_tools(catalogs, r["catalog"], r.get("tools1") or [])
        if ids is not None:
            out.append(dict(r, crowd=crowd([vectors(r["catalog"], t) for t in ids])))
    return out, len(rows) - len(out)


def crowd_halves(rows: list[dict], fits=None) -> dict[str, dict[str, dict[str, float]]]:
    """Per kind and mode, over the answerable first searches: the mean error (fits minus best probability) in
    the half with the least crowded first tools and in the most crowded half (split at the median crowd),
    against the labels and, with ``fits``, against labelled-or-judged fits."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for kind in sorted({r["catalog"] for r in rows}):
        for mode in MODES:
            rs = [r for r in rows if r["catalog"] == kind and r["mode"] == mode and r.get("answerable")]
            if fits is not None:
                rs = [r for r in rs if fits(r) is not None]
            if len(rs) < 4:
                continue
            c, p = np.array([r["crowd"] for r in rs]), np.array([r["best1"] for r in rs])
            hi = c >= np.median(c)
            cell = {"n": len(rs), "crowd_median": float(np.median(c))}
            for name, y in [("labels", np.array([r["right1"] for r in rs], dtype=float))] + (
                    [("fits", np.array([first_fits(r, fits) for r in rs], dtype=float))] if fits is not None else []):
                cell[f"{name}_error_low"] = float(np.mean(y[~hi] - p[~hi]))
                cell[f"{name}_error_high"] = float(np.mean(y[hi] - p[hi]))
            out.setdefault(kind, {})[mode] = cell
    return out


def leave_one_kind_out(rows: list[dict], variants: tuple[str, ...] = VARIANTS) -> dict[str, dict[str, float]]:
    """Per variant, per fit kind left out: the ECE of the best probability fitted on the other kinds."""
    from retrieval.evaluation.stats import ece

    kinds = sorted({r["catalog"] for r in rows})
    out: dict[str, dict[str, float]] = {}
    for variant in variants:
        per = {}
        for kind in kinds:
            test = [r for r in rows if r["catalog"] == kind and r.get("answerable", True)]   # the target: answerable
            w = fit([r for r in rows if r["catalog"] != kind], variant)
            per[kind] = float(ece(apply(test, variant, w), np.array([r["right1"] for r in test], dtype=float)))
        per["mean"] = float(np.mean([per[k] for k in kinds]))
        per["worst"] = float(max(per[k] for k in kinds))
        out[variant] = per
    return out


def check(rows: list[dict], variant: str, w: np.ndarray, fits=None,
          proceed: float = 0.83) -> dict[str, dict[str, dict[str, float]]]:
    """Per report kind and mode: ECE before and after the map, against the labels and (``fits``: a row's first
    tool judged to fit) against what fits, each with a calibrated model's median ECE at that count; where
    ``rows`` hold no-fit twins, the share of them proceeding (best at or over ``proceed``) before and after and,
    with ``fits``, the share proceeding with a first tool the judge does not accept."""
    from retrieval.evaluation.stats import ece, ece_floor

    out: dict[str, dict[str, dict[str, float]]] = {}
    for kind in sorted({r["catalog"] for r in rows}):
        for mode in MODES:
            twins = [r for r in rows if r["catalog"] == kind and r["mode"] == mode and not r.get("answerable")]
            rs = [r for r in rows if r["catalog"] == kind and r["mode"] == mode and r.get("answerable")]
            if fits is not None:
                rs = [r for r in rs if fits(r) is not None]
            if not rs:
                continue
            p = np.array([r["best1"] for r in rs])
            q = apply(rs, variant, w)
            strict = np.array([r["right1"] for r in rs], dtype=float)
            cell = {"n": len(rs), "mean_before": float(p.mean()), "mean_after": float(q.mean()),
                    "rank1": float(strict.mean()), "ece_before": float(ece(p, strict)), "ece_after": float(ece(q, strict)),
                    "calibrated_median": ece_floor(q)["median"]}
            if fits is not None:
                judged = np.array([first_fits(r, fits) for r in rs], dtype=float)
                cell.update({"fits": float(judged.mean()), "ece_fits_before": float(ece(p, judged)),
                             "ece_fits_after": float(ece(q, judged))})
            if twins:
                tp, tq = np.array([r["best1"] for r in twins]), apply(twins, variant, w)
                cell.update({"twins": len(twins), "twins_proceed_before": float(np.mean(tp >= proceed)),
                             "twins_proceed_after": float(np.mean(tq >= proceed))})
                if fits is not None:   # a twin not judged counts as not fitting (the judge read every offered tool)
                    wrong = np.array([not fits(r) for r in twins])
                    cell.update({"twins_wrong_before": float(np.mean((tp >= proceed) & wrong)),
                                 "twins_wrong_after": float(np.mean((tq >= proceed) & wrong))})
            out.setdefault(kind, {})[mode] = cell
    return out


def _most_proceeding(pa: np.ndarray, ya: np.ndarray, pt: np.ndarray, yt: np.ndarray, proceed: float,
                     safe: float) -> tuple[float, float | None]:
    """The largest share of answerable first searches a map calibrated on them can proceed on while at most
    ``safe`` of the twins proceed with a tool the judge rejects: a two-level map (the answerable fit rate over a
    cut of the best probability, and under it) keeps the order, reads an ECE of 0 on the answerable requests,
    and proceeds over the cut if that rate reaches ``proceed`` and the rate under it does not (else everything
    would); any finer order-keeping calibrated map proceeds on no more. Of cuts with the same share, the
    highest (the least permissive out of sample). Returns (share, cut) — (0.0, None) where no cut qualifies."""
    best: tuple[float, float | None] = (0.0, None)
    for cut in np.unique(np.r_[pa, pt]):
        over = pa >= cut
        if not over.any() or ya[over].mean() < proceed:
            continue
        if (~over).any() and ya[~over].mean() >= proceed:   # the lower level would proceed too: all would
            continue
        if np.mean((pt >= cut) & (yt == 0)) <= safe and over.mean() >= best[0]:   # ascending cuts: ties go up
            best = (float(over.mean()), float(cut))
    return best


def _two_level(pa: np.ndarray, ya: np.ndarray, cut: float | None):
    """The two-level map of :func:`_most_proceeding`: the answerable fit rate over ``cut`` and under it; no
    cut (none was safe on the evidence): the probabilities as shipped."""
    if cut is None:
        return lambda p: np.asarray(p, dtype=np.float64)
    over = pa >= cut
    hi = float(ya[over].mean()) if over.any() else 1.0
    lo = float(ya[~over].mean()) if (~over).any() else 0.0
    return lambda p: np.where(np.asarray(p) >= cut, hi, lo)


def cross_fitted(ids_a: list[str], pa: np.ndarray, ya: np.ndarray, ids_t: list[str], pt: np.ndarray, yt: np.ndarray,
                 proceed: float, safe: float) -> dict[str, float]:
    """:func:`_most_proceeding`'s map chosen on half of a kind's requests (a request and its twin stay together,
    split by a digest of the id) and read on the other half, both ways: what a tenant's own evidence of about
    that size would give out of sample (a half with no safe cut keeps the shipped probabilities). Each half is
    read on its own (pooled, the two maps' opposite errors would cancel in the ECE): the answerable ECE, the
    share proceeding and the share of twins proceeding wrongly, each the halves' mean weighted by their sizes,
    with the halves' own figures beside them, and the ECE a calibrated map reads at that count (the floor)."""
    import hashlib

    from retrieval.evaluation.judged import base_id
    from retrieval.evaluation.stats import ece, ece_floor

    def half(i: str) -> int:
        return hashlib.sha1(base_id(i).encode()).digest()[0] % 2

    ha, ht = np.array([half(i) for i in ids_a]), np.array([half(i) for i in ids_t])
    eces, floors, proceeds, wrongs, sizes, twin_sizes = [], [], [], [], [], []
    for h in (0, 1):
        fa, ft, ra, rt = ha != h, ht != h, ha == h, ht == h   # fitted on the other half, read on this one
        if not ra.any():
            continue
        _, cut = _most_proceeding(pa[fa], ya[fa], pt[ft], yt[ft], proceed, safe)
        m = _two_level(pa[fa], ya[fa], cut)
        qa, qt = m(pa[ra]), m(pt[rt])
        eces.append(float(ece(qa, ya[ra])))
        floors.append(ece_floor(qa, draws=200)["median"])   # what a calibrated map reads at this count
        proceeds.append(float(np.mean(qa >= proceed)))
        wrongs.append(float(np.mean((qt >= proceed) & (yt[rt] == 0))) if rt.any() else 0.0)
        sizes.append(int(ra.sum()))
        twin_sizes.append(max(int(rt.sum()), 1))
    return {"ece": float(np.average(eces, weights=sizes)), "ece_calibrated": float(np.average(floors, weights=sizes)),
            "answerable_proceed": float(np.average(proceeds, weights=sizes)),
            "twins_wrong": float(np.average(wrongs, weights=twin_sizes)), "ece_halves": eces,
            "twins_wrong_halves": wrongs}


def oracle_bound(rows: list[dict], fits=None, proceed: float = 0.83,
                 safe: float = 0.10) -> dict[str, dict[str, dict[str, float]]]:
    """Per report kind and mode, what maps of the best probability fitted on the kind's own rows could do
    (in-sample): the finest map calibrated on the answerable requests (isotonic: its ECE near zero by
    construction) and the twins it lets proceed wrongly; one fitted on answerable and twins together and the
    answerable ECE it leaves; and the share of answerable first searches the most-proceeding map calibrated on
    them can proceed on with at most ``safe`` wrong twin proceeds (:func:`_most_proceeding`), beside the share
    proceeding now. A first tool fits when labelled or, with ``fits``, judged to fit (a twin's only when judged)."""
    from sklearn.isotonic import IsotonicRegression
    from sklearn.metrics import roc_auc_score

    from retrieval.evaluation.stats import ece

    out: dict[str, dict[str, dict[str, float]]] = {}
    for kind in sorted({r["catalog"] for r in rows}):
        for mode in MODES:
            ans = [r for r in rows if r["catalog"] == kind and r["mode"] == mode and r.get("answerable")]
            twins = [r for r in rows if r["catalog"] == kind and r["mode"] == mode and not r.get("answerable")]
            if not ans or not twins:
                continue
            pa, ya = np.array([r["best1"] for r in ans]), np.array([first_fits(r, fits) for r in ans], dtype=float)
            pt, yt = np.array([r["best1"] for r in twins]), np.array([first_fits(r, fits) for r in twins], dtype=float)
            on_ans = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(pa, ya)
            both = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(
                np.concatenate([pa, pt]), np.concatenate([ya, yt]))
            qt = on_ans.predict(pt)
            share, cut = _most_proceeding(pa, ya, pt, yt, proceed, safe)
            out.setdefault(kind, {})[mode] = {
                "n": len(ans), "twins": len(twins), "ece_before": float(ece(pa, ya)),
                # how well the best probability tells an answerable request from its twin (1: always)
                "auroc_answerable_vs_twin": float(roc_auc_score(np.r_[np.ones(len(pa)), np.zeros(len(pt))],
                                                                np.r_[pa, pt])),
                "ece_answerable_map": float(ece(on_ans.predict(pa), ya)),
                "twins_proceed_answerable_map": float(np.mean(qt >= proceed)),
                "twins_wrong_answerable_map": float(np.mean((qt >= proceed) & (yt == 0))),
                "ece_both_map": float(ece(both.predict(pa), ya)),
                "twins_wrong_both_map": float(np.mean((both.predict(pt) >= proceed) & (yt == 0))),
                "answerable_proceed_now": float(np.mean(pa >= proceed)),
                "twins_wrong_now": float(np.mean((pt >= proceed) & (yt == 0))),
                "answerable_proceed_calibrated_safe": share, "calibrated_safe_cut": cut,
                "cross_fitted": cross_fitted([r["id"] for r in ans], pa, ya, [r["id"] for r in twins], pt, yt,
                                             proceed, safe)}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fit", type=Path, required=True, help="agent-flow rows of the fit set (with n_eligible)")
    p.add_argument("--report", type=Path, required=True, help="agent-flow rows of the report set")
    p.add_argument("--fit-judged-items", type=Path, help="the fit rows' judge items: fit to labelled-or-judged fits")
    p.add_argument("--fit-judged", type=Path, nargs="*")
    p.add_argument("--judged-items", type=Path)
    p.add_argument("--judged", type=Path, nargs="*")
    p.add_argument("--mixture", action="store_true", help="fit on the no-fit twins' first searches too")
    p.add_argument("--proceed", type=float, default=0.83, help="the proceed threshold the twins are read at")
    p.add_argument("--oracle", action="store_true", help="also what maps fitted in-sample on each report kind could do")
    p.add_argument("--safe", type=float, default=0.10, help="the wrong twin proceeds --oracle allows (default 0.10)")
    p.add_argument("--crowd", action="store_true", help="also the crowd variant and the error by the first tool's crowd")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "catalog_calibration.json")
    a = p.parse_args(argv)
    missing = [f for f in [a.fit, a.report, a.fit_judged_items, a.judged_items, *(a.fit_judged or []), *(a.judged or [])]
               if f is not None and not f.is_file()]
    if missing:
        print(f"error: no such file: {', '.join(map(str, missing))}", file=sys.stderr)
        return 2
    for items, answers, flag in ((a.fit_judged_items, a.fit_judged, "--fit-judged"), (a.judged_items, a.judged, "--judged")):
        if bool(items) != bool(answers):
            print(f"error: {flag}-items and {flag} go together", file=sys.stderr)
            return 2
    loaded = []
    for path in (a.fit, a.report):
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict) or not isinstance(data.get("rows"), list) \
                    or not all(isinstance(r, dict) for r in data["rows"]):
                raise ValueError("no list of rows")
        except (OSError, ValueError) as exc:
            print(f"error: {path}: not an agent-flow result file ({exc})", file=sys.stderr)
            return 2
        loaded.append(data)
    fit_data, report_data = loaded
    if fit_data.get("set") != "fit" or report_data.get("set") != "report":
        print("error: --fit takes the fit set's rows and --report the report set's", file=sys.stderr)
        return 2
    rows = first_searches(fit_data["rows"], twins=a.mixture)
    report_rows = first_searches(report_data["rows"], twins=True)
    if not rows or not report_rows:
        print("error: no first searches to fit on or to check", file=sys.stderr)
        return 2
    variants = VARIANTS + (CROWD_VARIANTS if a.crowd else ())
    if a.crowd:
        (rows, fit_left), (report_rows, report_left) = add_crowd(rows), add_crowd(report_rows)
        print(f"(--crowd: first searches whose answer has no second tool are left out: {fit_left} fit, "
              f"{report_left} report)")
    try:
        fit_judge = load_fits(a.fit_judged_items, a.fit_judged) if a.fit_judged_items else None
        fits = load_fits(a.judged_items, a.judged) if a.judged_items else None
    except ValueError as exc:
        print(f"error: a judge's file: {exc}", file=sys.stderr)
        return 2
    if fit_judge is not None:   # fitted to what fits (labelled or judged), not to the labels alone
        rows = judged_target(rows, fit_judge)
        print("(the fit reads the fit catalogs' judge: a first tool fits when labelled or judged to fit)")
    if a.mixture:
        print("(fitted on the answerable requests and their no-fit twins; the ECE below is the answerable ones')")
    table = leave_one_kind_out(rows, variants)
    kinds = sorted({r["catalog"] for r in rows})
    print(f"fit catalogs, each kind left out of the fit ({len(rows)} first searches): ECE of the best probability\n")
    print("| variant | " + " | ".join(kinds) + " | mean | worst |\n|---|" + "---:|" * (len(kinds) + 2))
    for variant, per in table.items():
        print(f"| {variant} | " + " | ".join(f"{per[k]:.3f}" for k in kinds) + f" | {per['mean']:.3f} | {per['worst']:.3f} |")
    chosen = min(variants, key=lambda v: table[v]["mean"])   # the identity too: no map unless one beats it
    w = fit(rows, chosen)
    result = check(report_rows, chosen, w, fits, a.proceed)
    print(f"\nchosen on the fit catalogs: {chosen} (weights {np.round(w, 3).tolist()}); checked once on the report "
          "catalogs (ECE before -> after; calibrated model's median at that count)\n")
    print("| catalog | mode | n | mean best before -> after | rank 1 | ECE vs labels | "
          + ("first tool fits | ECE vs fit | " if fits else "") + "calibrated | twins proceeding | "
          + ("wrong proceeds | " if fits else "") + "\n|---|---|---:|---|---:|---|" + ("---:|---|" if fits else "")
          + "---:|---|" + ("---|" if fits else ""))
    for kind, modes in result.items():
        for mode, c in modes.items():
            line = (f"| {kind} | {mode} | {c['n']} | {c['mean_before']:.2f} -> {c['mean_after']:.2f} | {c['rank1']:.0%} | "
                    f"{c['ece_before']:.3f} -> {c['ece_after']:.3f} | ")
            if fits:
                line += f"{c['fits']:.0%} | {c['ece_fits_before']:.3f} -> {c['ece_fits_after']:.3f} | "
            line += f"{c['calibrated_median']:.3f} | "
            line += f"{c['twins_proceed_before']:.0%} -> {c['twins_proceed_after']:.0%} | " if "twins" in c else "- | "
            if fits:
                line += f"{c['twins_wrong_before']:.0%} -> {c['twins_wrong_after']:.0%} | " if "twins" in c else "- | "
            print(line)
    halves = crowd_halves(report_rows, fits) if a.crowd else None
    if halves:
        print("\nthe best probability's error (fits minus probability) on the report kinds' answerable first searches, "
              "least and most crowded halves of first tools\n")
        print("| catalog | mode | n | median crowd | vs labels: least / most crowded | "
              + ("vs labelled or judged fits: least / most crowded |" if fits else "") + "\n|---|---|---:|---:|---|"
              + ("---|" if fits else ""))
        for kind, modes in halves.items():
            for mode, c in modes.items():
                print(f"| {kind} | {mode} | {c['n']} | {c['crowd_median']:.2f} | {c['labels_error_low']:+.3f} / "
                      f"{c['labels_error_high']:+.3f} | " + (f"{c['fits_error_low']:+.3f} / {c['fits_error_high']:+.3f} |"
                                                             if fits else ""))
    oracle = oracle_bound(report_rows, fits, a.proceed, a.safe) if a.oracle else None
    if oracle:
        print(f"\nmaps fitted in-sample on each report kind's own rows (an optimistic reading); twins read at {a.proceed}\n")
        print("| catalog | mode | answerable vs twin AUROC | ECE now | finest map calibrated on its answerable: twins "
              "proceeding wrongly | a map fitted on answerable and twins: ECE on answerable | answerable proceeding now "
              f"(twins wrongly) | most proceeding, calibrated, twins wrongly <= {a.safe:.0%} | the same chosen on "
              "half, read on the other (both ways; means over the halves): ECE / proceeding / twins wrongly |\n"
              "|---|---|---:|---:|---:|---:|---:|---:|---|")
        for kind, modes in oracle.items():
            for mode, c in modes.items():
                print(f"| {kind} | {mode} | {c['auroc_answerable_vs_twin']:.3f} | {c['ece_before']:.3f} | "
                      f"{c['twins_wrong_answerable_map']:.0%} | {c['ece_both_map']:.3f} | "
                      f"{c['answerable_proceed_now']:.0%} ({c['twins_wrong_now']:.0%}) | "
                      f"{c['answerable_proceed_calibrated_safe']:.0%} | {c['cross_fitted']['ece']:.3f} "
                      f"(calibrated: {c['cross_fitted']['ece_calibrated']:.3f}) / "
                      f"{c['cross_fitted']['answerable_proceed']:.0%} / {c['cross_fitted']['twins_wrong']:.0%} |")
    environment = environment_stamp()
    print(stamp_line(environment))
    write_result(a.out, {"environment": environment, "fit": a.fit.name, "report": a.report.name, "loko": table,
                         "mixture": a.mixture, "proceed": a.proceed, "oracle": oracle,
                         **({"crowd_halves": halves} if a.crowd else {}),
                         "chosen": chosen, "weights": w.tolist(), "check": result}, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
