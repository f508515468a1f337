"""benchmarks/use_recalibration.py: the simulation prints its table (the recalibration itself:
tests/retrieval/test_recalibration.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import use_recalibration as ur


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


def test_every_probability_threshold_of_a_policy_moves_with_a_map():
    import dataclasses

    from retrieval.pipeline.decision import Policy
    from retrieval.pipeline.recalibration import THRESHOLDS, UseRecalibration

    floats = {f.name for f in dataclasses.fields(Policy) if f.type in (float, "float")}
    assert floats == set(THRESHOLDS)          # a new probability threshold must be moved too
    moved = UseRecalibration(1.0, 1.0).policy(Policy())
    assert all(getattr(moved, n) > getattr(Policy(), n) for n in THRESHOLDS)


def test_the_wide_reading_refuses_a_mode_it_has_no_rows_for(capsys):
    import pytest

    from benchmarks.use_recalibration import main

    with pytest.raises(SystemExit):
        main(["--wide", "--mode", "late_need", "--feedback", "25", "--repeats", "1"])
    assert "--wide reads the need and request_only modes" in capsys.readouterr().err
