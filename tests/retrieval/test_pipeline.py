"""The request path end to end on the tiny catalog, with probabilities set by hand.

A fake scorer returns a fixed logit per tool name and the confidence model is the identity
calibration (p = sigmoid(logit)), so every probability, and with it every decision, is known.
"""

from __future__ import annotations

import json
import math

import pytest

from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import Catalog, Tool, ToolId
from retrieval.index.bm25 import tokenize
from retrieval.index.embedded import ToolIndex
from retrieval.index.text import tool_document
from retrieval.pipeline.confidence import ConfidenceModel
from retrieval.pipeline.decision import Policy
from retrieval.pipeline.definitions import NAME_RE, function_name
from retrieval.pipeline.flow import Pipeline
from retrieval.pipeline.serialize import result_to_dict, tool_to_dict
from retrieval.pipeline.tokens import TokenCounter
from retrieval.shortcuts.always_available import AlwaysAvailable, AlwaysAvailableRule

from fakes import FakeScorer, HashEncoder, logit, tiny_catalog  # tests/ is on sys.path (tests/conftest.py)

LOGIT = ConfidenceModel(("logit",), (1.0,), 0.0, (0.0,), (1.0,))   # p = sigmoid(logit)
LOW = 0.01                                                           # default probability

SHARDS = ToolId("Elasticsearch", "get_shards")
INDICES = ToolId("Elasticsearch", "list_indices")
ISSUE = ToolId("GitHub", "create_issue")
PULLS = ToolId("GitHub", "list_pull_requests")
POST = ToolId("Slack", "post_message")
CHANNELS = ToolId("Slack", "list_channels")
FORECAST = ToolId("Weather", "get_forecast")
ALERTS = ToolId("Weather", "get_alerts")


# Branch tests pin their own thresholds; the shipped defaults (chosen on dev) may move. The no-fit
# floor is above the 0.2 these tests give their best tool, so a second attempt says no_fit (the
# `choose` zone between the floor and the threshold: tests/retrieval/test_need_and_zones.py).
TEST_POLICY = Policy(proceed_threshold=0.5, no_fit_below=0.25)


def make(index, probs=None, default=LOW, **kwargs) -> Pipeline:
    kwargs.setdefault("policy", TEST_POLICY)
    return Pipeline(index, FakeScorer(probs, default), confidence=LOGIT, **kwargs)


def ids(result) -> list[ToolId]:
    return [t.tool_id for t in result.tools]


def dump(result) -> str:
    return json.dumps(result_to_dict(result))


# ------------------------------------------------------------------ probabilities and ranking


def test_probabilities_come_from_the_confidence_model(index):
    pipe = make(index, {"get_shards": 0.8, "list_indices": 0.6, "get_alerts": 0.4})
    r = pipe.search("get shard allocation for an index")
    assert ids(r)[:3] == [SHARDS, INDICES, ALERTS]
    assert [t.probability for t in r.tools[:3]] == pytest.approx([0.8, 0.6, 0.4])
    assert [t.rank for t in r.tools] == list(range(1, len(r.tools) + 1))
    assert all(t.source == "ranked" for t in r.tools)
    assert r.best_probability == pytest.approx(0.8)
    assert all(isinstance(t.probability, float) for t in r.tools)
    probs = [t.probability for t in r.tools]
    assert probs == sorted(probs, reverse=True)


def test_retrieval_only_confidence_with_hand_set_weights(index):
    """No scorer: fused_rel is 1 for the top hit, so its probability is sigmoid(w + b)."""
    pipe = Pipeline(index, None, confidence=ConfidenceModel(("fused_rel",), (10.0,), -9.0, (0.0,), (1.0,)),
                    policy=TEST_POLICY)
    r = pipe.search("get shard allocation for an index")
    assert r.tools[0].tool_id == SHARDS
    assert r.best_probability == pytest.approx(1 / (1 + math.exp(-1.0)))
    assert r.decision == "proceed"


def test_logit_confidence_needs_a_scorer(index):
    with pytest.raises(ValueError, match="needs a scorer's logits"):
        Pipeline(index, None, confidence=LOGIT)


def test_default_confidence_without_scorer(index):
    pipe = Pipeline(index)
    r = pipe.search("get shard allocation for an index")
    assert r.tools and all(0.0 <= t.probability <= 1.0 for t in r.tools)
    assert pipe.model_info == {"name": "retrieval-only", "version": "0"}
    with pytest.raises(ValueError, match="no scorer model is loaded"):
        pipe.score("x", None, [index.catalog[SHARDS]])


