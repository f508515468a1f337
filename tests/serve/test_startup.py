"""Finding 5: a cold start does not make readiness wait for the public suggestion index."""

from __future__ import annotations

import threading

from fakes import FakeScorer, HashEncoder, tiny_catalog
from retrieval.index.embedded import ToolIndex
from serve import loading
from serve.settings import Settings


def test_the_public_index_is_built_in_the_background(monkeypatch, tmp_path):
    import retrieval.index.default as default_index

    gate, built = threading.Event(), []
    public = ToolIndex.build(tiny_catalog(), encoder=HashEncoder())

    def slow_build(**kwargs):
        gate.wait(10)
        built.append(True)
        return public

    monkeypatch.setattr(default_index, "default_index_path", lambda *a, **k: tmp_path / "no-cache")
    monkeypatch.setattr(default_index, "load_or_build_default", slow_build)
    monkeypatch.setattr(loading, "load_scorer", lambda settings: (FakeScorer(), {"loaded": True}))
    parts = loading.default_parts(Settings(auth_disabled=True, catalog=tmp_path / "unused.json"))
    ready = threading.Event()
    parts.on_public_ready = ready.set

    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder())
    first = parts.make_pipeline(index)          # what readiness waits for
    # returned while the public build is still held at the gate: readiness did not wait for it
    assert not gate.is_set() and not built and first.public_index is None
    assert "background" in parts.notes["public"]

    gate.set()
    assert ready.wait(10), "on_public_ready was never called"
    assert parts.make_pipeline(index).public_index is public


def test_every_index_version_reads_the_models_of_the_first(monkeypatch, tmp_path):
    """A version after the first (a PUT, a refresh) keeps the tail's and the without-examples models."""
    from pathlib import Path

    model = Path(__file__).resolve().parents[2] / "models" / "toolrank-reranker"
    monkeypatch.setattr(loading, "load_scorer", lambda settings: (FakeScorer(path=model), {"loaded": True}))
    parts = loading.default_parts(Settings(auth_disabled=True, catalog=tmp_path / "unused.json",
                                           public_suggestions=False))
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder())
    first = parts.make_pipeline(index)
    later = parts.make_pipeline(ToolIndex.build(tiny_catalog(), encoder=HashEncoder()))
    assert first.tail_calibration is not None and later.tail_calibration is not None
    assert later.confidence == first.confidence and later.tokens is first.tokens
    assert (later.confidence_noex is None) == (first.confidence_noex is None)
