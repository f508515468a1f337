"""Index versions on disk: atomic pointer, one writer at a time, pick-up by other workers."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from retrieval.catalog.model import Tool
from serve.engine import Engine
from serve.index_store import IndexStore, StoreError
from serve_fakes import FakeIndex, FakePipeline, auth, demo_catalog
from testkit import wait_until


def store_at(path, keep=3):
    return IndexStore(path, FakeIndex.load, keep=keep)


def engine_at(path):
    seed = FakeIndex(demo_catalog())
    e = Engine(store_at(path), lambda index: FakePipeline(index), lambda: seed)
    e.start()
    return e


def test_publish_points_current_at_a_complete_folder(tmp_path):
    store = store_at(tmp_path / "s")
    assert store.current_version() is None
    index = FakeIndex(demo_catalog())
    with store.write_lock():
        assert store.publish(index) == 1
        assert store.publish(index) == 2
    assert (tmp_path / "s" / "CURRENT").read_text() == "v2\n"
    assert len(store.load(2).catalog) == len(demo_catalog())


def test_old_versions_are_cleaned_and_names_never_reused(tmp_path):
    store = store_at(tmp_path / "s", keep=2)
    index = FakeIndex(demo_catalog())
    (tmp_path / "s" / "v7").mkdir()  # a crashed write's leftover: never pointed to, never reused
    with store.write_lock():
        versions = [store.publish(index) for _ in range(3)]
    assert versions == [8, 9, 10]
    assert store.versions_on_disk() == [9, 10]


def test_bad_store_states_say_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match="keep at least 2"):
        IndexStore(tmp_path, FakeIndex.load, keep=1)
    store = store_at(tmp_path)
    (tmp_path / "CURRENT").write_text("garbage")
    with pytest.raises(StoreError, match="expected a version name like 'v3'"):
        store.current_version()
    with pytest.raises(StoreError, match="version 4 is not on disk"):
        store.load(4)


def test_a_reader_never_loads_a_half_written_version(tmp_path, monkeypatch):
    writer, reader = engine_at(tmp_path / "s"), engine_at(tmp_path / "s")
    monkeypatch.setattr(FakeIndex, "save_delay_s", 0.3)
    seen, errors = [], []
    done = threading.Event()

    def read():
        while not done.is_set():
            try:
                reader.refresh()
                seen.append(reader.snapshot.version)
            except Exception as exc:  # a half-written folder would fail to load here
                errors.append(exc)
            time.sleep(0.005)

    t = threading.Thread(target=read)
    t.start()
    tool = Tool("Zeta", "z", "zeta tool")
    for _ in range(2):
        writer.upsert_server("Zeta", "", [tool], None)
        tool = Tool("Zeta", "z", tool.description + " more")
    done.set()
    t.join()
    reader.refresh()
    assert errors == []
    assert seen == sorted(seen) and set(seen) <= {1, 2, 3}  # only ever complete versions, never backwards
    assert reader.snapshot.version == 3 and "Zeta" in reader.snapshot.catalog.servers


def test_concurrent_writers_lose_nothing(tmp_path):
    a, b = engine_at(tmp_path / "s"), engine_at(tmp_path / "s")

    def put(i):
        (a if i % 2 else b).upsert_server(f"S{i}", f"server {i}", [Tool(f"S{i}", "t", f"tool {i}")], None)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(put, range(12)))
    a.refresh(), b.refresh()
    for e in (a, b):
        assert {f"S{i}" for i in range(12)} <= set(e.snapshot.catalog.servers)
        assert e.snapshot.version == 13


def test_second_app_picks_up_a_change_by_polling(make_client, tmp_path):
    """The second app learns of the new version from its poller alone (no request of its own reads the
    store). How soon is a matter of the poll interval: measured by benchmarks/load_test.py."""
    first = make_client(poll_interval_s=0.1)
    second = make_client(FakePipeline(FakeIndex(demo_catalog())), poll_interval_s=0.1)
    engine = second.app.state.toolrank.engine
    r = first.put("/v1/servers/Zeta", json={"tools": [{"name": "z", "description": "zeta"}]}, headers=auth("ops"))
    version = r.json()["index_version"]
    assert version == 2
    wait_until(lambda: engine.snapshot.version == version, "the second app's poller picked up version 2")
    names = [s["name"] for s in second.get("/v1/servers", headers=auth("ops")).json()["servers"]]
    assert "Zeta" in names
    assert second.get("/readyz", headers=auth("ops")).json()["index_version"] == version


def test_a_restart_serves_the_latest_version_not_the_seed(make_client, tmp_path):
    first = make_client()
    first.put("/v1/servers/Zeta", json={"tools": [{"name": "z"}]}, headers=auth("ops"))
    again = make_client(FakePipeline(FakeIndex(demo_catalog())))
    assert again.get("/v1/servers/Zeta", headers=auth("ops")).status_code == 200
    assert again.get("/readyz", headers=auth("ops")).json()["index_version"] == 2