def test_score_and_model_info_with_scorer(index):
    pipe = make(index, {"get_shards": 0.7})
    assert pipe.score("x", None, [index.catalog[SHARDS], index.catalog[POST]]) == [0.7, LOW]
    assert pipe.model_info == {"name": "fake-scorer", "version": "3"}


def test_rank_orders_by_probability(index):
    pipe = make(index, {"list_channels": 0.9, "post_message": 0.5})
    hits = index.retrieve("post a message")
    ranked = pipe.rank("post a message", None, hits)
    assert [t for t, _ in ranked[:2]] == [CHANNELS, POST]
    assert ranked[0][1] == pytest.approx(0.9)


# ------------------------------------------------------------------ shortcut: always available

WEATHER_CHECK = AlwaysAvailable([AlwaysAvailableRule(FORECAST, ("weather check",))])


def test_always_available_first_at_confidence_one(index):
    pipe = make(index, {"post_message": 0.8}, always_available=WEATHER_CHECK)
    r = pipe.search("post a message to the team channel, and do a weather check")
    first = r.tools[0]
    assert (first.tool_id, first.probability, first.source, first.rank) == (FORECAST, 1.0, "always_available", 1)
    assert r.tools[1].tool_id == POST and r.tools[1].probability == pytest.approx(0.8)
    assert ids(r).count(FORECAST) == 1                       # not listed again when ranked
    assert r.best_probability == 1.0 and r.decision == "proceed"


def test_always_available_proceeds_even_when_nothing_else_fits(index):
    pipe = make(index, always_available=WEATHER_CHECK)       # every tool at 0.01
    r = pipe.search("do a weather check")
    assert r.decision == "proceed" and r.tools[0].tool_id == FORECAST


def test_always_available_only_on_its_keywords(index):
    pipe = make(index, {"post_message": 0.8}, always_available=WEATHER_CHECK)
    r = pipe.search("post a message to the team channel")
    assert all(t.source != "always_available" for t in r.tools)


@pytest.mark.parametrize("eligible", [
    Eligibility.of(servers=["Slack", "GitHub"]),
    Eligibility.of(tools=[POST, ALERTS]),                    # the server's other tool only
])
def test_always_available_subject_to_eligibility(index, eligible):
    pipe = make(index, {"post_message": 0.8}, always_available=WEATHER_CHECK)
    r = pipe.search("post a message to the team channel, and do a weather check", eligible=eligible)
    assert FORECAST not in ids(r)
    assert all(t.source != "always_available" for t in r.tools)
    assert r.best_probability == pytest.approx(0.8)


def test_always_available_tool_missing_from_catalog_is_ignored(index):
    aa = AlwaysAvailable([AlwaysAvailableRule(ToolId("Gone", "gone"), ("weather check",))])
    r = make(index, {"post_message": 0.8}, always_available=aa).search("post a message, weather check")
    assert ToolId("Gone", "gone") not in ids(r) and r.best_probability == pytest.approx(0.8)


# ------------------------------------------------------------------ shortcut: server mention


def test_server_mention_restricts_but_does_not_set_the_probability(index):
    # Slack's list_channels would win without the mention
    pipe = make(index, {"list_channels": 0.9, "list_pull_requests": 0.1, "create_issue": 0.05})
    r = pipe.search("use github to list the open items")
    assert r.restricted_to == ["GitHub"]
    assert {t.tool_id.server for t in r.tools} == {"GitHub"}
    top = r.tools[0]
    assert (top.tool_id, top.source) == (PULLS, "server_mention")
    assert top.probability == pytest.approx(0.1)             # the scorer's own, no 0.95 floor
    assert r.tools[1].probability == pytest.approx(0.05)
    assert r.decision == "search_again"                       # naming GitHub does not make a weak tool fit
    assert "restricted to GitHub" in r.message


def test_server_mention_keeps_a_higher_probability(index):
    r = make(index, {"list_pull_requests": 0.99}).search("use github to list the open items")
    assert r.tools[0].probability == pytest.approx(0.99) and r.tools[0].source == "server_mention"


