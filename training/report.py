"""Calibration report on held-out questions: ECE before/after, reliability diagram, hit rate by confidence.

    python -m training.report --model models/toolrank-reranker --split test --plot models/toolrank-reranker/reliability.png

"Before" is the cross-encoder's raw sigmoid(logit); "after" is the shipped probability
(logit joined with retrieval evidence, fitted on dev). Two views, both over the request
alone with all servers eligible: every one of the top-10 candidates of each query, and
the best candidate of each query against whether it is right.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np

from retrieval.evaluation.harness import load_queries
from retrieval.pipeline.confidence import ConfidenceModel
from scorer.calibration import expected_calibration_error, sigmoid

from .calibrate import collect

log = logging.getLogger("toolrank.report")
DATA = Path(__file__).resolve().parent / "data"


def calibration_report(index, scorer, confidence: ConfidenceModel, queries, *, top: int = 10) -> dict:
    col = collect(index, queries, scorer, modes=("request",))
    top_raw, top_cal, top_y = [], [], []
    best_raw, best_raw_y, best_cal, best_cal_y, top5 = [], [], [], [], []
    for g, y in enumerate(col.labels):
        f = {k: v[g] for k, v in col.feats.items()}
        p = confidence.probabilities_from_features(f)
        raw = sigmoid(f["logit"]) if "logit" in f else p
        order = np.argsort(-p, kind="stable")
        top_raw += list(raw[order[:top]]); top_cal += list(p[order[:top]]); top_y += list(y[order[:top]])
        best_cal.append(float(p[order[0]])); best_cal_y.append(float(y[order[0]]))
        r = int(np.argmax(raw))
        best_raw.append(float(raw[r])); best_raw_y.append(float(y[r]))
        top5.append(bool(y[order[:5]].any()))
    arr = lambda v: np.asarray(v, dtype=float)  # noqa: E731
    best_cal_a, best_cal_y_a, top5_a = arr(best_cal), arr(best_cal_y), np.asarray(top5)
    groups = {}
    for name, lo, hi in (("< 0.5", 0.0, 0.5), ("0.5-0.8", 0.5, 0.8), (">= 0.8", 0.8, 1.01)):
        m = (best_cal_a >= lo) & (best_cal_a < hi)
        groups[name] = {"n": int(m.sum()), "top5": float(top5_a[m].mean()) if m.any() else None,
                        "top1": float(best_cal_y_a[m].mean()) if m.any() else None}
    return {
        "n_queries": len(queries),
        "ece_top10_before": expected_calibration_error(arr(top_raw), arr(top_y), n_bins=15),
        "ece_top10_after": expected_calibration_error(arr(top_cal), arr(top_y), n_bins=15),
        "ece_best_before": expected_calibration_error(arr(best_raw), arr(best_raw_y), n_bins=15),
        "ece_best_after": expected_calibration_error(best_cal_a, best_cal_y_a, n_bins=15),
        "hit_rate_by_best_probability": groups,
        "_curves": {"top10_after": (top_cal, top_y), "top10_before": (top_raw, top_y),
                    "best_after": (best_cal, best_cal_y)},
    }


def plot_reliability(rep: dict, path: Path, n_bins: int = 15) -> Path | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib missing: no reliability diagram")
        return None
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], "k--", lw=1, label="perfect")
    edges = np.linspace(0, 1, n_bins + 1)
    for key, label in (("top10_before", "top-10, raw sigmoid(logit)"), ("top10_after", "top-10, shipped"),
                       ("best_after", "best candidate, shipped")):
        p, y = (np.asarray(v, float) for v in rep["_curves"][key])
        idx = np.clip(np.digitize(p, edges) - 1, 0, n_bins - 1)
        xs, ys = [], []
        for b in range(n_bins):
            m = idx == b
            if m.sum() >= 5:
                xs.append(p[m].mean()); ys.append(y[m].mean())
        ax.plot(xs, ys, "o-", label=label)
    ax.set_xlabel("predicted probability"); ax.set_ylabel("observed frequency")
    ax.set_title("reliability (test questions, request alone)")
    ax.legend(fontsize=8); ax.grid(alpha=0.3)
    fig.tight_layout(); fig.savefig(path, dpi=120); plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--split", default="test")
    p.add_argument("--queries", type=Path, default=DATA / "questions.jsonl")
    p.add_argument("--plot", type=Path)
    p.add_argument("--json", type=Path, help="also write the figures here")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    from retrieval.index.default import load_or_build_default
    from scorer import Scorer

    scorer = Scorer.load(a.model, threads=a.threads)
    conf = ConfidenceModel.load(a.model / "combiner.json")
    rep = calibration_report(load_or_build_default(), scorer, conf, load_queries(a.queries, split=a.split))
    if a.plot:
        plot_reliability(rep, a.plot)
    out = {k: v for k, v in rep.items() if not k.startswith("_")}
    print(json.dumps(out, indent=1))
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
