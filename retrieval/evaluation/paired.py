"""Paired comparison of two rankers on the same questions, at rank 1.

Two stages' rank-1 rates on one set of questions are not independent samples: most
questions are right (or wrong) for both, and only the questions where they disagree say
which is better. So a difference is reported as wins / losses over those questions, with
the exact two-sided McNemar p-value (a binomial test of the wins among the disagreements
at 1/2). A style cell of ~140 questions where two stages differ by one question is then
seen for what it is (p close to 1), and a real difference for what it is too.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from .stats import mcnemar_exact

__all__ = ["mcnemar_exact", "paired_top1"]


def _cell(a: Sequence[bool], b: Sequence[bool]) -> dict:
    wins = sum(x and not y for x, y in zip(a, b))
    losses = sum(y and not x for x, y in zip(a, b))
    return {"n": len(a), "wins": wins, "losses": losses, "p": mcnemar_exact(wins, losses)}


def paired_top1(ranks_a: Sequence[int | None], ranks_b: Sequence[int | None],
                styles: Sequence[str | None]) -> dict:
    """Stage A against stage B, at rank 1: overall and by style.

    ``wins``: questions A puts right at rank 1 and B does not; ``losses``: the reverse.
    """
    if not len(ranks_a) == len(ranks_b) == len(styles):
        raise ValueError(f"paired comparison needs one rank per question from each stage and one style each, "
                         f"got {len(ranks_a)}, {len(ranks_b)} and {len(styles)}")
    a = [r == 1 for r in ranks_a]
    b = [r == 1 for r in ranks_b]
    groups: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(styles):
        groups[s or "-"].append(i)
    out = _cell(a, b)
    out["by_style"] = {s: _cell([a[i] for i in idx], [b[i] for i in idx]) for s, idx in sorted(groups.items())}
    return out
