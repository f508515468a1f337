"""The tail's fit (training/tail.py): the labels give its shape, a blind judge its level."""

import json

import numpy as np
import pytest

from retrieval.pipeline.confidence import TailCalibration
from training import tail as tl


def _row(i, n_tail=20, fit_at=None, judged=True):
    return {"id": f"q{i}", "catalog": "k", "mode": "need", "answerable": True, "n_eligible": 50,
            "head_p": [0.6] + [0.05] * 9, "tail_r": list(np.linspace(0.2, 0.01, n_tail)),
            "tail_fit": [j == fit_at for j in range(n_tail)],
            "tail_ids": [["S", f"t{i}_{j}"] for j in range(10)]}


def test_the_level_moves_until_the_judged_candidates_expect_the_judged_fits():
    x = np.column_stack([np.zeros(500), np.log(np.arange(11, 511)), np.full(500, np.log(50)), np.zeros(500)])
    tail = TailCalibration(a=-1.0, b=0.0, c=-0.5, d=0.2)
    y = np.zeros(500)
    y[:3] = 1
    moved = tl.level_to_judged(tail, x, y, "judge")
    p = 1 / (1 + np.exp(-(moved.a + x @ np.array([moved.b, moved.c, moved.d, moved.e]))))
    assert abs(p.sum() - 3.0) < 1e-6
    assert (moved.b, moved.c, moved.d, moved.e) == (tail.b, tail.c, tail.d, tail.e)   # the shape is kept
    assert "3 fits the judge accepted" in moved.fitted_on
    none = tl.level_to_judged(tail, x, np.zeros(500))
    p0 = 1 / (1 + np.exp(-(none.a + x @ np.array([none.b, none.c, none.d, none.e]))))
    assert abs(p0.sum() - 0.5) < 1e-6                   # a judge that accepted none: half a fit, not zero


def test_only_the_candidates_the_judge_read_count():
    rows = [_row(0), dict(_row(1), mode="request_only"), dict(_row(2), answerable=False)]
    judged = {"q0": {("S", "t0_0"): 0.9, ("S", "t0_1"): 0.1, ("S", "t0_2"): 0.0}}
    x, y = tl.judged_candidates(rows, judged)
    assert x.shape == (3, 4) and y.tolist() == [1.0, 0.0, 0.0]   # three read, of one need-mode answerable row
    assert np.allclose(x[:, 1], np.log([11, 12, 13]))               # their ranks past the head
    with pytest.raises(ValueError, match="no judged tail candidates"):
        tl.judged_candidates(rows, {})


def test_the_cli_levels_the_label_fit_with_the_judge(tmp_path, capsys):
    rng = np.random.default_rng(0)
    rows = [_row(i, fit_at=int(rng.integers(0, 3)) if i % 3 == 0 else None) for i in range(60)]
    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps({"set": "fit", "rows": rows}))
    items = tmp_path / "items.jsonl"
    answers = tmp_path / "judged_01.jsonl"
    items.write_text("".join(json.dumps({"id": r["id"], "catalog": "k", "query": "q", "candidates":
                                         [{"server": s, "tool": t} for s, t in r["tail_ids"]]}) + "\n" for r in rows))
    answers.write_text("".join(json.dumps({"id": r["id"], "n": 10, "p": {"1": 0.9} if i == 0 else {}}) + "\n"
                               for i, r in enumerate(rows)))
    assert tl.main([str(flow), "--out", str(tmp_path / "labels.json")]) == 0
    assert tl.main([str(flow), "--out", str(tmp_path / "judged.json"), "--judged-items", str(items),
                    "--judged", str(answers)]) == 0
    labels, judged = TailCalibration.load(tmp_path / "labels.json"), TailCalibration.load(tmp_path / "judged.json")
    assert judged.a < labels.a and judged.c == labels.c     # 1 judged fit in 600 against 20 labelled in 1,200
    assert "600 judged candidates" in judged.fitted_on
    assert tl.main([str(flow), "--out", str(tmp_path / "x.json"), "--judged-items", str(items)]) == 2
    assert "go together" in capsys.readouterr().err


def test_a_judge_that_accepted_every_candidate_still_sets_a_level():
    x = np.column_stack([np.zeros(4), np.log([11, 12, 13, 14]), np.zeros(4), np.zeros(4)])
    tail = TailCalibration(a=-8.0, b=0.0, c=-1.0, d=0.0)
    moved = tl.level_to_judged(tail, x, np.ones(4))
    p = 1 / (1 + np.exp(-(moved.a + x @ np.array([moved.b, moved.c, moved.d, moved.e]))))
    assert abs(p.sum() - 3.5) < 1e-6                  # all but half a candidate: below 1, not a failed search
    with pytest.raises(ValueError, match="too few"):
        tl.level_to_judged(tail, x[:1], np.ones(1))


def test_the_loko_comparison_and_its_errors(tmp_path, capsys):
    rows = [dict(_row(i, fit_at=i % 2 if i % 3 == 0 else None), catalog="ab"[i % 2]) for i in range(80)]
    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps({"set": "fit", "rows": rows}))
    items, answers = tmp_path / "items.jsonl", tmp_path / "judged_01.jsonl"
    items.write_text("".join(json.dumps({"id": r["id"], "catalog": r["catalog"], "query": "q", "candidates":
                                         [{"server": s, "tool": t} for s, t in r["tail_ids"]]}) + "\n" for r in rows))
    answers.write_text("".join(json.dumps({"id": r["id"], "n": 10, "p": {"1": 0.9} if i in (0, 1) else {}}) + "\n"
                               for i, r in enumerate(rows)))
    table = tl.leave_one_kind_out(rows, __import__("retrieval.evaluation.judged", fromlist=["x"]).read_judged(items, [answers]))
    assert set(table) == set(tl.VARIANTS) and set(table["labels"]) == {"a", "b", "total"}
    assert table["labels+judged level"]["a"]["judged"] == 1 and table["labels"]["total"]["loglik"] < 0
    assert tl.main([str(flow), "--loko", "--judged-items", str(items), "--judged", str(answers)]) == 0
    assert "| labels+judged level |" in capsys.readouterr().out
    assert tl.main([str(flow), "--loko"]) == 2 and "reads the judge" in capsys.readouterr().err
    assert tl.main([str(flow)]) == 2 and "give --out" in capsys.readouterr().err
    assert tl.main([str(tmp_path / "missing.json"), "--out", str(tmp_path / "t.json")]) == 2


