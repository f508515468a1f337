"""The tenant-invariance test, extended to learning from use: what one tenant teaches the
service never changes another tenant's answers, byte for byte."""

from __future__ import annotations

import pytest

from real_app import key
from test_tenant_invariance import REQUESTS, tenant_view


def teach(service, tenant: str) -> int:
    """``tenant`` searches every request and calls each offered tool of the first three; returns how many it learned."""
    learned = 0
    for i, body in enumerate(REQUESTS + [{"request": "the cluster turned yellow, replica unassigned"}]):
        r = service.post("/v1/search", json={k: v for k, v in body.items() if k != "previous"},
                        headers={**key(tenant), "X-Request-ID": f"teach-{i}"})
        assert r.status_code == 200, r.text
        for t in r.json()["tools"][:3]:
            f = service.post("/v1/feedback", json={"request_id": f"teach-{i}", "server": t["server"],
                                                  "tool": t["tool"], "outcome": "success"}, headers=key(tenant))
            assert f.status_code == 200, f.text
            learned += f.json()["learned"]
    return learned


@pytest.mark.parametrize("teacher", ["all", "ops"])
def test_another_tenants_learning_changes_nothing_a_tenant_gets(service, teacher):
    before = tenant_view(service, "acme")
    assert teach(service, teacher) >= 10
    assert service.get("/v1/examples", headers=key(teacher)).json()["tools"], "the teacher must have learned"
    assert tenant_view(service, "acme") == before
    assert service.get("/v1/examples", headers=key("acme")).json()["tools"] == []


def test_a_tenants_own_learning_does_change_its_answers(service):
    """The control: the same teaching by the tenant itself moves its answers (so the test above can fail)."""
    before = tenant_view(service, "acme")
    assert teach(service, "acme") >= 5
    assert tenant_view(service, "acme") != before
