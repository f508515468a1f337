"""Eligibility: which tools a tenant may use."""

from __future__ import annotations

import pytest

from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import ToolId


def test_unrestricted_allows_everything():
    e = Eligibility()
    assert e.unrestricted
    assert e.allows(ToolId("Any", "tool"))
    assert e.allows_server("Any")
    assert Eligibility.of().unrestricted


def test_servers_only():
    e = Eligibility.of(servers=["Slack", "GitHub"])
    assert not e.unrestricted
    assert e.servers == frozenset({"Slack", "GitHub"})
    assert e.allows(ToolId("Slack", "post_message"))
    assert e.allows(("GitHub", "create_issue"))               # plain tuples work too
    assert not e.allows(ToolId("Weather", "get_forecast"))
    assert e.allows_server("Slack") and not e.allows_server("Weather")


def test_tools_only():
    e = Eligibility.of(tools=[("Slack", "post_message")])
    assert e.tools == frozenset({ToolId("Slack", "post_message")})
    assert e.allows(ToolId("Slack", "post_message"))
    assert not e.allows(ToolId("Slack", "list_channels"))
    assert e.allows_server("Slack") and not e.allows_server("GitHub")


def test_servers_and_tools_must_both_pass():
    e = Eligibility.of(servers=["GitHub"], tools=[("Slack", "post_message"), ("GitHub", "create_issue")])
    assert e.allows(ToolId("GitHub", "create_issue"))
    assert not e.allows(ToolId("Slack", "post_message"))      # tool allowed, server not
    assert not e.allows(ToolId("GitHub", "list_pull_requests"))  # server allowed, tool not


def test_empty_sets_allow_nothing():
    assert not Eligibility.of(servers=[]).allows(ToolId("A", "t"))
    assert not Eligibility.of(tools=[]).allows(ToolId("A", "t"))
    assert not Eligibility.of(servers=[]).unrestricted


def test_narrowed_to():
    assert Eligibility().narrowed_to(["Slack"]).servers == frozenset({"Slack"})
    e = Eligibility.of(servers=["Slack", "GitHub"]).narrowed_to(["Slack", "Weather"])
    assert e.servers == frozenset({"Slack"})
    t = Eligibility.of(tools=[("Slack", "post_message")]).narrowed_to(["Slack"])
    assert t.tools == frozenset({ToolId("Slack", "post_message")}) and t.servers == frozenset({"Slack"})


def test_of_accepts_generators_and_is_hashable():
    e = Eligibility.of(servers=(s for s in ["A", "B"]))
    assert e == Eligibility.of(servers=["B", "A"])
    assert hash(e) == hash(Eligibility.of(servers=["B", "A"]))


def test_a_single_server_string_is_refused():
    with pytest.raises(ValueError, match=r"servers must be a list of names, got the string 'GitHub': wrap it"):
        Eligibility.of(servers="GitHub")
