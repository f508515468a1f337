"""PUT /v1/servers/{name}?write_examples=true: example requests written for new or changed tools."""

from __future__ import annotations

import json

import retrieval.index.examples as ix
from real_app import key
from retrieval.writing.llm import EndpointError

BODY = {"description": "Issue tracker", "tools": [
    {"name": "create_ticket", "description": "Create a ticket in a project"},
    {"name": "close_ticket", "description": "Close a ticket"}]}


class FakeClient:
    """A chat client that writes numbered example requests (or fails), and counts its calls."""

    def __init__(self, fail: bool = False):
        self.fail, self.calls = fail, 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def chat(self, messages, temperature=0.0):
        self.calls += 1
        if self.fail:
            raise EndpointError("endpoint said 503", status=503)
        tool = messages[-1]["content"].split("\n")[0][:40]
        return type("Reply", (), {"text": json.dumps({"examples": [f"use {tool} way {i}" for i in range(5)]})})()


def stored(service, tool):
    return service.app.state.toolrank.engine.snapshot.catalog[("Tracker", tool)].examples


def test_put_writes_examples_once_per_tool_content(service, monkeypatch):
    fake = FakeClient()
    monkeypatch.setattr(ix, "llm_client", lambda concurrency=4: fake)
    r = service.put("/v1/servers/Tracker?write_examples=true", json=BODY, headers=key("ops"))
    assert r.status_code == 201, r.text
    assert "2 tool(s) written" in r.json()["examples_note"]
    assert len(stored(service, "create_ticket")) == 5 and fake.calls == 2

    changed = {**BODY, "tools": [BODY["tools"][0], {"name": "close_ticket", "description": "Close a ticket for good"}]}
    r = service.put("/v1/servers/Tracker?write_examples=true", json=changed, headers=key("ops"))
    assert r.status_code == 200 and fake.calls == 3          # only the changed tool is written again
    assert r.json()["re_embedded"] == 1
    assert "1 tool(s) written, 1 from the cache" in r.json()["examples_note"]


def test_put_with_a_failing_endpoint_indexes_the_tools_without_examples(service, monkeypatch):
    monkeypatch.setattr(ix, "llm_client", lambda concurrency=4: FakeClient(fail=True))
    r = service.put("/v1/servers/Tracker?write_examples=true", json=BODY, headers=key("ops"))
    assert r.status_code == 201, r.text
    assert "WITHOUT example requests" in r.json()["examples_note"] and "503" in r.json()["examples_note"]
    assert stored(service, "create_ticket") == ()


def test_put_without_an_endpoint_is_refused_and_nothing_changes(service, monkeypatch):
    monkeypatch.delenv("TOOLRANK_LLM_BASE_URL", raising=False)
    r = service.put("/v1/servers/Tracker?write_examples=true", json=BODY, headers=key("ops"))
    assert r.status_code == 422 and "TOOLRANK_LLM_BASE_URL" in r.json()["error"]["message"]
    assert service.get("/v1/servers/Tracker", headers=key("ops")).status_code == 404
