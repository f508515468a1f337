from __future__ import annotations

import pytest

from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.formats import load_default_catalog
from retrieval.catalog.model import ToolId
from retrieval.shortcuts.exact_names import ExactNameMatcher, is_identifier_like

TOOLS = [
    ToolId("Elasticsearch", "get_shards"),
    ToolId("Git", "git_diff_unstaged"),
    ToolId("Git - geropl", "git_diff_unstaged"),
    ToolId("Slack - nourl", "slack_list_channels"),
    ToolId("Airflow", "List DAGs"),
    ToolId("Meilisearch", "search"),
    ToolId("Kagi Search", "search"),
    ToolId("Meilisearch", "get-task"),
    ToolId("Meilisearch", "health-check"),
    ToolId("Axiom", "listDatasets"),
    ToolId("Astra DB", "GetRecord"),
    ToolId("Graphlit", "GitHub"),
    ToolId("Graphlit", "Slack"),
    ToolId("YouTube", "videos.getVideo"),
]


@pytest.fixture(scope="module")
def matcher() -> ExactNameMatcher:
    return ExactNameMatcher(TOOLS)


@pytest.mark.parametrize(("request_text", "expected"), [
    ("how many shards? call get_shards on the cluster", [ToolId("Elasticsearch", "get_shards")]),
    ("show me git_diff_unstaged for the repo",
     [ToolId("Git", "git_diff_unstaged"), ToolId("Git - geropl", "git_diff_unstaged")]),
    ("SLACK_LIST_CHANNELS please", [ToolId("Slack - nourl", "slack_list_channels")]),
    ("run `get_shards`.", [ToolId("Elasticsearch", "get_shards")]),
    ('run "List DAGs" now', [ToolId("Airflow", "List DAGs")]),
    ("run 'List DAGs' now", [ToolId("Airflow", "List DAGs")]),
    ("run `search` on both", [ToolId("Meilisearch", "search"), ToolId("Kagi Search", "search")]),
    ("call get-task 5", [ToolId("Meilisearch", "get-task")]),
    ("use listDatasets then GetRecord", [ToolId("Axiom", "listDatasets"), ToolId("Astra DB", "GetRecord")]),
    ("fetch it with videos.getVideo", [ToolId("YouTube", "videos.getVideo")]),
    ("call youtube.videos.getVideo for id 42", [ToolId("YouTube", "videos.getVideo")]),
    ("first get_shards, then git_diff_unstaged",
     [ToolId("Elasticsearch", "get_shards"), ToolId("Git", "git_diff_unstaged"),
      ToolId("Git - geropl", "git_diff_unstaged")]),
    # ordinary words and prose never fire
    ("list dags in the scheduler", []),
    ("List DAGs in the scheduler", []),
    ("search for the error", []),
    ('find documents that mention "search"', []),
    ("open an issue on GitHub and post in Slack", []),
    ("do a quick health-check of the cluster", []),
    ("get shards of the index", []),
    ("don't forget the get_shardsX variant", []),
])
def test_find(matcher, request_text, expected):
    assert matcher.find(request_text) == expected


def test_eligibility_filters_every_copy(matcher):
    only_git = Eligibility.of(servers=["Git"])
    assert matcher.find("show git_diff_unstaged", eligible=only_git) == [ToolId("Git", "git_diff_unstaged")]
    assert matcher.find("call get_shards", eligible=only_git) == []
    tools_only = Eligibility.of(tools=[("Git - geropl", "git_diff_unstaged")])
    assert matcher.find("show git_diff_unstaged", eligible=tools_only) == [ToolId("Git - geropl", "git_diff_unstaged")]


@pytest.mark.parametrize(("name", "expected"), [
    ("get_shards", True), ("get-task", True), ("listDatasets", True), ("GetRecord", True),
    ("AppBuilderClient", True), ("videos.getVideo", True),
    ("search", False), ("List", False), ("List DAGs", False), ("GitHub", False), ("OneDrive", False),
    ("health-check", False), ("iOS", False), ("__init__", False),
])
def test_is_identifier_like(name, expected):
    assert is_identifier_like(name) is expected


def test_bad_input():
    with pytest.raises(ValueError, match="not a \\(server, tool\\) pair"):
        ExactNameMatcher(["get_shards"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="request must be a string"):
        ExactNameMatcher(TOOLS).find(None)  # type: ignore[arg-type]
    assert ExactNameMatcher([]).find("call get_shards") == []


def test_shipped_catalog_names():
    catalog = load_default_catalog(with_examples=False)
    m = ExactNameMatcher(t.id for t in catalog)
    assert m.find("run get_shards") == [ToolId("Elasticsearch", "get_shards")]
    assert m.find("list the channels with slack_list_channels") == [ToolId("Slack - nourl", "slack_list_channels")]
    assert m.find('please run "List DAGs"') == [ToolId("Airflow", "List DAGs")]
    assert m.find("search the docs and list everything") == []
    assert len(m) == len(catalog)
