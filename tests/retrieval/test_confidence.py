"""ConfidenceModel and candidate_features: hand-set weights, hand-made hit lists."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from retrieval.catalog.model import ToolId
from retrieval.pipeline.confidence import (EXPERIMENTAL_FEATURES, FEATURES, MISSING_RANK, RETRIEVAL_FEATURES,
                                           ConfidenceModel,
                                           candidate_features, default_confidence_path)
from retrieval.index.hits import Hit

# p = sigmoid(logit): the identity calibration
LOGIT = ConfidenceModel(("logit",), (1.0,), 0.0, (0.0,), (1.0,))


def sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


def hits(n: int) -> list[Hit]:
    """n hits with both retrieval lists present and decreasing scores."""
    return [Hit(ToolId("S", f"t{i}"), i + 1, 1.0 / (i + 1), i + 1, 10.0 - i, i + 1, 0.9 - 0.1 * i)
            for i in range(n)]


# ------------------------------------------------------------------ construction


def test_dict_round_trip():
    m = ConfidenceModel(("logit", "fused_rel"), (1.5, -0.25), -0.7, (0.1, 0.5), (2.0, 0.3), "dev v1")
    d = m.to_dict()
    assert json.loads(json.dumps(d)) == d          # plain JSON
    assert ConfidenceModel.from_dict(d) == m
    assert d["features"] == ["logit", "fused_rel"]


def test_save_load_round_trip(tmp_path):
    m = ConfidenceModel(("fused_rel", "log_bm25_rank"), (3.0, -1.0), 0.5, (0.0, 1.0), (1.0, 2.0))
    m.save(tmp_path / "combiner.json")
    assert ConfidenceModel.load(tmp_path / "combiner.json") == m


def test_load_errors(tmp_path):
    with pytest.raises(ValueError, match="confidence model not found"):
        ConfidenceModel.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="invalid JSON"):
        ConfidenceModel.load(bad)
    with pytest.raises(ValueError, match="malformed confidence model"):
        ConfidenceModel.from_dict({"features": ["logit"], "weights": [1.0]})


@pytest.mark.parametrize(("weights", "mean", "scale", "message"), [
    ((1.0,), (0.0, 0.0), (1.0, 1.0), "2 features but 1 weights"),
    ((1.0, 2.0), (0.0,), (1.0, 1.0), "1 means"),
    ((1.0, 2.0), (0.0, 0.0), (1.0, 1.0, 1.0), "3 scales"),
])
def test_mismatched_lengths(weights, mean, scale, message):
    with pytest.raises(ValueError, match=message):
        ConfidenceModel(("logit", "fused_rel"), weights, 0.0, mean, scale)


def test_scale_must_be_positive():
    with pytest.raises(ValueError, match=r"every scale must be a positive number, got \[1.0, 0.0\]"):
        ConfidenceModel(("logit", "fused_rel"), (1.0, 1.0), 0.0, (0.0, 0.0), (1.0, 0.0))


def test_unknown_feature():
    with pytest.raises(ValueError, match=r"unknown features \['popularity'\]"):
        ConfidenceModel(("fused_rel", "popularity"), (1.0, 1.0), 0.0, (0.0, 0.0), (1.0, 1.0))
    with pytest.raises(ValueError, match="unknown features"):
        ConfidenceModel.from_dict({"features": ["bogus"], "weights": [1], "bias": 0, "mean": [0], "scale": [1]})


def test_uses_logit():
    assert LOGIT.uses_logit
    assert ConfidenceModel(("logit_gap",), (1.0,), 0.0, (0.0,), (1.0,)).uses_logit
    assert not ConfidenceModel(("fused_rel",), (1.0,), 0.0, (0.0,), (1.0,)).uses_logit


def test_shipped_retrieval_model_needs_no_logit():
    m = ConfidenceModel.load(default_confidence_path())
    assert not m.uses_logit
    assert set(m.features) <= set(RETRIEVAL_FEATURES)
    p = m.probabilities(hits(5))
    assert p.shape == (5,) and np.all((p >= 0) & (p <= 1))


# ------------------------------------------------------------------ probabilities


def test_identity_calibration_is_sigmoid_of_logit():
    z = np.array([-2.0, 0.0, 3.0])
    np.testing.assert_allclose(LOGIT.probabilities(hits(3), z), [sigmoid(v) for v in z], rtol=1e-12)


def test_probabilities_in_unit_interval_without_overflow():
    z = np.array([-1e4, -50.0, 0.0, 50.0, 1e4])
    with warnings.catch_warnings():
        warnings.simplefilter("error")             # no overflow RuntimeWarning
        p = ConfidenceModel(("logit", "logit_gap"), (3.0, 1.0), 2.0, (0.0, 0.0), (1.0, 1.0)).probabilities(hits(5), z)
    assert np.all(np.isfinite(p)) and np.all((p >= 0) & (p <= 1))
    assert p[0] == pytest.approx(0.0, abs=1e-12) and p[-1] == pytest.approx(1.0)


@pytest.mark.parametrize("model", [
    LOGIT,
    ConfidenceModel(("logit", "logit_gap", "fused_rel"), (0.8, 0.4, 2.0), -1.0, (0.5, -1.0, 0.3), (2.0, 1.5, 0.4)),
])
def test_monotone_in_logit(model):
    """Within one list (same retrieval evidence), a larger logit never gets a smaller probability."""
    h = [Hit(ToolId("S", f"t{i}"), 1, 0.5, 1, 1.0, 1, 0.5) for i in range(7)]   # identical evidence
    z = np.array([-6.0, -2.0, -0.5, 0.0, 0.1, 2.0, 9.0])
    p = model.probabilities(h, z)
    assert np.all(np.diff(p) > 0)
    # and across calls: raising one candidate's logit raises its probability
    z2 = z.copy()
    z2[2] += 1.0
    assert model.probabilities(h, z2)[2] > p[2]


def test_hand_set_retrieval_weights_give_known_top_probability():
    """fused_rel is 1 for the top hit, so p_top = sigmoid(w + b)."""
    m = ConfidenceModel(("fused_rel",), (10.0,), -8.0, (0.0,), (1.0,))
    p = m.probabilities(hits(4))
    assert p[0] == pytest.approx(sigmoid(2.0))
    assert np.all(np.diff(p) < 0)                  # fused score falls with rank


def test_standardisation_is_applied():
    # (logit - mean) / scale with mean 2, scale 4: logit 6 -> z = 1
    m = ConfidenceModel(("logit",), (1.0,), 0.0, (2.0,), (4.0,))
    assert m.probabilities(hits(1), np.array([6.0]))[0] == pytest.approx(sigmoid(1.0))


def test_logit_model_without_logits_raises():
    with pytest.raises(ValueError, match="pass the scorer's logits"):
        LOGIT.probabilities(hits(2))


def test_empty_list():
    assert LOGIT.probabilities([], np.zeros(0)).shape == (0,)
    assert ConfidenceModel(("fused_rel",), (1.0,), 0.0, (0.0,), (1.0,)).probabilities([]).shape == (0,)


def test_bias_only_model_gives_one_probability_per_hit():
    m = ConfidenceModel((), (), 0.0, (), ())
    np.testing.assert_allclose(m.probabilities(hits(3)), [0.5, 0.5, 0.5])


# ------------------------------------------------------------------ features


def test_candidate_features_by_hand():
    h = [
        Hit(ToolId("A", "a"), 1, 0.5, 1, 8.0, 2, 0.8),
        Hit(ToolId("A", "b"), 2, 0.25, None, None, 1, 0.9),   # only in the dense list
        Hit(ToolId("B", "c"), 3, 0.1, 2, 2.0, None, None),    # only in the BM25 list
    ]
    f = candidate_features(h, np.array([1.0, 3.0, -1.0]))
    assert set(f) == set(FEATURES)
    np.testing.assert_allclose(f["log_fused_rank"], np.log([1, 2, 3]))
    np.testing.assert_allclose(f["log_bm25_rank"], np.log([1, MISSING_RANK, 2]))
    np.testing.assert_allclose(f["log_dense_rank"], np.log([2, 1, MISSING_RANK]))
    np.testing.assert_allclose(f["fused_rel"], [1.0, 0.5, 0.2])
    np.testing.assert_allclose(f["bm25_rel"], [1.0, 0.0, 0.25])
    np.testing.assert_allclose(f["bm25_over_5th"], [1.0, 0.0, 0.25])  # fewer than 5: over the last
    np.testing.assert_allclose(f["dense_score"], [0.8, 0.9, 0.8])   # missing -> the list's lowest
    np.testing.assert_allclose(f["dense_gap"], [-0.1, 0.0, -0.1])
    np.testing.assert_allclose(f["logit_gap"], [-2.0, 0.0, -4.0])
    assert "logit" not in candidate_features(h)


def test_need_features_read_the_need_lists_and_repeat_the_request_without_one():
    with_need = [
        Hit(ToolId("A", "a"), 1, 0.5, 1, 8.0, 2, 0.8, 3, 1, 0.7),
        Hit(ToolId("A", "b"), 2, 0.25, None, None, 1, 0.9, None, 2, 0.6),   # not in the need's BM25 list
        Hit(ToolId("B", "c"), 3, 0.1, 2, 2.0, None, None, 5, None, None),   # in no need dense list
    ]
    f = candidate_features(with_need, n_eligible=40)
    assert f["has_need"].tolist() == [1.0, 1.0, 1.0]
    np.testing.assert_allclose(f["log_need_rank"], np.log([1, 2, 5]))          # the better of the need's ranks
    np.testing.assert_allclose(f["need_dense_score"], [0.7, 0.6, 0.6])         # missing -> the list's lowest
    np.testing.assert_allclose(f["need_dense_gap"], [0.0, -0.1, -0.1])
    np.testing.assert_allclose(f["log_eligible"], np.log(40))
    bare = [Hit(h.tool_id, h.rank, h.score, h.bm25_rank, h.bm25_score, h.dense_rank, h.dense_score) for h in with_need]
    g = candidate_features(bare)
    assert g["has_need"].tolist() == [0.0, 0.0, 0.0]
    np.testing.assert_allclose(g["log_need_rank"], np.log([1, 1, 2]))        # the request's better rank
    np.testing.assert_allclose(g["need_dense_score"], g["dense_score"])
    np.testing.assert_allclose(g["log_eligible"], np.log(3))                   # default: the list's length


def test_candidate_features_compute_only_what_a_model_reads():
    h = [Hit(ToolId("A", "a"), 1, 0.5, 1, 8.0, 2, 0.8, 3, 1, 0.7), Hit(ToolId("B", "c"), 2, 0.1, 2, 2.0, None, None)]
    shipped = tuple(f for f in FEATURES if f not in EXPERIMENTAL_FEATURES)
    f = candidate_features(h, np.array([1.0, 0.0]), only=shipped)
    assert set(f) == set(shipped)
    g = candidate_features(h, np.array([1.0, 0.0]), n_eligible=9, only=("logit", "need_dense_gap"))
    assert {"has_need", "need_dense_gap"} <= set(g) and "log_eligible" not in g
    full = candidate_features(h, np.array([1.0, 0.0]), n_eligible=9)
    for name in f:   # the same values whichever subset is asked for
        np.testing.assert_allclose(f[name], full[name])
    # a model reads its own features only, with the same probabilities as from all of them
    model = ConfidenceModel(shipped, tuple(0.1 for _ in shipped), 0.0, tuple(0.0 for _ in shipped),
                            tuple(1.0 for _ in shipped))
    np.testing.assert_allclose(model.probabilities(h, np.array([1.0, 0.0])), model.probabilities_from_features(full))


def test_candidate_features_all_zero_scores():
    """An exactly named tool joins with score 0; a list of only such hits must not divide by zero."""
    h = [Hit(ToolId("A", "a"), 1, 0.0)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f = candidate_features(h)
    assert f["fused_rel"].tolist() == [0.0] and f["bm25_rel"].tolist() == [0.0]
    assert f["dense_score"].tolist() == [0.0]
    assert f["bm25_over_5th"].tolist() == [0.0]


def test_bm25_over_5th_measures_how_far_a_match_stands_out():
    def bm25_list(scores):
        return [Hit(ToolId("S", f"t{i}"), i + 1, 1.0 / (i + 1), i + 1, sc, None, None) for i, sc in enumerate(scores)]
    peaked = candidate_features(bm25_list([10.0, 4.0, 3.0, 3.0, 2.0, 1.0]))["bm25_over_5th"]
    plateau = candidate_features(bm25_list([10.0, 9.5, 9.0, 9.0, 8.0, 1.0]))["bm25_over_5th"]
    np.testing.assert_allclose(peaked[:5], [0.8, 0.2, 0.1, 0.1, 0.0])
    assert peaked[0] > plateau[0] > 0      # the same best score means more when nothing is close
    assert plateau[5] < 0                  # below the fifth best: negative


# ------------------------------------------------------------------ the list calibration


def test_list_calibration_refuses_parameters_that_would_reorder_a_list():
    from retrieval.pipeline.confidence import ListCalibration

    with pytest.raises(ValueError, match="keep each list's order"):
        ListCalibration(a=0.5, b=-0.6)
    with pytest.raises(ValueError, match="keep each list.s order"):
        ListCalibration(a=-0.1, b=0.5)
    with pytest.raises(ValueError, match="keep each list's order"):
        ListCalibration(c=-0.1)
    with pytest.raises(ValueError, match="finite"):
        ListCalibration(a=float("nan"))


def test_list_calibration_lifts_only_the_best_and_keeps_the_order():
    from retrieval.pipeline.confidence import ListCalibration

    s = np.array([-1.0, 2.0, 0.5, 2.0 - 1e-9])
    out = ListCalibration(a=1.0, b=0.5, c=0.7, d=-0.2).apply(s)
    assert list(np.argsort(-out, kind="stable")) == list(np.argsort(-s, kind="stable"))
    assert out[1] == pytest.approx(2.0 + 0.7 - 0.2)
    assert ListCalibration().apply(np.zeros(0)).shape == (0,)


def test_malformed_list_calibration_is_a_clear_error():
    d = {"features": ["logit"], "weights": [1.0], "bias": 0.0, "mean": [0.0], "scale": [1.0],
         "list_calibration": {"a": 1.0, "e": 2.0}}
    with pytest.raises(ValueError, match="malformed confidence model"):
        ConfidenceModel.from_dict(d)