def test_server_mention_with_an_exactly_named_tool_of_another_server(index):
    """An exactly named tool of another server joins with its floor; the named server's tool keeps its score."""
    pipe = make(index, {"list_pull_requests": 0.1, "create_issue": 0.05, "get_alerts": 0.2})
    r = pipe.search("use github to run get_alerts")
    by_id = {t.tool_id: t for t in r.tools}
    assert r.restricted_to == ["GitHub"]
    assert by_id[PULLS].source == "server_mention"
    assert by_id[PULLS].probability == pytest.approx(0.1)
    assert by_id[ALERTS].source == "exact_name"
    assert by_id[ALERTS].probability == pytest.approx(0.9)
    assert ids(r)[:2] == [ALERTS, PULLS]


def test_policy_has_no_server_mention_floor():
    with pytest.raises(TypeError):
        Policy(server_mention_confidence=0.5)


NO_GITHUB = Eligibility.of(servers=["Elasticsearch", "Slack", "Weather"])
PROBS = {"list_channels": 0.2, "post_message": 0.15, "list_indices": 0.1, "get_alerts": 0.07,
         "get_forecast": 0.06, "get_shards": 0.05, "list_pull_requests": 0.9, "create_issue": 0.8}


def test_ineligible_server_mention_restricts_and_reveals_nothing(index):
    pipe = make(index, PROBS)
    r = pipe.search("use github to list channels", eligible=NO_GITHUB)
    assert r.restricted_to == []
    assert all(t.tool_id.server != "GitHub" for t in r.tools)
    assert r.decision == "search_again"                      # no 0.95 floor leaked in
    assert r.best_probability == pytest.approx(0.2)
    assert "github" not in dump(r).lower()


def test_ineligible_server_behaves_as_if_it_did_not_exist(encoder):
    """Same tenant, same request: a deployment with GitHub (not eligible) and one without it."""
    full = tiny_catalog()
    without = Catalog([t for t in full.tools if t.server != "GitHub"])
    request = "use github to list channels"
    r_full = make(ToolIndex.build(full, encoder=encoder), PROBS).search(request, eligible=NO_GITHUB)
    r_none = make(ToolIndex.build(without, encoder=encoder), PROBS).search(request, eligible=NO_GITHUB)
    assert ids(r_full) == ids(r_none)
    assert [t.probability for t in r_full.tools] == pytest.approx([t.probability for t in r_none.tools])
    for field in ("decision", "best_probability", "restricted_to", "message", "tokens"):
        assert getattr(r_full, field) == getattr(r_none, field), field


def test_mention_of_a_tools_restricted_server(index):
    """Eligible by tools only: a server with no eligible tool counts as not mentioned."""
    eligible = Eligibility.of(tools=[POST, CHANNELS, SHARDS])
    r = make(index, PROBS).search("use github to list channels", eligible=eligible)
    assert r.restricted_to == [] and set(ids(r)) <= {POST, CHANNELS, SHARDS}


# ------------------------------------------------------------------ shortcut: exact names


def test_exact_name_joins_even_when_retrieval_misses_it(index):
    request = "post a message to the channel then call list_indices"
    policy = Policy(candidates=1)                             # retrieval keeps only its top hit
    assert INDICES not in {h.tool_id for h in index.retrieve(request, k=1)}
    r = make(index, {"post_message": 0.8}, default=0.001).search(request, policy=policy)
    by_id = {t.tool_id: t for t in r.tools}
    assert set(by_id) == {POST, INDICES}
    assert by_id[INDICES].source == "exact_name"
    assert by_id[INDICES].probability == pytest.approx(Policy().exact_name_confidence)


def test_exact_name_kept_when_the_list_is_full(index):
    # post_message outranks the named tool (0.9), fills k=1, and the named tool still joins
    r = make(index, {"post_message": 0.97}).search("post a message to the channel then call list_indices", k=1)
    assert ids(r) == [POST, INDICES]


def test_exact_name_kept_below_the_floor(index):
    policy = Policy(exact_name_confidence=0.01, floor=0.5, min_results=1)
    r = make(index, {"post_message": 0.8}, default=0.001).search(
        "post a message to the channel then call list_indices", policy=policy)
    assert ids(r) == [POST, INDICES]


def test_exact_name_lifts_the_decision(index):
    r = make(index).search("run get_alerts for the coast")
    assert r.decision == "proceed"
    assert r.tools[0].tool_id == ALERTS and r.tools[0].source == "exact_name"


