"""Turning cross-encoder logits into calibrated probabilities (Platt scaling).

``p = sigmoid(a * logit + b)`` with ``a > 0``, so calibration never changes a ranking.
Applying a calibration needs numpy only; fitting is a few Newton steps in numpy too.
The fitted parameters travel inside the model folder's ``config.json``.

Fit on the logits of the model *as shipped* (after int8 quantisation): quantisation
moves logits enough to matter for thresholds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Mapping

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "CalibrationError",
    "Calibration",
    "sigmoid",
    "fit_platt",
    "expected_calibration_error",
    "reliability_table",
]


class CalibrationError(ValueError):
    """Calibration parameters or fitting data that cannot be used."""


def sigmoid(z: ArrayLike) -> np.ndarray:
    """Numerically stable logistic function, float64, never NaN for finite or infinite input."""
    z = np.asarray(z, dtype=np.float64)
    return np.exp(-np.logaddexp(0.0, -z))


@dataclass(frozen=True)
class Calibration:
    """Platt scaling: ``p = sigmoid(a * logit + b)``. The default is the identity (plain sigmoid).

    Attributes:
        kind: Always ``"platt"`` (the only kind so far; kept so the format can grow).
        a: Slope, strictly positive so that probabilities rise with the logit.
        b: Offset.
    """

    kind: Literal["platt"] = "platt"
    a: float = 1.0
    b: float = 0.0

    def __post_init__(self) -> None:
        if self.kind != "platt":
            raise CalibrationError(f"unknown calibration kind {self.kind!r}; only 'platt' is supported")
        for field_name in ("a", "b"):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
                    or not math.isfinite(float(value)):
                raise CalibrationError(f"calibration {field_name} must be a finite number, got {value!r}")
            object.__setattr__(self, field_name, float(value))
        if self.a <= 0:
            raise CalibrationError(
                f"calibration slope a={self.a} must be > 0 (a <= 0 would reverse or erase the ranking); "
                "refit the calibration on held-out logits"
            )

    def apply(self, logits: ArrayLike) -> np.ndarray:
        """Calibrated probabilities for ``logits`` (any shape), float64 in [0, 1]."""
        return sigmoid(self.a * np.asarray(logits, dtype=np.float64) + self.b)

    __call__ = apply

    @property
    def is_identity(self) -> bool:
        return self.a == 1.0 and self.b == 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (plain Python floats)."""
        return {"kind": self.kind, "a": float(self.a), "b": float(self.b)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "Calibration":
        """Inverse of :meth:`to_dict`; ``None`` or ``{}`` gives the identity.

        Raises:
            CalibrationError: not a mapping, unknown keys, or invalid values.
        """
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise CalibrationError(f"calibration must be an object like {{'kind': 'platt', 'a': 1.0, 'b': 0.0}}, "
                                   f"got {type(d).__name__}")
        unknown = set(d) - {"kind", "a", "b"}
        if unknown:
            raise CalibrationError(f"unknown calibration keys {sorted(unknown)}; expected 'kind', 'a', 'b'")
        return cls(kind=d.get("kind", "platt"), a=d.get("a", 1.0), b=d.get("b", 0.0))


def _as_binary_data(logits: ArrayLike, labels: ArrayLike, what: str = "logits") -> tuple[np.ndarray, np.ndarray]:
    z = np.asarray(logits, dtype=np.float64).ravel()
    try:
        y = np.asarray(labels, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise CalibrationError("labels must be numbers: 1 for a fitting tool, 0 otherwise") from None
    if z.size != y.size:
        raise CalibrationError(f"got {z.size} {what} but {y.size} labels; pass one label per value")
    if z.size == 0:
        raise CalibrationError("no data: pass at least one positive and one negative example")
    if not np.all(np.isfinite(z)):
        raise CalibrationError(f"{what} contain NaN or infinity; check the model outputs")
    if not np.all((y == 0) | (y == 1)):
        raise CalibrationError("labels must be 0 or 1 (bool or int); got other values")
    return z, y


def fit_platt(logits: ArrayLike, labels: ArrayLike, *, max_iter: int = 100, tol: float = 1e-10) -> Calibration:
    """Fit ``p = sigmoid(a * logit + b)`` to binary labels by minimising log loss.

    Uses Platt's smoothed targets (``(N+ + 1) / (N+ + 2)`` and ``1 / (N- + 2)``), which keep
    the solution finite even on perfectly separated data and change nothing measurable
    on large sets. Newton's method with backtracking on standardised logits; numpy only.

    Args:
        logits: Raw model logits of held-out pairs.
        labels: 1 where the tool fits the request, 0 otherwise; same length.
        max_iter: Newton iteration cap.
        tol: Stop when the parameter step is below this.

    Returns:
        The fitted :class:`Calibration`.

    Raises:
        CalibrationError: mismatched lengths, non-binary labels, all labels equal, all
            logits equal, no convergence, or a fitted slope ``a <= 0`` (the logits rank
            negatives above positives: check label order or the model).
    """
    z, y = _as_binary_data(logits, labels)
    n_pos = int(y.sum())
    n_neg = int(y.size - n_pos)
    if n_pos == 0 or n_neg == 0:
        only = "positive (1)" if n_neg == 0 else "negative (0)"
        raise CalibrationError(f"all {y.size} labels are {only}: fitting needs both fitting and non-fitting pairs")
    mu, sd = float(z.mean()), float(z.std())
    if not sd > 1e-12 * max(1.0, abs(mu)):
        raise CalibrationError(f"all logits are equal ({mu:.6g}): the model does not separate anything to calibrate")

    x = (z - mu) / sd
    t = np.where(y == 1, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))
    X = np.stack([x, np.ones_like(x)], axis=1)

    def loss(theta: np.ndarray) -> float:
        s = X @ theta
        return float(np.mean(np.logaddexp(0.0, s) - t * s))

    theta = np.array([1.0, math.log((n_pos + 1.0) / (n_neg + 1.0))])
    current = loss(theta)
    converged = False
    for _ in range(max_iter):
        p = sigmoid(X @ theta)
        grad = X.T @ (p - t) / x.size
        w = p * (1.0 - p)
        hess = (X * w[:, None]).T @ X / x.size + 1e-12 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        scale = 1.0
        while True:
            candidate = theta - scale * step
            new = loss(candidate)
            if new <= current + 1e-12 or scale < 1e-8:
                break
            scale *= 0.5
        theta, current = candidate, new
        if float(np.max(np.abs(scale * step))) < tol:
            converged = True
            break
    if not converged or not np.all(np.isfinite(theta)):
        raise CalibrationError(f"Platt fit did not converge in {max_iter} iterations; "
                               "check for extreme logits or pass more data")

    a_std, b_std = float(theta[0]), float(theta[1])
    a = a_std / sd
    b = b_std - a_std * mu / sd
    if not a > 0:
        raise CalibrationError(
            f"fitted slope a={a:.4g} <= 0: higher logits mean *less* likely to fit on this data; "
            "check that label 1 marks the fitting tool and that the logits come from this model"
        )
    return Calibration(a=a, b=b)


def reliability_table(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15) -> list[dict[str, float | int]]:
    """Per-bin calibration table over equal-width probability bins.

    Args:
        probs: Predicted probabilities in [0, 1].
        labels: 0/1 outcomes, same length.
        n_bins: Number of equal-width bins over [0, 1].

    Returns:
        One dict per non-empty bin: ``lower``, ``upper``, ``count``, ``mean_probability``,
        ``positive_rate`` and ``gap`` (``|mean_probability - positive_rate|``), plain Python types.

    Raises:
        CalibrationError: mismatched lengths, empty input, probabilities outside [0, 1],
            non-binary labels, or ``n_bins < 1``.
    """
    if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 1:
        raise CalibrationError(f"n_bins must be an int >= 1, got {n_bins!r}")
    p, y = _as_binary_data(probs, labels, "probabilities")
    if np.any((p < 0) | (p > 1)):
        raise CalibrationError("probabilities must lie in [0, 1]; pass calibrated probabilities, not logits")
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    idx = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, n_bins - 1)
    rows: list[dict[str, float | int]] = []
    for i in range(n_bins):
        mask = idx == i
        count = int(mask.sum())
        if not count:
            continue
        mean_p = float(p[mask].mean())
        rate = float(y[mask].mean())
        rows.append({"lower": float(edges[i]), "upper": float(edges[i + 1]), "count": count,
                     "mean_probability": mean_p, "positive_rate": rate, "gap": abs(mean_p - rate)})
    return rows


def expected_calibration_error(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15) -> float:
    """Expected calibration error: count-weighted mean of per-bin ``|mean p - positive rate|``.

    Same arguments and errors as :func:`reliability_table`; returns a plain float in [0, 1].
    """
    rows = reliability_table(probs, labels, n_bins)
    total = sum(int(r["count"]) for r in rows)
    return float(sum(int(r["count"]) * float(r["gap"]) for r in rows) / total)
