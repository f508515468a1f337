"""The agent flow read against a blind judge (benchmarks/judged_flow.py): a no-fit request that proceeds with a
tool the judge accepts is not a wrong proceed, twins with no accepted tool are the judged no-fit ones, and the
first tool counts as right when labelled or accepted."""

import numpy as np

from benchmarks.judged_flow import judged_probabilities, judged_report


def _row(rid, answerable, best1, tools1, *, decision1="search_again", decision="choose", tools2=(), right1=False,
         mode="need"):
    return {"id": rid, "catalog": "api_bank", "mode": mode, "answerable": answerable, "best1": best1, "right1": right1,
            "decision1": decision1, "decision": decision, "tools1": [list(t) for t in tools1],
            "tools2": [list(t) for t in tools2]}


def test_judged_probabilities_follow_each_requests_numbering():
    items = [{"id": "a", "candidates": [{"server": "S", "tool": "x"}, {"server": "S", "tool": "y"}]},
             {"id": "b", "candidates": [{"server": "S", "tool": "x"}]}]
    answers = {"a": {"id": "a", "n": 2, "p": {"2": 0.9, "7": 1.0}},   # 7 is no candidate: dropped
               "b": {"id": "b", "n": 3, "p": {"1": 0.9}}}             # another count: the request is left out
    assert judged_probabilities(items, answers) == {"a": {("S", "x"): 0.0, ("S", "y"): 0.9}}


def test_proceeds_and_ece_read_against_the_judge():
    judged = {"q1": {("S", "x"): 0.9, ("S", "y"): 0.0},     # a look-alike fits: proceeding is right
              "q2": {("S", "x"): 0.1, ("S", "y"): 0.2},     # nothing fits: a wrong proceed
              "q3": {("S", "x"): 0.0},                      # nothing fits, no proceed
              "a1": {("S", "x"): 0.8, ("S", "z"): 1.0}}     # answerable: the first tool is not labelled but fits
    rows = [_row("q1:none", False, 0.9, [("S", "x")], decision1="proceed", decision="proceed"),
            _row("q2:none", False, 0.5, [("S", "y")], tools2=[("S", "x")], decision="proceed"),
            _row("q3:none", False, 0.2, [("S", "x")], decision="no_fit"),
            _row("a1", True, 0.7, [("S", "x"), ("S", "z")])]
    rep = judged_report(rows, judged, {"a1": [("S", "z")]})["api_bank"]["need"]
    assert rep["no_fit_judged"] == 3 and rep["nofit_proceed"] == 2 / 3
    assert rep["nofit_wrong_proceed"] == 1 / 3 and rep["nofit_proceed_fitting"] == 1 / 3
    assert rep["judged_no_fit"] == 2 and rep["judged_no_fit_proceed"] == 1 / 2 and rep["judged_no_fit_end_no_fit"] == 1 / 2
    assert rep["rank1_strict"] == 0.0 and rep["rank1_fits"] == 1.0 and rep["label_judged_fit"] == 1.0
    assert rep["ece_strict"] == 0.7 and abs(rep["ece_fits"] - 0.3) < 1e-9


def test_results_of_a_corpus_without_a_licence_keep_digests_that_still_line_up():
    from benchmarks.judged_flow import shippable_items
    from retrieval.evaluation.agent_flow import shippable_rows
    from retrieval.evaluation.corpora import shippable, shippable_tool

    assert shippable("api_bank") and shippable("mcpzero-org") and not shippable("ultratool")
    assert shippable_tool("api_bank", ("S", "x")) == ["S", "x"]
    digest = shippable_tool("ultratool", ("S", "x"))
    assert digest[0] == "sha1" and "x" not in digest[1] and digest == shippable_tool("ultratool", ["S", "x"])
    assert shippable_tool("ultratool", digest) == digest          # digesting twice changes nothing
    rows = [_row("u1:none", False, 0.9, [("S", "x")], decision1="proceed", decision="proceed")
            | {"catalog": "ultratool", "tail_labelled": [["S", "x"]], "tail_labelled_ranks": [40]}]
    items = [{"id": "u1", "catalog": "ultratool", "query": "secret text", "candidates": [{"server": "S", "tool": "x"}]}]
    rows, items = shippable_rows(rows), shippable_items(items)
    assert rows[0]["tools1"] == [digest] and items[0]["query"] is None and "secret" not in str(items)
    assert rows[0]["tail_labelled"] == [digest] and rows[0]["tail_labelled_ranks"] == [40]
    judged = judged_probabilities(items, {"u1": {"id": "u1", "n": 1, "p": {"1": 0.9}}})
    rep = judged_report(rows, judged, {})["ultratool"]["need"]
    assert rep["nofit_proceed"] == 1.0 and rep["nofit_wrong_proceed"] == 0.0   # the digests still match


