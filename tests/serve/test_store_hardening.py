"""Findings 1 and 5: the index store round-trips any text it accepted, refuses what it could not
before writing anything, falls back to the newest readable version, and cleans crash leftovers."""

from __future__ import annotations

import json
import time

import pytest

from real_app import key, real_client
from serve.engine import Engine
from serve.index_store import IndexStore, StoreError
from serve_fakes import FakeIndex, FakePipeline, auth, demo_catalog

BREAKS = "\u2028\u2029\u0085"   # what str.splitlines() splits on and json.dumps(ensure_ascii=False) leaves raw
DOCS = {
    "description": f"Docs{BREAKS}server",
    "tools": [
        {"name": "read_page", "description": f"Read\u2028a page\u2029of the docs\u0085now",
         "inputSchema": {"type": "object", "properties": {"q": {"type": "string", "description": f"a{BREAKS}b"}}}},
        {"name": "search_docs", "description": "Search the docs", "inputSchema": {"type": "object"}},
    ],
    "examples": {"read_page": [f"read\u2028the page"]},
}


def served(client, name="Docs"):
    r = client.get(f"/v1/servers/{name}", headers=key("ops"))
    assert r.status_code == 200, r.text
    return {k: v for k, v in r.json().items() if k != "index_version"}


def test_line_separators_round_trip_through_the_store(tmp_path):
    first = real_client(tmp_path, poll_interval_s=0.05)
    second = real_client(tmp_path, poll_interval_s=0.05)  # another worker on the same store
    try:
        assert first.put("/v1/servers/Docs", json=DOCS, headers=key("ops")).status_code == 201
        sent = {"name": "Docs", "description": DOCS["description"],
                "tools": [{"name": t["name"], "description": t["description"], "inputSchema": t["inputSchema"]}
                          for t in DOCS["tools"]]}
        assert served(first) == sent
        # the next write reads the store back: it failed with a 500 when a record was split in two
        changed = {**DOCS, "tools": [DOCS["tools"][0], {**DOCS["tools"][1], "description": f"Search\u2028docs"}]}
        r = first.put("/v1/servers/Docs", json=changed, headers=key("ops"))
        assert r.status_code == 200 and r.json()["changed"] is True, r.text
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and second.get("/readyz", headers=key("ops")).json()["index_version"] != 3:
            time.sleep(0.02)
        assert served(second)["tools"][1]["description"] == "Search\u2028docs"  # the other worker followed
        found = second.post("/v1/search", json={"request": "read a page of the docs", "explain": True},
                            headers=key("ops"))
        assert found.status_code == 200 and found.json()["tools"][0]["tool"] == "read_page"
    finally:
        first.__exit__(None, None, None)
        second.__exit__(None, None, None)
    again = real_client(tmp_path)  # a restart reads the same version
    try:
        assert again.get("/readyz", headers=key("ops")).json()["index_version"] == 3
        assert served(again)["tools"][0]["description"] == DOCS["tools"][0]["description"]
        assert again.delete("/v1/servers/Docs", headers=key("ops")).status_code == 200
    finally:
        again.__exit__(None, None, None)
    # the records on disk are one per line, with the separators escaped
    current = (tmp_path / "store" / "CURRENT").read_text().strip()
    text = (tmp_path / "store" / current / "tools.jsonl").read_text(encoding="utf-8")
    assert not any(ch in text for ch in BREAKS)


@pytest.mark.parametrize("raw, words", [
    ('{"tools": [{"name": "t", "description": "lone \\ud800 surrogate"}]}', "lone surrogate"),
    ('{"tools": [{"name": "t", "inputSchema": {"type": "object", "default": NaN}}]}', "not a JSON number"),
    ('{"tools": [{"name": "t", "inputSchema": {"maximum": 1e400}}]}', "not a JSON number"),
    ('{"tools": [{"name": "t", "inputSchema": {"maximum": 123456789012345678901234567890}}]}', "64 bits"),
    ('{"tools": [{"name": "t", "inputSchema": {"\\udc00": 1}}]}', "lone surrogate"),
    ('{"tools": [{"name": "t"}], "description": "\\udfff"}', "lone surrogate"),
    ('{"tools": [{"name": "t"}], "examples": {"t": ["ex \\ud83d"]}}', "lone surrogate"),
])
def test_what_cannot_round_trip_is_refused_before_anything_is_written(tmp_path, raw, words):
    c = real_client(tmp_path)
    try:
        before = sorted(p.name for p in (tmp_path / "store").iterdir())
        pointer = (tmp_path / "store" / "CURRENT").read_text()
        r = c.put("/v1/servers/Bad", content=raw.encode(), headers={**key("ops"), "Content-Type": "application/json"})
        assert r.status_code == 422, r.text
        assert words in r.json()["error"]["message"]
        assert sorted(p.name for p in (tmp_path / "store").iterdir()) == before
        assert (tmp_path / "store" / "CURRENT").read_text() == pointer
        assert c.get("/v1/servers/Bad", headers=key("ops")).status_code == 404
        assert c.post("/v1/search", json={"request": "anything at all"}, headers=key("acme")).status_code == 200
    finally:
        c.__exit__(None, None, None)


