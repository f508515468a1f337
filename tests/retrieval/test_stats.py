"""retrieval.evaluation.stats: the one AUROC, McNemar, ECE and sigmoid, checked against definitions by hand."""

from __future__ import annotations

import builtins
import math
import sys
from itertools import product

import numpy as np
import pytest

from retrieval.evaluation import abstention, paired, stats
from retrieval.pipeline import confidence


def test_every_user_shares_the_one_implementation():
    assert abstention.auroc is stats.auroc
    assert paired.mcnemar_exact is stats.mcnemar_exact
    assert confidence.sigmoid is stats.sigmoid


def test_auroc_is_the_pairwise_probability_with_ties_half():
    pos, neg = [0.9, 0.5, 0.5, 0.2], [0.5, 0.1, 0.3]
    pairs = [(1.0 if p > n else 0.5 if p == n else 0.0) for p, n in product(pos, neg)]
    assert stats.auroc(pos, neg) == pytest.approx(sum(pairs) / len(pairs))
    assert math.isnan(stats.auroc([], [0.1]))


@pytest.mark.parametrize("wins, losses", [(0, 1), (3, 0), (5, 5), (14, 5), (2, 3), (101, 18)])
def test_mcnemar_is_twice_the_binomial_tail(wins, losses):
    n, k = wins + losses, min(wins, losses)
    expected = min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)
    assert stats.mcnemar_exact(wins, losses) == pytest.approx(expected, rel=1e-9)


def test_mcnemar_refuses_negative_counts_and_is_one_without_disagreement():
    assert stats.mcnemar_exact(0, 0) == 1.0
    with pytest.raises(ValueError, match="counts"):
        stats.mcnemar_exact(-1, 2)


def test_ece_by_hand():
    # bins of 0.1: {0.05, 0.15}: 0.05 → bin 0 (label 0, gap 0.05); 0.15 → bin 1 (label 1, gap 0.85)
    assert stats.ece([0.05, 0.15], [0, 1]) == pytest.approx((0.05 + 0.85) / 2)
    # one bin at 15 bins edges differs from 10: 0.12 and 0.14 share a bin at 10, not at 15
    p, y = np.array([0.12, 0.14]), np.array([1, 0])
    assert stats.ece(p, y, n_bins=10) == pytest.approx(abs(0.13 - 0.5))
    assert stats.ece(p, y, n_bins=15) == pytest.approx((0.88 + 0.14) / 2)


def test_sigmoid_is_stable_at_the_extremes():
    z = np.array([-1000.0, -30.0, 0.0, 30.0, 1000.0])
    s = stats.sigmoid(z)
    assert np.all(np.isfinite(s)) and s[2] == 0.5 and s[0] == 0.0 and s[-1] == 1.0
    assert s[1] == pytest.approx(math.exp(-30) / (1 + math.exp(-30)), rel=1e-12)


def test_a_missing_evaluation_library_is_named(monkeypatch):
    real_import = builtins.__import__

    def no_sklearn(name, *args, **kwargs):
        if name.startswith("sklearn"):
            raise ImportError("No module named 'sklearn'")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "sklearn.metrics", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_sklearn)
    with pytest.raises(ImportError, match="scikit-learn"):
        stats.auroc([0.9], [0.1])


def test_the_query_path_does_not_load_the_evaluation_libraries():
    import subprocess

    code = ("import sys; import retrieval.pipeline.flow, retrieval.pipeline.confidence, retrieval.evaluation.stats; "
            "print('sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_ece_floor_is_what_a_calibrated_model_reads_at_that_count():
    rng = np.random.default_rng(1)
    p = rng.uniform(0.3, 0.95, 100)
    small = stats.ece_floor(p, draws=300)
    big = stats.ece_floor(np.tile(p, 10), draws=300)
    assert 0.04 < small["median"] < 0.12 and small["n"] == 100   # 100 requests: near 0.08, above 0.05
    assert big["median"] < small["median"] / 2                   # ten times the count: about a third
    assert small["median"] <= small["p95"]
    # an ECE far past the calibrated draws has a small p-value, one inside them a large one
    assert stats.ece_floor(p, observed=0.4, draws=300)["p_value"] < 0.01
    assert stats.ece_floor(p, observed=small["median"], draws=300)["p_value"] > 0.3
    assert stats.ece_floor([], draws=10)["n"] == 0


def test_a_count_against_a_poisson_expectation():
    import numpy as np

    from retrieval.evaluation.stats import poisson_at_least, poisson_loglik, poisson_p

    assert poisson_p(5, 5.0) > 0.9 and poisson_p(0, 10.0) < 0.001 and poisson_p(1, 0.0) == 0.0
    assert poisson_at_least(0, 3.0) == 1.0 and abs(poisson_at_least(1, 0.5) - (1 - np.exp(-0.5))) < 1e-12
    assert abs(poisson_loglik(1, 0.1) - (np.log(0.1) - 0.1)) < 1e-12
    assert abs(poisson_loglik(0, 0.0)) < 1e-9 and poisson_loglik(2, 0.0) < -40   # nothing expected: a count is near impossible
