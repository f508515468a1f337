"""serve/work.py: the work token, checkpoints, and the scorer's ONNX session that checks before
every batch (the production cancellation path; the real scorer: tests/scorer/test_scorer_cancellation.py)."""

from __future__ import annotations

import threading
import time

import pytest

from serve.work import WorkCancelled, WorkToken, checkpoint, checkpointed, run_with


class Session:
    """Counts its batches; ``on_run`` is called before each."""

    def __init__(self, on_run=lambda n: None):
        self.runs = 0
        self.on_run = on_run
        self.providers = ["CPUExecutionProvider"]

    def run(self, outputs, feeds):
        self.runs += 1
        self.on_run(self.runs)
        return [feeds["x"] * 2]


class Scorer:
    def __init__(self, session):
        self._session = session

    def score(self, batches):
        return [self._session.run(["y"], {"x": b})[0] for b in batches]


def far() -> WorkToken:
    return WorkToken(time.monotonic() + 3600)


def test_checkpoint_outside_any_work_does_nothing():
    checkpoint()   # no token in this thread: nothing to stop


def test_a_cancelled_token_stops_the_work_at_the_next_batch():
    token = far()
    session = Session(on_run=lambda n: token.cancel("disconnected") if n == 2 else None)
    scorer = checkpointed(Scorer(session))
    with pytest.raises(WorkCancelled) as stopped:
        run_with(token, scorer.score, [1, 2, 3, 4])
    assert stopped.value.reason == "disconnected"
    assert session.runs == 2                       # the batch that saw the cancel finished; no third began


def test_a_passed_deadline_stops_the_work_as_deadline():
    token = far()
    session = Session(on_run=lambda n: setattr(token, "deadline", time.monotonic() - 1) if n == 1 else None)
    with pytest.raises(WorkCancelled) as stopped:
        run_with(token, checkpointed(Scorer(session)).score, [1, 2, 3])
    assert stopped.value.reason == "deadline" and session.runs == 1


def test_results_are_unchanged_and_the_session_still_reads_like_itself():
    session = Session()
    scorer = checkpointed(Scorer(session))
    assert run_with(far(), scorer.score, [1, 2, 3]) == [2, 4, 6] and session.runs == 3
    assert scorer._session.providers == ["CPUExecutionProvider"]   # attributes pass through
    assert checkpointed(scorer)._session is scorer._session        # wrapped once, however often asked


def test_batches_run_in_the_scorers_thread_pool_see_the_token():
    """A scorer that runs batches side by side in a thread pool: the pool's threads get the
    caller's token, so the batches not yet started stop."""
    from concurrent.futures import ThreadPoolExecutor

    class PooledScorer(Scorer):
        def __init__(self, session):
            super().__init__(session)
            self._pool = ThreadPoolExecutor(max_workers=1)

        def score(self, batches):
            return list(self._pool.map(lambda b: self._session.run(["y"], {"x": b})[0], batches))

    tokens = []
    session = Session(on_run=lambda n: tokens[0].cancel("deadline") if tokens and n == 1 else None)
    scorer = checkpointed(PooledScorer(session))
    assert run_with(far(), scorer.score, [1, 2]) == [2, 4]             # results unchanged through the pool
    session.runs = 0
    tokens.append(token := far())
    with pytest.raises(WorkCancelled):
        run_with(token, scorer.score, [1, 2, 3, 4])
    assert session.runs == 1
    assert checkpointed(scorer)._pool is scorer._pool                  # wrapped once
    scorer._pool.shutdown()


def test_a_scorer_without_an_onnx_session_is_left_as_it_is():
    class NoSession:
        _session = None

    plain, none = object(), NoSession()
    assert checkpointed(plain) is plain and checkpointed(none) is none and none._session is None


def test_a_token_is_seen_only_by_the_work_it_was_given_to():
    """Another thread (another request's work) does not see this request's cancelled token."""
    token = far()
    outcome = []

    def other() -> None:
        try:
            checkpoint()
            outcome.append("ran")
        except WorkCancelled:
            outcome.append("stopped")

    def work() -> None:
        token.cancel("disconnected")
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        checkpoint()

    with pytest.raises(WorkCancelled):
        run_with(token, work)
    assert outcome == ["ran"]