def _design(n_req=60, kinds="ab", fit_every=6, pi=0.25, seed=0):
    """A tail sample's design: every request's 90 candidates past the head, a quarter judged, a fit at rank
    11 of every ``fit_every``-th request where it was judged."""
    rng = np.random.default_rng(seed)
    reqs, answers = [], {}
    for i in range(n_req):
        at = sorted({0, *rng.choice(np.arange(1, 90), size=20, replace=False).tolist()})
        reqs.append({"id": f"q{i}", "catalog": kinds[i % len(kinds)], "n_eligible": 120,
                     "head_p": [0.6] + [0.05] * 9, "tail_p": [0.001] * 90,
                     "tail_r": list(np.linspace(0.2, 0.01, 90)), "pi": [1.0] + [pi] * 89, "judged_at": at,
                     "judged_ids": [["S", f"q{i}_{j}"] for j in at], "labelled_at": []})
        answers[f"q{i}"] = {("S", f"q{i}_{j}"): (0.9 if j == 0 and i % fit_every == 0 else 0.0) for j in at}
    return {"set": "fit", "requests": reqs}, answers


def test_a_judged_sample_sets_the_tail_over_ranks_11_to_100():
    design, judged = _design()
    sample = tl.sampled_candidates(design, judged)
    assert sample["x"].shape == (60 * 90, 4) and sample["read"].sum() == 60 * 21
    assert tl.sampled_fits(sample) == pytest.approx(10)          # ten fits, each judged surely (pi 1)
    design["requests"][0]["pi"][5] = 0.25
    tail = TailCalibration(a=-3.0, b=0.0, c=-1.0, d=0.0, e=0.5)
    moved = tl.level_to_sampled(tail, sample, "fit")
    assert float(np.sum(tl.tail_p(moved, sample["x"]))) == pytest.approx(10, abs=1e-6)
    assert moved.c == tail.c and "expect the 10.0 fits" in moved.fitted_on
    fitted = tl.fit_sampled(sample, "fit")
    assert fitted.c < 0                                          # the fits sit at rank 11: the rank matters
    p = tl.tail_p(fitted, sample["x"])
    assert float(np.sum(p)) == pytest.approx(10, rel=0.2)        # weighted by 1/pi: the whole tail's level
    assert tl.sampled_loss(moved, sample) > 0
    with pytest.raises(ValueError, match="no judgment"):
        tl.sampled_candidates(design, {})
    none = {k: {t: 0.0 for t in v} for k, v in judged.items()}
    with pytest.raises(ValueError, match="too few"):
        tl.fit_sampled(tl.sampled_candidates(design, none))


def test_the_cli_fits_and_compares_on_a_sample(tmp_path, capsys):
    rows = [dict(_row(i, fit_at=i % 2 if i % 3 == 0 else None), catalog="ab"[i % 2]) for i in range(80)]
    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps({"set": "fit", "rows": rows}))
    design, judged = _design(fit_every=3)
    folder = tmp_path / "sample"
    folder.mkdir()
    (folder / "design.json").write_text(json.dumps(design))
    (folder / "items.jsonl").write_text("".join(json.dumps({"id": r["id"], "catalog": r["catalog"], "query": "x",
                                                            "candidates": [{"server": s, "tool": t} for s, t in r["judged_ids"]]}) + "\n"
                                                for r in design["requests"]))
    answers = folder / "judged_01.jsonl"
    answers.write_text("".join(json.dumps({"id": r["id"], "n": len(r["judged_ids"]),
                                           "p": {str(k + 1): judged[r["id"]][tuple(t)] for k, t in enumerate(r["judged_ids"])
                                                 if judged[r["id"]][tuple(t)]}}) + "\n" for r in design["requests"]))
    assert tl.main([str(flow), "--loko", "--sample", str(folder), "--sample-judged", str(answers)]) == 0
    out = capsys.readouterr().out
    assert "| labels+sampled level |" in out and "| sampled fit |" in out and "labels+judged level" not in out
    assert tl.main([str(flow), "--out", str(tmp_path / "t.json"), "--sample", str(folder),
                    "--sample-judged", str(answers)]) == 0
    assert "expect the 20.0 fits" in TailCalibration.load(tmp_path / "t.json").fitted_on
    assert tl.main([str(flow), "--out", str(tmp_path / "t.json"), "--sample", str(folder)]) == 2
    assert "go together" in capsys.readouterr().err
    table = tl.leave_one_kind_out_sampled(rows, None, tl.sampled_candidates(*_design(fit_every=6)))
    assert "error" in table["sampled fit"]["a"] and table["sampled fit"]["total"]["loss"] is None   # b has no fit
    design["set"] = "report"
    (folder / "design.json").write_text(json.dumps(design))
    assert tl.main([str(flow), "--out", str(tmp_path / "t.json"), "--sample", str(folder),
                    "--sample-judged", str(answers)]) == 2
    assert "fit on the 'fit' set only" in capsys.readouterr().err
