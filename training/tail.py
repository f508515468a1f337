"""Fit the probability of the candidates the cross-encoder does not read (ranks past ``score_top``).

    python benchmarks/agent_flow.py --set fit --always-second        # rows with every candidate's evidence
    python -m training.tail benchmarks/results/agent_flow_fit.json --out models/toolrank-reranker/tail_calibration.json

A logistic regression (scikit-learn) over the fit catalogs' first-attempt candidates past the head
the cross-encoder read (ranks 11-100 at the default ``score_top`` of 10): the retrieval-only model's probability (as a logit), the log of the rank, the log of the
number of eligible tools and the log of the expected number of fitting tools among the scored ones. Rows come from MCP-Zero dev organisations and the training corpora only;
the README's figures come from other catalogs (``--set report``).

``--judged-items/--judged`` (0.14.0 on): the labels of the fit catalogs mark plan steps of multi-step requests
(NESTFUL, NesTools) that a blind judge does not accept as doing what was asked, and the probability claims
the judge's question. The labels still give the shape (how the probability moves with the retrieval
probability, the rank, the catalog's size and the head's expected fits: thousands of candidates against a
handful of judged fits); the judge gives the level: the intercept moves until the expected number of fits
among the judged candidates (ranks 11-20 of the need-mode first searches, ``benchmarks/judged_flow.py
mine-tail``) equals the number the judge accepted.

    python benchmarks/judged_flow.py mine-tail --flow benchmarks/results/agent_flow_fit.json \
        --out benchmarks/results/judged_flow/fit_tail/items.jsonl --batches runs/fit_tail --n-batches 8
    python -m training.tail benchmarks/results/agent_flow_fit.json --out models/toolrank-reranker/tail_calibration.json \
        --judged-items benchmarks/results/judged_flow/fit_tail/items.jsonl --judged benchmarks/results/judged_flow/fit_tail/judged_*.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def tail_matrix(rows: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """One row per candidate past the scored head of the answerable requests: [logit(r), log rank, log eligible,
    log expected fits in the head] (the last from ``head_p``, rows of 0.10.0's benchmark on)."""
    from retrieval.pipeline.confidence import head_fits

    xs, ys = [], []
    for r in rows:
        if not r.get("answerable") or "tail_r" not in r:
            continue
        if "head_p" not in r:
            raise ValueError("rows without head_p (the scored candidates' probabilities): run "
                             "benchmarks/agent_flow.py --set fit with this version")
        p = np.clip(np.asarray(r["tail_r"], dtype=np.float64), 1e-6, 1 - 1e-6)
        first = len(r["head_p"]) + 1   # the first rank past the head the cross-encoder read
        ranks = np.arange(first, first + len(p), dtype=np.float64)
        n = np.full(len(p), np.log(max(int(r.get("n_eligible", 1)), 1)))
        head = np.full(len(p), head_fits(np.asarray(r["head_p"], dtype=np.float64)))
        xs.append(np.stack([np.log(p / (1 - p)), np.log(ranks), n, head], axis=1))
        ys.append(np.asarray(r["tail_fit"], dtype=float))
    if not xs:
        raise ValueError("no answerable rows with tail evidence (run benchmarks/agent_flow.py with this version)")
    return np.concatenate(xs), np.concatenate(ys)


def fit_tail(rows: list[dict], source: str = ""):
    from sklearn.linear_model import LogisticRegression

    from retrieval.pipeline.confidence import TailCalibration

    x, y = tail_matrix(rows)
    m = LogisticRegression(C=1.0, max_iter=1000).fit(x, y)
    b, c, d, e = (float(v) for v in m.coef_[0])
    note = ""
    if b < 0:
        # a higher retrieval probability must not lower the tail's: without it (rank, size and head only)
        # the tail's probability falls with the rank (checked), so the tail keeps retrieval order
        m = LogisticRegression(C=1.0, max_iter=1000).fit(x[:, 1:], y)
        b, (c, d, e) = 0.0, (float(v) for v in m.coef_[0])
        if c >= 0:
            raise ValueError(f"the tail's probability would not fall with the rank (weight {c:.3g} on log rank); "
                             "fit on more rows")
        note = "; the retrieval probability's weight came out negative, so it is left out"
    return TailCalibration(float(m.intercept_[0]), b, c, d, fitted_on=f"{source}: {len(y)} candidates past the "
                                                                      f"scored head, {int(y.sum())} fit{note}", e=e), x, y


def judged_candidates(rows: list[dict], judged: dict, mode: str = "need") -> tuple[np.ndarray, np.ndarray]:
    """The judged tail candidates (``tail_ids``, ranks 11-20, those the judge read) of the answerable rows of
    ``mode`` with tail evidence: their :func:`tail_matrix` features and whether the judge accepted them."""
    from retrieval.evaluation.judged import FITS

    xs, ys = [], []
    for r in rows:
        if not r.get("answerable") or r.get("mode") != mode or r["id"] not in judged or not r.get("tail_ids") \
                or "tail_r" not in r:
            continue
        x, _ = tail_matrix([r])
        seen = judged[r["id"]]   # only the candidates the judge read (rows re-run since may differ)
        read = [i for i, t in enumerate(r["tail_ids"]) if tuple(t) in seen]
        xs.append(x[read])
        ys.append(np.array([seen[tuple(r["tail_ids"][i])] >= FITS for i in read], dtype=float))
    if not xs or not sum(len(y) for y in ys):
        raise ValueError("no judged tail candidates: the items must be mined from these rows (judged_flow mine-tail)")
    return np.concatenate(xs), np.concatenate(ys)


def sampled_candidates(design: dict, judged: dict, kinds: set[str] | None = None) -> dict[str, np.ndarray]:
    """A tail sample of ``benchmarks/tail_sample.py`` (its design and the judge's answers): every candidate past
    the head of the drawn requests (of ``kinds``, default all) with its :func:`tail_matrix` features, its
    chance ``pi`` of being judged, whether it was judged and, if so, whether the judge accepted it.

    Raises:
        ValueError: a drawn request the judge did not answer, or nothing drawn.
    """
    from retrieval.evaluation.judged import FITS

    xs, pis, read, ys, kind = [], [], [], [], []
    for d in design["requests"]:
        if kinds is not None and d["catalog"] not in kinds:
            continue
        if d["judged_at"] and d["id"] not in judged:
            raise ValueError(f"request {d['id']} was drawn but has no judgment")
        x, _ = tail_matrix([{"answerable": True, "tail_r": d["tail_r"], "head_p": d["head_p"],
                             "n_eligible": d["n_eligible"], "tail_fit": [False] * len(d["tail_r"])}])
        seen = judged.get(d["id"], {})
        r, y = np.zeros(len(x), dtype=bool), np.zeros(len(x))
        for i, t in zip(d["judged_at"], d["judged_ids"]):
            r[i], y[i] = True, float(seen.get(tuple(t), 0.0) >= FITS)
        xs.append(x)
        pis.append(np.asarray(d["pi"], dtype=np.float64))
        read.append(r)
        ys.append(y)
        kind += [d["catalog"]] * len(x)
    if not xs or not any(r.any() for r in read):
        raise ValueError("no judged candidates in the tail sample")
    return {"x": np.concatenate(xs), "pi": np.concatenate(pis), "read": np.concatenate(read),
            "y": np.concatenate(ys), "kind": np.array(kind)}


def sampled_fits(sample: dict[str, np.ndarray]) -> float:
    """The Horvitz-Thompson estimate of the fits among all the sample's candidates (each judged fit counts 1/pi)."""
    m = sample["read"]
    return float(np.sum(sample["y"][m] / sample["pi"][m]))


def level_to_sampled(tail, sample: dict[str, np.ndarray], source: str = ""):
    """``tail`` with its intercept moved so that all the sample's candidates (ranks 11-100) expect the fits the
    sample estimates (at least half a fit)."""
    from dataclasses import replace

    target = max(sampled_fits(sample), 0.5)
    shift = _shift_to(tail.a + sample["x"] @ _weights(tail), target)
    found = int(sample["y"][sample["read"]].sum())
    return replace(tail, a=tail.a + shift, fitted_on=f"{tail.fitted_on}; level moved by {shift:+.3f} so that "
                   f"{len(sample['y'])} candidates at ranks 11-100 ({source}) expect the {target:.1f} fits a judged "
                   f"sample of {int(sample['read'].sum())} estimates ({found} found)")


def fit_sampled(sample: dict[str, np.ndarray], source: str = "", C: float = 1.0):
    """The tail fitted on the judged sample alone: a logistic regression on the judged candidates weighted by
    1/pi (the whole tail's likelihood, estimated), the retrieval probability left out if its weight comes out
    negative (as :func:`fit_tail`)."""
    from sklearn.linear_model import LogisticRegression

    from retrieval.pipeline.confidence import TailCalibration

    m = sample["read"]
    x, y, w = sample["x"][m], sample["y"][m], 1.0 / sample["pi"][m]
    if y.sum() < 2:
        raise ValueError(f"{int(y.sum())} judged fit(s) in the sample: too few to fit the tail on")
    lr = LogisticRegression(C=C, max_iter=2000).fit(x, y, sample_weight=w)
    b, c, d, e = (float(v) for v in lr.coef_[0])
    cols = [0, 1, 2, 3]
    if b < 0:
        cols = [1, 2, 3]
        lr = LogisticRegression(C=C, max_iter=2000).fit(x[:, cols], y, sample_weight=w)
        b, (c, d, e) = 0.0, (float(v) for v in lr.coef_[0])
    if c >= 0:
        raise ValueError(f"the tail's probability would not fall with the rank (weight {c:.3g} on log rank)")
    return TailCalibration(float(lr.intercept_[0]), b, c, d, e=e, fitted_on=(
        f"{source}: a judged sample of {int(m.sum())} of {len(m)} candidates at ranks 11-100, {int(y.sum())} fit, "
        "weighted by 1/pi"))


def sampled_loss(tail, sample: dict[str, np.ndarray]) -> float:
    """The tail's log-loss over all the sample's candidates, estimated from the judged ones (weights 1/pi), per
    candidate."""
    m = sample["read"]
    p = np.clip(tail_p(tail, sample["x"][m]), 1e-9, 1 - 1e-9)
    y, w = sample["y"][m], 1.0 / sample["pi"][m]
    return float(-np.sum(w * (y * np.log(p) + (1 - y) * np.log(1 - p))) / len(sample["y"]))


def _weights(tail) -> np.ndarray:
    return np.array([tail.b, tail.c, tail.d, tail.e])


def tail_p(tail, x: np.ndarray) -> np.ndarray:
    """``tail``'s probability of each candidate of a :func:`tail_matrix` (what ``TailCalibration.probabilities``
    computes from the same evidence)."""
    from retrieval.evaluation.stats import sigmoid

    return sigmoid(tail.a + x @ _weights(tail))


def _shift_to(z: np.ndarray, target: float) -> float:
    """The shift ``d`` with ``sum(sigmoid(z + d)) == target`` (0 < target < len(z); the search moves only the
    intercept)."""
    from scipy.optimize import brentq

    from retrieval.evaluation.stats import sigmoid

    def gap(d: float) -> float:
        return float(np.sum(sigmoid(z + d))) - target

    lo, hi = -30.0, 30.0
    while gap(lo) > 0:   # widen until the root is inside (the sum runs from 0 to len(z))
        lo *= 2
    while gap(hi) < 0:
        hi *= 2
    return float(brentq(gap, lo, hi))


def level_to_judged(tail, x: np.ndarray, y: np.ndarray, source: str = ""):
    """``tail`` with its intercept moved so that the expected number of fits among the judged candidates ``x``
    equals the number the judge accepted (``y``), kept between half a fit and all but half a candidate (a judge
    that accepted none, or all, does not send the probability to 0 or 1).

    Raises:
        ValueError: fewer than two judged candidates.
    """
    from dataclasses import replace

    if len(y) < 2:
        raise ValueError(f"{len(y)} judged candidate(s): too few to set the tail's level")
    shift = _shift_to(tail.a + x @ _weights(tail), min(max(float(y.sum()), 0.5), len(y) - 0.5))
    return replace(tail, a=tail.a + shift, fitted_on=f"{tail.fitted_on}; level moved by {shift:+.3f} so that "
                   f"{len(y)} judged candidates ({source}) expect the {int(y.sum())} fits the judge accepted")


def rank_only(rows: list[dict], source: str = ""):
    """The tail from the rank alone (the labels' slope), for comparison with :func:`fit_tail`'s shape."""
    from sklearn.linear_model import LogisticRegression

    from retrieval.pipeline.confidence import TailCalibration

    x, y = tail_matrix(rows)
    m = LogisticRegression(C=1.0, max_iter=1000).fit(x[:, 1:2], y)
    return TailCalibration(float(m.intercept_[0]), 0.0, float(m.coef_[0][0]), 0.0, fitted_on=f"{source}: rank only")


VARIANTS = ("labels", "labels+judged level", "rank+judged level")


def leave_one_kind_out(rows: list[dict], judged: dict) -> dict[str, dict[str, dict[str, float]]]:
    """Per variant, per fit kind left out: the fits its tail expects among that kind's judged candidates, the
    number accepted and the Poisson log-likelihood of that count (fitted on the other kinds; ``total`` sums them)."""
    from retrieval.evaluation.stats import poisson_loglik

    out: dict[str, dict[str, dict[str, float]]] = {}
    for variant in VARIANTS:
        per: dict[str, dict[str, float]] = {}
        for kind in sorted({r["catalog"] for r in rows}):
            train = [r for r in rows if r["catalog"] != kind]
            try:
                xt, yt = judged_candidates([r for r in rows if r["catalog"] == kind], judged)
            except ValueError:   # nothing judged in this kind
                continue
            tail = rank_only(train) if variant.startswith("rank") else fit_tail(train)[0]
            if "judged" in variant:
                tail = level_to_judged(tail, *judged_candidates(train, judged))
            expected = float(np.sum(tail_p(tail, xt)))
            per[kind] = {"expected": expected, "judged": int(yt.sum()), "loglik": poisson_loglik(int(yt.sum()), expected)}
        per["total"] = {"loglik": float(sum(c["loglik"] for c in per.values()))}
        out[variant] = per
    return out


def _subset(sample: dict[str, np.ndarray], keep: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v[keep] for k, v in sample.items()}


SAMPLED_VARIANTS = ("labels+judged level", "labels+sampled level", "rank+sampled level", "sampled fit")


def _variant(name: str, rows: list[dict], judged: dict | None, sample: dict[str, np.ndarray]):
    if name == "sampled fit":
        return fit_sampled(sample)
    tail = rank_only(rows) if name.startswith("rank") else fit_tail(rows)[0]
    if name == "labels+judged level":
        return level_to_judged(tail, *judged_candidates(rows, judged))
    return level_to_sampled(tail, sample)


def leave_one_kind_out_sampled(rows: list[dict], judged: dict | None, sample: dict[str, np.ndarray],
                               variants: tuple[str, ...] = SAMPLED_VARIANTS) -> dict[str, dict[str, dict[str, float]]]:
    """Per variant, per fit kind left out (fitted on the other kinds' rows, ranks 11-20 judgments and sample):
    the left-out kind's tail log-loss estimated from its judged sample (per candidate), the fits its tail
    expects over ranks 11-100 and the fits its sample estimates; ``total`` sums the log-losses weighted by
    candidates."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    kinds = sorted(set(sample["kind"]))
    for variant in variants:
        if variant == "labels+judged level" and judged is None:
            continue
        per: dict[str, dict[str, float]] = {}
        for kind in kinds:
            held = _subset(sample, sample["kind"] == kind)
            try:
                tail = _variant(variant, [r for r in rows if r["catalog"] != kind], judged,
                                _subset(sample, sample["kind"] != kind))
            except ValueError as exc:   # e.g. no judged fit among the other kinds: the variant cannot be read
                per[kind] = {"error": str(exc), "candidates": int(len(held["y"]))}
                continue
            per[kind] = {"loss": sampled_loss(tail, held), "expected": float(np.sum(tail_p(tail, held["x"]))),
                         "estimated": sampled_fits(held), "found": int(held["y"][held["read"]].sum()),
                         "candidates": int(len(held["y"]))}
        ok = [c for c in per.values() if "loss" in c]
        per["total"] = {"loss": float(sum(c["loss"] * c["candidates"] for c in ok) / sum(c["candidates"] for c in ok))
                        if len(ok) == len(per) else None}
        out[variant] = per
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("rows", type=Path, help="agent-flow JSON of the fit set")
    p.add_argument("--out", type=Path, help="where to write the tail calibration (required unless --loko)")
    p.add_argument("--judged-items", type=Path, help="judge items of the rows' tails (judged_flow.py mine-tail)")
    p.add_argument("--judged", type=Path, nargs="*", help="the judges' answers to them")
    p.add_argument("--loko", action="store_true",
                   help="compare the labels' tail, its judged level and the rank alone with a judged level, each "
                        "fit kind left out (needs the judge); writes nothing unless --out")
    p.add_argument("--sample", type=Path,
                   help="a judged sample of ranks 11-100 (benchmarks/tail_sample.py draw --set fit: its folder)")
    p.add_argument("--sample-judged", type=Path, nargs="*", help="the judges' answers to the sample's items")
    p.add_argument("--variant", choices=SAMPLED_VARIANTS, default="labels+sampled level",
                   help="with --sample: which tail to write (compare them with --loko)")
    a = p.parse_args(argv)
    if bool(a.judged_items) != bool(a.judged):
        print("error: --judged-items and --judged go together", file=sys.stderr)
        return 2
    if bool(a.sample) != bool(a.sample_judged):
        print("error: --sample and --sample-judged go together", file=sys.stderr)
        return 2
    if a.loko and not (a.judged_items or a.sample):
        print("error: --loko reads the judge: give --judged-items and --judged, or --sample and --sample-judged",
              file=sys.stderr)
        return 2
    if a.sample and a.variant == "labels+judged level" and not a.judged_items:
        print("error: the variant 'labels+judged level' reads --judged-items and --judged", file=sys.stderr)
        return 2
    if not a.out and not a.loko:
        print("error: give --out (or --loko to compare only)", file=sys.stderr)
        return 2
    try:
        data = json.loads(a.rows.read_text())
    except (OSError, ValueError) as exc:
        print(f"error: {a.rows}: {exc}", file=sys.stderr)
        return 2
    if data.get("set") != "fit":
        print(f"error: {a.rows} is the {data.get('set')!r} set; fit on the 'fit' set only", file=sys.stderr)
        return 2
    judged = None
    if a.judged_items:
        from retrieval.evaluation.judged import read_judged

        try:
            judged = read_judged(a.judged_items, a.judged)
        except (OSError, ValueError, KeyError) as exc:
            print(f"error: the judge's files: {exc}", file=sys.stderr)
            return 2
    sample = None
    if a.sample:
        from retrieval.evaluation.judged import read_judged

        try:
            design = json.loads((a.sample / "design.json").read_text())
            if design.get("set") != "fit":
                print(f"error: {a.sample} is a sample of the {design.get('set')!r} set; fit on the 'fit' set only",
                      file=sys.stderr)
                return 2
            sample = sampled_candidates(design, read_judged(a.sample / "items.jsonl", a.sample_judged))
        except (OSError, ValueError, KeyError) as exc:
            print(f"error: the tail sample: {exc}", file=sys.stderr)
            return 2
    try:
        if a.loko and sample is not None:
            table = leave_one_kind_out_sampled(data["rows"], judged, sample)
            kinds = [k for k in next(iter(table.values())) if k != "total"]
            print("each fit kind left out, ranks 11-100: log-loss per 1,000 candidates estimated from its judged "
                  "sample; fits expected / estimated (found)\n")
            print("| variant | " + " | ".join(kinds) + " | total |\n|---|" + "---|" * (len(kinds) + 1))
            for variant, per in table.items():
                print(f"| {variant} | " + " | ".join(
                    f"{1000 * per[k]['loss']:.2f}; {per[k]['expected']:.1f} / {per[k]['estimated']:.1f} ({per[k]['found']})"
                    if "loss" in per[k] else "cannot fit" for k in kinds)
                    + (f" | {1000 * per['total']['loss']:.2f} |" if per["total"]["loss"] is not None else " | - |"))
            if not a.out:
                return 0
        elif a.loko:
            table = leave_one_kind_out(data["rows"], judged)
            kinds = [k for k in next(iter(table.values())) if k != "total"]
            print("each fit kind left out: fits expected among its judged candidates (judged) -> Poisson log-likelihood\n")
            print("| variant | " + " | ".join(kinds) + " | total |\n|---|" + "---|" * (len(kinds) + 1))
            for variant, per in table.items():
                print(f"| {variant} | " + " | ".join(f"{per[k]['expected']:.2f} ({per[k]['judged']}) {per[k]['loglik']:.2f}"
                                                   for k in kinds) + f" | {per['total']['loglik']:.2f} |")
            if not a.out:
                return 0
        if sample is not None:
            tail = _variant(a.variant, data["rows"], judged, sample)
            print(f"{a.variant}: the sample's {len(sample['y'])} candidates expect "
                  f"{float(np.sum(tail_p(tail, sample['x']))):.1f} fits; the sample estimates {sampled_fits(sample):.1f}")
            print(tail)
            tail.save(a.out)
            return 0
        tail, x, y = fit_tail(data["rows"], a.rows.name)
        print(f"fitted on the labels: predicted {np.mean(tail_p(tail, x)):.5f} "
              f"vs labelled {y.mean():.5f} per candidate")
        if judged is not None:
            xj, yj = judged_candidates(data["rows"], judged)
            before = float(np.mean(tail_p(tail, xj)))
            tail = level_to_judged(tail, xj, yj, a.judged_items.parent.name)
            after = float(np.mean(tail_p(tail, xj)))
            print(f"judged candidates: {len(yj)}, {int(yj.sum())} fit; predicted {before:.5f} -> {after:.5f} per candidate")
    except ValueError as exc:
        print(f"error: {a.rows}: {exc}", file=sys.stderr)
        return 2
    print(tail)
    tail.save(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
