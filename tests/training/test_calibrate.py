"""Confidence calibration: the logistic fit, and the (query, mode) candidate lists it is fitted on."""

from __future__ import annotations

import json

import numpy as np
import pytest

from retrieval.catalog.model import ToolId
from retrieval.evaluation.harness import Query
from retrieval.pipeline.confidence import RETRIEVAL_FEATURES, ConfidenceModel
from training.calibrate import abstain_eligibility, collect, fit_confidence

SHARDS = ToolId("Elasticsearch", "get_shards")
INDICES = ToolId("Elasticsearch", "list_indices")
ISSUE = ToolId("GitHub", "create_issue")
POST = ToolId("Slack", "post_message")
FORECAST = ToolId("Weather", "get_forecast")

QUERIES = [
    Query("d1", "shard allocation status of an index", SHARDS, need="get shard status", style="goal"),
    Query("d2", "open a new issue in the repository", ISSUE, need="create an issue", style="explicit",
          acceptable=(POST,)),  # an acceptable alternative on another server
]


class FakeScorer:
    """Logit = 2 for the query's labelled tool and its alternatives, -1 otherwise; records its calls."""

    def __init__(self, queries=QUERIES):
        self.good = {q.query: q.lenient_targets for q in queries}
        self.calls: list[tuple[str, str | None, list[ToolId]]] = []

    def logits(self, request, need, tools) -> np.ndarray:
        self.calls.append((request, need, [t.id for t in tools]))
        return np.array([2.0 if t.id in self.good[request] else -1.0 for t in tools])


# ------------------------------------------------------------------ fit_confidence


def test_fit_confidence_is_monotone_in_the_logit_and_matches_the_base_rate():
    pytest.importorskip("sklearn")
    rng = np.random.default_rng(0)
    y = (rng.random(2000) < 0.2).astype(np.float64)
    logit = rng.normal(0.0, 1.0, len(y)) + 2.0 * y  # higher logit, more often a fit
    feats = {"logit": logit, "dense_score": rng.normal(size=len(y))}  # extra features are ignored
    model = fit_confidence(feats, y, ("logit",), fitted_on="synthetic")
    assert isinstance(model, ConfidenceModel)
    assert model.features == ("logit",) and model.fitted_on == "synthetic"
    assert model.weights[0] > 0
    grid = np.linspace(-4, 6, 50)
    p_grid = model.probabilities_from_features({"logit": grid})
    assert np.all(np.diff(p_grid) > 0)
    p = model.probabilities_from_features(feats)
    assert abs(p.mean() - y.mean()) < 0.02
    assert p[y == 1].mean() > p[y == 0].mean() + 0.2
    # survives a save/load round trip
    assert ConfidenceModel.from_dict(model.to_dict()) == model


# ------------------------------------------------------------------ collect


def test_abstain_eligibility_drops_the_labelled_and_acceptable_servers(index):
    eligible = abstain_eligibility(index, QUERIES[1])
    assert eligible.servers == frozenset({"Elasticsearch", "Weather"})


def test_collect_groups_labels_and_modes(index):
    scorer = FakeScorer()
    col = collect(index, QUERIES, scorer, show_progress=False)
    assert col.modes == ["request", "need", "abstain"] * len(QUERIES)
    feats, y, groups = col.arrays()
    assert set(feats) == {"logit", "logit_gap", *RETRIEVAL_FEATURES}
    assert all(len(v) == len(y) == len(groups) for v in feats.values())
    assert list(np.unique(groups)) == list(range(len(col.modes)))

    # the scorer saw each (query, mode) list once: the need only in "need" mode
    assert [(r, n) for r, n, _ in scorer.calls] == [
        (q.query, q.need if mode == "need" else None) for q in QUERIES for mode in ("request", "need", "abstain")]
    for g, ((request, _, tools), mode) in enumerate(zip(scorer.calls, col.modes)):
        q = next(q for q in QUERIES if q.query == request)
        labels = col.labels[g]
        assert len(labels) == len(tools) and np.all(groups[groups == g] == g)
        # 1 exactly for the labelled tool and its acceptable alternatives
        assert [t for t, lab in zip(tools, labels) if lab == 1.0] == [t for t in tools if t in q.lenient_targets]
        assert set(np.unique(labels)) <= {0.0, 1.0}
        np.testing.assert_array_equal(col.feats["logit"][g], [2.0 if t in q.lenient_targets else -1.0 for t in tools])
        if mode == "abstain":
            assert not {t.server for t in tools} & {t.server for t in q.lenient_targets}
            assert labels.sum() == 0
        else:
            assert set(tools) >= q.lenient_targets  # the tiny catalog: everything is retrieved
            assert labels.sum() == len(q.lenient_targets)


