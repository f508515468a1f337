"""training/refresh_lists.py: unjudged candidates, judge batches, merging, two judges' agreement."""

from __future__ import annotations

import json

import pytest

from retrieval.catalog.model import Catalog, Tool
from training.refresh_lists import agreement, batch_text, main, merge, unjudged


def test_unjudged_keeps_retrieval_order_and_each_tool_once():
    row = {"id": "r", "query": "q", "candidates": [{"server": "A", "tool": "a", "p_yes": 1.0}]}
    got = unjudged(row, [[("A", "a"), ("B", "b")], [("C", "c"), ("B", "b")]])
    assert got == [("B", "b"), ("C", "c")]


def test_batch_text_numbers_each_candidate_with_its_card():
    catalog = Catalog([Tool("Git", "git_commit", "Record   changes to the repository",
                            {"type": "object", "properties": {"message": {}, "repo_path": {}}}, "")], {"Git": ""})
    text = batch_text([{"id": "r1", "query": "commit the staged files",
                        "candidates": [{"server": "Git", "tool": "git_commit"}]}], catalog)
    assert text == ("Request r1: commit the staged files\n"
                    "  1. Git / git_commit — Record changes to the repository [message, repo_path]\n")


def test_merge_appends_only_new_candidates():
    lists = [{"id": "r", "query": "q", "catalog": "mcp-zero", "candidates": [{"server": "A", "tool": "a", "p_yes": 1.0}]},
             {"id": "s", "query": "q2", "catalog": "mcp-zero", "candidates": []}]
    judged = [{"id": "r", "candidates": [{"server": "A", "tool": "a", "p_yes": 0.0},
                                         {"server": "B", "tool": "b", "p_yes": 0.9}]}]
    out, added = merge(lists, judged)
    assert added == 1
    assert out[0]["candidates"] == [{"server": "A", "tool": "a", "p_yes": 1.0}, {"server": "B", "tool": "b", "p_yes": 0.9}]
    assert out[1] == lists[1]


def test_agreement_by_hand():
    first = [{"id": "1", "n": 2, "p": {"1": 0.9}}, {"id": "2", "n": 2, "p": {}}, {"id": "3", "n": 5, "p": {}}]
    second = [{"id": "1", "n": 2, "p": {"1": 0.8, "2": 0.6}}, {"id": "2", "n": 2, "p": {}}, {"id": "3", "n": 4, "p": {}}]
    got = agreement(first, second)
    assert got["requests"] == 2 and got["pairs"] == 4          # request 3: different lengths, left out
    assert got["same_yes_no"] == pytest.approx(0.75)
    # yes rates 1/4 and 2/4: chance agreement 0.25*0.5 + 0.75*0.5 = 0.5, kappa (0.75-0.5)/0.5
    assert got["kappa"] == pytest.approx(0.5)
    with pytest.raises(ValueError):
        agreement(first, [{"id": "9", "n": 1, "p": {}}])


def test_cli_errors_are_clear(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["merge", "--lists", str(tmp_path / "missing.jsonl"), "--refresh", str(tmp_path / "x.jsonl"),
              "--out", str(tmp_path / "o.jsonl")])
    assert exc.value.code == 2 and "missing.jsonl" in capsys.readouterr().err
    (tmp_path / "a.jsonl").write_text(json.dumps({"id": "1", "n": 1, "p": {"1": 1.0}}) + "\n")
    (tmp_path / "b.jsonl").write_text(json.dumps({"id": "1", "n": 1, "p": {}}) + "\n")
    assert main(["agree", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]) == 0
    assert json.loads(capsys.readouterr().out)["same_yes_no"] == 0.0
