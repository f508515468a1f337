"""Paired rank-1 comparison: exact McNemar p-values by hand, wins/losses by style."""

from __future__ import annotations

from math import comb

import pytest

from retrieval.evaluation.paired import mcnemar_exact, paired_top1


def test_no_disagreement_is_no_evidence():
    assert mcnemar_exact(0, 0) == 1.0


@pytest.mark.parametrize("wins,losses,expected", [
    (5, 0, 2 / 32),                                   # 2 * P(X = 0), X ~ Bin(5, 1/2)
    (10, 2, 2 * (1 + 12 + 66) / 4096),               # 2 * P(X <= 2), X ~ Bin(12, 1/2)
    (1, 2, 1.0),                                      # as even as 3 can be: capped at 1
    (30, 10, 2 * sum(comb(40, i) for i in range(11)) / 2 ** 40),
])
def test_mcnemar_exact_by_hand(wins, losses, expected):
    assert mcnemar_exact(wins, losses) == pytest.approx(expected, rel=1e-12)
    assert mcnemar_exact(losses, wins) == pytest.approx(expected, rel=1e-12)  # two-sided: symmetric


def test_more_lopsided_is_less_likely_by_chance():
    assert mcnemar_exact(9, 1) < mcnemar_exact(8, 2) < mcnemar_exact(6, 4)


def test_negative_counts_are_refused():
    with pytest.raises(ValueError, match="counts"):
        mcnemar_exact(-1, 3)


def test_wins_and_losses_by_style():
    a = [1, 1, 2, None, 1, 3]     # stage A's rank of the right tool, per question
    b = [1, 2, 1, 1, 4, 3]
    styles = ["goal", "goal", "goal", "function", "function", None]
    out = paired_top1(a, b, styles)
    assert (out["n"], out["wins"], out["losses"]) == (6, 2, 2)
    assert out["p"] == 1.0
    assert out["by_style"]["goal"] == {"n": 3, "wins": 1, "losses": 1, "p": 1.0}
    assert out["by_style"]["function"] == {"n": 2, "wins": 1, "losses": 1, "p": 1.0}
    assert out["by_style"]["-"] == {"n": 1, "wins": 0, "losses": 0, "p": 1.0}


def test_lengths_must_match():
    with pytest.raises(ValueError, match="one rank per question"):
        paired_top1([1, 2], [1], ["goal", "goal"])
