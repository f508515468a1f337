"""The abstention report: AUROC with ties, the coverage-risk curve, and the whole report on the
tiny catalog with probabilities set by hand (a fake scorer + the identity calibration)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from retrieval.evaluation.abstention import (abstention_report, auroc, coverage_risk, format_abstention,
                                             plot_coverage_risk)
from retrieval.catalog.model import ToolId
from retrieval.evaluation.harness import Query
from retrieval.pipeline.confidence import ConfidenceModel
from retrieval.pipeline.decision import Policy
from retrieval.pipeline.flow import Pipeline

LOGIT = ConfidenceModel(("logit",), (1.0,), 0.0, (0.0,), (1.0,))   # p = sigmoid(logit)


def pairwise_auroc(pos, neg) -> float:
    """The definition, pair by pair."""
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


# ------------------------------------------------------------------ auroc


@pytest.mark.parametrize(("pos", "neg", "expected"), [
    ([0.9, 0.8], [0.1, 0.2], 1.0),
    ([0.1, 0.2], [0.9, 0.8], 0.0),
    ([0.5, 0.5], [0.5, 0.5, 0.5], 0.5),                 # all tied
    ([0.9, 0.5, 0.5], [0.5, 0.1], 5 / 6),               # by hand: 1 + 1 + .5 + 1 + .5 + 1 over 6
    ([0.3], [0.3], 0.5),
    ([1, 1, 0], [1, 0, 0], (2.5 + 2.5 + 1) / 9),         # integers, ties across both groups
])
def test_auroc_by_hand(pos, neg, expected):
    assert auroc(pos, neg) == pytest.approx(expected)
    assert auroc(pos, neg) == pytest.approx(pairwise_auroc(pos, neg))


def test_auroc_matches_the_pairwise_definition_with_many_ties():
    rng = np.random.default_rng(0)
    for _ in range(20):
        pos = rng.integers(0, 4, size=rng.integers(1, 12)) / 4       # few distinct values: many ties
        neg = rng.integers(0, 4, size=rng.integers(1, 12)) / 4
        assert auroc(pos, neg) == pytest.approx(pairwise_auroc(pos, neg))


def test_auroc_is_order_free_and_takes_iterables():
    assert auroc(iter([0.2, 0.9, 0.5]), (x for x in [0.5, 0.1])) == pytest.approx(auroc([0.9, 0.5, 0.2], [0.1, 0.5]))
    assert isinstance(auroc([0.9], [0.1]), float)


def test_auroc_empty_side_is_nan():
    assert math.isnan(auroc([], [0.1]))
    assert math.isnan(auroc([0.1], []))


# ------------------------------------------------------------------ coverage_risk


def test_coverage_risk_by_hand():
    cov, risk = coverage_risk(np.array([0.9, 0.1, 0.5, 0.7]), np.array([True, False, False, True]))
    # best first: 0.9 right, 0.7 right, 0.5 wrong, 0.1 wrong
    np.testing.assert_allclose(cov, [0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(risk, [0.0, 0.0, 1 / 3, 0.5])


def test_coverage_risk_ties_are_answered_together():
    """A threshold cannot split tied scores: the curve must not depend on input order."""
    best = np.array([0.8, 0.8, 0.2])
    a = coverage_risk(best, np.array([False, True, True]))
    b = coverage_risk(best, np.array([True, False, True]))
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y)
    np.testing.assert_allclose(a[0], [2 / 3, 2 / 3, 1.0])
    np.testing.assert_allclose(a[1], [0.5, 0.5, 1 / 3])


def test_coverage_risk_ends_at_full_coverage_and_overall_error():
    rng = np.random.default_rng(1)
    best = rng.integers(0, 5, 30) / 5
    correct = rng.random(30) < 0.6
    cov, risk = coverage_risk(best, correct)
    assert len(cov) == len(risk) == 30
    assert cov[-1] == 1.0 and risk[-1] == pytest.approx(1 - correct.mean())
    assert np.all(np.diff(cov) >= 0) and np.all((risk >= 0) & (risk <= 1))


def test_coverage_risk_empty():
    cov, risk = coverage_risk(np.zeros(0), np.zeros(0, dtype=bool))
    assert len(cov) == len(risk) == 0


# ------------------------------------------------------------------ the report

SHARDS = ToolId("Elasticsearch", "get_shards")
POST = ToolId("Slack", "post_message")
QUERIES = [
    Query("q1", "get shard allocation for an index", SHARDS, need="inspect elasticsearch shards"),
    Query("q2", "post a message to a channel", POST, need="send a chat message"),
]


class FakeScorer:
    """Logit per (request, tool name); tools not listed for a request get ``default``."""

    info = {"name": "fake", "version": "1"}
    path = None

    def __init__(self, table: dict[str, dict[str, float]], default: float):
        self.table, self.default = table, default
        self.needs: list[str | None] = []

    def logits(self, request, need, tools):
        self.needs.append(need)
        probs = self.table.get(request, {})
        p = np.array([probs.get(t.name, self.default) for t in tools])
        return np.log(p / (1 - p))


def pipeline(index, table, default=0.05) -> Pipeline:
    # the threshold is pinned: these tests are about the report, not the shipped default
    return Pipeline(index, FakeScorer(table, default), confidence=LOGIT,
                    policy=Policy(proceed_threshold=0.5, no_fit_below=0.1))


SURE = {QUERIES[0].query: {"get_shards": 0.9}, QUERIES[1].query: {"post_message": 0.9}}


def test_report_with_a_sure_scorer(index):
    pipe = pipeline(index, SURE)
    rep = abstention_report(pipe, QUERIES)
    assert rep["n_queries"] == 2
    assert rep["auroc_request"] == 1.0 and rep["auroc_final"] == 1.0
    assert rep["proceed_first_when_fit"] == 1.0 and rep["proceed_first_when_none"] == 0.0
    assert rep["no_fit_share_when_fit"] == 0.0 and rep["no_fit_share_when_none"] == 1.0
    assert rep["top5_when_fit"] == 1.0
    # best first: the two fitting runs (right), then the two without a fitting tool (wrong)
    assert rep["coverage"] == pytest.approx([0.5, 0.5, 1.0, 1.0])
    assert rep["risk"] == pytest.approx([0.0, 0.0, 0.5, 0.5])
    # the second try (only for the runs without a fit) carried the need
    assert {"inspect elasticsearch shards", "send a chat message"} <= set(pipe.scorer.needs)


def test_report_by_hand_with_ties(index):
    """q1 is clear; on q2 the right tool and an unrelated one both get 0.2, so q2's run without
    a fitting tool ties with its run with one. AUROC over pos [.9, .2] vs neg [.05, .2] = 3.5/4."""
    table = {QUERIES[0].query: {"get_shards": 0.9},
             QUERIES[1].query: {"post_message": 0.2, "get_forecast": 0.2}}
    rep = abstention_report(pipeline(index, table), QUERIES)
    assert rep["auroc_request"] == pytest.approx(0.875) and rep["auroc_final"] == pytest.approx(0.875)
    assert rep["proceed_first_when_fit"] == 0.5 and rep["proceed_first_when_none"] == 0.0
    # the second attempt: q2 (0.2, above the 0.1 floor) ends in `choose` with its tools, fitting or not;
    # q1 without a fitting tool (0.05, under the floor) ends in no_fit
    assert rep["no_fit_share_when_fit"] == 0.0 and rep["no_fit_share_when_none"] == 0.5
    assert rep["top5_when_fit"] == 1.0                      # q2's tools came back: the right one among them
    # thresholds: 0.9 (q1 fit, right) | 0.2 (q2 fit, right: its tools came back; q2 none, wrong) | 0.05 (q1 none)
    assert rep["coverage"] == pytest.approx([0.25, 0.75, 0.75, 1.0])
    assert rep["risk"] == pytest.approx([0.0, 1 / 3, 1 / 3, 0.5])


def test_report_with_an_uninformative_scorer(index):
    """Every tool at 0.5: fitting and non-fitting runs tie, so AUROC is exactly 0.5."""
    rep = abstention_report(pipeline(index, {}, default=0.5), QUERIES)
    assert rep["auroc_request"] == 0.5 and rep["auroc_final"] == 0.5
    assert rep["proceed_first_when_fit"] == 1.0 and rep["proceed_first_when_none"] == 1.0
    assert rep["no_fit_share_when_none"] == 0.0
    # all four runs tie: one threshold answers all of them; the two without a fit are wrong
    assert rep["coverage"] == [1.0] * 4
    assert rep["risk"] == pytest.approx([0.5] * 4)


def test_format_and_plot(index, tmp_path):
    rep = abstention_report(pipeline(index, SURE), QUERIES[:1])
    text = format_abstention(rep)
    assert "AUROC" in text and "1 queries" in text
    pytest.importorskip("matplotlib")
    out = plot_coverage_risk(rep, tmp_path / "cr.png")
    assert out is not None and out.stat().st_size > 0


# ------------------------------------------------------------------ real no-fit requests


def test_nofit_report_by_hand(index, tmp_path):
    import json

    from retrieval.evaluation.abstention import format_nofit, load_nofit, nofit_report

    path = tmp_path / "nofit.jsonl"
    rows = [{"id": "n1", "query": "book a haircut for friday", "kind": "absent", "split": "test", "style": "goal"},
            {"id": "n2", "query": "rename the shard allocation", "kind": "near_miss", "split": "test", "style": "function"},
            {"id": "n3", "query": "only dev", "kind": "absent", "split": "dev", "style": "goal"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    nofit = load_nofit(path, "test")
    assert [r.id for r in nofit] == ["n1", "n2"]
    # the near miss gets a confident wrong answer, the absent one nothing
    table = {**SURE, "rename the shard allocation": {"get_shards": 0.95}}
    rep = nofit_report(pipeline(index, table), QUERIES, nofit)
    assert (rep["n_fit"], rep["n_none"]) == (2, 2)
    assert rep["decisions"]["fit"]["proceed"] == 1.0 and rep["decisions"]["none"]["proceed"] == 0.5
    assert rep["by_kind"]["near_miss"]["proceed"] == 1.0 and rep["by_kind"]["absent"]["proceed"] == 0.0
    assert rep["by_kind"]["absent"]["auroc"] == 1.0 and rep["by_kind"]["near_miss"]["auroc"] == 0.0
    assert rep["top5_among_proceed_fit"] == 1.0
    assert "near_miss" in format_nofit(rep)


def test_load_nofit_errors_name_the_line(tmp_path):
    from retrieval.evaluation.abstention import load_nofit

    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "query": "x", "split": "dev"}\n{"id": "b"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:2: not a no-fit request line"):
        load_nofit(path)
    path.write_text('{"id": "a", "query": "x", "split": "dev"}\n')
    with pytest.raises(ValueError, match="no no-fit requests in split 'test'"):
        load_nofit(path, "test")
