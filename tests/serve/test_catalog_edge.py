"""Finding 2: hostile catalog content is refused at the edge with a 422, never a 500 later.

Deep schemas used to break every search of every tenant that could see the server (the token
report deep-copies definitions), lone surrogates gave 500s, and names took control characters,
bidi overrides, look-alike letters, and invalid UTF-8 that mapped different names to one server.
"""

from __future__ import annotations

import pytest

from real_app import key
from retrieval.catalog.rules import MAX_SCHEMA_BYTES, MAX_SCHEMA_DEPTH


def nested(depth: int) -> dict:
    """An inputSchema ``depth`` levels deep (the schema object itself is level 1)."""
    schema: dict = {"type": "string"}
    for _ in range(depth - 1):
        schema = {"x": schema}
    return schema


def test_nested_counts_levels():
    from retrieval.catalog.rules import check_json
    assert check_json(nested(1), "s", max_depth=99) == 1 and check_json(nested(7), "s", max_depth=99) == 7


def searches_work(service):
    for tenant in ("ops", "acme", "all"):
        for body in ({"request": "create an issue in a repository", "explain": True},
                     {"request": "list shard allocation", "format": "openai"}):
            r = service.post("/v1/search", json=body, headers=key(tenant))
            assert r.status_code == 200, (tenant, r.text)


@pytest.mark.parametrize("depth", [MAX_SCHEMA_DEPTH + 1, 256, 494, 5000])
def test_deep_schemas_are_refused_and_searches_keep_working(service, depth):
    schema = '{"x": ' * (depth - 1) + '{"type": "string"}' + "}" * (depth - 1)  # json.dumps would recurse
    body = '{"tools": [{"name": "deep", "description": "a deep schema", "inputSchema": ' + schema + "}]}"
    r = service.put("/v1/servers/GitHub", content=body, headers={**key("ops"), "Content-Type": "application/json"})
    assert r.status_code == 422, r.text[:300]
    message = r.json()["error"]["message"]
    assert str(MAX_SCHEMA_DEPTH) in message and "Traceback" not in r.text
    searches_work(service)
    assert service.get("/v1/servers/GitHub", headers=key("acme")).status_code == 200


def test_the_deepest_allowed_schema_is_served_everywhere(service):
    tool = {"name": "deep", "description": "create a deep issue", "inputSchema": nested(MAX_SCHEMA_DEPTH)}
    assert service.put("/v1/servers/GitHub", json={"tools": [tool]}, headers=key("ops")).status_code == 200
    searches_work(service)
    r = service.get("/v1/servers/GitHub", headers=key("acme"))
    assert r.status_code == 200 and r.json()["tools"][0]["inputSchema"] == tool["inputSchema"]
    r = service.post("/v1/search", json={"request": "create a deep issue", "format": "anthropic"}, headers=key("acme"))
    assert r.json()["tools"][0]["definition"]["input_schema"]["x"] == tool["inputSchema"]["x"]


def test_oversized_schemas_are_refused(service):
    big = {"type": "object", "description": "d" * (MAX_SCHEMA_BYTES + 1)}
    r = service.put("/v1/servers/Big", json={"tools": [{"name": "t", "inputSchema": big}]}, headers=key("ops"))
    assert r.status_code == 422 and f"the limit is {MAX_SCHEMA_BYTES}" in r.json()["error"]["message"]


@pytest.mark.parametrize("name, words", [
    ("Nul%00Server", "U+0000"),
    ("Line%0D%0ABreak", "U+000D"),
    ("Git%E2%80%AEbuH", "U+202E"),              # right-to-left override
    ("Zero%E2%80%8BWidth", "U+200B"),
    ("G%D1%96tHub", "mixes letters of the Cyrillic and Latin scripts"),   # Cyrillic і
    ("%EF%BC%A7itHub", "compatibility form"),     # full-width G
    ("Bad%FFByte", "U+FFFD"),                     # invalid UTF-8
    ("%20Padded", "starts or ends with a space"),
])
def test_bad_server_names_are_refused(service, name, words):
    r = service.put(f"/v1/servers/{name}", json={"tools": [{"name": "t"}]}, headers=key("ops"))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "invalid_server_name" and words in r.json()["error"]["message"]
    assert len(service.get("/v1/servers", headers=key("ops")).json()["servers"]) == 4


