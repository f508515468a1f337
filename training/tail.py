"""Fit the probability of the candidates the cross-encoder does not read (ranks past ``score_top``).

    python benchmarks/agent_flow.py --set fit --always-second        # rows with every candidate's evidence
    python -m training.tail benchmarks/results/agent_flow_fit.json --out models/toolrank-reranker/tail_calibration.json

A logistic regression (scikit-learn) over the fit catalogs' first-attempt candidates past the head
the cross-encoder read (ranks 11-100 at the default ``score_top`` of 10): the retrieval-only model's probability (as a logit), the log of the rank, the log of the
number of eligible tools and the log of the expected number of fitting tools among the scored ones. Rows come from MCP-Zero dev organisations and the training corpora only;
the README's figures come from other catalogs (``--set report``).
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("rows", type=Path, help="agent-flow JSON of the fit set")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
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
    print(f"{tail}\nfit set: predicted {p_hat.mean():.5f} vs observed {y.mean():.5f} per candidate")
    tail.save(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
