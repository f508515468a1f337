"""`toolrank index / search / servers --backend qdrant` through ``main(argv)``: the real ONNX
encoder on a tiny catalog, an embedded Qdrant in a folder; bad options are one line."""

from __future__ import annotations

import json

import pytest

from retrieval.cli import main
from retrieval.index.encoder import default_encoder_path

pytestmark = pytest.mark.skipif(not (default_encoder_path() / "model.onnx").exists(),
                                reason="the ONNX encoder is not in models/")

TOOLS = [
    {"server": "Weather", "name": "get_forecast", "description": "Weather forecast for a city"},
    {"server": "Weather", "name": "get_alerts", "description": "Severe weather alerts for a region"},
    {"server": "Slack", "name": "post_message", "description": "Post a message to a channel"},
    {"server": "Slack", "name": "list_channels", "description": "List the channels of a workspace"},
]


@pytest.fixture(autouse=True)
def no_backend_env(monkeypatch):
    for name in ("TOOLRANK_BACKEND", "TOOLRANK_QDRANT_URL", "TOOLRANK_QDRANT_PATH", "TOOLRANK_QDRANT_API_KEY",
                 "TOOLRANK_COLLECTION"):
        monkeypatch.delenv(name, raising=False)


def test_index_search_and_servers_on_an_embedded_qdrant(tmp_path, capsys):
    catalog = tmp_path / "tools.jsonl"
    catalog.write_text("".join(json.dumps(t) + "\n" for t in TOOLS), encoding="utf-8")
    q = ["--backend", "qdrant", "--qdrant-path", str(tmp_path / "qdrant"), "--collection", "tiny"]
    assert main(["index", "--catalog", str(catalog), *q]) == 0
    assert "indexed 4 tools from 2 servers into" in capsys.readouterr().out
    assert main(["index", "--catalog", str(catalog), *q]) == 2           # already there: say how to rebuild
    assert "--recreate" in capsys.readouterr().err
    assert main(["search", "what's the weather forecast for Lisbon", "--retrieval-only", "--json", *q]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert (hits[0]["server"], hits[0]["tool"]) == ("Weather", "get_forecast") and len(hits) == 4
    assert main(["search", "post to a channel", "--server", "Slack", "--retrieval-only", "--json", *q]) == 0
    assert {h["server"] for h in json.loads(capsys.readouterr().out)} == {"Slack"}
    assert main(["servers", *q]) == 0
    assert capsys.readouterr().out.splitlines() == ["Weather\t2 tools", "Slack\t2 tools"]
    assert main(["index", "--catalog", str(catalog), "--recreate", "--no-examples", *q]) == 0
    capsys.readouterr()
    assert main(["search", "weather", "--retrieval-only", *q]) == 2      # built without examples: say so
    assert "without their example requests" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["search", "x", "--backend", "qdrant", "--qdrant-url", "http://127.0.0.1:9"], "cannot reach Qdrant at http://127.0.0.1:9"),
    (["search", "x", "--backend", "qdrant"], "needs --qdrant-url URL"),
    (["search", "x", "--qdrant-url", "http://localhost:6333"], "add --backend qdrant"),
    (["search", "x", "--backend", "qdrant", "--qdrant-path", "q", "--index", "idx"], "--index names an embedded"),
    (["index", "--catalog", "c.jsonl", "--out", "o", "--backend", "qdrant", "--qdrant-path", "q"], "without --out"),
])
def test_bad_backend_options_are_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