def test_the_tail_is_read_against_labels_and_the_judge():
    from benchmarks.judged_flow import tail_report

    row = {"id": "a1", "catalog": "c", "mode": "need", "answerable": True, "tail_p": [0.1, 0.1, 0.1, 0.1],
           "tail_fit": [True, False, False, False], "tail_ids": [["S", "a"], ["S", "b"], ["S", "c"], ["S", "d"]]}
    rep = tail_report([row], {"a1": {("S", "a"): 0.0, ("S", "b"): 0.8, ("S", "c"): 0.2, ("S", "d"): 0.0}})["c"]
    assert rep["candidates"] == 4 and rep["labelled_n"] == 1 and rep["fits_n"] == 2
    assert abs(rep["ratio_labelled"] - 0.4) < 1e-9 and abs(rep["ratio_fits"] - 0.2) < 1e-9
    assert abs(rep["expected"] - 0.4) < 1e-9 and rep["p_fits"] > 0.05   # 2 fits where 0.4 are expected: not rare


def test_a_count_far_from_what_the_tail_expects_is_flagged():
    from benchmarks.judged_flow import poisson_p

    assert poisson_p(5, 5.0) > 0.9                       # as expected
    assert poisson_p(0, 10.0) < 0.001 and poisson_p(30, 5.0) < 1e-6   # too few, too many
    assert poisson_p(0, 0.2) == 1.0                      # nothing where almost nothing is expected
    assert poisson_p(0, 0.0) == 1.0 and poisson_p(1, 0.0) == 0.0


def test_tail_probabilities_re_read_as_the_pipeline_computes_them():
    import numpy as np

    from benchmarks.judged_flow import retail
    from retrieval.pipeline.confidence import TailCalibration

    tail = TailCalibration(a=-2.0, b=0.5, c=-1.0, d=0.3, e=0.4)
    row = {"id": "a", "tail_r": [0.2, 0.1, 0.05], "head_p": [0.9, 0.3], "n_eligible": 40, "tail_p": [0, 0, 0]}
    got = retail([row, {"id": "b"}], tail)
    want = tail.probabilities(np.array([0.2, 0.1, 0.05]), np.array([3, 4, 5]), 40, np.array([0.9, 0.3]))
    assert np.allclose(got[0]["tail_p"], want, atol=1e-6) and got[1] == {"id": "b"}
    assert row["tail_p"] == [0, 0, 0]                   # the rows read are not changed


def test_calibration_rows_read_a_judge_only_where_the_label_missed(tmp_path):
    import json

    from benchmarks.calibration_report import judged_rows

    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": "m1", "catalog": "api_bank", "query": "q",
                                 "candidates": [{"server": "S", "tool": "x"}, {"server": "S", "tool": "y"}]}) + "\n")
    answers = tmp_path / "j.jsonl"
    answers.write_text(json.dumps({"id": "m1", "n": 2, "p": {"1": 0.9}}) + "\n")
    base = {"catalog": "api_bank", "mode": "need", "answerable": True, "best1": 0.5}
    rows = [dict(base, id="m1", right1=False, tools1=[["S", "x"]]),     # missed, the judge accepts its first tool
            dict(base, id="m2", right1=False, tools1=[["S", "z"]]),     # missed, never judged: stays wrong
            dict(base, id="m3", right1=True, tools1=[["S", "q"]])]      # labelled right: stays right
    out, accepted = judged_rows(rows, items, [answers])
    assert [r["right1"] for r in out] == [True, False, True] and accepted == 1


def test_labelled_tools_further_down_are_read_against_the_judge():
    from benchmarks.judged_flow import labelled_tail_report

    rows = [{"id": "a", "catalog": "c", "mode": "need", "answerable": True,
             "tail_labelled": [["S", "x"], ["S", "y"], ["S", "z"]], "tail_labelled_ranks": [15, 30, 90]},
            {"id": "b", "catalog": "c", "mode": "request_only", "answerable": True,
             "tail_labelled": [["S", "w"]], "tail_labelled_ranks": [40]}]
    rep = labelled_tail_report(rows, {"a": {("S", "y"): 0.9, ("S", "z"): 0.1}}, past=20)["c"]
    assert {k: rep[k] for k in ("labelled", "read", "fit", "fit_share")} == {"labelled": 2, "read": 2, "fit": 1, "fit_share": 0.5}
    assert rep["expected"] == 0.0 and rep["p_at_least"] == 0.0   # no tail probabilities: one fit is impossible


