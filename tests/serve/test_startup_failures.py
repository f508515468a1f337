"""Issue 24, point 2: a store that cannot be used fails fast with one line; read-only copies are served."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from serve import app as app_module
from serve import index_store
from serve.index_store import IndexStore, StoreError
from serve_fakes import FakeIndex, demo_catalog
from testkit import WAIT_S, free_port, wait_until

REPO = Path(__file__).resolve().parents[2]
WAIT = 2 * WAIT_S  # a bound for the process (two workers, each importing everything) to exit


def broken_store(root: Path) -> Path:
    (root / "v1").mkdir(parents=True)          # a version folder that cannot be read
    (root / "CURRENT").write_text("v1\n")
    return root


def tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.stat().st_size) for p in root.rglob("*")}


def test_an_unreadable_store_exits_with_one_line_in_process(make_client, tmp_path, monkeypatch, caplog):
    exits = []
    monkeypatch.setattr(app_module, "_exit_process", lambda reason, path: exits.append(reason))
    store = broken_store(tmp_path / "store")
    with caplog.at_level(logging.DEBUG, logger="serve.app"):
        c = make_client(wait=False, index_dir=store, fail_fast=True, failure_file=tmp_path / "failed")
        wait_until(lambda: exits, "start-up failure stopping the service")
    assert len(exits) == 1 and "no index version can be read" in exits[0] and "move the folder aside" in exits[0]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is None and "\n" not in errors[0].getMessage()
    assert errors[0].getMessage().startswith("start-up failed: ")
    assert c.get("/readyz").status_code == 503


@pytest.mark.parametrize("workers", [1, 2])
def test_toolrank_serve_exits_non_zero_on_an_unreadable_store(tmp_path, workers):
    """It used to keep running with /healthz 500, the reason the last line of a traceback."""
    store = broken_store(tmp_path / "store")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLRANK_")}
    env.update(PYTHONPATH=os.pathsep.join([str(REPO), str(Path(__file__).parent)]), OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "serve.cli", "--app", "serve_fakes:app_from_env", "--index", str(store),
         "--port", str(port), "--workers", str(workers)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = proc.communicate(timeout=WAIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("toolrank serve kept running on an unreadable store")
    assert proc.returncode == 3, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("error: start-up failed: ") and "no index version can be read" in last
    assert "Traceback" not in stderr
    assert not list(Path("/tmp").glob(f"toolrank-metrics-{proc.pid}-*"))  # nothing left behind


def seeded_store(make_client, root: Path) -> Path:
    make_client(index_dir=root)  # a writable service seeds it
    (root / ".lock").unlink()
    return root


def test_a_read_only_copy_is_served_and_never_written(make_client, tmp_path):
    source = seeded_store(make_client, tmp_path / "store")
    copy = tmp_path / "replica"
    shutil.copytree(source, copy)
    before = tree(copy)
    c = make_client(index_dir=copy, read_only=True)
    assert c.post("/v1/search", json={"request": "send an email message"},
                  headers={"X-API-Key": "key-ops"}).status_code == 200
    r = c.put("/v1/servers/New", json={"tools": [{"name": "t"}]}, headers={"X-API-Key": "key-ops"})
    assert r.status_code == 405 and r.json()["error"]["code"] == "read_only_store" and r.headers["allow"]
    assert c.delete("/v1/servers/Alpha%20Mail", headers={"X-API-Key": "key-ops"}).status_code == 405
    assert "read-only" in c.get("/readyz", headers={"X-API-Key": "key-ops"}).json()["detail"]
    assert tree(copy) == before  # no lock file, no clean-up, nothing


def test_a_store_that_cannot_be_written_is_detected_as_read_only(make_client, tmp_path, monkeypatch):
    """The lock file used to be opened read-write unconditionally: a read-only mount could not be served."""
    store = seeded_store(make_client, tmp_path / "store")
    real_open = os.open

    def read_only_fs(path, flags, *args):
        if str(path).startswith(str(store)) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(index_store.os, "open", read_only_fs)
    c = make_client(index_dir=store)
    assert c.get("/v1/servers", headers={"X-API-Key": "key-ops"}).status_code == 200
    assert c.put("/v1/servers/New", json={"tools": [{"name": "t"}]},
                 headers={"X-API-Key": "key-ops"}).status_code == 405


def test_an_empty_read_only_store_says_what_it_needs(tmp_path):
    with pytest.raises(StoreError, match="must be an existing folder"):
        IndexStore(tmp_path / "missing", FakeIndex.load, read_only=True)
    (tmp_path / "empty").mkdir()
    from serve.engine import Engine

    engine = Engine(IndexStore(tmp_path / "empty", FakeIndex.load, read_only=True), lambda i: i,
                    lambda: FakeIndex(demo_catalog()))
    with pytest.raises(StoreError, match="holds no index version"):
        engine.start()
    assert list((tmp_path / "empty").iterdir()) == []


def test_read_only_needs_an_index_folder(tmp_path):
    from pydantic import ValidationError

    from serve.settings import Settings

    with pytest.raises(ValidationError, match="--index DIR"):
        Settings(auth_disabled=True, read_only=True)
    assert Settings(auth_disabled=True, read_only=True, index_dir=tmp_path).read_only
