"""The agent's need as a query of its own, and the decision zones (issues 33, 34)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fakes import FakeScorer, HashEncoder, tiny_catalog
from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import Catalog, Tool, ToolId
from retrieval.index.embedded import ToolIndex
from retrieval.index.fusion import FusionConfig
from retrieval.index.hits import Hit
from retrieval.pipeline.confidence import ConfidenceModel
from retrieval.pipeline.decision import Policy, decide, decide_search
from retrieval.pipeline.flow import Pipeline, guarded_need


def _logit_only() -> ConfidenceModel:
    """p = sigmoid(logit): the fake scorer's probability passes through unchanged."""
    return ConfidenceModel(("logit",), (1.0,), 0.0, (0.0,), (1.0,))


# ------------------------------------------------------------------ the need channel

def test_need_has_lists_of_its_own_and_finds_what_the_request_alone_misses():
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder(), with_examples=False)
    vague = "can you help me with the thing we talked about"
    without = [h.tool_id.tool for h in index.retrieve(vague, None, k=3)]
    joined_only = ToolIndex.build(tiny_catalog(), encoder=HashEncoder(), with_examples=False,
                                  fusion=FusionConfig(w_need_bm25=0.0, w_need_dense=0.0))
    need = "list pull requests"
    with_need = [h.tool_id.tool for h in index.retrieve(vague, need, k=3)]
    assert with_need[0] == "list_pull_requests"
    assert without[0] != "list_pull_requests"
    # the need's own lists add to what joining the need to the request gives
    got = index.retrieve(vague, need, k=8)
    joined = joined_only.retrieve(vague, need, k=8)
    score = {h.tool_id: h.score for h in got}
    assert score[ToolId("GitHub", "list_pull_requests")] > {h.tool_id: h.score for h in joined}[
        ToolId("GitHub", "list_pull_requests")]


def test_a_need_naming_another_platform_cannot_hijack_the_request():
    """The request says Slack; a careless need says Discord. The other platform's name is left out of the
    need (its action stays), so the request's platform wins."""
    tools = list(tiny_catalog().tools) + [
        Tool("Discord", "send_message", "Send a message to a Discord channel", None, "Chat"),
    ]
    index = ToolIndex.build(Catalog(tools), encoder=HashEncoder(), with_examples=False)
    pipe = Pipeline(index, FakeScorer({}, default=0.5), confidence=_logit_only(), policy=Policy(score_top=None))
    request = "post 'deploy finished' to the #ops channel in slack"
    need = "send a message to a Discord channel"
    ranked = [t.tool_id for t in pipe.search(request, need).tools]
    slack, discord = ToolId("Slack", "post_message"), ToolId("Discord", "send_message")
    assert ranked[0] == slack and (discord not in ranked or ranked.index(discord) > ranked.index(slack))
    ranked = [h.tool_id for h in index.retrieve(request, guarded_need(request, need, pipe._matchers(Eligibility())[2]),
                                                k=9)]
    assert ranked.index(slack) < ranked.index(discord)   # also where the request does not restrict the search
    assert guarded_need(request, need, pipe._matchers(Eligibility())[2]) == "send a message to a channel"
    # where the request names no platform, the agent's need is searched as written
    assert guarded_need("tell the team the deploy is done", need, pipe._matchers(Eligibility())[2]) == need
    assert guarded_need(request, "   ", pipe._matchers(Eligibility())[2]) is None


def test_hits_carry_the_need_lists_ranks_for_the_confidence_model():
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder(), with_examples=False)
    got = index.retrieve("can you help me with the thing we talked about", "list pull requests", k=8)
    top = next(h for h in got if h.tool_id == ToolId("GitHub", "list_pull_requests"))
    assert top.need_bm25_rank == 1 and top.need_dense_rank is not None and top.need_dense_score is not None
    assert all(h.need_bm25_rank is None and h.need_dense_rank is None and h.need_dense_score is None
               for h in index.retrieve("list pull requests", None, k=8))


def test_the_need_channel_respects_eligibility():
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder(), with_examples=False)
    only = Eligibility.of(servers=["Weather"])
    hits = index.retrieve("help", "create an issue in a repository", only, k=8)
    assert hits and all(h.tool_id.server == "Weather" for h in hits)


