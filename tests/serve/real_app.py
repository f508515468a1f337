"""The service over the real ToolIndex + Pipeline, with the hash encoder and a fake scorer:
real retrieval, statistics, definitions, token counts and store, in a second per test."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fastapi.testclient import TestClient  # noqa: E402

from fakes import FakeScorer, HashEncoder, tiny_catalog  # noqa: E402
from retrieval.index.embedded import ToolIndex  # noqa: E402
from retrieval.pipeline.flow import Pipeline  # noqa: E402
from serve.app import create_app  # noqa: E402
from serve.settings import Settings  # noqa: E402
from serve_fakes import wait_ready  # noqa: E402
from testkit import tenants_toml  # noqa: E402

ACME = ["Elasticsearch", "GitHub"]
KEYS = {"ops": "k-ops", "acme": "k-acme", "all": "k-all"}
TENANTS = tenants_toml(
    {"name": "ops", "admin": True, "key": KEYS["ops"], "servers": "*"},
    {"name": "acme", "key": KEYS["acme"], "servers": ACME},
    {"name": "all", "key": KEYS["all"], "servers": "*"},
)


def key(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[tenant]}"}


def real_pipeline() -> Pipeline:
    return Pipeline(ToolIndex.build(tiny_catalog(), encoder=HashEncoder()), FakeScorer())


def real_client(tmp_path: Path, pipeline: Any | None = None, **settings: Any) -> TestClient:
    """A started, ready client (call ``__exit__`` when done); the store lives in ``tmp_path / "store"``."""
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(TENANTS)
    settings.setdefault("index_dir", tmp_path / "store")
    app = create_app(Settings(config=tenants, **settings), pipeline=pipeline or real_pipeline())
    client = TestClient(app, raise_server_exceptions=False)
    client.__enter__()
    wait_ready(client)
    return client
