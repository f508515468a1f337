"""Training pairs: train-split only, one positive per question, judged labels kept, mined negatives."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from fakes import HashEncoder  # tests/ is on sys.path (tests/conftest.py)
from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import Catalog, Tool, ToolId
from retrieval.index.embedded import ToolIndex
from training.pairs import Pair, PairConfig, build_pairs, data_hash

SPLIT = {"Elasticsearch": "train", "GitHub": "train", "Slack": "train", "Weather": "dev"}
TRAIN = {s for s, sp in SPLIT.items() if sp == "train"}

QUESTIONS = [
    {"id": "q1", "query": "shard allocation status of an index", "need": "get shard status",
     "server": "Elasticsearch", "tool": "get_shards"},
    {"id": "q2", "query": "open a new issue in the repository", "need": "create an issue",
     "server": "GitHub", "tool": "create_issue"},
    {"id": "q3", "query": "post a message to the team channel", "need": "send a chat message",
     "server": "Slack", "tool": "post_message"},
]
JUDGMENTS = [
    {"qid": "q1", "server": "Elasticsearch", "tool": "list_indices", "p_yes": 0.35},
    {"qid": "q2", "server": "GitHub", "tool": "list_pull_requests", "p_yes": 0.1},
    {"qid": "q2", "server": "GitHub", "tool": "create_issue", "p_yes": 0.9},  # the labelled tool itself
]


def build(index, cfg=PairConfig(), questions=QUESTIONS, judgments=JUDGMENTS, split=SPLIT) -> list[Pair]:
    return build_pairs(index, questions, judgments, split, cfg, show_progress=False)


def by_question(pairs: list[Pair]) -> dict[str, list[Pair]]:
    out: dict[str, list[Pair]] = defaultdict(list)
    for p in pairs:
        out[p.qid].append(p)
    return out


def judged_tools(judgments=JUDGMENTS) -> dict[str, set[ToolId]]:
    out: dict[str, set[ToolId]] = defaultdict(set)
    for j in judgments:
        out[j["qid"]].add(ToolId(j["server"], j["tool"]))
    return out


# ------------------------------------------------------------------ refusals


def test_refuses_questions_off_the_train_servers(index):
    weather = {"id": "qW", "query": "rain tomorrow", "server": "Weather", "tool": "get_forecast"}
    with pytest.raises(ValueError, match=r"1 questions are not on train servers \(e\.g\. qW\)"):
        build(index, questions=QUESTIONS + [weather])
    unknown = {"id": "qX", "query": "anything", "server": "Nowhere", "tool": "x"}
    with pytest.raises(ValueError, match=r"e\.g\. qX"):
        build(index, questions=[unknown])


def test_refuses_judgments_naming_non_train_tools(index):
    bad = {"qid": "q1", "server": "Weather", "tool": "get_alerts", "p_yes": 0.2}
    with pytest.raises(ValueError, match=r"judgment q1 names a non-train tool .*Weather.*get_alerts"):
        build(index, judgments=JUDGMENTS + [bad])


# ------------------------------------------------------------------ contents


def test_one_positive_per_question_with_label_one(index):
    pairs = build(index)
    positives = [p for p in pairs if p.kind == "positive"]
    assert Counter(p.qid for p in positives) == {"q1": 1, "q2": 1, "q3": 1}
    for q in QUESTIONS:
        [pos] = [p for p in positives if p.qid == q["id"]]
        assert pos.tool == ToolId(q["server"], q["tool"]) and pos.label == 1.0 and pos.request == q["query"]
    # the labelled tool never comes back as anything but the positive, even when judged
    for q in QUESTIONS:
        target = ToolId(q["server"], q["tool"])
        assert [p.kind for p in pairs if p.qid == q["id"] and p.tool == target] == ["positive"]


def test_judged_candidates_keep_their_p_yes(index):
    judged = [p for p in build(index) if p.kind == "judged"]
    assert {(p.qid, p.tool, p.label) for p in judged} == {
        ("q1", ToolId("Elasticsearch", "list_indices"), 0.35),
        ("q2", ToolId("GitHub", "list_pull_requests"), 0.1),
    }


def test_mined_negatives_skip_labelled_and_judged_tools_and_stay_on_train_servers(index):
    pairs = build(index, PairConfig(top_negatives=10, deep_negatives=10))
    judged = judged_tools()
    for q in QUESTIONS:
        target = ToolId(q["server"], q["tool"])
        mined = [p for p in pairs if p.qid == q["id"] and p.kind == "mined"]
        assert mined, q["id"]
        assert all(p.label == 0.0 for p in mined)
        tools = [p.tool for p in mined]
        assert len(tools) == len(set(tools))
        assert target not in tools
        assert not set(tools) & judged[q["id"]]
        assert {t.server for t in tools} <= TRAIN
        # everything else on the train servers was mined (the tiny catalog is shallower than 10)
        rest = {t.id for t in index.catalog.tools if t.server in TRAIN} - {target} - judged[q["id"]]
        assert set(tools) == rest


def test_top_negative_count_on_the_tiny_index(index):
    # 6 train tools: q1 has 6 - 1 labelled - 1 judged = 4 candidates, all within the top 10
    per_q = by_question(build(index, PairConfig(top_negatives=3, deep_negatives=2)))
    assert Counter(p.kind for p in per_q["q1"]) == {"positive": 1, "judged": 1, "mined": 3}
    assert Counter(p.kind for p in per_q["q3"]) == {"positive": 1, "mined": 3}
    per_q = by_question(build(index, PairConfig(top_negatives=0, deep_negatives=2)))
    assert all(p.kind != "mined" for p in per_q["q1"])  # no deep ranks in a 6-tool pool


def big_index() -> ToolIndex:
    """Three train servers of 8 tools (24) plus a dev server: deep enough for ranks 11+."""
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    tools = [Tool(s, f"{w}_{s.lower()}", f"{w} operation on {s} records", None, f"{s} service")
             for s in ("Alpha", "Beta", "Gamma", "Dev") for w in words]
    return ToolIndex.build(Catalog(tools), encoder=HashEncoder())


BIG_SPLIT = {"Alpha": "train", "Beta": "train", "Gamma": "train", "Dev": "dev"}
BIG_QUESTIONS = [
    {"id": f"b{i}", "query": f"{w} operation on Alpha records", "need": f"{w} alpha",
     "server": "Alpha", "tool": f"{w}_alpha"}
    for i, w in enumerate(["alpha", "delta", "golf"])
]
BIG_JUDGMENTS = [{"qid": "b0", "server": "Beta", "tool": "alpha_beta", "p_yes": 0.5}]


def test_top_and_deep_counts_come_from_their_rank_bands():
    index = big_index()
    cfg = PairConfig(top_negatives=4, deep_negatives=5, seed=3)
    pairs = build_pairs(index, BIG_QUESTIONS, BIG_JUDGMENTS, BIG_SPLIT, cfg, show_progress=False)
    eligible = Eligibility.of(servers={"Alpha", "Beta", "Gamma"})
    judged = judged_tools(BIG_JUDGMENTS)
    for q in BIG_QUESTIONS:
        target = ToolId(q["server"], q["tool"])
        ranked = [h.tool_id for h in index.retrieve(q["query"], None, eligible, k=100)
                  if h.tool_id != target and h.tool_id not in judged[q["id"]]]
        assert len(ranked) >= 20  # the fixture really has a deep band
        mined = [p.tool for p in pairs if p.qid == q["id"] and p.kind == "mined"]
        assert len(mined) == 9
        assert set(mined[:4]) <= set(ranked[:10])      # top negatives: ranks 1-10
        assert set(mined[4:]) <= set(ranked[10:])      # deep negatives: ranks 11-100
        assert all(t.server != "Dev" for t in mined)


# ------------------------------------------------------------------ need rate and seed


def test_need_rate_zero_and_one(index):
    assert all(p.need is None for p in build(index, PairConfig(need_rate=0.0)))
    needs = {q["id"]: q["need"] for q in QUESTIONS}
    assert all(p.need == needs[p.qid] for p in build(index, PairConfig(need_rate=1.0)))


def test_need_is_shared_by_all_pairs_of_a_question(index):
    for p_list in by_question(build(index, PairConfig(need_rate=0.5, seed=1))).values():
        assert len({p.need for p in p_list}) == 1


def test_deterministic_with_the_seed():
    index = big_index()

    def run(seed: int) -> list[Pair]:
        cfg = PairConfig(need_rate=0.5, seed=seed)
        return build_pairs(index, BIG_QUESTIONS, BIG_JUDGMENTS, BIG_SPLIT, cfg, show_progress=False)

    assert run(7) == run(7)
    assert run(7) != run(8)  # 13 deep candidates choose 2, three times over: seeds differ


# ------------------------------------------------------------------ data hash


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
