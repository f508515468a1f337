"""What the encoder and the cross-encoder train on comes from train servers only."""

from __future__ import annotations

import json

from retrieval.catalog.formats import load_default_catalog
from training.pairs import DATA_DIR, load_split


def _held_out_questions() -> set[str]:
    lines = (DATA_DIR / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    return {q["query"] for q in map(json.loads, lines) if q["split"] != "train"}


def test_encoder_pairs_come_from_train_servers_only():
    from training.train_encoder import training_pairs

    split = load_split()
    cat = load_default_catalog()
    server_of = {str(t.id): t.server for t in cat.tools}
    rows = training_pairs(seed=0)
    assert len(rows) > 1000
    assert {split[server_of[r["key"]]] for r in rows} == {"train"}
    # A held-out question's text may recur only as an example request written for that train
    # tool (one generic phrase does: "What's the current working directory?").
    tools, held_out = {str(t.id): t for t in cat.tools}, _held_out_questions()
    for r in rows:
        if r["anchor"].split("\n")[0] in held_out:
            assert r["anchor"] in tools[r["key"]].examples


def _teacher_file(tmp_path, rows):
    path = tmp_path / "lists.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_encoder_teacher_rows_pair_every_accepted_tool_with_a_rejected_look_alike(tmp_path):
    from retrieval.index.text import tool_passages
    from training.train_encoder import teacher_rows

    cat = load_default_catalog()
    train = [t for t in cat.tools if load_split()[t.server] == "train"][:6]
    card = {t.id: tool_passages(t, with_examples=False)[0] for t in train}

    def cand(t, p):
        return {"server": t.server, "tool": t.name, "p_yes": p}

    path = _teacher_file(tmp_path, [
        {"id": "a", "query": "two fit", "catalog": "mcp-zero",
         "candidates": [cand(train[0], 0.9), cand(train[1], 0.6), cand(train[2], 0.05), cand(train[3], 0.3)]},
        {"id": "b", "query": "none fits", "catalog": "mcp-zero", "candidates": [cand(train[4], 0.2), cand(train[5], 0.0)]},
        {"id": "c", "query": "no look-alike was rejected", "catalog": "mcp-zero",
         "candidates": [cand(train[4], 0.8), cand(train[5], 0.4)]},
    ])
    rows, stats, dev = teacher_rows([path], None, seed=0)
    assert dev == [] and stats["no_fit"] == 1 and stats["no_negative"] == 1
    assert sorted((r["anchor"], r["positive"]) for r in rows) == sorted(
        [("two fit", card[train[0].id]), ("two fit", card[train[1].id])])
    # the only candidate the judge rejected (0.05) is the hard negative; 0.3 is neither
    assert {r["negative"] for r in rows} == {card[train[2].id]}


def test_encoder_need_rows_keep_the_judges_cards_and_use_only_that_lists_blind_need():
    from retrieval.index.embedded import ToolIndex
    from training.train_encoder import teacher_need_rows

    rows = [{"anchor": "rename my playlist", "positive": "P1", "negative": "N1", "list": "ts1"},
            {"anchor": "book a table", "positive": "P2", "negative": "N2", "list": "ts2"},
            {"anchor": "no need written", "positive": "P3", "negative": "N3", "list": "ts3"}]
    needs = {"ts1": {"need": "rename a playlist and make it private", "need2": "update playlist name and visibility"},
             "ts2": {"need": "reserve a restaurant table"}, "ts3": {"need": ""}}
    out = teacher_need_rows(rows, needs, seed=0)
    assert len(out) == 4   # need alone and request + need, for the two lists that have a need
    by_pos = {}
    for r in out:
        by_pos.setdefault((r["positive"], r["negative"]), []).append(r["anchor"])
    assert set(by_pos) == {("P1", "N1"), ("P2", "N2")}   # the judge's cards travel with their need
    assert ToolIndex.query_text("rename my playlist", needs["ts1"]["need"]) in by_pos[("P1", "N1")]
    assert set(by_pos[("P1", "N1")]) & {needs["ts1"]["need"], needs["ts1"]["need2"]}
    assert sorted(by_pos[("P2", "N2")]) == sorted(["reserve a restaurant table",
                                                   ToolIndex.query_text("book a table", "reserve a restaurant table")])


def test_encoder_teacher_rows_refuse_held_out_servers(tmp_path):
    import pytest

    from training.train_encoder import teacher_rows

    cat = load_default_catalog()
    test_tool = next(t for t in cat.tools if load_split()[t.server] == "test")
    path = _teacher_file(tmp_path, [{"id": "x", "query": "q", "catalog": "mcp-zero",
                                     "candidates": [{"server": test_tool.server, "tool": test_tool.name, "p_yes": 1.0}]}])
    with pytest.raises(ValueError, match="dev/test servers"):
        teacher_rows([path], None)


def test_smithery_hold_out_is_a_fixed_share_of_servers():
    from training.train_encoder import held_out_smithery

    names = [f"server {i}" for i in range(2000)]
    held = [n for n in names if held_out_smithery(n, 15)]
    assert 0.12 < len(held) / len(names) < 0.18
    assert held == [n for n in names if held_out_smithery(n, 15)]   # by name, not by draw
    assert not any(held_out_smithery(n, 0) for n in names)
