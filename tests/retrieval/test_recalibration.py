"""A tenant's recalibration from feedback (retrieval/pipeline/recalibration.py), by hand."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.pipeline.recalibration import (UseRecalibration, beats_identity, fit_recalibration,
                                              fit_use_recalibration)


def _overconfident(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.6, 0.99, n)
    return p, (rng.uniform(size=n) < p - 0.4).astype(float)      # right 40 points less often than said


def _calibrated(n: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.05, 0.95, n)
    return p, (rng.uniform(size=n) < p).astype(float)


def test_a_strong_pull_keeps_the_identity_and_none_corrects_an_overconfident_tenant():
    p, y = _overconfident(400)
    a, b = fit_recalibration(p, y, pull=1e6)
    assert a == pytest.approx(1.0, abs=1e-3) and b == pytest.approx(0.0, abs=1e-3)
    fitted = UseRecalibration(*fit_recalibration(p, y, pull=0.0)).apply(p)
    assert abs(fitted.mean() - y.mean()) < 0.02                 # the mean probability now matches the rate
    assert abs(p.mean() - y.mean()) > 0.3


def test_the_fit_is_used_only_where_it_beats_the_identity_and_with_enough_observations():
    p, y = _overconfident(60)
    assert beats_identity(p, y)
    fitted = fit_use_recalibration(p, y)
    assert fitted is not None and fitted.observations == 60
    assert fitted.apply(p).mean() < p.mean() - 0.2               # the tenant's probabilities come down
    assert fit_use_recalibration(p[:20], y[:20]) is None         # under 25 observations: nothing
    cp, cy = _calibrated(200)
    assert fit_use_recalibration(cp, cy) is None                 # already calibrated: kept as it is
    with pytest.raises(ValueError, match="labels"):
        fit_use_recalibration(p, y[:-1])


def test_the_order_never_changes_and_invert_undoes_apply():
    r = UseRecalibration(0.4, -1.3)
    p = np.array([0.001, 0.2, 0.5, 0.84, 0.99])
    q = r.apply(p)
    assert np.all(np.diff(q) > 0) and np.all((q > 0) & (q < 1))
    np.testing.assert_allclose(r.invert(q), p, rtol=1e-6)
    with pytest.raises(ValueError):
        UseRecalibration(0.0, 1.0)                               # a flat (or reversed) map would lose the order
    with pytest.raises(ValueError):
        UseRecalibration(float("nan"), 0.0)


def test_extreme_maps_stay_finite_and_invertible():
    r = UseRecalibration(0.05, -20.0)                           # every probability mapped near 0
    p = np.array([0.3, 0.6, 0.9])
    q = r.apply(p)
    assert np.all(q > 0) and np.all(np.diff(q) > 0)
    np.testing.assert_allclose(r.invert(q), p, rtol=1e-6)
