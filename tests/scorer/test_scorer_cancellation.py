"""The production cancellation path: the scorer the service loads (serve.loading.load_scorer) checks
the request's work token before every ONNX batch, also where it runs pairs side by side in its
thread pool, so abandoned or overdue work stops within one batch a worker, and scores are unchanged
when nothing cancels."""

from __future__ import annotations

import time

import pytest

from scorer import Scorer
from serve.loading import load_scorer
from serve.settings import Settings
from serve.work import WorkCancelled, WorkToken, run_with


def test_the_loaded_scorer_stops_between_batches(make_model_dir, tools):
    folder = make_model_dir()
    scorer, status = load_scorer(Settings(auth_disabled=True, model_dir=folder))
    assert status["loaded"] and len(tools) > scorer.workers > 1       # pairs side by side, in its pool

    plain = Scorer.load(folder)
    token = WorkToken(time.monotonic() + 3600)
    assert run_with(token, scorer.score, "send an email to ana", None, tools) == \
        plain.score("send an email to ana", None, tools)                       # nothing cancelled: same scores

    session = scorer._session._session        # the ONNX session behind the checkpoint
    runs = []
    token = WorkToken(time.monotonic() + 3600)

    class Counting:
        def run(self, *args, **kwargs):
            runs.append(1)
            token.cancel("disconnected")       # the client hangs up during the first batch
            return session.run(*args, **kwargs)

    scorer._session._session = Counting()
    with pytest.raises(WorkCancelled) as stopped:
        run_with(token, scorer.score, "create a github issue", None, tools)   # a request not in the cache
    assert stopped.value.reason == "disconnected"
    assert len(runs) <= scorer.workers < len(tools)   # at most the batches already running: the rest never ran
