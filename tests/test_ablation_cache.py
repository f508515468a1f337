"""benchmarks/ablation.py memoises logits: a tool with and without example requests is two pairs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from retrieval.catalog.model import Tool

ROOT = Path(__file__).resolve().parent.parent


def _ablation():
    spec = importlib.util.spec_from_file_location("ablation", ROOT / "benchmarks" / "ablation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class CountingScorer:
    """Its logit is the number of example requests the record would carry."""

    info = path = None

    def __init__(self):
        self.calls = 0

    def logits(self, request, need, tools):
        self.calls += len(tools)
        return np.array([float(len(t.examples)) for t in tools])


def test_a_day_one_run_never_reuses_a_with_examples_logit():
    cached = _ablation().CachedScorer(CountingScorer())
    with_ex = Tool("Mail", "send", "Send a message", {}, "", ("email Bob", "send a note"))
    day_one = Tool("Mail", "send", "Send a message", {}, "", ())
    assert cached.logits("mail bob", None, [with_ex]).tolist() == [2.0]
    assert cached.logits("mail bob", None, [day_one]).tolist() == [0.0]
    assert cached.logits("mail bob", None, [with_ex, day_one]).tolist() == [2.0, 0.0]   # both memoised
    assert cached.scorer.calls == 2