def test_collect_without_a_scorer_has_only_retrieval_features(index):
    col = collect(index, QUERIES[:1], None, modes=("request",), show_progress=False)
    feats, y, groups = col.arrays()
    assert set(feats) == set(RETRIEVAL_FEATURES)
    assert col.modes == ["request"] and y.sum() == 1 and set(groups) == {0}


# ------------------------------------------------------------------ fit_list_calibration


def _synthetic_lists(n_lists=600, n=30, seed=1):
    """Lists whose best first-stage score is right less often than a per-candidate fit says
    (the winner's curse of picking the maximum of noisy scores)."""
    from training.calibrate import Collected

    rng = np.random.default_rng(seed)
    col = Collected()
    for _ in range(n_lists):
        y = np.zeros(n)
        y[rng.integers(n)] = 1.0
        logit = rng.normal(0.0, 1.5, n) + 2.0 * y
        col.add({"logit": logit}, y, "request")
    return col


def _best_gap(model, col):
    """Mean predicted minus observed for the best candidate of each list."""
    p_best, y_best = [], []
    for g, y in enumerate(col.labels):
        p = model.probabilities_from_features({k: v[g] for k, v in col.feats.items()})
        i = int(np.argmax(p))
        p_best.append(p[i]); y_best.append(y[i])
    return float(np.mean(p_best) - np.mean(y_best))


def test_list_calibration_calibrates_the_best_candidate_without_reordering():
    pytest.importorskip("sklearn")
    from dataclasses import replace

    from training.calibrate import fit_list_calibration

    col = _synthetic_lists()
    feats, y, _ = col.arrays()
    first = fit_confidence(feats, y, ("logit",))
    lc = fit_list_calibration(first, col)
    assert lc is not None
    both = replace(first, list_calibration=lc)
    held_out = _synthetic_lists(seed=2)
    assert abs(_best_gap(both, held_out)) < abs(_best_gap(first, held_out))
    assert abs(_best_gap(both, held_out)) < 0.05
    for g in range(20):  # the same order within every list
        f = {k: v[g] for k, v in held_out.feats.items()}
        assert list(np.argsort(-first.probabilities_from_features(f), kind="stable")) == \
               list(np.argsort(-both.probabilities_from_features(f), kind="stable"))
    assert ConfidenceModel.from_dict(both.to_dict()) == both


def test_collected_subset_keeps_only_the_named_modes(index):
    col = collect(index, QUERIES, FakeScorer(), show_progress=False)
    sub = col.subset(("request", "need"))
    assert sub.modes == ["request", "need"] * len(QUERIES)
    kept = [g for g, m in enumerate(col.modes) if m != "abstain"]
    assert all(np.array_equal(a, col.labels[g]) for a, g in zip(sub.labels, kept))
    assert col.subset(()).modes == []


# ------------------------------------------------------------------ catalogs shaped like users'


def test_collect_catalogs_marks_kinds_and_gives_twins_their_cases_size(index, tmp_path):
    from retrieval.catalog.eligibility import Eligibility
    from retrieval.evaluation.agent_flow import Case
    from retrieval.pipeline.flow import Pipeline
    from training.calibrate import Collected, collect_catalogs

    pipe = Pipeline(index, None)
    every = [t.id for t in index.catalog.tools]
    cases = [Case("c1", "open a new issue in the repository", "toy", Eligibility(), frozenset({ISSUE}),
                  "create an issue", "create an issue in a repository"),
             Case("c1:none", "open a new issue in the repository", "toy",
                  Eligibility.of(tools=[t for t in every if t != ISSUE]), frozenset(), "create an issue")]
    col = collect_catalogs([(pipe, cases)], show_progress=False)
    # the answerable case without a need, with its need and with the sharper one; the twin twice
    assert col.modes == ["catalog"] * 3 + ["catalog_nofit"] * 2 and set(col.kinds) == {"toy"}
    assert [int(lab.sum()) for lab in col.labels] == [1, 1, 1, 0, 0]
    # the twin reads its case's catalog size, not the one tool short that would mark every twin
    sizes = {float(f[0]) for f in col.feats["log_eligible"]}
    assert sizes == {float(np.log(len(every)))}
    col.save(tmp_path / "lists.npz", {"examples": False})
    back, meta = Collected.load(tmp_path / "lists.npz")
    assert back.modes == col.modes and back.kinds == col.kinds and meta == {"examples": False}
    assert all(np.array_equal(a, b) for a, b in zip(back.labels, col.labels))
    assert all(np.array_equal(a, b) for k in col.feats for a, b in zip(back.feats[k], col.feats[k]))
    with pytest.raises(ValueError, match="no such file"):
        Collected.load(tmp_path / "missing.npz")
    (tmp_path / "bad.npz").write_bytes(b"not an npz")
    with pytest.raises(ValueError, match="not a lists file"):
        Collected.load(tmp_path / "bad.npz")


