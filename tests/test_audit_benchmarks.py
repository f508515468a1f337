"""The audit benchmarks' pieces (benchmarks/audit_recalibration.py, audit_tail.py, audit_judge.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.audit_recalibration import cross_fitted, traffic
from benchmarks.audit_tail import audit_of, observed


def test_traffic_adds_the_no_fit_share_and_says_which_rows_are_answerable():
    rng = np.random.default_rng(0)
    p, y = np.full(80, 0.7), np.ones(80)
    same = traffic(p, y, None, 0.2, rng)
    assert same[0] is p and same[2].all()
    tp, ty, answerable = traffic(p, y, (np.full(5, 0.6), np.zeros(5)), 0.2, rng)
    assert len(tp) == 100 and answerable.sum() == 80 and ty[~answerable].sum() == 0 and (tp[~answerable] == 0.6).all()


def test_cross_fitting_reads_every_row_with_a_map_fitted_elsewhere_and_finds_a_level():
    rng = np.random.default_rng(1)
    p = rng.uniform(0.3, 0.9, 600)
    y = (rng.random(600) < np.clip(p + 0.2, 0, 1)).astype(float)   # the shipped numbers read 0.2 under
    q = cross_fitted(p, y, (1.0, 0.0), 100, 0.5, np.random.default_rng(2))
    assert q.shape == p.shape and abs(q.mean() - y.mean()) < abs(p.mean() - y.mean()) / 3


def test_an_audited_requests_tail_candidate_stands_for_its_tail():
    d = {"id": "r", "tail_p": [0.001] * 90, "pi": [0.02] * 90, "judged_at": [3, 40], "judged_ids": [["a", "x"], ["b", "y"]]}
    judged = {"r": {("a", "x"): 0.9}}
    seen = {audit_of(d, judged, np.random.default_rng(s)) for s in range(50)}
    assert seen == {(0.001, 90.0, True), (0.001, 90.0, False)}
    assert audit_of({**d, "judged_at": [], "judged_ids": []}, judged, np.random.default_rng(0)) is None
    assert observed(d, judged) == pytest.approx(50.0)   # one fit drawn at 2%: fifty


def test_the_audit_judge_reads_agreement_and_kappa(tmp_path):
    from benchmarks.audit_judge import read

    items = [{"id": f"a{i}", "row": f"r{i}", "catalog": "k", "best1": 0.6, "fits": i % 2 == 0} for i in range(10)]
    (tmp_path / "items.jsonl").write_text("\n".join(json.dumps(i) for i in items) + "\n")
    (tmp_path / "answers_01.jsonl").write_text("\n".join(
        json.dumps({"id": f"a{i}", "p_yes": 0.9 if i % 2 == 0 or i == 1 else 0.1}) for i in range(10)) + "\n")
    assert read(tmp_path, tmp_path / "out.json", 0) == 0
    row = json.loads((tmp_path / "out.json").read_text())["table"]["k"]
    assert row["n"] == 10 and row["agree"] == pytest.approx(0.9) and row["prompt_fits"] == pytest.approx(0.6)
    assert row["kappa"] == pytest.approx((0.9 - 0.5) / 0.5)
