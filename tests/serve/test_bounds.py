"""Bad input gets a 4xx whose message names the field and the fix; never a 500."""

from __future__ import annotations

import json

import pytest

from serve_fakes import auth

CAND = {"id": "c", "name": "send_email", "description": "Send an email"}


def candidates(n):
    return [{**CAND, "id": str(i)} for i in range(n)]


@pytest.mark.parametrize("path, body, field, words", [
    ("/v1/score", {"request": "x", "candidates": []}, "body.candidates", "at least 1 item"),
    ("/v1/score", {"request": "x", "candidates": candidates(201)}, "body.candidates", "at most 200 items"),
    ("/v1/score", {"request": "x" * 4001, "candidates": candidates(1)}, "body.request", "at most 4000"),
    ("/v1/score", {"request": "x", "need": "n" * 501, "candidates": candidates(1)}, "body.need", "at most 500"),
    ("/v1/score", {"request": "x", "candidates": [{**CAND, "description": "d" * 4001}]},
     "body.candidates[0].description", "at most 4000"),
    ("/v1/score", {"request": "x", "candidates": [{"id": "1"}]}, "body.candidates[0].name", "add this field"),
    ("/v1/score", {"request": "   ", "candidates": candidates(1)}, "body.request", "blank"),
    ("/v1/search", {"request": "x", "k": 0}, "body.k", "greater than or equal to 1"),
    ("/v1/search", {"request": "x", "k": 51}, "body.k", "less than or equal to 50"),
    ("/v1/search", {"request": "x", "format": "xml"}, "body.format", "'mcp', 'openai' or 'anthropic'"),
    ("/v1/search", {"request": "x", "reqest": "typo"}, "body.reqest", "check its spelling"),
    ("/v1/search", {"need": "x"}, "body.request", "add this field"),
    ("/v1/search", {"request": "x", "previous": {"attempt": 0, "decision": "proceed"}}, "body.previous.attempt",
     "greater than or equal to 1"),
    ("/v1/search", {"request": "x", "previous": {"attempt": 1, "decision": "maybe"}}, "body.previous.decision",
     "'proceed', 'search_again', 'choose' or 'no_fit'"),
])
def test_invalid_input_is_a_readable_422(client, path, body, field, words):
    r = client.post(path, json=body, headers=auth("acme"))
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_request"
    assert err["message"].startswith(field + ":"), err["message"]
    assert words in err["message"]
    assert err["fields"][0]["path"] == field
    assert "Traceback" not in r.text and len(r.text) < 2000  # the input is never echoed


def test_limits_are_inclusive(client):
    r = client.post("/v1/score", json={"request": "x" * 4000, "need": "n" * 500,
                                       "candidates": [{**CAND, "id": str(i), "description": "d" * 4000}
                                                      for i in range(200)]}, headers=auth("acme"))
    assert r.status_code == 200 and len(r.json()["scores"]) == 200
    assert client.post("/v1/search", json={"request": "x", "k": 50}, headers=auth("acme")).status_code == 200


def test_malformed_json_is_422(client):
    r = client.post("/v1/search", content=b'{"request": ', headers={**auth("acme"), "Content-Type": "application/json"})
    assert r.status_code == 422
    assert "valid JSON" in r.json()["error"]["message"]


def test_a_body_sent_without_its_json_content_type_says_how_to_send_it(client):
    r = client.post("/v1/search", content=b'{"request": "x"}', headers={**auth("acme"), "Content-Type": "text/plain"})
    assert r.status_code == 422
    assert "Content-Type: application/json" in r.json()["error"]["message"]
    r = client.post("/v1/search", json="hello", headers=auth("acme"))             # JSON, but not an object
    assert r.status_code == 422 and "must be a JSON object" in r.json()["error"]["message"]
    r = client.post("/v1/search", json={"request": "x", "previous": 5}, headers=auth("acme"))
    assert r.status_code == 422 and "Content-Type" not in r.json()["error"]["message"]   # a field, not the body


def test_oversized_body_is_413_before_parsing(client):
    big = json.dumps({"request": "x", "candidates": [{**CAND, "id": str(i), "description": "d" * 3000}
                                                     for i in range(400)]})
    assert len(big) > 1024 * 1024
    r = client.post("/v1/score", content=big, headers={**auth("acme"), "Content-Type": "application/json"})
    assert r.status_code == 413
    assert "limit is 1048576 bytes" in r.json()["error"]["message"]


def test_oversized_chunked_body_is_413(client):
    def chunks():
        yield b'{"request": "'
        for _ in range(40):
            yield b"x" * 32768
        yield b'"}'

    r = client.post("/v1/search", content=chunks(), headers={**auth("acme"), "Content-Type": "application/json"})
    assert r.status_code == 413


def test_body_limit_is_a_setting(make_client):
    c = make_client(max_body_bytes=2048, index_dir=None)
    r = c.post("/v1/score", json={"request": "x", "candidates": candidates(60)}, headers=auth("acme"))
    assert r.status_code == 413


def test_bad_server_payloads_are_422(client):
    admin = auth("ops")
    cases = [
        ({"tools": []}, "body.tools"),
        ({"tools": [{"description": "no name"}]}, "body.tools[0].name"),
        ({"tools": [{"name": "a", "inputSchema": "not an object"}]}, "body.tools[0].inputSchema"),
        ({"tools": [{"name": "a"}, {"name": "a"}]}, "appears twice"),
        ({"tools": [{"name": "a"}], "examples": {"b": ["x"]}}, "'examples' names 'b'"),
        ({"tools": [{"name": "a"}], "examples": {"a": ["x"] * 51}}, "at most 50"),
        ({"tools": [{"name": "a", "description": "d" * 4001}]}, "body.tools[0].description"),
        ({"tools": [{"name": "   "}]}, "tool name is empty"),
    ]
    for body, words in cases:
        r = client.put("/v1/servers/Zeta", json=body, headers=admin)
        assert r.status_code == 422, (body, r.text)
        assert words in r.json()["error"]["message"], r.json()
    assert client.put(f"/v1/servers/{'z' * 201}", json={"tools": [{"name": "a"}]}, headers=admin).status_code == 422


def test_unknown_routes_and_methods_are_json_4xx(client):
    r = client.get("/v2/nothing")
    assert r.status_code == 404 and "no such endpoint" in r.json()["error"]["message"]
    r = client.get("/v1/search", headers=auth("acme"))
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


def test_unexpected_errors_are_a_generic_500(make_client, caplog):
    from serve_fakes import FakeIndex, FakePipeline, demo_catalog

    class Broken(FakePipeline):
        def search(self, *a, **kw):
            raise RuntimeError("secret internals")

        def with_index(self, index):
            return Broken(index)

    c = make_client(Broken(FakeIndex(demo_catalog())))
    r = c.post("/v1/search", json={"request": "do the thing, body secret"}, headers=auth("acme"))
    assert r.status_code == 500
    assert "secret" not in r.text and r.json()["error"]["code"] == "internal_error"
    assert r.json()["error"]["request_id"] == r.headers["x-request-id"]
    logged = "\n".join(rec.getMessage() + str(rec.exc_info) for rec in caplog.records)
    assert "secret internals" in logged  # the exception is logged ...
    assert "body secret" not in logged   # ... the request body never