def test_a_feature_that_does_not_vary_is_refused():
    pytest.importorskip("sklearn")
    rng = np.random.default_rng(0)
    feats = {"logit": rng.normal(size=200), "log_eligible": np.full(200, np.log(2797))}
    y = (feats["logit"] > 0.5).astype(float)
    with pytest.raises(ValueError, match="log_eligible"):
        fit_confidence(feats, y, ("logit", "log_eligible"))


@pytest.mark.parametrize(("argv", "message"), [
    (["--cv"], "add --catalogs fit"),
    (["--modes", "request,need,catalog"], "lists of --catalogs fit"),
    (["--load-lists", "x.npz", "--save-lists", "y.npz"], "nothing is scored"),
    (["--save-lists", "/no/such/folder/l.npz"], "no folder"),
])
def test_calibrate_refuses_flag_combinations_with_a_clear_error(argv, message, capsys):
    from training.calibrate import main

    with pytest.raises(SystemExit) as exc:
        main(["--retrieval-only", *argv])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_calibrate_refuses_lists_scored_for_another_index(tmp_path, capsys, monkeypatch):
    from training.calibrate import Collected, main

    col = Collected()
    col.add({"log_fused_rank": np.log(np.arange(1, 6.0))}, np.array([1.0, 0, 0, 0, 0]), "request")
    col.save(tmp_path / "l.npz", {"examples": True, "score_top": 10, "logits": False})
    with pytest.raises(SystemExit):
        main(["--retrieval-only", "--no-examples", "--score-top", "10", "--load-lists", str(tmp_path / "l.npz")])
    assert "scored with examples=True" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--retrieval-only", "--load-lists", str(tmp_path / "missing.npz")])
    assert "no such file" in capsys.readouterr().err
    # a retrieval-only fit reads no logits: lists scored with another head serve it (written to tmp_path here)
    import training.calibrate as calibrate

    monkeypatch.setattr(calibrate, "default_confidence_path", lambda with_examples=True: tmp_path / "fitted.json")
    col.add({"log_fused_rank": np.log(np.arange(1, 6.0))}, np.array([0.0, 1, 0, 0, 0]), "request")
    col.save(tmp_path / "head20.npz", {"examples": False, "score_top": 20, "logits": True,
                                       "source": "dev questions (2)"})
    assert main(["--retrieval-only", "--no-examples", "--modes", "request", "--calibrate-on", "none",
                 "--features", "log_fused_rank", "--load-lists", str(tmp_path / "head20.npz")]) == 0
    assert (tmp_path / "fitted.json").is_file() and "scored with" not in capsys.readouterr().err
    # the record names the questions the lists were scored from, not the lists file
    assert json.loads((tmp_path / "fitted.json").read_text())["fitted_on"].startswith("dev questions (2), modes")


def test_cross_validation_leaves_each_catalog_kind_out():
    pytest.importorskip("sklearn")
    from training.calibrate import Collected, cross_validate, format_cv

    rng = np.random.default_rng(3)
    col = Collected()
    for kind in ("a", "b", "c"):
        for _ in range(60):
            y = np.zeros(20)
            y[rng.integers(20)] = 1.0
            col.add({"logit": rng.normal(0, 1.5, 20) + 2.5 * y}, y, "catalog", kind)
            col.add({"logit": rng.normal(0, 1.5, 20)}, np.zeros(20), "catalog_nofit", kind)
    rows = cross_validate(col, ("logit",), ("catalog",))
    assert [r["kind"] for r in rows] == ["a", "b", "c"]
    assert all(r["lists"] == 60 and r["nofit_lists"] == 60 for r in rows)
    # same writer everywhere: each held-out kind is calibrated, and its twins are less sure than its answers
    assert all(r["ece"] < 0.15 and r["nofit_mean_best"] < r["mean_best"] for r in rows)
    assert format_cv(rows).count("\n") == 2 + 3