@pytest.mark.parametrize("tool_name", ["a\x00b", "line\nbreak", "rtl\u202eoverride", "p\u0430ypal", "\uff41pi"])
def test_bad_tool_names_are_refused(service, tool_name):
    r = service.put("/v1/servers/Tools", json={"tools": [{"name": tool_name}]}, headers=key("ops"))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["fields"][0]["path"] == "body.tools[0].name"


def test_invalid_utf8_never_maps_two_names_to_one_server(service):
    for raw in ("%FF", "%FE", "%C3%28"):
        assert service.get(f"/v1/servers/X{raw}", headers=key("ops")).status_code == 404
        assert service.put(f"/v1/servers/X{raw}", json={"tools": [{"name": "t"}]}, headers=key("ops")).status_code == 422
        assert service.delete(f"/v1/servers/X{raw}", headers=key("ops")).status_code == 404


def test_names_are_stored_nfc_normalised(service):
    decomposed, composed = "Cafe\u0301", "Caf\u00e9"
    r = service.put(f"/v1/servers/{decomposed}", json={"tools": [{"name": "Re\u0301sume\u0301"}],
                                                      "examples": {"Re\u0301sume\u0301": ["summarise this"]}},
                   headers=key("ops"))
    assert r.status_code == 201 and r.json()["name"] == composed
    for form in (decomposed, composed):
        got = service.get(f"/v1/servers/{form}", headers=key("ops")).json()
        assert got["name"] == composed and got["tools"][0]["name"] == "R\u00e9sum\u00e9"
    r = service.put(f"/v1/servers/{composed}", json={"tools": [{"name": "R\u00e9sum\u00e9"}, {"name": "Re\u0301sume\u0301"}]},
                   headers=key("ops"))
    assert r.status_code == 422 and "appears twice" in r.json()["error"]["message"]
    assert service.delete(f"/v1/servers/{decomposed}", headers=key("ops")).status_code == 200


def test_whole_script_look_alikes_of_an_existing_server_are_refused(service):
    assert service.put("/v1/servers/Ape", json={"tools": [{"name": "t"}]}, headers=key("ops")).status_code == 201
    r = service.put("/v1/servers/\u0410\u0440\u0435", json={"tools": [{"name": "t"}]}, headers=key("ops"))  # Cyrillic
    assert r.status_code == 422 and "reads the same as the existing server 'Ape'" in r.json()["error"]["message"]
    # case alone is not a look-alike: distinct servers may differ in case (MCP-Zero has FireCrawl and Firecrawl)
    assert service.put("/v1/servers/APE", json={"tools": [{"name": "t"}]}, headers=key("ops")).status_code == 201


@pytest.mark.parametrize("path, raw", [
    ("/v1/search", '{"request": "find \\ud800 tools"}'),
    ("/v1/search", '{"request": "x", "need": "\\udc00"}'),
    ("/v1/search", '{"request": "x", "previous": {"attempt": 1, "decision": "no_fit", "tools": [{"server": "\\ud800", "tool": "t"}]}}'),
    ("/v1/score", '{"request": "x", "candidates": [{"id": "1", "name": "\\udfff", "description": "d"}]}'),
    ("/v1/score", '{"request": "x", "candidates": [{"id": "1", "name": "n", "description": "\\ud83d"}]}'),
])
def test_lone_surrogates_are_refused_everywhere(service, path, raw):
    r = service.post(path, content=raw.encode(), headers={**key("acme"), "Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    assert "lone surrogate" in r.json()["error"]["message"]


def test_deep_bodies_are_refused_before_parsing(service):
    raw = '{"request": "x", "need": ' + "[" * 100_000 + "]" * 100_000 + "}"
    r = service.post("/v1/search", content=raw.encode(), headers={**key("acme"), "Content-Type": "application/json"})
    assert r.status_code == 422 and "nested 100001 levels deep" in r.json()["error"]["message"]
    ok = '{"request": "brackets [[[[ in a string {{{{ are not nesting"}'
    assert service.post("/v1/search", content=ok.encode(),
                       headers={**key("acme"), "Content-Type": "application/json"}).status_code == 200