@pytest.mark.parametrize("eligible", [
    Eligibility.of(servers=["Slack", "GitHub", "Weather"]),
    Eligibility.of(tools=[POST, SHARDS]),
])
def test_exact_name_never_when_ineligible(index, eligible):
    request = "post a message to the channel then call list_indices"
    r = make(index, {"post_message": 0.8}).search(request, eligible=eligible, explain=True)
    assert INDICES not in ids(r)
    assert all(t.source != "exact_name" for t in r.tools)
    assert "list_indices" not in dump(r)


# ------------------------------------------------------------------ decisions


def test_proceed(index):
    r = make(index, {"post_message": 0.8}).search("post a message")
    assert (r.decision, r.attempt) == ("proceed", 1)
    assert r.suggestions == [] and "proceed" in r.message


def test_proceed_at_exactly_the_threshold(index):
    r = make(index, {"post_message": 0.5}).search("post a message", policy=Policy(proceed_threshold=0.5))
    assert r.decision == "proceed"


def test_search_again_then_no_fit(index):
    pipe = make(index, {"post_message": 0.2})   # under TEST_POLICY's no-fit floor
    first = pipe.search("post a message")
    assert (first.decision, first.attempt) == ("search_again", 1)
    assert first.tools and first.best_probability == pytest.approx(0.2)
    assert "previous" in first.message
    second = pipe.search("post a message", "send text to a chat channel", previous=first)
    assert (second.decision, second.attempt) == ("no_fit", 2)
    assert second.tools == [] and second.tokens.selected == 0
    assert second.best_probability == pytest.approx(0.2)
    assert second.suggestions == []                          # no public index configured
    assert "No connected tool fits" in second.message
    assert pipe.scorer.calls[-1][1] == "send text to a chat channel"   # the need reached the scorer


def test_second_attempt_between_floor_and_threshold_chooses(index):
    pipe = make(index, {"post_message": 0.3})
    first = pipe.search("post a message")
    second = pipe.search("post a message", "send text to a chat channel", previous=first)
    assert (second.decision, second.attempt) == ("choose", 2)
    assert ids(second)[0] == ToolId("Slack", "post_message") and second.suggestions == []
    assert second.tokens.selected > 0


def test_second_attempt_can_proceed(index):
    pipe = make(index, {"post_message": 0.2})
    first = pipe.search("post a message")
    pipe.scorer.probs["post_message"] = 0.7                  # the need made it clear
    second = pipe.search("post a message", "send text to a channel", previous=first)
    assert (second.decision, second.attempt) == ("proceed", 2)


def test_attempt_never_exceeds_two(index):
    pipe = make(index)
    r = pipe.search("post a message")
    for _ in range(3):
        r = pipe.search("post a message", previous=r)
        assert (r.decision, r.attempt) == ("no_fit", 2)


def test_tenant_policy_changes_the_decision(index):
    pipe = make(index, {"post_message": 0.5})
    assert pipe.search("post a message").decision == "proceed"
    strict = pipe.search("post a message", policy=Policy(proceed_threshold=0.6))
    assert strict.decision == "search_again" and "0.6" in strict.message
    assert pipe.policy == TEST_POLICY                        # the pipeline's own policy is untouched
    assert pipe.search("post a message").decision == "proceed"
    lenient = make(index, {"post_message": 0.5}, policy=Policy(proceed_threshold=0.6))
    assert lenient.search("post a message", policy=Policy(proceed_threshold=0.4)).decision == "proceed"


@pytest.mark.parametrize(("policy", "expected"), [
    (Policy(floor=0.05, min_results=2), 2),                  # one tool above the floor, filled to 2
    (Policy(floor=0.05, min_results=5), 5),
    (Policy(floor=0.0, min_results=1, max_results=3), 3),
    (Policy(floor=0.05, min_results=1, max_results=10), 1),
])
def test_floor_and_list_length(index, policy, expected):
    r = make(index, {"post_message": 0.9}).search("post a message", policy=policy)
    assert len(r.tools) == expected and r.tools[0].tool_id == POST


# ------------------------------------------------------------------ Policy validation


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"proceed_threshold": 1.5}, r"thresholds must lie in \[0, 1\].*proceed_threshold=1.5"),
    ({"floor": -0.1}, r"thresholds must lie in \[0, 1\]: floor=-0.1"),
    ({"proceed_threshold": float("nan")}, "thresholds must lie in"),
    ({"min_results": 0}, "need 1 <= min_results <= max_results, got 0 and 10"),
    ({"min_results": 6, "max_results": 5}, "got 6 and 5"),
    ({"candidates": 0}, "candidates must be 1..1000, got 0"),
    ({"candidates": 1001}, "candidates must be 1..1000, got 1001"),
    ({"exact_name_confidence": -0.5}, r"exact_name_confidence .* \[0, 1\], got -0.5"),
    ({"suggestions": -1}, "suggestions must be 0 or more"),
])
def test_policy_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Policy(**kwargs)


