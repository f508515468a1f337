"""benchmarks/use_recalibration.py: the per-tenant recalibration it simulates, by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import use_recalibration as ur


def test_a_strong_pull_keeps_the_identity_and_none_corrects_an_overconfident_tenant():
    rng = np.random.default_rng(0)
    p = rng.uniform(0.6, 0.99, 400)
    y = (rng.uniform(size=400) < p - 0.4).astype(float)          # right 40 points less often than said
    a, b = ur.fit_recalibration(p, y, lam=1e6)
    assert a == pytest.approx(1.0, abs=1e-3) and b == pytest.approx(0.0, abs=1e-3)
    fitted = ur.apply(p, ur.fit_recalibration(p, y, lam=0.0))
    assert abs(fitted.mean() - y.mean()) < 0.02                 # the mean probability now matches the rate
    assert abs(p.mean() - y.mean()) > 0.3


def test_the_script_prints_a_table_from_rows(tmp_path, capsys):
    rng = np.random.default_rng(1)
    rows = []
    for kind in ("a", "b"):
        for i in range(60):
            p = float(rng.uniform(0.3, 0.99))
            rows.append({"catalog": kind, "mode": "need", "answerable": True, "best1": p,
                         "right1": bool(rng.uniform() < p * 0.7)})
        rows += [{"catalog": kind, "mode": "need", "answerable": False, "best1": 0.9, "right1": False}]
    path = tmp_path / "rows.json"
    path.write_text(json.dumps({"rows": rows}))
    assert ur.main(["--fit", str(path), "--report", str(path), "--feedback", "20", "--repeats", "3",
                    "--json", str(tmp_path / "out.json")]) == 0
    out = capsys.readouterr().out
    assert "| a " in out and "| b " in out
    assert json.loads((tmp_path / "out.json").read_text())["report"]["20"]["a"]["n"] == 60


def test_unreadable_rows_are_a_clear_error(tmp_path):
    with pytest.raises(SystemExit) as exc:
        ur.main(["--fit", str(tmp_path / "missing.json")])
    assert exc.value.code == 2
