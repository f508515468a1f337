"""training.pairs: the data hash that stamps what a run trained on."""

from __future__ import annotations

from training.pairs import data_hash


def test_data_hash_follows_file_contents(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"id": "q1"}\n')
    b.write_text('{"qid": "q1"}\n')
    before = data_hash(a, b)
    assert len(before) == 16 and before == data_hash(a, b)
    b.write_text('{"qid": "q2"}\n')
    assert data_hash(a, b) != before
    b.write_text('{"qid": "q1"}\n')
    assert data_hash(a, b) == before
