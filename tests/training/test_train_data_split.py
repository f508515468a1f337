"""What the encoder and the cross-encoder train on comes from train servers only."""

from __future__ import annotations

import json

from retrieval.catalog.formats import load_default_catalog
from retrieval.catalog.model import ToolId
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


def test_example_questions_are_train_tools_only_and_bounded_per_tool():
    from training.train import example_questions

    split = load_split()
    cat = load_default_catalog()
    qs = example_questions(cat, split, per_tool=2, seed=0)
    assert qs and {split[q["server"]] for q in qs} == {"train"}
    per_tool: dict[ToolId, int] = {}
    for q in qs:
        tid = ToolId(q["server"], q["tool"])
        assert q["query"] in cat[tid].examples  # an example written for that very tool
        per_tool[tid] = per_tool.get(tid, 0) + 1
    assert max(per_tool.values()) == 2
    assert example_questions(cat, split, per_tool=0, seed=0) == []