def test_the_fits_expected_past_a_rank_sum_the_tail_from_that_rank():
    from benchmarks.judged_flow import labelled_tail_report

    row = {"id": "a", "catalog": "c", "mode": "need", "answerable": True, "head_p": [0.9, 0.1],
           "tail_p": [0.5, 0.25, 0.125, 0.125], "tail_labelled": [["S", "x"]], "tail_labelled_ranks": [5]}
    import numpy as np

    rep = labelled_tail_report([row], {"a": {("S", "x"): 1.0}}, past=3)["c"]   # ranks 4, 5, 6 are past 3
    assert rep["expected"] == 0.5 and rep["fit"] == 1
    assert abs(rep["p_at_least"] - (1 - np.exp(-0.5))) < 1e-9


def test_the_tail_report_counts_only_what_the_judge_read():
    from benchmarks.judged_flow import tail_report

    row = {"id": "a1", "catalog": "c", "mode": "need", "answerable": True, "tail_p": [0.1, 0.1],
           "tail_fit": [False, False], "tail_ids": [["S", "a"], ["S", "b"]]}
    rep = tail_report([row], {"a1": {("S", "a"): 0.9}})["c"]   # ("S", "b") was not read
    assert rep["candidates"] == 1 and rep["judged_n"] == 1 and abs(rep["expected"] - 0.1) < 1e-9
    assert abs(rep["loglik_judged"] - (np.log(0.1) - 0.1)) < 1e-9   # Poisson(1; 0.1)


def test_the_tail_commands_from_the_command_line(tmp_path, capsys):
    import json

    from benchmarks import judged_flow as jf
    from retrieval.pipeline.confidence import TailCalibration

    row = {"id": "a1", "catalog": "c", "mode": "need", "answerable": True, "head_p": [0.5] * 10, "n_eligible": 30,
           "tail_r": [0.1, 0.05], "tail_p": [0.2, 0.2], "tail_fit": [True, False], "tail_ids": [["S", "a"], ["S", "b"]],
           "tail_labelled": [["S", "a"], ["S", "z"]], "tail_labelled_ranks": [11, 40]}
    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps({"rows": [row]}))
    items, answers = tmp_path / "items.jsonl", tmp_path / "j.jsonl"
    items.write_text(json.dumps({"id": "a1", "catalog": "c", "query": "q", "candidates":
                                 [{"server": "S", "tool": "a"}, {"server": "S", "tool": "b"}, {"server": "S", "tool": "z"}]}) + "\n")
    answers.write_text(json.dumps({"id": "a1", "n": 3, "p": {"3": 0.8}}) + "\n")
    TailCalibration(a=-20.0, b=0.0, c=0.0, d=0.0).save(tmp_path / "tail.json")
    assert jf.main(["report-tail", "--flow", str(flow), "--items", str(items), "--judged", str(answers),
                    "--tail", str(tmp_path / "tail.json"), "--out", str(tmp_path / "t.json")]) == 0
    assert json.loads((tmp_path / "t.json").read_text())["report"]["c"]["expected"] < 1e-6   # re-read with the tail
    (tmp_path / "bad.json").write_text("{}")
    assert jf.main(["report-tail", "--flow", str(flow), "--items", str(items), "--judged", str(answers),
                    "--tail", str(tmp_path / "bad.json"), "--out", str(tmp_path / "t.json")]) == 2
    assert "malformed tail calibration" in capsys.readouterr().err
    assert jf.main(["report-labelled-tail", "--flow", str(flow), "--items", str(items), "--judged", str(answers),
                    "--out", str(tmp_path / "l.json")]) == 0
    rep = json.loads((tmp_path / "l.json").read_text())["report"]["c"]
    assert rep["labelled"] == 1 and rep["fit"] == 1 and abs(rep["expected"] - 0.0) < 1e-9   # rank 40: past 20


def test_two_sets_of_judges_agree_per_kind(tmp_path, capsys):
    import json

    from benchmarks import judged_flow as jf

    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"id": i, "catalog": c, "query": "q", "candidates": [
        {"server": "S", "tool": "a"}, {"server": "S", "tool": "b"}]}) + "\n" for i, c in (("r1", "x"), ("r2", "y"))))
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    one.write_text(json.dumps({"id": "r1", "n": 2, "p": {"1": 0.9}}) + "\n" + json.dumps({"id": "r2", "n": 2, "p": {}}) + "\n")
    two.write_text(json.dumps({"id": "r1", "n": 2, "p": {"1": 0.8}}) + "\n" + json.dumps({"id": "r2", "n": 2, "p": {"2": 0.7}}) + "\n")
    assert jf.main(["agree", "--items", str(items), "--first", str(one), "--second", str(two),
                    "--out", str(tmp_path / "a.json")]) == 0
    got = json.loads((tmp_path / "a.json").read_text())["agreement"]
    assert got["x"]["same_yes_no"] == 1.0 and got["y"]["same_yes_no"] == 0.5 and got["all"]["pairs"] == 4
    assert "| x | 1 | 2 |" in capsys.readouterr().out