def test_policy_is_keyword_only_and_frozen():
    with pytest.raises(TypeError):
        Policy(0.3, 0.05)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        Policy().floor = 0.1  # type: ignore[misc]


def test_policy_overrides():
    p = Policy().with_overrides(proceed_threshold=0.7, floor=None)
    assert p.proceed_threshold == 0.7 and p.floor == Policy().floor
    with pytest.raises(ValueError, match="thresholds must lie"):
        Policy().with_overrides(floor=2.0)
    with pytest.raises(TypeError):
        Policy().with_overrides(no_such_field=1)


# ------------------------------------------------------------------ request and k bounds


@pytest.mark.parametrize("k", [0, -3])
def test_k_below_one(index, k):
    with pytest.raises(ValueError, match=f"k must be at least 1, got {k}"):
        make(index).search("post a message", k=k)


@pytest.mark.parametrize(("k", "expected"), [(1, 1), (3, 3), (8, 8), (50, 8)])  # clamped to the catalog
def test_k_sets_the_list_length(index, k, expected):
    r = make(index, default=0.5).search("post a message", k=k)   # all above floor: only k limits
    assert len(r.tools) == expected


@pytest.mark.parametrize("request_text", ["", "   \n", None])
def test_empty_request(index, request_text):
    with pytest.raises(ValueError, match="request must be a non-empty string"):
        make(index).search(request_text)  # type: ignore[arg-type]


def test_unknown_format(index):
    with pytest.raises(ValueError, match="unknown format 'xml': use mcp, openai or anthropic"):
        make(index).search("post a message", fmt="xml")  # type: ignore[arg-type]


def test_search_does_not_mutate_eligibility_or_policy(index):
    eligible, policy = Eligibility.of(servers=["Slack"]), Policy(proceed_threshold=0.4)
    make(index).search("use slack to post a message", eligible=eligible, policy=policy)
    assert eligible == Eligibility.of(servers=["Slack"]) and policy == Policy(proceed_threshold=0.4)


# ------------------------------------------------------------------ definitions


def test_mcp_definitions(index):
    r = make(index, {"post_message": 0.9}).search("post a message", fmt="mcp")
    for t in r.tools:
        tool = index.catalog[t.tool_id]
        assert set(t.definition) == {"name", "description", "inputSchema"}
        assert t.definition["name"] == tool.name
        assert t.definition["description"] == tool.description
        assert t.definition["inputSchema"]["type"] == "object"


def test_openai_definitions(index):
    r = make(index, {"post_message": 0.9}).search("post a message", fmt="openai")
    for t in r.tools:
        d = t.definition
        assert d["type"] == "function" and set(d["function"]) == {"name", "description", "parameters"}
        assert d["function"]["name"] == function_name(t.tool_id) and NAME_RE.match(d["function"]["name"])
        assert d["function"]["description"] == index.catalog[t.tool_id].description
    assert r.tools[0].definition["function"]["name"] == "Slack__post_message"


def test_anthropic_definitions(index):
    r = make(index, {"post_message": 0.9}).search("post a message", fmt="anthropic")
    for t in r.tools:
        assert set(t.definition) == {"name", "description", "input_schema"}
        assert t.definition["name"] == function_name(t.tool_id) and NAME_RE.match(t.definition["name"])
    names = [t.definition["name"] for t in r.tools]
    assert len(set(names)) == len(names)


def test_definitions_follow_shortcut_tools(index):
    pipe = make(index, always_available=WEATHER_CHECK)
    r = pipe.search("weather check, then call list_indices", fmt="anthropic", k=2)
    assert [t.definition["name"] for t in r.tools[:1]] == ["Weather__get_forecast"]
    assert "Elasticsearch__list_indices" in [t.definition["name"] for t in r.tools]


# ------------------------------------------------------------------ token report


