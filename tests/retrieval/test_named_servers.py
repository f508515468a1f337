"""A request that names a server counts against other servers' tools (``named_other``),
names only count from the public registry and the tenant's eligible servers, and the
pipeline picks the confidence model fitted for its kind of index."""

from __future__ import annotations

import json
import math

import pytest

from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import Catalog, Tool, ToolId
from retrieval.index.embedded import ToolIndex
from retrieval.index.hits import Hit
from retrieval.pipeline.confidence import ConfidenceModel, candidate_features, combiner_file
from retrieval.pipeline.decision import Policy
from retrieval.pipeline.flow import Pipeline
from retrieval.pipeline.serialize import result_to_dict

from fakes import FakeScorer, HashEncoder, logit, tiny_catalog

PENALTY = 4.0
# p = sigmoid(logit - PENALTY * named_other)
NAMED = ConfidenceModel(("logit", "named_other"), (1.0, -PENALTY), 0.0, (0.0, 0.0), (1.0, 1.0))
PRIVATE = "Vault Weather"
REQUEST = "open an issue on GitHub about the broken weather alerts"


def sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


@pytest.fixture
def deployment(encoder):
    public = ToolIndex.build(tiny_catalog(), encoder=encoder)
    deployed = ToolIndex.build(tiny_catalog(), encoder=encoder)
    deployed.upsert_server(PRIVATE, "Private weather data", [
        Tool(PRIVATE, "vault_alerts", "Severe weather alerts for a region from the vault")])
    return deployed, public


def make(index, public, probs=None) -> Pipeline:
    return Pipeline(index, FakeScorer(probs or {"get_alerts": 0.9, "create_issue": 0.9}, default=0.3), confidence=NAMED,
                    public_index=public, policy=Policy(proceed_threshold=0.5, no_fit_below=0.2))


def test_candidate_features_named_other_by_hand():
    hits = [Hit(ToolId("GitHub", "create_issue"), 1, 1.0), Hit(ToolId("Slack", "post_message"), 2, 0.5)]
    assert list(candidate_features(hits, named_servers=["GitHub"])["named_other"]) == [0.0, 1.0]
    assert list(candidate_features(hits, named_servers=["Jira"])["named_other"]) == [1.0, 1.0]
    assert list(candidate_features(hits)["named_other"]) == [0.0, 0.0]     # names nothing: no evidence


def test_naming_a_public_server_that_is_not_connected(deployment):
    deployed, public = deployment
    pipe = make(deployed, public)
    eligible = Eligibility.of(servers=["Weather", "Slack"])
    assert pipe.named_servers(REQUEST, eligible) == ["GitHub"]
    first = pipe.search(REQUEST, eligible=eligible)
    # every eligible tool is another server's: each loses PENALTY in the logit
    assert first.best_probability == pytest.approx(sigmoid(logit(0.9) - PENALTY))
    assert first.decision == "search_again"
    assert "names GitHub, which is not connected" in first.message
    final = pipe.search(REQUEST, eligible=eligible, previous=first)
    assert final.decision == "no_fit"          # 0.14: under the no-fit floor
    assert final.suggestions[0] == "GitHub"
    assert "GitHub" in final.message


def test_naming_a_connected_server_costs_its_tools_nothing(deployment):
    deployed, public = deployment
    pipe = make(deployed, public)
    r = pipe.search(REQUEST, eligible=Eligibility.of(servers=["GitHub", "Weather"]))
    assert r.restricted_to == ["GitHub"]
    assert r.tools[0].tool_id == ToolId("GitHub", "create_issue")
    assert r.tools[0].probability == pytest.approx(0.9)  # the scorer's own: naming it neither floors nor penalises
    assert r.decision == "proceed"


def test_an_unnamed_request_is_untouched(deployment):
    deployed, public = deployment
    pipe = make(deployed, public)
    r = pipe.search("severe weather alerts for a region", eligible=Eligibility.of(servers=["Weather"]))
    assert r.best_probability == pytest.approx(0.9)


def test_a_hidden_private_server_name_never_counts(deployment):
    deployed, public = deployment
    pipe = make(deployed, public)
    eligible = Eligibility.of(servers=["Weather"])
    request = "use vault weather to get severe weather alerts"
    assert pipe.named_servers(request, eligible) == []
    r = pipe.search(request, eligible=eligible)
    assert r.best_probability == pytest.approx(0.9)
    assert "vault" not in json.dumps(result_to_dict(r)).lower()


def test_the_tenants_own_private_server_counts(deployment):
    deployed, public = deployment
    pipe = make(deployed, public)
    eligible = Eligibility.of(servers=["Weather", PRIVATE])
    assert pipe.named_servers("use vault weather to get severe weather alerts", eligible) == [PRIVATE]


def test_without_a_public_registry_only_eligible_names_count(deployment):
    deployed, _ = deployment
    pipe = make(deployed, None)
    assert pipe.named_servers(REQUEST, Eligibility.of(servers=["Weather"])) == []
    assert pipe.named_servers(REQUEST, Eligibility()) == ["GitHub"]


# ------------------------------------------------------------------ which confidence model


def _model_dir(tmp_path, with_noex: bool):
    for name, bias in ((combiner_file(True), 1.0), (combiner_file(False), -1.0))[: 2 if with_noex else 1]:
        ConfidenceModel(("logit",), (1.0,), bias, (0.0,), (1.0,)).save(tmp_path / name)
    return tmp_path


