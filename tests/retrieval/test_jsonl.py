"""retrieval/jsonl.py: JSON Lines that survive any text."""

from __future__ import annotations

import json

import pytest

from retrieval.jsonl import dumps_line, read_jsonl, round_trips, split_lines, write_jsonl

NASTY = {"text": "a\u2028b\u2029c\u0085d\ne\rf\x1cg\x1dh\x1ei\x0bj\x0ck", "schema": {"k\u2028": [1, 2.5, None, True]}}


def test_a_record_is_one_line_whatever_its_text():
    line = dumps_line(NASTY)
    assert line.splitlines() == [line]            # no character str.splitlines() breaks on
    assert json.loads(line) == NASTY


def test_files_round_trip_and_old_files_read(tmp_path):
    path = tmp_path / "rows.jsonl"
    write_jsonl(path, [NASTY, {"n": 2}])
    assert [r for _, r in read_jsonl(path)] == [NASTY, {"n": 2}]
    old = tmp_path / "old.jsonl"   # written by json.dumps(ensure_ascii=False): raw U+2028 inside strings
    old.write_text(json.dumps(NASTY, ensure_ascii=False) + "\r\n\n" + json.dumps({"n": 2}) + "\n", encoding="utf-8")
    assert read_jsonl(old) == [(1, NASTY), (3, {"n": 2})]


def test_split_lines_is_a_drop_in_for_splitlines_on_plain_files():
    text = "a\nb\r\n\nc"
    assert split_lines(text) == text.splitlines() == ["a", "b", "", "c"]
    assert split_lines("x\u2028y\n") == ["x\u2028y"]


def test_what_is_not_json_is_refused():
    with pytest.raises(ValueError):
        dumps_line({"x": float("nan")})
    assert not round_trips({"x": float("inf")})
    assert not round_trips({"x": "lone \ud800"})
    assert round_trips(NASTY)


def test_bad_lines_name_the_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n{"a": \n', encoding="utf-8")
    with pytest.raises(ValueError, match="bad.jsonl, line 2: invalid JSON"):
        read_jsonl(path)
    path.write_text("[" * 100_000 + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 1: JSON nested too deeply"):
        read_jsonl(path)


def test_queries_files_read_the_same_way(tmp_path):
    from retrieval.evaluation.harness import load_queries

    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"id": "1", "query": "find\u2028it", "server": "S", "tool": "t"}, ensure_ascii=False)
                    + "\n", encoding="utf-8")
    assert [q.query for q in load_queries(path)] == ["find\u2028it"]
