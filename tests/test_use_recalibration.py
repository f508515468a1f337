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


def test_feedback_as_a_flow_following_agent_leaves_it():
    """A proceed's first tool is called and counted as a fit whether it fits or not; a search under the threshold
    has its fitting tool called (the label says whether it was the first); a no-fit request is observed only when
    it proceeds, and then as a fit."""
    rng = np.random.default_rng(0)
    p = np.array([0.95, 0.95, 0.4, 0.4])
    y = np.array([0.0, 1.0, 0.0, 1.0])           # the first proceed's first tool does not fit
    po, yo = ur.observed(p, y, np.array([0.9, 0.1]), 0.83, 0.3, rng, 400, np.arange(4))
    assert len(po) == 400
    assert np.all(yo[po >= 0.83] == 1.0)          # every proceed reads as a fit
    low = po < 0.83
    assert set(po[low]) == {0.4} and 0.3 < yo[low].mean() < 0.7   # under the threshold: the labels
    assert 0.1 not in set(po)                     # a no-fit request that does not proceed leaves nothing
    with pytest.raises(SystemExit):
        ur.main(["--biased", "1.5"])