def test_pipeline_picks_the_combiner_for_its_kind_of_index(tmp_path, encoder):
    scorer = FakeScorer({}, path=_model_dir(tmp_path, with_noex=True))
    cat = tiny_catalog()
    ex = ToolIndex.build(cat.with_examples({t.id: [f"please {t.description.lower()}"] for t in cat.tools}), encoder=encoder)
    noex = ToolIndex.build(cat, encoder=encoder, with_examples=False)
    assert Pipeline(ex, scorer).confidence.bias == 1.0
    assert Pipeline(noex, scorer).confidence.bias == -1.0
    # a catalog without examples indexed "with examples" fuses as day one, so it is scored as day one (0.12.0)
    assert Pipeline(ToolIndex.build(cat, encoder=encoder), scorer).confidence.bias == -1.0
    assert Pipeline(noex, scorer).with_index(ex).confidence.bias == 1.0   # re-picked for the new index
    given = ConfidenceModel(("logit",), (1.0,), 5.0, (0.0,), (1.0,))
    assert Pipeline(noex, scorer, confidence=given).with_index(ex).confidence.bias == 5.0  # a given one stays


def test_noex_falls_back_to_the_with_examples_combiner(tmp_path, encoder):
    scorer = FakeScorer({}, path=_model_dir(tmp_path, with_noex=False))
    noex = ToolIndex.build(tiny_catalog(), encoder=encoder, with_examples=False)
    assert Pipeline(noex, scorer).confidence.bias == 1.0


def test_explanation_says_why_a_named_other_server_lowered_the_tool(deployment):
    deployed, public = deployment
    pipe = make(deployed, public)
    r = pipe.search(REQUEST, eligible=Eligibility.of(servers=["Weather", "Slack"]), explain=True)
    assert all("the request names GitHub, not this tool's server" in t.explanation["reason"] for t in r.tools)
    plain = pipe.search("severe weather alerts for a region", eligible=Eligibility.of(servers=["Weather"]), explain=True)
    assert all("lowered" not in t.explanation["reason"] for t in plain.tools)


# ------------------------------------------------------------------ casual mentions (mentions_server)

BOOST = 3.0
MENTIONS = ConfidenceModel(("logit", "mentions_server"), (1.0, BOOST), 0.0, (0.0, 0.0), (1.0, 1.0))


def test_candidate_features_mentions_server_by_hand():
    hits = [Hit(ToolId("GitHub", "create_issue"), 1, 1.0), Hit(ToolId("Slack", "post_message"), 2, 0.5)]
    assert list(candidate_features(hits, mentioned_servers=["Slack"])["mentions_server"]) == [0.0, 1.0]
    assert list(candidate_features(hits)["mentions_server"]) == [0.0, 0.0]


def test_a_casual_mention_lifts_that_servers_tools(deployment):
    deployed, public = deployment
    pipe = Pipeline(deployed, FakeScorer({"post_message": 0.5, "create_issue": 0.6}, default=0.01),
                    confidence=MENTIONS, public_index=public, policy=Policy(proceed_threshold=0.5))
    request = "send a slack msg saying the issue is fixed"
    assert pipe.named_servers(request) == []                       # not a restriction...
    assert pipe.named_servers(request, loose=True) == ["Slack"]    # ...but evidence
    r = pipe.search(request)
    assert r.restricted_to == []
    assert r.tools[0].tool_id == ToolId("Slack", "post_message")
    assert r.tools[0].probability == pytest.approx(sigmoid(logit(0.5) + BOOST))
    assert next(t for t in r.tools if t.tool_id.server == "GitHub").probability == pytest.approx(0.6)


def test_a_hidden_server_mentioned_casually_never_counts(deployment):
    deployed, public = deployment
    pipe = Pipeline(deployed, FakeScorer({"vault_alerts": 0.4, "get_alerts": 0.4}, default=0.01),
                    confidence=MENTIONS, public_index=public, policy=Policy(proceed_threshold=0.5))
    eligible = Eligibility.of(servers=["Weather"])
    request = "severe alerts from vault weather for my region"
    assert pipe.named_servers(request, eligible, loose=True) == []
    r = pipe.search(request, eligible=eligible)
    assert r.best_probability == pytest.approx(0.4)
    assert "vault" not in json.dumps(result_to_dict(r)).lower()
    # the tenant that owns it gets the evidence
    assert pipe.named_servers(request, Eligibility.of(servers=["Weather", PRIVATE]), loose=True) == [PRIVATE]


def test_explanation_says_a_casual_mention_raised_the_tool(deployment):
    deployed, public = deployment
    pipe = Pipeline(deployed, FakeScorer({"post_message": 0.5}, default=0.01),
                    confidence=MENTIONS, public_index=public, policy=Policy(proceed_threshold=0.5))
    r = pipe.search("send a slack msg saying the issue is fixed", explain=True)
    slack = [t for t in r.tools if t.tool_id.server == "Slack"]
    assert slack and all("raised: the request mentions Slack" in t.explanation["reason"] for t in slack)
    assert not any("raised" in t.explanation["reason"] for t in r.tools if t.tool_id.server != "Slack")


def test_a_public_index_set_later_is_read_by_the_name_matchers():
    """The service and the gateway build the public catalog's index in the background and set it on the
    pipelines once it is ready: the registry's names count from then on."""
    from retrieval.pipeline.confidence import ConfidenceModel

    pipe = Pipeline(ToolIndex.build(Catalog([Tool("Mail", "send_email", "Send an email")]), encoder=HashEncoder()),
                    FakeScorer(), confidence=ConfidenceModel(("logit",), (1.0,), 0.0, (0.0,), (1.0,)))
    assert pipe.named_servers("open a ticket in Jira") == []
    pipe.public_index = ToolIndex.build(Catalog([Tool("Jira", "create_issue", "Create a Jira issue")]),
                                        encoder=HashEncoder())
    assert pipe.named_servers("open a ticket in Jira") == ["Jira"]
