"""Finding 3: nothing a tenant cannot see may change what it gets.

A tenant restricted to some servers sends the same requests before and after an admin adds,
changes and removes servers hidden from it, whose texts share the tenant's words; every
answer must be the same, byte for byte (scores, probabilities, explanations, versions).
"""

from __future__ import annotations

from real_app import key

# Texts that collide with the tenant's tools (tiny_catalog: Elasticsearch, GitHub), so the
# hidden servers move the deployment's document frequencies and average length.
SHADOW = {"description": "Search engine shards and code repositories", "tools": [
    {"name": "get_shards", "description": "Get shard allocation for an index of the cluster, shard status"},
    {"name": "create_issue", "description": "Create a new issue in a repository, an issue about the index"},
    {"name": "list_indices", "description": "List all indices in the cluster; indices and shards and issues"}]}
DECOY = {"description": "Issues", "tools": [
    {"name": "issue", "description": "issue issue issue repository repository pull requests"}]}

REQUESTS = [
    {"request": "list shard allocation for an index", "explain": True},
    {"request": "create a new issue in my repository", "explain": True, "format": "openai"},
    {"request": "list the pull requests and the indices", "need": "pull requests of a repository",
     "explain": True, "format": "anthropic", "k": 3},
    {"request": "open an issue on GitHub about the shards", "explain": True},
    {"request": "something about the weather", "explain": True,
     "previous": {"attempt": 1, "decision": "search_again"}},
]


def tenant_view(service, tenant: str = "acme") -> list[bytes]:
    headers = {**key(tenant), "X-Request-ID": "same-id"}  # error bodies quote it
    out = []
    for body in REQUESTS:
        r = service.post("/v1/search", json=body, headers=headers)
        assert r.status_code == 200, r.text
        out.append(r.content)
    for path in ("/v1/servers", "/v1/servers/GitHub", "/v1/servers/Shadow", "/v1/servers/Decoy"):
        r = service.get(path, headers=headers)
        out.append(f"{r.status_code} ".encode() + r.content)
    return out


def test_hidden_servers_change_nothing_a_tenant_gets(service):
    before = tenant_view(service)
    admin = key("ops")
    explained = [b for b in before if b"bm25_score" in b]
    assert explained, "the answers must carry BM25 scores, or the test proves nothing"

    steps = [
        ("put", "Shadow", SHADOW),
        ("put", "Decoy", DECOY),
        ("put", "Shadow", {**SHADOW, "tools": SHADOW["tools"][:2]}),   # change a hidden server
        ("delete", "Decoy", None),
        ("delete", "Shadow", None),
    ]
    for method, name, body in steps:
        r = service.put(f"/v1/servers/{name}", json=body, headers=admin) if method == "put" \
            else service.delete(f"/v1/servers/{name}", headers=admin)
        assert r.status_code in (200, 201), r.text
        assert tenant_view(service) == before, f"after {method} {name}, the tenant's answers changed"

    # ... while an admin, who sees the hidden server, does see the store move
    assert service.get("/v1/servers", headers=admin).json()["index_version"] == 6


def test_a_tenant_sees_its_own_changes(service):
    before = service.get("/v1/servers", headers=key("acme")).json()["index_version"]
    r = service.put("/v1/servers/GitHub", json={"description": "Code hosting", "tools": [
        {"name": "create_issue", "description": "Create a new issue in a repository, with labels"}]},
        headers=key("ops"))
    assert r.status_code == 200
    after = service.get("/v1/servers", headers=key("acme")).json()["index_version"]
    assert after != before  # a visible change moves the tenant's version


def test_a_tenant_that_sees_everything_sees_the_store_version(service):
    v = service.get("/v1/servers", headers=key("all")).json()["index_version"]
    service.put("/v1/servers/Shadow", json=SHADOW, headers=key("ops"))
    assert service.get("/v1/servers", headers=key("all")).json()["index_version"] == v + 1