def test_fusion_need_weights_are_validated():
    with pytest.raises(ValueError):
        FusionConfig(w_need_dense=-1.0)
    assert not FusionConfig(w_need_bm25=0.0, w_need_dense=0.0).need_channel


def test_saved_index_keeps_its_need_fusion(tmp_path):
    cfg = FusionConfig(w_need_bm25=0.25, w_need_dense=3.0, need_joint=False)
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder(), fusion=cfg)
    index.save(tmp_path / "ix")
    assert json.loads((tmp_path / "ix" / "manifest.json").read_text())["fusion"]["w_need_dense"] == 3.0
    assert ToolIndex.load(tmp_path / "ix", encoder=HashEncoder()).fusion == cfg


# ------------------------------------------------------------------ decision zones

@pytest.mark.parametrize("best, attempt, expected", [
    (0.90, 1, "proceed"), (0.90, 2, "proceed"),
    (0.50, 1, "search_again"), (0.02, 1, "search_again"),   # the first attempt never says no_fit
    (0.50, 2, "choose"), (0.10, 2, "choose"),               # between the floor and the threshold
    (0.09, 2, "no_fit"),                                    # only under the floor
])
def test_three_zones(best, attempt, expected):
    assert decide(best, attempt, Policy(proceed_threshold=0.85, no_fit_below=0.10)) == expected


def test_choose_keeps_the_tools_best_first_and_no_fit_is_empty():
    hits = [Hit(ToolId("S", f"t{i}"), i + 1, 1.0 / (i + 1)) for i in range(6)]
    probs = np.array([0.3, 0.6, 0.05, 0.02, 0.01, 0.2])
    policy = Policy(proceed_threshold=0.85, no_fit_below=0.10)
    chosen = decide_search(hits, probs, always=[], exact=[], mentioned=[], attempt=2, policy=policy, max_results=10)
    assert chosen.decision == "choose"
    assert [c[0].tool for c in chosen.chosen][:3] == ["t1", "t0", "t5"]
    low = decide_search(hits, probs * 0.1, always=[], exact=[], mentioned=[], attempt=2, policy=policy,
                        max_results=10)
    assert low.decision == "no_fit" and low.chosen == []


def test_no_fit_floor_is_validated():
    with pytest.raises(ValueError):
        Policy(proceed_threshold=0.5, no_fit_below=0.6)
    with pytest.raises(ValueError):
        Policy(no_fit_below=-0.1)


def test_second_search_keeps_a_right_tool_the_scorer_was_unsure_of():
    """The gateway report: git_commit first at 0.83 after a good second need must not become an empty no_fit."""
    scorer = FakeScorer({"create_issue": 0.83}, default=0.01)
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder(), with_examples=False)
    pipe = Pipeline(index, scorer, confidence=_logit_only(),
                    policy=Policy(proceed_threshold=0.85, no_fit_below=0.10, score_top=None))
    first = pipe.search("open a bug about the login crash", "create an issue in a repository")
    assert first.decision == "search_again" and first.tools[0].tool_id.tool == "create_issue"
    second = pipe.search("open a bug about the login crash", "file a new issue in the code repository's tracker",
                         previous=first)
    assert second.decision == "choose"
    assert second.tools[0].tool_id.tool == "create_issue"
    assert "ask the user" in second.message


def test_no_fit_only_below_the_floor_and_suggestions_never_name_connected_servers():
    scorer = FakeScorer({}, default=0.01)
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder(), with_examples=False)
    public_tools = list(tiny_catalog().tools) + [
        Tool("Jira", "create_ticket", "Create a ticket in an issue tracker", None, "Issue tracker"),
        Tool("Linear", "create_issue", "Create an issue in Linear", None, "Issue tracker")]
    public = ToolIndex.build(Catalog(public_tools), encoder=HashEncoder(), with_examples=False)
    pipe = Pipeline(index, scorer, confidence=_logit_only(), public_index=public,
                    policy=Policy(proceed_threshold=0.85, no_fit_below=0.10, score_top=None))
    eligible = Eligibility.of(servers=["GitHub", "Slack"])
    first = pipe.search("create a ticket in the issue tracker", "create a ticket", eligible=eligible)
    second = pipe.search("create a ticket in the issue tracker", "create a ticket", eligible=eligible,
                         previous=first)
    assert second.decision == "no_fit" and second.tools == []
    assert second.suggestions and not set(second.suggestions) & {"GitHub", "Slack"}


