"""Policy.score_top: the cross-encoder scores only the first N fused candidates."""

from __future__ import annotations

import math

import numpy as np
import pytest

from retrieval.pipeline.confidence import ConfidenceModel
from retrieval.pipeline.decision import Policy
from retrieval.pipeline.flow import Pipeline

LOGIT = ConfidenceModel(("logit",), (1.0,), 0.0, (0.0,), (1.0,))   # p = sigmoid(logit)
REQUEST = "shard allocation status of an index"                     # names no server and no tool


class CountingScorer:
    """Logit = 3, 2, 1, ... by position in the list it is asked to score; records each call's size."""

    info = {"name": "counting", "version": 1}
    path = None

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.asked: list[list] = []

    def logits(self, request, need, tools) -> np.ndarray:
        self.sizes.append(len(tools))
        self.asked.append([t.id for t in tools])
        return np.arange(len(tools), 0, -1, dtype=np.float64)


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_score_top_must_be_positive():
    with pytest.raises(ValueError, match="score_top must be None .* at least 1, got 0"):
        Policy(score_top=0)
    with pytest.raises(ValueError, match="got -3"):
        Policy(score_top=-3)
    assert Policy(score_top=1).score_top == 1 and Policy(score_top=None).score_top is None
    assert Policy().score_top == 10   # the shipped operating point


def test_only_the_first_fused_candidates_are_scored(index):
    scorer = CountingScorer()
    pipe = Pipeline(index, scorer, confidence=LOGIT, policy=Policy(score_top=2))
    hits = index.retrieve(REQUEST, None, None, k=100)
    assert len(hits) == 8

    result = pipe.search(REQUEST)
    assert scorer.sizes == [2]
    assert scorer.asked == [[h.tool_id for h in hits[:2]]]
    assert result.tools[0].tool_id == hits[0].tool_id


def test_unscored_candidates_take_the_lowest_scored_logit(index):
    scorer = CountingScorer()
    pipe = Pipeline(index, scorer, confidence=LOGIT)
    hits = index.retrieve(REQUEST, None, None, k=100)
    p = pipe.probabilities(REQUEST, None, hits, score_top=2)
    assert scorer.sizes == [2]
    np.testing.assert_allclose(p[:2], [sigmoid(2.0), sigmoid(1.0)])
    np.testing.assert_allclose(p[2:], sigmoid(1.0))   # the lowest scored one's probability
    # ranking: the scored ones first, the rest (tied) keep retrieval order
    assert [t for t, _ in pipe.rank(REQUEST, None, hits, score_top=2)] == [h.tool_id for h in hits]

    # via search, with the policy: the same probabilities reach the result
    scorer.sizes.clear()
    result = Pipeline(index, scorer, confidence=LOGIT, policy=Policy(score_top=2)).search(REQUEST, k=8)
    assert scorer.sizes == [2]
    got = {t.tool_id: t.probability for t in result.tools}
    assert set(got) == {h.tool_id for h in hits}  # every probability is above the floor
    for h in hits[2:]:
        assert got[h.tool_id] == pytest.approx(sigmoid(1.0))


def test_score_top_none_scores_all(index):
    scorer = CountingScorer()
    pipe = Pipeline(index, scorer, confidence=LOGIT)  # default policy: score_top=None
    pipe.search(REQUEST)
    assert scorer.sizes == [8]
    hits = index.retrieve(REQUEST, None, None, k=100)
    p = pipe.probabilities(REQUEST, None, hits, score_top=None)
    np.testing.assert_allclose(p, [sigmoid(float(z)) for z in range(8, 0, -1)])
    # a score_top beyond the list scores the whole list
    scorer.sizes.clear()
    pipe.probabilities(REQUEST, None, hits, score_top=50)
    assert scorer.sizes == [8]


def test_the_cli_scores_what_the_shipped_policy_scores(index):
    """`toolrank search/eval` without --score-top use the policy the confidence models were fitted at."""
    from retrieval.cli import _pipeline

    assert _pipeline(index, None, True, 1).policy.score_top == Policy().score_top
    assert _pipeline(index, None, True, 1, 5).policy.score_top == 5
    assert _pipeline(index, None, True, 1, 0).policy.score_top is None   # 0: every candidate


def test_score_top_flag():
    from retrieval.pipeline.decision import score_top_flag

    assert score_top_flag(None) == Policy().score_top
    assert score_top_flag(0) is None and score_top_flag(7) == 7
    with pytest.raises(ValueError, match="got -1"):
        score_top_flag(-1)