@pytest.mark.parametrize("fmt", ["mcp", "openai", "anthropic"])
def test_token_report_consistent(index, fmt):
    counter = TokenCounter()
    r = make(index, {"post_message": 0.9}).search("post a message", fmt=fmt, k=3)
    assert r.tokens is not None and r.tokens.encoding == "cl100k_base"
    assert r.tokens.catalog == counter.total(index.catalog.tools, fmt)
    assert r.tokens.selected == counter.total([index.catalog[t] for t in ids(r)], fmt)
    assert 0 < r.tokens.selected < r.tokens.catalog
    assert 0.0 < r.tokens.reduction < 1.0
    assert result_to_dict(r)["tokens"]["selected"] == r.tokens.selected


def test_token_report_counts_only_eligible_tools(index):
    counter = TokenCounter()
    pipe = make(index, {"post_message": 0.9})
    full = pipe.search("post a message")
    slack = pipe.search("post a message", eligible=Eligibility.of(servers=["Slack"]))
    two = pipe.search("post a message", eligible=Eligibility.of(tools=[POST, SHARDS]))
    one = pipe.search("post a message", eligible=Eligibility.of(tools=[POST]))
    assert slack.tokens.catalog == counter.total(index.catalog.server_tools("Slack"))
    assert two.tokens.catalog == counter.total([index.catalog[POST], index.catalog[SHARDS]])
    assert one.tokens.catalog == one.tokens.selected == counter.count_tool(index.catalog[POST])
    assert one.tokens.catalog < slack.tokens.catalog < full.tokens.catalog
    assert two.tokens.catalog < full.tokens.catalog
    for r in (full, slack, two, one):
        assert r.tokens.selected <= r.tokens.catalog
    assert slack.tokens.selected == slack.tokens.catalog     # both Slack tools selected
    assert slack.tokens.reduction == 0.0


def test_token_report_follows_catalog_updates(index):
    pipe = make(index, {"post_message": 0.9})
    before = pipe.search("post a message").tokens.catalog
    index.upsert_server("Notes", "Note taking", [Tool("Notes", "add_note", "Add a note with a title and body")])
    after = pipe.search("post a message").tokens.catalog
    assert after == before + TokenCounter().count_tool(index.catalog[ToolId("Notes", "add_note")])


def test_shortcuts_follow_catalog_updates(index):
    pipe = make(index, {"add_note": 0.3})
    assert pipe.search("use acmenotes to call add_note").restricted_to == []
    index.upsert_server("AcmeNotes", "Note taking", [Tool("AcmeNotes", "add_note", "Add a note")])
    r = pipe.search("use acmenotes to call add_note")
    assert r.restricted_to == ["AcmeNotes"]
    assert r.tools[0].tool_id == ToolId("AcmeNotes", "add_note")
    assert r.tools[0].source == "exact_name"


# ------------------------------------------------------------------ explanations


def test_no_explanations_by_default(index):
    r = make(index).search("post a message")
    assert all(t.explanation is None for t in r.tools)
    assert all("explanation" not in tool_to_dict(t) for t in r.tools)


def test_explanations(index):
    request = "get shard allocation for an index"
    r = make(index, {"get_shards": 0.8}).search(request, explain=True)
    query_terms = set(tokenize([request])[0])
    for t in r.tools:
        e = t.explanation
        assert e is not None and "explanation" in tool_to_dict(t)
        assert e["probability"] == pytest.approx(t.probability, abs=1e-4)
        assert e["source"] == t.source and e["reason"]
        doc_terms = set(tokenize([tool_document(index.catalog[t.tool_id], with_examples=index.with_examples)])[0])
        assert set(e["matched_terms"]) <= query_terms & doc_terms
        assert e["matched_terms"] == sorted(e["matched_terms"])
    top = r.tools[0].explanation
    assert r.tools[0].tool_id == SHARDS
    assert {"shard", "index"} <= {w[:5] for w in top["matched_terms"]}
    assert not {"for", "an"} & set(top["matched_terms"])       # stopwords never "match"
    assert top["fused_rank"] == 1 and top["bm25_rank"] == 1
    assert str(TEST_POLICY.proceed_threshold) in top["reason"]     # the threshold that decided
    json.dumps(result_to_dict(r))                                # plain JSON


def test_explanations_for_shortcut_sources(index):
    pipe = make(index, {"list_pull_requests": 0.1}, always_available=WEATHER_CHECK)
    r = pipe.search("use github to list pull requests, weather check, and call get_alerts", explain=True)
    reasons = {t.source: t.explanation["reason"] for t in r.tools}
    assert set(reasons) >= {"always_available", "server_mention", "exact_name"}
    assert "restricted" in reasons["server_mention"] and "0.95" not in reasons["server_mention"]
    always = next(t for t in r.tools if t.source == "always_available").explanation
    assert always["fused_rank"] is None or isinstance(always["fused_rank"], int)


