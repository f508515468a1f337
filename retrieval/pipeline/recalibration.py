"""A tenant's own recalibration, learnt from its feedback: ``q = sigmoid(a * logit(p) + b)``.

The shipped confidence models are fitted on toolrank's catalogs; on a user's catalog their probabilities can
be far off (held out, ECE of the best probability 0.06-0.15, and 0.60 on Gorilla's model-hub APIs). Each
successful call reported through ``POST /v1/feedback`` after a search is one observation: the search's best
probability (before any recalibration) and whether the called tool was the first one offered. Fitted with a
pull towards the identity (``pull * ((a - 1)^2 + b^2)``, 0.5 chosen on the fit catalogs' agent-flow rows) and
used only where it beats the identity by five-fold cross-validated log loss on the tenant's own observations,
so a tenant whose probabilities already match its rates keeps them (``benchmarks/use_recalibration.py``:
Gorilla 0.58 -> 0.05 and MCP-Zero organisations 0.17 -> 0.06 after 25 observations against labels; read against
labelled or judged fits on up to 400 requests, MCPToolBench++ 0.26 -> 0.05 after 50: ``use_recalibration_wide_need.md``).

What it cannot see: a search where the agent called nothing (a request no tool fits) gives no observation, so
the fit learns from answerable traffic; and it assumes the agent called a tool that fitted. That is why, since
0.16.0, the thresholds move through the same map (:func:`moved_policy`, as a catalog's calibration moves them):
it changes what the numbers say, never a decision — read against the shipped thresholds it would let most no-fit
requests of an under-confident catalog proceed (``benchmarks/results/use_recalibration_wide_need.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

__all__ = ["UseRecalibration", "DEFAULT_PULL", "MIN_OBSERVATIONS", "THRESHOLDS", "fit_recalibration",
           "fit_use_recalibration", "fit_audit_recalibration", "AUDIT_PULL", "beats_identity", "moved_policy",
           "platt"]

if TYPE_CHECKING:
    from .decision import Policy

DEFAULT_PULL = 0.5        # chosen on the fit catalogs' rows (benchmarks/results/use_recalibration.md)
MIN_OBSERVATIONS = 25
_EPS = 1e-6


def expit(z: np.ndarray) -> np.ndarray:
    """The logistic function without overflow or cancellation (numpy only: scipy stays off the query path)."""
    z = np.asarray(z, dtype=np.float64)
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), _EPS, 1 - _EPS)
    return np.log(p / (1 - p))


def platt(p: np.ndarray | Sequence[float] | float, a: float, b: float) -> np.ndarray:
    """``sigmoid(a * logit(p) + b)``: a tenant's recalibration and a catalog's (``probes.CatalogCalibration``)."""
    return expit(a * _logit(np.asarray(p, dtype=np.float64)) + b)


THRESHOLDS = ("proceed_threshold", "no_fit_below", "floor", "exact_name_confidence")   # a Policy's probabilities


def moved_policy(policy: "Policy", apply: Callable[[float], Any]) -> "Policy":
    """``policy`` with every probability threshold moved through the monotone map ``apply``: read against mapped
    probabilities, it gives the decisions the shipped thresholds give on the shipped ones."""
    return policy.with_overrides(**{name: float(apply(getattr(policy, name))) for name in THRESHOLDS})


@dataclass(frozen=True)
class UseRecalibration:
    """``q = sigmoid(a * logit(p) + b)`` with ``a > 0`` (the order of a tenant's tools never changes); from audits
    (0.18.0) also the level of the candidates past the scored head: their shipped logit moved by ``tail_shift``
    (None: the catalog's own level, as without a recalibration), measured on ``tail_judged`` audited candidates
    of which ``tail_fits`` fit."""

    a: float
    b: float
    observations: int = 0
    tail_shift: float | None = None
    tail_judged: int = 0
    tail_fits: int = 0

    def __post_init__(self) -> None:
        if not (np.isfinite(self.a) and np.isfinite(self.b) and self.a > 0):
            raise ValueError(f"recalibration needs a finite a > 0 and a finite b, got a={self.a}, b={self.b}")

    def apply(self, p: np.ndarray | Sequence[float]) -> np.ndarray:
        return platt(p, self.a, self.b)

    def tail(self, p: np.ndarray) -> np.ndarray:
        """Candidates past the scored head at the tenant's own level (read only where ``tail_shift`` is set)."""
        return platt(p, 1.0, self.tail_shift or 0.0)

    def policy(self, policy: "Policy") -> "Policy":
        """``policy`` with its thresholds moved through the same map: the same decisions (0.16.0)."""
        return moved_policy(policy, self.apply)

    def invert(self, q: np.ndarray | Sequence[float] | float) -> np.ndarray:
        """The probability before recalibration (exact up to ``apply``'s clip at 1e-6 from 0 and 1)."""
        q = np.clip(np.asarray(q, dtype=np.float64), 1e-300, 1 - 1e-16)
        return expit((np.log(q) - np.log1p(-q) - self.b) / self.a)


def fit_recalibration(p: np.ndarray, y: np.ndarray, pull: float = DEFAULT_PULL, *,
                      bounds: tuple[tuple[float, float], tuple[float, float]] = ((0.05, 20.0), (-20.0, 20.0)),
                      weight: np.ndarray | None = None, prior: tuple[float, float] = (1.0, 0.0)) -> tuple[float, float]:
    """``(a, b)`` minimising the log loss of ``sigmoid(a * logit(p) + b)`` (each observation counted ``weight``
    times, default once) plus ``pull * ((a-a0)^2 + (b-b0)^2)`` with ``(a0, b0) = prior`` (default the identity;
    a tenant's audits pull towards its catalog's map); ``a`` and ``b`` kept within ``bounds`` (``a``
    positive: the order stays; held at 1 by its bounds, ``b`` is a shift)."""
    from scipy.optimize import minimize

    x, y = _logit(p), np.asarray(y, dtype=np.float64)
    n = np.ones_like(x) if weight is None else np.asarray(weight, dtype=np.float64)
    a0, b0 = float(prior[0]), float(prior[1])

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        z = w[0] * x + w[1]
        g = n * (expit(z) - y)
        value = np.sum(n * (np.logaddexp(0, z) - y * z)) + pull * ((w[0] - a0) ** 2 + (w[1] - b0) ** 2)
        return float(value), np.array([np.sum(g * x) + 2 * pull * (w[0] - a0), np.sum(g) + 2 * pull * (w[1] - b0)])

    start = np.clip(np.array([a0, b0]), [lo for lo, _ in bounds], [hi for _, hi in bounds])
    w = minimize(loss, start, jac=True, method="L-BFGS-B", bounds=list(bounds)).x
    return float(w[0]), float(w[1])


def _log_loss(q: np.ndarray, y: np.ndarray) -> float:
    q = np.clip(q, _EPS, 1 - _EPS)
    return float(-np.sum(y * np.log(q) + (1 - y) * np.log(1 - q)))


def beats_identity(p: np.ndarray, y: np.ndarray, pull: float = DEFAULT_PULL, folds: int = 5, seed: int = 0) -> bool:
    """Whether the recalibration's cross-validated log loss on these observations is below the identity's."""
    p, y = np.asarray(p, dtype=np.float64), np.asarray(y, dtype=np.float64)
    order = np.random.default_rng(seed).permutation(len(p))
    fitted = same = 0.0
    for f in range(folds):
        test = order[f::folds]
        train = np.setdiff1d(order, test)
        if not len(test) or not len(train):
            continue
        a, b = fit_recalibration(p[train], y[train], pull)
        fitted += _log_loss(UseRecalibration(a, b).apply(p[test]), y[test])
        same += _log_loss(p[test], y[test])
    return fitted < same


def fit_use_recalibration(p: Sequence[float], y: Sequence[float], *, pull: float = DEFAULT_PULL,
                          min_observations: int = MIN_OBSERVATIONS) -> UseRecalibration | None:
    """A tenant's recalibration from its observations, or None: too few of them, or no better than the
    identity in cross-validation."""
    p_arr, y_arr = np.asarray(p, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(p_arr) != len(y_arr):
        raise ValueError(f"{len(p_arr)} probabilities but {len(y_arr)} labels")
    if len(p_arr) < max(int(min_observations), 5) or not beats_identity(p_arr, y_arr, pull):
        return None
    a, b = fit_recalibration(p_arr, y_arr, pull)
    return UseRecalibration(a, b, len(p_arr))


AUDIT_PULL = DEFAULT_PULL   # chosen on the fit catalogs' rows at 50 audits among 0.5, 2, 8 (benchmarks/audit_recalibration.py)


def fit_audit_recalibration(p: Sequence[float], y: Sequence[float], *, prior: tuple[float, float] = (1.0, 0.0),
                            pull: float = AUDIT_PULL,
                            min_observations: int = MIN_OBSERVATIONS) -> UseRecalibration | None:
    """A tenant's recalibration from its **audits** (searches drawn before their outcome, their first tool judged by
    the LLM endpoint: ``serve/audits.py``), or None under ``min_observations``. Unlike feedback, audits are an
    unbiased sample of the tenant's searches, read with the calibration target's own question, so no gate: the fit
    is pulled towards ``prior`` — the catalog's own map (``probes.CatalogCalibration``; the identity without one) —
    and follows the audits as they grow (``benchmarks/audit_recalibration.py``)."""
    p_arr, y_arr = np.asarray(p, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(p_arr) != len(y_arr):
        raise ValueError(f"{len(p_arr)} probabilities but {len(y_arr)} labels")
    if len(p_arr) < max(int(min_observations), 5):
        return None
    a, b = fit_recalibration(p_arr, y_arr, pull, prior=prior)
    return UseRecalibration(a, b, len(p_arr))
