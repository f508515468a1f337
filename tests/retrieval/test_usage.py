"""Learned examples (retrieval.index.learned) and the gateway's learning hook (serve.usage.GatewayUsage)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fakes import HashEncoder, tiny_catalog
from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import ToolId
from retrieval.index.embedded import ToolIndex
from retrieval.index.learned import LearnedExamples, near_duplicate, retrieve_with_learned

SHARDS = ToolId("Elasticsearch", "get_shards")


def test_bounded_to_the_most_recent_and_near_duplicates_merged():
    learned = LearnedExamples(limit=3)
    for i in range(5):
        learned = learned.add(SHARDS, f"request number {i} about shards", at=i)
    assert learned.requests(SHARDS) == tuple(f"request number {i} about shards" for i in (2, 3, 4))
    merged = learned.add(SHARDS, "Request number 3 about shards!", at=9)
    assert len(merged[SHARDS]) == 3 and merged[SHARDS][-1].uses == 2
    assert near_duplicate("show the shard status of index logs", "show the shard status of the index logs")
    assert not near_duplicate("show the shard status", "create an issue")
    with pytest.raises(ValueError):
        learned.add(SHARDS, "   ")


def test_remove_and_round_trip(tmp_path):
    learned = LearnedExamples().add(SHARDS, "a", at=1).add(SHARDS, "b c", at=2).add(("GitHub", "create_issue"), "x", at=3)
    learned.save(tmp_path / "v1")
    assert LearnedExamples.load(tmp_path / "v1") == learned
    one, n = learned.remove(SHARDS, "a")
    assert n == 1 and one.requests(SHARDS) == ("b c",)
    none, n = learned.remove()
    assert n == 3 and len(none) == 0


def test_retrieval_is_the_index_own_without_learned_examples_and_moves_with_them():
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder())
    request = "why did the cluster turn yellow overnight"
    assert retrieve_with_learned(index, LearnedExamples(), request) == index.retrieve(request)
    other = LearnedExamples().add(("Weather", "get_alerts"), "cluster yellow overnight")
    acme = Eligibility.of(servers=["Elasticsearch", "GitHub"])
    assert retrieve_with_learned(index, other, request, eligible=acme) == index.retrieve(request, eligible=acme)
    learned = LearnedExamples().add(SHARDS, "the cluster turned yellow overnight")
    before = {h.tool_id: h for h in index.retrieve(request)}
    after = {h.tool_id: h for h in retrieve_with_learned(index, learned, request)}
    assert after[SHARDS].dense_score > before[SHARDS].dense_score
    assert after[SHARDS].dense_rank == 1 and after[SHARDS].rank < before[SHARDS].rank


def test_gateway_learns_a_successful_call_to_a_found_tool_only(tmp_path, monkeypatch):
    from serve.usage import GatewayUsage

    assert GatewayUsage.for_index(None) is None
    monkeypatch.setenv("TOOLRANK_LEARN_FROM_USE", "0")
    assert GatewayUsage.for_index(tmp_path / "idx") is None
    monkeypatch.delenv("TOOLRANK_LEARN_FROM_USE")
    usage = GatewayUsage.for_index(tmp_path / "idx")
    found = SimpleNamespace(tools=[SimpleNamespace(tool_id=SHARDS)])
    usage.offered("cluster is yellow", None, found)
    usage.called("GitHub", "create_issue", SimpleNamespace(isError=False))     # not offered
    usage.called(*SHARDS, SimpleNamespace(isError=True))                        # failed
    assert usage.learned() is None
    usage.called(*SHARDS, SimpleNamespace(isError=False))
    assert usage.learned().requests(SHARDS) == ("cluster is yellow",)
    assert (tmp_path / "idx-usage").is_dir()
    events = usage.book.tenant("local").events()
    assert [(e["offered"], e["learned"]) for e in events] == [(False, False), (True, False), (True, True)]


def test_toolrank_examples_list_and_remove(tmp_path, capsys):
    import time

    from serve.commands import main
    from serve.usage import Offer, UsageBook

    book = UsageBook(tmp_path / "store" / "usage")
    (tmp_path / "store").mkdir(exist_ok=True)
    (tmp_path / "store" / "CURRENT").write_text("v1\n")          # a service index store
    book.feedback("acme", Offer("why is the cluster yellow", None, (SHARDS,), time.time()), "r1", SHARDS, True)
    assert main(["examples", "list", "--store", str(tmp_path / "store")]) == 0
    assert "[acme] Elasticsearch / get_shards  (1)" in capsys.readouterr().out
    assert main(["examples", "remove", "--store", str(tmp_path / "store"), "--tenant", "acme",
                 "--server", "Elasticsearch", "--tool", "get_shards"]) == 0
    assert main(["examples", "remove", "--store", str(tmp_path / "store"), "--tenant", "acme", "--all"]) == 1
    assert main(["examples", "remove", "--store", str(tmp_path / "store")]) == 2   # says what to give


def test_the_gateway_learns_and_logs_the_masked_request_with_its_probabilities(tmp_path):
    """The gateway's offers are the book's: a secret typed into a request is masked in what is learned and
    logged, and the event keeps the offered probabilities (real-use calibration)."""
    from serve.usage import GatewayUsage

    usage = GatewayUsage.for_index(tmp_path / "idx")
    found = SimpleNamespace(decision="proceed", tools=[SimpleNamespace(tool_id=SHARDS, probability=0.9)])
    usage.offered("shards of logs-2024 with password=hunter2", None, found)
    usage.called(*SHARDS, SimpleNamespace(isError=False))
    assert "hunter2" not in usage.learned().requests(SHARDS)[0]
    event = usage.book.tenant("local").events()[-1]
    assert "hunter2" not in event["request"] and event["offered_probabilities"] == [[*SHARDS, 0.9]]
    assert event["decision"] == "proceed"
