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
    ``mode``: their :func:`tail_matrix` features and whether the judge accepted them."""
    from retrieval.evaluation.judged import FITS

    xs, ys = [], []
    for r in rows:
        if not r.get("answerable") or r.get("mode") != mode or r["id"] not in judged or not r.get("tail_ids"):
            continue
        x, _ = tail_matrix([r])
        seen = judged[r["id"]]   # only the candidates the judge read (rows re-run since may differ)
        read = [i for i, t in enumerate(r["tail_ids"]) if tuple(t) in seen]
        xs.append(x[read])
        ys.append(np.array([seen[tuple(r["tail_ids"][i])] >= FITS for i in read], dtype=float))
    if not xs:
        raise ValueError("no judged tail candidates: the items must be mined from these rows (judged_flow mine-tail)")
    return np.concatenate(xs), np.concatenate(ys)


def level_to_judged(tail, x: np.ndarray, y: np.ndarray, source: str = ""):
    """``tail`` with its intercept moved so that the expected number of fits among the judged candidates ``x``
    equals the number the judge accepted (``y``); at least half a fit, so a judge that accepted none does not
    send the probability to zero."""
    from dataclasses import replace

    from scipy.optimize import brentq

    z = tail.a + x @ np.array([tail.b, tail.c, tail.d, tail.e])
    target = max(float(y.sum()), 0.5)
    shift = brentq(lambda d: float(np.sum(1 / (1 + np.exp(-(z + d))))) - target, -30.0, 30.0)
    return replace(tail, a=tail.a + shift, fitted_on=f"{tail.fitted_on}; level moved by {shift:+.3f} so that "
                   f"{len(y)} judged candidates ({source}) expect the {int(y.sum())} fits the judge accepted")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("rows", type=Path, help="agent-flow JSON of the fit set")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--judged-items", type=Path, help="judge items of the rows' tails (judged_flow.py mine-tail)")
    p.add_argument("--judged", type=Path, nargs="*", help="the judges' answers to them")
    a = p.parse_args(argv)
    if bool(a.judged_items) != bool(a.judged):
        print("error: --judged-items and --judged go together", file=sys.stderr)
        return 2
    data = json.loads(a.rows.read_text())
    if data.get("set") != "fit":
        print(f"error: {a.rows} is the {data.get('set')!r} set; fit on the 'fit' set only", file=sys.stderr)
        return 2
    try:
        tail, x, y = fit_tail(data["rows"], a.rows.name)
    except ValueError as exc:
        print(f"error: {a.rows}: {exc}", file=sys.stderr)
        return 2
    pred = tail.a + x @ np.array([tail.b, tail.c, tail.d, tail.e])
    p_hat = 1 / (1 + np.exp(-pred))
    print(f"fitted on the labels: predicted {p_hat.mean():.5f} vs labelled {y.mean():.5f} per candidate")
    if a.judged_items:
        from retrieval.evaluation.judged import read_judged

        try:
            xj, yj = judged_candidates(data["rows"], read_judged(a.judged_items, a.judged))
        except (OSError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        before = float(np.mean(1 / (1 + np.exp(-(tail.a + xj @ np.array([tail.b, tail.c, tail.d, tail.e]))))))
        tail = level_to_judged(tail, xj, yj, a.judged_items.parent.name)
        after = float(np.mean(1 / (1 + np.exp(-(tail.a + xj @ np.array([tail.b, tail.c, tail.d, tail.e]))))))
        print(f"judged candidates: {len(yj)}, {int(yj.sum())} fit; predicted {before:.5f} -> {after:.5f} per candidate")
    print(tail)
    tail.save(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