class _NeedScorer(FakeScorer):
    """Probabilities per tool name, another table when the need holds ``word`` (a sharper need that misleads)."""

    def __init__(self, probs, when, word, default=0.01):
        super().__init__(probs, default)
        self.when, self.word = dict(when), word

    def logits(self, request, need, tools):
        table = self.when if need and self.word in need else self.probs
        return np.array([np.log(p / (1 - p)) for p in (table.get(t.name, self.default) for t in tools)])


def _unsure_pipe(first_p: float, second_p: float) -> Pipeline:
    scorer = _NeedScorer({"create_issue": first_p}, {"create_issue": second_p}, "tracker", default=0.01)
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder(), with_examples=False)
    return Pipeline(index, scorer, confidence=_logit_only(),
                    policy=Policy(proceed_threshold=0.85, no_fit_below=0.25, score_top=None))


def test_a_sharper_need_never_empties_what_the_first_search_found():
    """Issue 34: a right first answer at 0.31 whose second search falls to 0.22 (under the floor) keeps the
    first answer's tools (choose), each with the probability the first search gave it."""
    pipe = _unsure_pipe(0.31, 0.22)
    first = pipe.search("open a bug about the login crash", "create an issue")
    assert first.decision == "search_again" and first.tools[0].tool_id.tool == "create_issue"
    second = pipe.search("open a bug about the login crash", "file it in the tracker", previous=first)
    assert second.decision == "choose" and second.attempt == 2
    assert [t.tool_id for t in second.tools] == [t.tool_id for t in first.tools][:len(second.tools)]
    assert second.tools[0].probability == pytest.approx(first.tools[0].probability)
    assert second.best_probability == pytest.approx(first.best_probability)
    assert "first search" in second.message and second.suggestions == []
    # with no earlier answer to keep (an old caller passing only the attempt), under the floor is no_fit
    from types import SimpleNamespace
    bare = pipe.search("open a bug about the login crash", "file it in the tracker", previous=SimpleNamespace(attempt=1))
    assert bare.decision == "no_fit" and bare.tools == []


def test_the_first_answer_is_kept_only_at_or_above_the_floor_and_never_beyond_eligibility():
    pipe = _unsure_pipe(0.20, 0.10)   # both under the floor: nothing fits, the answer is empty
    first = pipe.search("open a bug about the login crash", "create an issue")
    second = pipe.search("open a bug about the login crash", "file it in the tracker", previous=first)
    assert second.decision == "no_fit" and second.tools == []
    # a first answer over every server (a Slack tool first), a second search over Slack and Weather alone:
    # the first answer's GitHub tools are never kept, its Slack tool is
    scorer = _NeedScorer({"post_message": 0.31, "create_issue": 0.30}, {"post_message": 0.10}, "tracker")
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder(), with_examples=False)
    pipe = Pipeline(index, scorer, confidence=_logit_only(),
                    policy=Policy(proceed_threshold=0.85, no_fit_below=0.25, score_top=None))
    first = pipe.search("post the crash report", "send a message")
    assert first.tools[0].tool_id.tool == "post_message" and any(t.tool_id.server == "GitHub" for t in first.tools)
    narrow = Eligibility.of(servers=["Slack", "Weather"])
    second = pipe.search("post the crash report", "file it in the tracker", previous=first, eligible=narrow)
    assert second.decision == "choose" and second.tools[0].tool_id.tool == "post_message"
    assert {t.tool_id.server for t in second.tools} <= {"Slack", "Weather"}


