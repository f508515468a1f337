"""Blind needs (merge, leak check) and the decision-zone chooser."""

from __future__ import annotations

import json

from training.needs import leaks, merge
from training.thresholds import choose_zones, zone_table


def test_leak_check_flags_a_tool_identifier_the_request_does_not_have():
    assert leaks("show me the shards of index logs", "call get_shard_allocation for logs", "get_shard_allocation")
    assert not leaks("run get_shard_allocation on logs", "call get_shard_allocation for logs", "get_shard_allocation")
    assert not leaks("show me the shards", "inspect shard placement of an index", "get_shard_allocation")


def test_merge_keeps_voices_and_refuses_unknown_ids(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "in" / "a.tsv").write_text("q1\tterse\tlist my repos\nq2\tplain\tpost hi\n")
    (tmp_path / "out" / "a.jsonl").write_text(json.dumps({"id": "q1", "need": " list  repositories ", "need2": "x y"})
                                               + "\n" + json.dumps({"id": "zz", "need": "n"}) + "\nnot json\n")
    stats = merge(tmp_path / "in", tmp_path / "out", tmp_path / "needs.jsonl")
    assert stats == {"read": 3, "bad_json": 1, "unknown_id": 1, "empty": 0, "kept": 1}
    row = json.loads((tmp_path / "needs.jsonl").read_text())
    assert row == {"id": "q1", "voice": "terse", "need": "list repositories", "need2": "x y"}


def _row(kind, answerable, best1, best2, right1=True, right2=True):
    return {"catalog": kind, "mode": "need", "answerable": answerable, "best1": best1, "best2": best2,
            "right1": right1 and answerable, "right2": right2 and answerable, "decision1": "", "decision": "",
            "right_final": False, "empty": False}


def test_zones_keep_right_answers_and_stop_no_fit_requests():
    rows = [_row("a", True, 0.9, 0.9), _row("a", True, 0.5, 0.6), _row("a", True, 0.2, 0.3),
            _row("a", False, 0.1, 0.04, False, False), _row("a", False, 0.12, 0.02, False, False),
            _row("b", True, 0.7, 0.8), _row("b", False, 0.1, 0.03, False, False)]
    chosen = choose_zones(zone_table(rows))
    assert chosen["right_first_end_empty_worst"] <= 0.01
    assert chosen["nofit_proceed_worst"] <= 0.10
    assert chosen["no_fit_below"] <= 0.3 and chosen["nofit_no_fit"] == 1.0
    # a no-fit request whose first search was sure enough (0.6) keeps that answer (choose) under any floor
    # that keeps the right answers: the replay follows decision.keep_first_answer
    sure = choose_zones(zone_table(rows + [_row("a", False, 0.6, 0.02, False, False)]))
    assert sure["right_first_end_empty_worst"] <= 0.01 and sure["nofit_no_fit"] < 1.0


def test_a_twin_proceeding_with_a_tool_the_judge_accepts_is_no_wrong_proceed():
    """Read against a blind judge, the no-fit twins that proceed with a look-alike that fits do not hold the
    threshold up (an unjudged proceed still counts as wrong)."""
    ans = [dict(_row("a", True, 0.8, 0.8), id=f"q{i}", tools1=[["S", "x"]], tools2=[["S", "x"]]) for i in range(4)]
    twins = [dict(_row("a", False, 0.8, 0.8, False, False), id=f"q{i}:none", tools1=[["S", "y"]], tools2=[["S", "y"]])
             for i in range(4)]
    strict = choose_zones(zone_table(ans + twins, proceeds=[0.7, 0.85], floors=[0.25]))
    assert strict["proceed_threshold"] == 0.85          # every twin would proceed at 0.7
    fits = lambda row, tool: row["id"] != "q0:none"     # noqa: E731 - the judge accepts three twins' tools
    table = zone_table(ans + twins, proceeds=[0.7, 0.85], floors=[0.25], fits=fits)
    at_07 = next(r for r in table if r["proceed_threshold"] == 0.7)
    assert at_07["nofit_proceed"] == 0.25               # only the one the judge rejects is a wrong proceed
    unjudged = zone_table(ans + twins, proceeds=[0.7], floors=[0.25], fits=lambda row, tool: None)
    assert unjudged[0]["nofit_proceed"] == 1.0
