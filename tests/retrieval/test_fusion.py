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


def test_day_one_weights_where_few_tools_have_examples():
    """An index of tools without example requests (a user's own catalog, an MCP gateway's) fuses with the
    weights chosen over writers at day one; one with examples for at least half its tools keeps the defaults."""
    from types import SimpleNamespace

    bare = [SimpleNamespace(examples=()) for _ in range(3)]
    rich = [SimpleNamespace(examples=("find my invoices",)) for _ in range(3)]
    assert FusionConfig.for_catalog(bare, with_examples=True) == FusionConfig.day_one()
    assert FusionConfig.for_catalog(rich, with_examples=True) == FusionConfig()
    assert FusionConfig.for_catalog(rich, with_examples=False) == FusionConfig.day_one()   # examples not indexed
    assert FusionConfig.for_catalog(rich[:2] + bare[:2], with_examples=True) == FusionConfig()   # half: defaults
    assert FusionConfig.for_catalog(rich[:1] + bare, with_examples=True) == FusionConfig.day_one()
    assert FusionConfig.for_catalog([], with_examples=True) == FusionConfig.day_one()
    day = FusionConfig.day_one()
    assert day.w_dense > FusionConfig().w_dense and day.k < FusionConfig().k and day.w_bm25 == 1.0


def test_an_index_picks_its_weights_from_its_catalog_and_keeps_them(tmp_path):
    from retrieval.catalog.model import Catalog, Tool
    from retrieval.index.embedded import ToolIndex
    from tests.fakes import HashEncoder

    tools = [Tool("A", f"t{i}", f"tool number {i}") for i in range(4)]
    bare = ToolIndex(Catalog(tools), HashEncoder())
    assert bare.fusion == FusionConfig.day_one()
    rich = ToolIndex(Catalog([t.with_examples(["an example request"]) for t in tools]), HashEncoder())
    assert rich.fusion == FusionConfig()
    given = FusionConfig(w_dense=1.0)
    assert ToolIndex(Catalog(tools), HashEncoder(), fusion=given).fusion == given   # weights given win
    bare.save(tmp_path / "i")
    assert ToolIndex.load(tmp_path / "i", encoder=HashEncoder()).fusion == FusionConfig.day_one()


def test_an_index_saved_before_the_day_one_weights_takes_them_on_load():
    """Fusion happens at query time: an index built before 0.12.0 with the then defaults over a catalog
    without example requests searches with the day-one weights (the day-one models were fitted on them);
    anything else keeps what it saved."""
    from types import SimpleNamespace

    bare = [SimpleNamespace(examples=())]
    old = dataclasses.asdict(FusionConfig(learned_lexical="both"))
    up = FusionConfig.from_manifest(old, "0.11.0", bare, True)
    assert up.day_one_weights and up.learned_lexical == "both"          # weights only; other fields kept
    assert FusionConfig.from_manifest(old, None, bare, True).day_one_weights   # no version recorded: older
    assert FusionConfig.from_manifest(old, "0.12.0", bare, True) == FusionConfig(learned_lexical="both")
    assert FusionConfig.from_manifest(old, "0.11.0", [SimpleNamespace(examples=("x",))], True) \
        == FusionConfig(learned_lexical="both")                        # a catalog with examples: as saved
    chosen = dataclasses.asdict(FusionConfig(w_dense=1.0))
    assert FusionConfig.from_manifest(chosen, "0.9.0", bare, True) == FusionConfig(w_dense=1.0)   # chosen weights stay
    assert FusionConfig.from_manifest(old, "dev-build", bare, True) == FusionConfig(learned_lexical="both")
    # PEP 440 order (packaging): a release candidate of 0.12.0 is older than 0.12.0, 0.12.0.post1 is not
    assert FusionConfig.from_manifest(old, "0.12.0rc1", bare, True).day_one_weights
    assert FusionConfig.from_manifest(old, "0.12.0.post1", bare, True) == FusionConfig(learned_lexical="both")
    assert FusionConfig.from_manifest(old, "0.9.10", bare, True).day_one_weights
    assert FusionConfig.from_manifest(old, "0.12", bare, True) == FusionConfig(learned_lexical="both")   # = 0.12.0
    assert FusionConfig.from_manifest(old, "0.12.0.dev3", bare, True).day_one_weights   # a pre-release: older
    called = []
    FusionConfig.from_manifest(old, "0.12.1", lambda: called.append(1) or bare, True)
    assert not called                                                   # the catalog read only when it matters


def test_the_pipeline_scores_a_day_one_fused_index_with_the_day_one_models():
    """A catalog without example requests indexed with with_examples=True (the CLI's default) fuses with
    the day-one weights, so its confidence and tail models are the day-one ones, as for with_examples=False."""
    from retrieval.catalog.model import Catalog, Tool
    from retrieval.index.embedded import ToolIndex
    from retrieval.pipeline.confidence import default_confidence_path
    from retrieval.pipeline.flow import Pipeline
    from tests.fakes import HashEncoder

    tools = [Tool("A", f"t{i}", f"tool number {i}") for i in range(4)]
    from retrieval.pipeline.confidence import ConfidenceModel

    day_one, examples = (ConfidenceModel.load(default_confidence_path(x)) for x in (False, True))
    assert day_one.weights != examples.weights
    for with_examples in (True, False):
        pipe = Pipeline(ToolIndex(Catalog(tools), HashEncoder(), with_examples=with_examples))
        assert pipe.confidence == day_one and pipe.confidence_noex is None
    rich = ToolIndex(Catalog([t.with_examples(["an example"]) for t in tools]), HashEncoder())
    assert Pipeline(rich).confidence == examples
