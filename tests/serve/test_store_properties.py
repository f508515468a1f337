"""Property tests of the index store through the service (real ToolIndex, hash encoder).

Any catalog the service accepts comes back exactly as sent (names NFC-normalised), from the
served index and from the folder on disk; anything it refuses is a 4xx that leaves the store as
it was; nothing is ever a 5xx. A small budget runs by default; ``-m slow`` runs a long one.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakes import HashEncoder
from real_app import key, real_client
from retrieval.catalog.rules import MAX_SCHEMA_DEPTH
from retrieval.index.embedded import ToolIndex

# Text with the characters that broke the store, controls, bidi overrides, look-alikes and
# (sometimes) lone surrogates, which must be refused.
TRICKY = "\u2028\u2029\u0085\n\r\t\x00\x1c\u202e\u200b\ufeff\ufffd\u0430\u0301e\uff21 /%\"\\"
SURROGATES = "\ud800\udbff\udc00\udfff"
text = st.text(st.characters(codec="utf-8") | st.sampled_from(TRICKY), max_size=30)
with_surrogate = st.builds(lambda a, s, b: a + s + b, text, st.sampled_from(SURROGATES), text)
risky_text = st.one_of(text, text, text, with_surrogate)  # mostly storable
clean_names = st.text(st.characters(codec="utf-8", categories=["L", "N", "P", "S"]) | st.just(" "),
                      min_size=1, max_size=24)
tricky_names = st.text(st.characters(codec="utf-8") | st.sampled_from(TRICKY + SURROGATES), min_size=1, max_size=24)
names = st.one_of(clean_names, clean_names, tricky_names,
                  st.sampled_from(["GitHub", "a b", "Cafe\u0301", "G\u0456tHub", " x", "x.", "..", "%2F", "a/b"]))
scalars = (st.none() | st.booleans() | st.integers(min_value=-(2 ** 70), max_value=2 ** 70)
           | st.floats(allow_nan=True, allow_infinity=True) | risky_text)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(risky_text, inner, max_size=4), max_leaves=20)


@st.composite
def deep(draw):
    depth = draw(st.integers(min_value=MAX_SCHEMA_DEPTH - 3, max_value=MAX_SCHEMA_DEPTH + 3))  # either side of the limit
    value = {"type": "string"}
    for _ in range(depth - 1):
        value = {"x": value}
    return value


objects = st.dictionaries(risky_text, json_values, max_size=5)
schemas = st.one_of(st.none(), objects, objects, objects, deep(), json_values)
tools = st.fixed_dictionaries({"name": names}, optional={"description": risky_text, "inputSchema": schemas})
bodies = st.fixed_dictionaries({"tools": st.lists(tools, min_size=1, max_size=3)},
                               optional={"description": risky_text,
                                         "examples": st.dictionaries(names, st.lists(risky_text, max_size=2),
                                                                     max_size=2)})


def canonical(value) -> str:
    """Strict equality: true is not 1, 1.0 is not 1."""
    return json.dumps(value, sort_keys=True, ensure_ascii=True, allow_nan=True)


def store_state(root: Path) -> tuple:
    return (root / "CURRENT").read_text(), sorted(p.name for p in root.iterdir())


def check_store(tmp_path: Path, examples: int) -> None:
    client = real_client(tmp_path)
    root = tmp_path / "store"
    outcomes: dict[int, int] = {}

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(name=names, body=bodies)
    def put_round_trips(name: str, body: dict) -> None:
        before = store_state(root)
        raw = json.dumps(body, ensure_ascii=True, allow_nan=True).encode()  # lone surrogates travel as \ud800
        path = "/v1/servers/" + quote(name.encode("utf-8", "surrogatepass"), safe="").replace(".", "%2E")
        r = client.put(path, content=raw, headers={**key("ops"), "Content-Type": "application/json"})
        outcomes[r.status_code] = outcomes.get(r.status_code, 0) + 1
        assert r.status_code < 500, r.text
        if r.status_code >= 400:
            assert store_state(root) == before, "a refused change touched the store"
            return
        stored = r.json()["name"]
        assert stored == unicodedata.normalize("NFC", name)
        expected = {"description": body.get("description", ""),
                    "tools": [{"name": unicodedata.normalize("NFC", t["name"]),
                               "description": t.get("description") or "",
                               "inputSchema": t.get("inputSchema")} for t in body["tools"]]}
        got = client.get("/v1/servers/" + quote(stored, safe="").replace(".", "%2E"), headers=key("ops"))
        assert got.status_code == 200, got.text
        assert canonical({k: got.json()[k] for k in ("description", "tools")}) == canonical(expected)
        # ... and from the folder on disk, as a restarted worker would read it
        on_disk = ToolIndex.load(root / (root / "CURRENT").read_text().strip(), encoder=HashEncoder()).catalog
        assert canonical([{"name": t.name, "description": t.description, "inputSchema": t.input_schema}
                          for t in on_disk.server_tools(stored)]) == canonical(expected["tools"])
        assert on_disk.server_descriptions[stored] == expected["description"]
        assert client.post("/v1/search", json={"request": "anything"}, headers=key("acme")).status_code == 200
        assert client.delete("/v1/servers/" + quote(stored, safe="").replace(".", "%2E"),
                             headers=key("ops")).status_code == 200

    try:
        put_round_trips()
    finally:
        client.__exit__(None, None, None)
    print(f"store property run: {examples} examples, statuses {dict(sorted(outcomes.items()))}")
    assert any(s < 300 for s in outcomes) and any(s == 422 for s in outcomes), outcomes


def test_store_round_trips_what_it_accepts(tmp_path):
    check_store(tmp_path, examples=40)


@pytest.mark.slow
def test_store_round_trips_what_it_accepts_long(tmp_path):
    check_store(tmp_path, examples=1500)
