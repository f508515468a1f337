"""Weighted reciprocal-rank fusion: exact arithmetic, weights, ties, config validation."""

from __future__ import annotations

import dataclasses

import pytest

from retrieval.index.fusion import FusionConfig, reciprocal_rank_fusion


def test_rrf_scores_and_order():
    fused = reciprocal_rank_fusion([[1, 2, 3], [3, 1]], [1.0, 0.5], k=10)
    assert [row for row, _ in fused] == [1, 3, 2]
    scores = dict(fused)
    assert scores[1] == pytest.approx(1 / 11 + 0.5 / 12)
    assert scores[3] == pytest.approx(1 / 13 + 0.5 / 11)
    assert scores[2] == pytest.approx(1 / 12)


def test_rrf_k_zero_is_plain_reciprocal_rank():
    fused = reciprocal_rank_fusion([[7, 8], [8]], [1.0, 1.0], k=0)
    assert fused == [(8, pytest.approx(1 / 2 + 1 / 1)), (7, pytest.approx(1.0))]


def test_rrf_a_zero_weight_ignores_that_list():
    fused = reciprocal_rank_fusion([[1, 2], [3, 2, 1]], [1.0, 0.0], k=10)
    assert [row for row, _ in fused] == [1, 2]
    assert dict(fused) == {1: pytest.approx(1 / 11), 2: pytest.approx(1 / 12)}
    only_second = reciprocal_rank_fusion([[1, 2], [3, 2, 1]], [0.0, 2.0], k=10)
    assert only_second == [(3, pytest.approx(2 / 11)), (2, pytest.approx(2 / 12)), (1, pytest.approx(2 / 13))]


def test_rrf_ties_keep_first_appearance():
    fused = reciprocal_rank_fusion([[4, 5], [5, 4]], [1.0, 1.0], k=10)
    assert [row for row, _ in fused] == [4, 5]
    assert fused[0][1] == pytest.approx(fused[1][1])


def test_rrf_empty_lists():
    assert reciprocal_rank_fusion([[], []], [1.0, 1.0], k=10) == []
    assert reciprocal_rank_fusion([[], [2]], [1.0, 1.0], k=10) == [(2, pytest.approx(1 / 11))]


def test_fusion_config_defaults():
    cfg = FusionConfig()
    assert (cfg.k, cfg.w_bm25, cfg.w_dense) == (10.0, 1.0, 2.0)  # chosen on dev (README, "Fusion weights")
    assert cfg.depth >= 100


@pytest.mark.parametrize("kwargs", [{"k": -1}, {"w_bm25": -0.1}, {"w_dense": -1}, {"w_bm25": 0, "w_dense": 0}])
def test_fusion_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError, match="invalid fusion config .* k and weights must be >= 0, weights not both 0"):
        FusionConfig(**kwargs)


def test_fusion_config_one_zero_weight_is_allowed():
    assert FusionConfig(w_dense=0.0).w_bm25 == 1.0
    assert FusionConfig(w_bm25=0.0).w_dense == FusionConfig().w_dense


def test_fusion_config_is_frozen_and_keyword_only():
    cfg = FusionConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.k = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        FusionConfig(10.0)  # type: ignore[misc]
