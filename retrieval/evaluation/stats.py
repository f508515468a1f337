"""The statistics of evaluation, one of each: AUROC, the exact McNemar test, ECE, the sigmoid, a count
against a Poisson expectation.

AUROC is :func:`sklearn.metrics.roc_auc_score` and the exact McNemar p-value is
:func:`scipy.stats.binomtest`; both libraries are imported on first use, so the query path
(``Pipeline.search``, the service) never loads them. ECE and the numerically stable sigmoid
are :mod:`scorer.calibration`'s, the lowest layer, which the scorer and training use too.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
from numpy.typing import ArrayLike

from scorer.calibration import expected_calibration_error, sigmoid

__all__ = ["auroc", "ece", "ece_floor", "mcnemar_exact", "poisson_at_least", "poisson_loglik", "poisson_p",
           "sigmoid"]


def _missing(package: str) -> ImportError:
    return ImportError(f"evaluation statistics need {package}, a dependency of toolrank that is missing here: "
                       f"pip install '{package}' (or install from an up-to-date requirements.lock)")


def auroc(scores_pos: Iterable[float], scores_neg: Iterable[float]) -> float:
    """P(a random positive scores above a random negative), ties counting half; NaN when a side is empty."""
    pos, neg = np.asarray(list(scores_pos), float), np.asarray(list(scores_neg), float)
    if not len(pos) or not len(neg):
        return float("nan")
    try:
        from sklearn.metrics import roc_auc_score
    except ImportError as exc:
        raise _missing("scikit-learn") from exc

    labels = np.concatenate([np.ones(len(pos)), np.zeros(len(neg))])
    return float(roc_auc_score(labels, np.concatenate([pos, neg])))


def mcnemar_exact(wins: int, losses: int) -> float:
    """Two-sided exact McNemar p-value: P(a split at least this uneven | no difference).

    The binomial test of ``wins`` among the ``wins + losses`` disagreements at 1/2.

    Raises:
        ValueError: a negative count.
    """
    if wins < 0 or losses < 0:
        raise ValueError(f"wins and losses must be counts, got {wins} and {losses}")
    if wins + losses == 0:
        return 1.0
    try:
        from scipy.stats import binomtest
    except ImportError as exc:
        raise _missing("scipy") from exc

    return float(min(1.0, binomtest(wins, wins + losses, 0.5, alternative="two-sided").pvalue))


def ece(probs: ArrayLike, labels: ArrayLike, n_bins: int = 10) -> float:
    """Expected calibration error over ``n_bins`` equal-width bins (:func:`scorer.calibration.expected_calibration_error`)."""
    return expected_calibration_error(probs, labels, n_bins=n_bins)


def ece_floor(probs: ArrayLike, observed: float | None = None, n_bins: int = 10, draws: int = 1000,
              seed: int = 0) -> dict[str, float]:
    """What :func:`ece` reads for a *perfectly calibrated* model with these probabilities: outcomes drawn
    as Bernoulli(p) ``draws`` times. With 100 requests a calibrated model's ECE is near 0.08 (10 bins), so an
    ECE target of 0.05 is only testable on a few hundred; report the observed ECE beside this floor.

    Returns ``{"median", "p95", "n"}`` and, given ``observed``, ``"p_value"``: the share of calibrated draws
    whose ECE reaches it (small: the miscalibration is more than the count explains).
    """
    p = np.clip(np.asarray(probs, dtype=np.float64), 0.0, 1.0)
    if p.size == 0:
        return {"median": float("nan"), "p95": float("nan"), "n": 0}
    rng = np.random.default_rng(seed)
    sims = np.array([ece(p, (rng.random(p.size) < p).astype(np.float64), n_bins) for _ in range(draws)])
    out = {"median": float(np.median(sims)), "p95": float(np.percentile(sims, 95)), "n": int(p.size)}
    if observed is not None:
        out["p_value"] = float((1 + np.sum(sims >= observed)) / (1 + draws))
    return out


def _poisson():
    try:
        from scipy.stats import poisson
    except ImportError as exc:
        raise _missing("scipy") from exc
    return poisson


def poisson_p(observed: int, expected: float) -> float:
    """Two-sided p-value of ``observed`` events where calibrated probabilities expect ``expected`` (Poisson):
    how surprising the count is, since at a few events in a thousand a ratio alone says little."""
    if expected <= 0:
        return 1.0 if observed == 0 else 0.0
    poisson = _poisson()
    return float(min(1.0, 2 * min(poisson.cdf(observed, expected), poisson.sf(observed - 1, expected))))


def poisson_at_least(observed: int, expected: float) -> float:
    """P(at least ``observed`` events) where ``expected`` are expected (Poisson, one-sided)."""
    return float(_poisson().sf(observed - 1, expected)) if observed else 1.0


def poisson_loglik(observed: int, expected: float) -> float:
    """Poisson log-likelihood of a count under an expectation (summed over groups: one number that compares
    two models on the same candidates)."""
    return float(_poisson().logpmf(observed, max(expected, 1e-12)))
