"""The day-one catalog calibration (issue 34): fitted on the fit catalogs' first searches, chosen by leaving one
catalog kind out, shipped only when it beats the identity, served monotone within a search, and read by the
zone replay."""

import json

import numpy as np
import pytest

from retrieval.pipeline.confidence import CatalogCalibration
from training import catalog_calibration as cc


def _rows(kind, n, shift, n_eligible, seed):
    """First searches whose best probability reads ``shift`` (in logits) under the truth."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.5, 1.5, n)
    p_true = 1 / (1 + np.exp(-z))
    y = rng.random(n) < p_true
    best = 1 / (1 + np.exp(-(z - shift)))
    return [{"catalog": kind, "mode": "need", "answerable": True, "best1": float(b), "right1": bool(t),
             "n_eligible": n_eligible} for b, t in zip(best, y)]


def test_an_under_confident_day_one_is_carried_and_written(tmp_path):
    rows = [r for i, k in enumerate("abcd") for r in _rows(k, 400, 1.0, 50 + 40 * i, i)]
    flow = tmp_path / "fit.json"
    flow.write_text(json.dumps({"set": "fit", "rows": rows + [{**rows[0], "answerable": False}]}))
    out = tmp_path / "catalog_calibration.json"
    assert cc.main([str(flow), "--out", str(out), "--json", str(tmp_path / "t.json")]) == 0
    cal = CatalogCalibration.load(out)
    table = json.loads((tmp_path / "t.json").read_text())["table"]
    assert table["platt"]["mean"] < table["identity"]["mean"] - 0.03   # one logit under: clearly carried
    assert cal.apply([0.5], 100)[0] > 0.6 and "leave-one-kind-out" in cal.fitted_on


def test_nothing_is_written_when_the_probabilities_already_match(tmp_path):
    rows = [r for i, k in enumerate("abcd") for r in _rows(k, 400, 0.0, 100, 10 + i)]
    flow = tmp_path / "fit.json"
    flow.write_text(json.dumps({"set": "fit", "rows": rows}))
    out = tmp_path / "catalog_calibration.json"
    out.write_text("{}")   # an earlier one is removed: the pipeline serves the confidence model as it is
    assert cc.main([str(flow), "--out", str(out)]) == 0
    assert not out.exists()


def test_the_report_set_is_refused(tmp_path):
    flow = tmp_path / "report.json"
    flow.write_text(json.dumps({"set": "report", "rows": []}))
    assert cc.main([str(flow), "--out", str(tmp_path / "x.json")]) == 2


def test_monotone_within_a_search_and_validated(tmp_path):
    cal = CatalogCalibration(1.4, 0.3, -0.1)
    p = np.array([0.9, 0.6, 0.3, 0.01])
    q = cal.apply(p, 120)
    assert np.all(np.diff(q) < 0)
    cal.save(tmp_path / "c.json")
    assert CatalogCalibration.load(tmp_path / "c.json") == cal
    with pytest.raises(ValueError):
        CatalogCalibration(-1.0, 0.0)
    (tmp_path / "bad.json").write_text('{"a": "x"}')
    with pytest.raises(ValueError, match="malformed"):
        CatalogCalibration.load(tmp_path / "bad.json")


def test_the_zone_replay_reads_carried_probabilities(tmp_path):
    from training.thresholds import carry_rows
    path = tmp_path / "c.json"
    CatalogCalibration(1.0, 1.0).save(path)
    [r] = carry_rows([{"best1": 0.5, "best2": 0.5, "n_eligible": 30}], path)
    assert r["best1"] == pytest.approx(1 / (1 + np.exp(-1.0))) and r["best2"] == r["best1"]
