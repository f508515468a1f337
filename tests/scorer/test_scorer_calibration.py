from __future__ import annotations

import json

import numpy as np
import pytest

from scorer.calibration import (
    Calibration,
    CalibrationError,
    expected_calibration_error,
    fit_platt,
    reliability_table,
    sigmoid,
)


def test_sigmoid_stable_and_bounded():
    z = np.array([-1e6, -800.0, -30.0, 0.0, 30.0, 800.0, 1e6, -np.inf, np.inf])
    p = sigmoid(z)
    assert np.all(np.isfinite(p))
    assert np.all((p >= 0) & (p <= 1))
    assert p[3] == 0.5 and p[0] == 0.0 and p[6] == 1.0
    np.testing.assert_allclose(sigmoid([-2.0, 2.0]), 1 / (1 + np.exp([2.0, -2.0])), rtol=1e-12)


def test_identity_default_and_round_trip():
    cal = Calibration()
    assert cal.is_identity
    np.testing.assert_allclose(cal.apply([0.0, 2.0]), sigmoid([0.0, 2.0]))
    fitted = Calibration(a=np.float32(1.5), b=-0.25)
    d = fitted.to_dict()
    assert json.loads(json.dumps(d)) == d and type(d["a"]) is float
    assert Calibration.from_dict(d) == fitted
    assert Calibration.from_dict(None) == Calibration()


def test_apply_monotone_and_in_range():
    cal = Calibration(a=0.7, b=-1.3)
    z = np.linspace(-50, 50, 1001)
    p = cal.apply(z)
    assert np.all((p >= 0) & (p <= 1))
    assert np.all(np.diff(p) >= 0)


@pytest.mark.parametrize("bad, match", [
    ({"kind": "isotonic"}, "unknown calibration kind"),
    ({"a": -1.0}, "slope a=-1.0 must be > 0"),
    ({"a": 0}, "must be > 0"),
    ({"a": float("nan")}, "finite number"),
    ({"b": "x"}, "finite number"),
    ({"a": 1, "c": 2}, "unknown calibration keys"),
])
def test_invalid_parameters(bad, match):
    with pytest.raises(CalibrationError, match=match):
        Calibration.from_dict(bad)


def test_fit_recovers_known_parameters():
    rng = np.random.default_rng(0)
    z = rng.normal(0.5, 2.0, 40_000)
    y = rng.random(z.size) < sigmoid(1.7 * z - 0.8)
    cal = fit_platt(z, y)
    assert cal.a == pytest.approx(1.7, rel=0.05)
    assert cal.b == pytest.approx(-0.8, abs=0.05)


def test_fit_on_separable_data_is_finite_and_monotone():
    z = np.array([-3.0, -2.0, -1.0, 1.0, 2.0, 3.0])
    y = np.array([0, 0, 0, 1, 1, 1])
    cal = fit_platt(z, y)
    assert np.isfinite(cal.a) and cal.a > 0
    p = cal.apply(z)
    assert p[0] < 0.5 < p[-1]


def test_ece_small_when_calibrated_large_when_not():
    rng = np.random.default_rng(1)
    p = rng.random(50_000)
    y = rng.random(p.size) < p
    assert expected_calibration_error(p, y) < 0.02
    overconfident = (p > 0.5).astype(float)  # says 0 or 1 where the truth is p
    assert expected_calibration_error(overconfident, y) > 0.2


def test_fitting_improves_ece_of_shifted_logits():
    rng = np.random.default_rng(2)
    z = rng.normal(0, 2, 20_000)
    y = rng.random(z.size) < sigmoid(0.5 * z + 1.0)
    before = expected_calibration_error(sigmoid(z), y)
    after = expected_calibration_error(fit_platt(z, y).apply(z), y)
    assert after < 0.02 < before


def test_reliability_table_rows():
    # bins are [lower, upper); the last one includes 1.0
    rows = reliability_table([0.05, 0.08, 0.95, 1.0], [0, 1, 1, 1], n_bins=10)
    assert [r["count"] for r in rows] == [2, 2]
    assert rows[0]["lower"] == 0.0 and rows[-1]["upper"] == 1.0
    assert rows[0]["positive_rate"] == 0.5 and rows[1]["mean_probability"] == pytest.approx(0.975)
    json.dumps(rows)  # plain types


@pytest.mark.parametrize("z, y, match", [
    ([0.1, 0.2, 0.3], [1, 1, 1], "all 3 labels are positive"),
    ([0.1, 0.2], [0, 0], "labels are negative"),
    ([1.0, 1.0, 1.0, 1.0], [0, 1, 0, 1], "all logits are equal"),
    ([1.0, 2.0], [0, 1, 1], "got 2 logits but 3 labels"),
    ([], [], "no data"),
    ([0.0, np.nan], [0, 1], "NaN or infinity"),
    ([0.0, 1.0], [0, 2], "labels must be 0 or 1"),
])
def test_degenerate_fits_are_rejected(z, y, match):
    with pytest.raises(CalibrationError, match=match):
        fit_platt(z, y)


def test_reversed_logits_are_rejected():
    z = np.array([-2.0, -1.0, 1.0, 2.0] * 10)
    y = np.array([1, 1, 0, 0] * 10)
    with pytest.raises(CalibrationError, match="a=.* <= 0"):
        fit_platt(z, y)


def test_reliability_rejects_logits():
    with pytest.raises(CalibrationError, match="pass calibrated probabilities"):
        expected_calibration_error([2.5, -1.0], [1, 0])
    with pytest.raises(CalibrationError, match="n_bins"):
        expected_calibration_error([0.5], [1], n_bins=0)