def test_explanations_never_mention_ineligible_tools(index):
    eligible = Eligibility.of(servers=["Slack", "Weather"])
    r = make(index).search("use elasticsearch to call get_shards for an index", eligible=eligible, explain=True)
    text = dump(r)
    for name in ("Elasticsearch", "get_shards", "list_indices", "GitHub", "create_issue", "list_pull_requests"):
        assert name not in text
    assert all(t.explanation is not None for t in r.tools)


# ------------------------------------------------------------------ no_fit suggestions

PRIVATE = "Vault Weather"   # a tenant's private server: in the deployment index only
PRIVATE_TOOLS = [
    Tool(PRIVATE, "vault_forecast", "Weather forecast for a city from the private weather vault"),
    Tool(PRIVATE, "vault_alerts", "Severe weather alerts for a region from the vault"),
]
WEATHER_REQUEST = "weather forecast for a city"


@pytest.fixture
def deployment(encoder):
    """Deployment index = public catalog + one private server; the public index stays apart."""
    public = ToolIndex.build(tiny_catalog(), encoder=encoder)
    deployed = ToolIndex.build(tiny_catalog(), encoder=encoder)
    deployed.upsert_server(PRIVATE, "Private weather data", PRIVATE_TOOLS)
    return deployed, public


def no_fit(pipe, request, eligible, policy=None):
    first = pipe.search(request, eligible=eligible, policy=policy)
    assert first.decision == "search_again"
    r = pipe.search(request, eligible=eligible, previous=first, policy=policy)
    assert r.decision == "no_fit"
    return r


def test_suggestions_come_from_the_public_index(deployment):
    deployed, public = deployment
    pipe = make(deployed, public_index=public)
    r = no_fit(pipe, WEATHER_REQUEST, Eligibility.of(servers=["Slack"]))
    assert r.suggestions and r.suggestions[0] == "Weather"
    assert set(r.suggestions) <= set(public.catalog.servers)
    assert "Slack" not in r.suggestions and PRIVATE not in r.suggestions
    assert len(r.suggestions) <= Policy().suggestions
    assert "Weather" in r.message


@pytest.mark.parametrize("servers", [["Slack"], ["Slack", PRIVATE], ["Slack", "Weather"], [PRIVATE]])
def test_private_servers_never_suggested(deployment, servers):
    deployed, public = deployment
    # the private server's own tools must not make this tenant proceed
    pipe = make(deployed, {"vault_forecast": 0.2}, public_index=public)
    eligible = Eligibility.of(servers=servers)
    r = no_fit(pipe, WEATHER_REQUEST, eligible)
    assert PRIVATE not in r.suggestions
    assert not any(eligible.allows_server(s) for s in r.suggestions)   # never a server the tenant has
    if PRIVATE not in servers:
        assert "vault" not in dump(r).lower()


def test_mention_of_another_tenants_private_server(deployment):
    deployed, public = deployment
    pipe = make(deployed, {"get_forecast": 0.2, "vault_forecast": 0.99}, public_index=public)
    eligible = Eligibility.of(servers=["Slack", "GitHub"])
    r = no_fit(pipe, "use vault weather to get the forecast", eligible)
    assert r.restricted_to == []
    assert "vault" not in dump(r).lower()


def test_suggestion_count_follows_the_policy(deployment):
    deployed, public = deployment
    pipe = make(deployed, public_index=public)
    eligible = Eligibility.of(servers=["Slack"])
    assert len(no_fit(pipe, WEATHER_REQUEST, eligible, Policy(suggestions=1)).suggestions) == 1
    assert no_fit(pipe, WEATHER_REQUEST, eligible, Policy(suggestions=0)).suggestions == []


def test_no_suggestions_for_a_tenant_with_everything(deployment):
    deployed, public = deployment
    r = no_fit(make(deployed, public_index=public), WEATHER_REQUEST, Eligibility())
    assert r.suggestions == []


def test_no_suggestions_unless_no_fit(deployment):
    deployed, public = deployment
    pipe = make(deployed, public_index=public)
    first = pipe.search(WEATHER_REQUEST, eligible=Eligibility.of(servers=["Slack"]))
    assert first.decision == "search_again" and first.suggestions == []