def test_an_old_store_with_raw_separators_is_read(tmp_path):
    """Folders written before the fix hold raw U+2028 inside strings: they load now."""
    c = real_client(tmp_path)
    try:
        assert c.put("/v1/servers/Docs", json=DOCS, headers=key("ops")).status_code == 201
    finally:
        c.__exit__(None, None, None)
    store = tmp_path / "store"
    folder = store / (store / "CURRENT").read_text().strip()
    rows = [json.loads(line) for line in (folder / "tools.jsonl").read_text(encoding="utf-8").split("\n") if line]
    (folder / "tools.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                        encoding="utf-8")  # as the old writer did
    assert "\u2028" in (folder / "tools.jsonl").read_text(encoding="utf-8")
    again = real_client(tmp_path)
    try:
        assert served(again)["description"] == DOCS["description"]
        assert again.put("/v1/servers/Docs", json={**DOCS, "description": "x"}, headers=key("ops")).status_code == 200
    finally:
        again.__exit__(None, None, None)


# ------------------------------------------------------------------ fallback and leftovers (fake index)


def fake_engine(root):
    seed = FakeIndex(demo_catalog())
    return Engine(IndexStore(root, FakeIndex.load, keep=5), lambda index: FakePipeline(index), lambda: seed)


def test_start_falls_back_to_the_newest_readable_version(tmp_path, caplog):
    root = tmp_path / "s"
    e = fake_engine(root)
    e.start()
    e.upsert_server("Zeta", "z", [FakeIndex(demo_catalog()).catalog.tools[0]], None)   # v2
    e.upsert_server("Eta", "e", [FakeIndex(demo_catalog()).catalog.tools[1]], None)    # v3
    (root / "v3" / "tools.jsonl").write_text('{"server": "Eta", "na')                   # v3 broken on disk
    (root / "v2" / "manifest.json").unlink()                                            # v2 broken too
    restarted = fake_engine(root)
    with caplog.at_level("WARNING"):
        snap = restarted.start()
    assert snap.version == 1 and set(restarted.unreadable) == {2, 3}
    assert "serving index version 1" in caplog.text and "v3" in caplog.text
    assert (root / "CURRENT").read_text() == "v3\n"  # the evidence stays; nothing is re-pointed
    # the next change is built on what is served, as a new version
    out = restarted.upsert_server("Theta", "t", [FakeIndex(demo_catalog()).catalog.tools[2]], None)
    assert out.version == 4 and "Theta" in restarted.snapshot.catalog.servers
    assert "Zeta" not in restarted.snapshot.catalog.servers


def test_no_readable_version_is_a_clear_failure(tmp_path):
    root = tmp_path / "s"
    fake_engine(root).start()
    (root / "v1" / "manifest.json").unlink()
    with pytest.raises(StoreError, match="no index version can be read.*move the folder aside"):
        fake_engine(root).start()


def test_a_garbled_pointer_serves_the_newest_folder(tmp_path):
    root = tmp_path / "s"
    e = fake_engine(root)
    e.start()
    e.upsert_server("Zeta", "z", [FakeIndex(demo_catalog()).catalog.tools[0]], None)
    (root / "CURRENT").write_text("garbage")
    again = fake_engine(root)
    assert again.start().version == 2
    assert again.upsert_server("Eta", "e", [FakeIndex(demo_catalog()).catalog.tools[1]], None).version == 3
    assert (root / "CURRENT").read_text() == "v3\n"


def test_a_worker_keeps_serving_when_a_newer_version_cannot_be_read(tmp_path):
    root = tmp_path / "s"
    reader, writer = fake_engine(root), fake_engine(root)
    reader.start(), writer.start()
    writer.upsert_server("Zeta", "z", [FakeIndex(demo_catalog()).catalog.tools[0]], None)
    (root / "v2" / "tools.jsonl").write_text("{not json")
    assert reader.refresh() is False and reader.snapshot.version == 1 and 2 in reader.unreadable
    assert reader.refresh() is False  # not retried at every poll
    reader.retry_unreadable_s = 0.0
    (root / "v2" / "tools.jsonl").write_text("")
    assert reader.refresh() is True and reader.snapshot.version == 2


def test_crash_leftovers_are_removed_at_start(tmp_path, caplog):
    root = tmp_path / "s"
    fake_engine(root).start()
    for name in (".v2.tmp-abc123", ".v7.old-123-456"):
        (root / name).mkdir()
        (root / name / "tools.jsonl").write_text("half")
    (root / ".CURRENT.tmp-999").write_text("v9\n")
    (root / "notes.txt").write_text("not ours")
    with caplog.at_level("WARNING"):
        fake_engine(root).start()
    assert sorted(p.name for p in root.iterdir()) == [".lock", "CURRENT", "notes.txt", "v1"]
    assert "leftover" in caplog.text


def test_readiness_tells_an_admin_about_the_fallback(make_client, tmp_path):
    first = make_client()
    first.put("/v1/servers/Zeta", json={"tools": [{"name": "z"}]}, headers=auth("ops"))
    (tmp_path / "store" / "v2" / "manifest.json").unlink()
    again = make_client(FakePipeline(FakeIndex(demo_catalog())))
    ready = again.get("/readyz", headers=auth("ops")).json()
    assert ready["ready"] is True and ready["index_version"] == 1 and "v2 could not be read" in ready["detail"]
    assert "v2" not in again.get("/readyz").json()["detail"]  # store details are for admins
    assert again.put("/v1/servers/Eta", json={"tools": [{"name": "e"}]}, headers=auth("ops")).status_code == 201
