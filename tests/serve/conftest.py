from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).parent))

from fastapi.testclient import TestClient  # noqa: E402

from serve.app import create_app  # noqa: E402
from serve.settings import Settings  # noqa: E402
from real_app import real_client  # noqa: E402
from serve_fakes import TENANTS_TOML, FakeIndex, FakePipeline, demo_catalog, wait_ready  # noqa: E402


@pytest.fixture
def tenants_file(tmp_path: Path) -> Path:
    path = tmp_path / "tenants.toml"
    path.write_text(TENANTS_TOML)
    return path


@pytest.fixture
def make_client(tmp_path: Path, tenants_file: Path) -> Iterator[Callable[..., TestClient]]:
    """Build a started client around a fake pipeline: make_client(pipeline=..., **settings)."""
    opened: list[TestClient] = []

    def make(pipeline: Any = None, *, wait: bool = True, **settings: Any) -> TestClient:
        settings.setdefault("config", tenants_file)
        settings.setdefault("index_dir", tmp_path / "store")
        if settings.get("auth_disabled"):
            settings.pop("config")
        app = create_app(Settings(**settings),
                         pipeline=pipeline or FakePipeline(FakeIndex(demo_catalog())))
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()
        opened.append(client)
        if wait:
            wait_ready(client)
        return client

    yield make
    for c in reversed(opened):
        c.__exit__(None, None, None)


@pytest.fixture
def client(make_client: Callable[..., TestClient]) -> TestClient:
    return make_client()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[TestClient]:
    """A started client over the real ToolIndex + Pipeline (real_app.py: hash encoder, fake scorer)."""
    c = real_client(tmp_path)
    yield c
    c.__exit__(None, None, None)