# ---------------------------------------------------------------- hidden names leave no trace


@pytest.mark.parametrize(("hidden", "request_text", "source"), [
    (Tool("GitHub Enterprise", "secret_tool", "hidden"), "use github enterprise to create an issue", "server_mention"),
    (Tool("Hidden", "api.create_issue", "hidden"), "call api.create_issue now", "exact_name"),
])
def test_a_hidden_name_changes_nothing(hidden, request_text, source):
    visible = [Tool("GitHub", "create_issue", "Create an issue"), Tool("Other", "x", "do x")]
    eligible = Eligibility.of(servers=["GitHub", "Other"])
    results = []
    for tools in (visible, visible + [hidden]):
        pipe = Pipeline(ToolIndex.build(Catalog(tools), encoder=HashEncoder()), FakeScorer(), confidence=LOGIT)
        r = pipe.search(request_text, eligible=eligible)
        results.append((r.restricted_to, [(t.tool_id, t.source, t.probability) for t in r.tools], r.message))
    assert results[0] == results[1]
    assert results[0][1][0][:2] == (ToolId("GitHub", "create_issue"), source)


# ------------------------------------------------------------------ a tenant's recalibration from use


def test_recalibration_moves_every_probability_keeps_the_order_and_the_raw_best(index):
    from retrieval.pipeline.recalibration import UseRecalibration

    pipe = make(index, {"post_message": 0.8, "list_channels": 0.6})
    plain = pipe.search("post a message to the team channel")
    down = pipe.search("post a message to the team channel", recalibration=UseRecalibration(1.0, -2.0))
    assert ids(down) == ids(plain)
    assert down.best_probability < plain.best_probability - 0.3
    assert plain.raw_best == pytest.approx(plain.best_probability)     # the first tool's, before any recalibration
    assert down.raw_best == pytest.approx(plain.best_probability)
    assert "raw_best" not in result_to_dict(down)                       # internal: never in an answer


@pytest.mark.parametrize("shipped, b", [(0.8, 2.0), (0.9, -2.0), (0.2, 1.5), (0.4, -1.0)])
def test_a_recalibration_moves_the_numbers_and_never_a_decision(index, shipped, b):
    """0.16.0: the thresholds move through the tenant's map too (before, a map lifting 0.8 to 0.97 made a
    search proceed that the shipped thresholds would not, and the simulated no-fit twins proceeded with it)."""
    from retrieval.pipeline.recalibration import UseRecalibration

    pipe = make(index, {"post_message": shipped, "list_channels": shipped / 2})
    cal = UseRecalibration(1.0, b)
    first = pipe.search("post a message to the team channel")
    mapped_first = pipe.search("post a message to the team channel", recalibration=cal)
    for plain, mapped in ((first, mapped_first),            # and the second attempt, each after its own first
                          (pipe.search("send a note to the channel", previous=first),
                           pipe.search("send a note to the channel", previous=mapped_first, recalibration=cal))):
        assert mapped.decision == plain.decision and ids(mapped) == ids(plain)
        assert mapped.best_probability == pytest.approx(float(cal.apply([plain.best_probability])[0]))


def test_no_raw_best_when_a_shortcut_comes_first(index):
    always = make(index, {"post_message": 0.8}, always_available=WEATHER_CHECK)
    assert always.search("post a message to the team channel, and do a weather check").raw_best is None
    exact = make(index).search("run get_alerts for the coast")
    assert exact.tools[0].source == "exact_name" and exact.raw_best is None


def test_a_map_that_changes_between_the_two_attempts_does_not_empty_a_kept_first_answer(index):
    """The first answer of this process (the gateway's) is read on the second search's scale through its raw_best;
    before, a tenant's map fitted between the attempts moved the floor above it and the answer ended empty."""
    from retrieval.pipeline.recalibration import UseRecalibration

    first = make(index, {"post_message": 0.4, "list_channels": 0.2}).search("post a message to the team channel")
    assert first.decision == "search_again" and first.best_probability > 0.25 and first.raw_best is not None
    low = make(index, {"post_message": 0.1, "list_channels": 0.05})          # the sharper need reads lower
    for fitted in (None, UseRecalibration(1.0, 1.5), UseRecalibration(1.0, -1.5)):
        second = low.search("send a note to the channel", previous=first,
                            **({"recalibration": fitted} if fitted else {}))
        assert second.decision == "choose" and ids(second)[:1] == ids(first)[:1], fitted
