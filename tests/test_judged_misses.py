"""The judged-misses diagnostic's arithmetic (benchmarks/judged_misses.py): each answer is read against the
shuffled candidates it was given, and the four cells and the rank-1 estimate follow."""

import json

from benchmarks.judged_misses import judged_view, main


def _row(rid, cands, first, target, lenient=()):
    t = lambda s: {"server": s.split("/")[0], "tool": s.split("/")[1]}   # noqa: E731
    return {"id": rid, "query": "q", "style": "goal", "candidates": [t(c) for c in cands], "first": t(first),
            "target": t(target), "lenient": [t(x) for x in lenient], "target_rank": 2}


def test_cells_follow_the_candidates_numbering():
    rows = [_row("a", ["S/x", "S/y", "T/z"], "S/x", "S/y"),        # the first fits too (a tie)
            _row("b", ["S/y", "S/x"], "S/x", "S/y"),                # a real miss
            _row("c", ["S/x", "S/y"], "S/x", "S/y", ["T/w"]),       # n differs from the answer: skipped
            _row("d", ["S/x", "S/y"], "S/x", "S/q", ["S/y"])]       # the label judged no, an acceptable one yes
    answers = {"a": {"id": "a", "n": 3, "p": {"1": 0.9, "2": 0.95}},
               "b": {"id": "b", "n": 2, "p": {"1": 1.0, "2": 0.1}},
               "c": {"id": "c", "n": 3, "p": {}},
               "d": {"id": "d", "n": 2, "p": {"2": 0.8}}}
    v = judged_view(rows, answers)
    assert v["requests"] == 3
    assert v["cells"] == {"first fits, label fits": 1, "first fits, label does not": 0,
                          "first does not, label fits": 2, "neither": 0}
    assert v["first_judged_fit"] == 1 / 3 and v["label_judged_fit"] == 2 / 3   # "d"'s labelled tool itself is judged no


def test_report_estimates_rank_one(tmp_path, capsys):
    rows = [_row("a", ["S/x", "S/y"], "S/x", "S/y"), _row("b", ["S/x", "S/y"], "S/x", "S/y")]
    misses = tmp_path / "m.jsonl"
    misses.write_text("".join(json.dumps(r) + "\n" for r in rows))
    judged = tmp_path / "j.jsonl"
    judged.write_text(json.dumps({"id": "a", "n": 2, "p": {"1": 0.9, "2": 0.9}}) + "\n"
                      + json.dumps({"id": "b", "n": 2, "p": {"2": 0.9}}) + "\n")
    out = tmp_path / "r.json"
    assert main(["report", "--misses", str(misses), "--judged", str(judged), "--total", "10", "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["rank1_strict"] == 0.8 and abs(got["rank1_judged"] - 0.9) < 1e-9
    assert "judge accepts 90.0%" in capsys.readouterr().out


def test_numbers_outside_the_list_are_dropped():
    rows = [_row("a", ["S/x", "S/y"], "S/x", "S/y")]
    v = judged_view(rows, {"a": {"id": "a", "n": 2, "p": {"0": 0.9, "3": 0.9, "2": 0.8}}})
    assert v["cells"]["first does not, label fits"] == 1   # "0" is not the last candidate, "3" not an error