def test_the_first_tool_decides_and_a_first_proceed_proceeds_again():
    from types import SimpleNamespace as NS

    from retrieval.pipeline.decision import Decided, keep_first_answer
    catalog = tiny_catalog()
    a, b = [t.id for t in list(catalog.tools)[:2]]
    policy = Policy(proceed_threshold=0.85, no_fit_below=0.25)
    empty = Decided("no_fit", 0.1, [])
    # the first answer's first tool under the floor, a later one (a calibrated tail tool) above it: not kept,
    # as the zone replay reads it (the first answer's decision probability is its first tool's)
    later_higher = NS(tools=[NS(tool_id=a, probability=0.2, source="ranked"), NS(tool_id=b, probability=0.6, source="ranked")])
    assert keep_first_answer(empty, later_higher, catalog, Eligibility(), policy, 10) is empty
    sure = NS(tools=[NS(tool_id=a, probability=0.9, source="ranked"), NS(tool_id=b, probability=0.1, source="ranked")])
    kept = keep_first_answer(empty, sure, catalog, Eligibility(), policy, 1)
    assert kept.decision == "proceed" and kept.best == 0.9 and kept.chosen == [(a, 0.9, "ranked")]   # k=1: one tool


def test_the_zone_replay_and_the_pipeline_end_the_same():
    """The replay of a row run with always_second gives the decision the pipeline gives the real second search."""
    from retrieval.evaluation.agent_flow import Case, replay, run_case
    for first_p, second_p in [(0.31, 0.22), (0.20, 0.10), (0.31, 0.60), (0.90, 0.10)]:
        pipe = _unsure_pipe(first_p, second_p)
        case = Case("c", "open a bug about the login crash", "tiny",
                    targets=frozenset({ToolId("GitHub", "create_issue")}), need="create an issue",
                    need2="file it in the tracker")
        row = run_case(pipe, case, "need", tail=False, always_second=True)
        [replayed] = replay([row], pipe.policy.proceed_threshold, pipe.policy.no_fit_below)
        live = run_case(pipe, case, "need", tail=False)
        assert replayed["decision"] == live["decision"], (first_p, second_p)
        assert replayed["empty"] == live["empty"] and replayed["right_final"] == live["right_final"]


def test_a_second_search_at_or_above_the_floor_keeps_its_own_answer():
    pipe = _unsure_pipe(0.31, 0.60)
    first = pipe.search("open a bug about the login crash", "create an issue")
    second = pipe.search("open a bug about the login crash", "file it in the tracker", previous=first)
    assert second.decision == "choose" and second.best_probability == pytest.approx(0.60, abs=1e-6)
    assert "first search" not in second.message


def test_keep_first_answer_reads_only_plausible_tools():
    from types import SimpleNamespace as NS

    from retrieval.pipeline.decision import Decided, keep_first_answer
    catalog = tiny_catalog()
    tid = next(iter(catalog.tools)).id
    policy = Policy(proceed_threshold=0.85, no_fit_below=0.25)
    empty = Decided("no_fit", 0.1, [])
    prev = NS(tools=[NS(tool_id=ToolId("Nowhere", "x"), probability=0.9, source="ranked"),   # not in the catalog
                     NS(tool_id=tid, probability=1.7, source="ranked"),                      # not a probability
                     NS(tool_id=tid, probability=None, source="ranked")])                    # absent: 0
    assert keep_first_answer(empty, prev, catalog, Eligibility(), policy, 10) is empty
    prev = NS(tools=[NS(tool_id=tid, probability=0.4, source="ranked"), NS(tool_id=tid, probability=0.3, source="ranked")])
    kept = keep_first_answer(empty, prev, catalog, Eligibility(), policy, 10)
    assert kept.decision == "choose" and kept.chosen == [(tid, 0.4, "ranked")]   # once, in the first answer's order
    proceed = Decided("proceed", 0.9, [(tid, 0.9, "ranked")])
    assert keep_first_answer(proceed, prev, catalog, Eligibility(), policy, 10) is proceed


def test_the_zone_replay_keeps_the_first_answer_like_the_pipeline():
    from retrieval.evaluation.agent_flow import replay
    row = {"answerable": True, "best1": 0.31, "best2": 0.22, "right1": True, "right_any1": True, "right2": False}
    [r] = replay([row], proceed=0.85, floor=0.25)
    assert r["decision"] == "choose" and r["right_final"] and not r["empty"]
    [r] = replay([{**row, "best1": 0.20}], proceed=0.85, floor=0.25)
    assert r["decision"] == "no_fit" and r["empty"]
