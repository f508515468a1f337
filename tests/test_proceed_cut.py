"""The proceed-cut simulation's arithmetic (benchmarks/proceed_cut.py): a cut is learnt only from searches
under the threshold, only where their first tools fit often enough, with enough of them."""

import numpy as np

from benchmarks import proceed_cut as pc


def test_the_wilson_bound_sits_under_the_rate_and_tightens_with_n():
    assert pc.wilson_lower(9, 10) < 0.9 < pc.wilson_lower(900, 1000) + 0.03
    assert pc.wilson_lower(9, 10) < pc.wilson_lower(90, 100) < 0.9
    assert pc.wilson_lower(0, 0) == 0.0


def test_a_cut_needs_enough_fitting_first_tools_under_the_threshold():
    p = np.linspace(0.5, 0.82, 100)
    fits = np.ones(100)
    assert pc.learn_cut(p, fits, 0.83, 0.8, 10) == 0.5                 # every first tool fits: all the way down
    mixed = (p >= 0.7).astype(float)                                    # under 0.7 none fits
    cut = pc.learn_cut(p, mixed, 0.83, 0.8, 10)
    assert 0.67 < cut < 0.72                  # near where the fits stop (the lowest ten may hold two misses)
    assert pc.learn_cut(p[:5], fits[:5], 0.83, 0.8, 10) == 0.83         # too few observations: as shipped
    above = np.linspace(0.84, 0.99, 50)                                 # proceeded searches say nothing
    assert pc.learn_cut(above, np.ones(50), 0.83, 0.8, 10) == 0.83


def test_the_simulation_reads_the_rest_at_the_learnt_cut():
    rng = np.random.default_rng(0)
    p = np.r_[rng.uniform(0.5, 0.95, 200), rng.uniform(0.0, 0.4, 200)]   # twins read low: safe to go down
    y = np.r_[np.ones(200), np.zeros(200)]
    ans = np.r_[np.ones(200, bool), np.zeros(200, bool)]
    out = pc.simulate({"k": (p, y, ans)}, 0.83, 0.8, 10, history=200, repeats=20)["k"]
    assert out["cut"] < 0.83 and out["proceed"] > out["proceed_default"] and out["twins_wrong"] == 0.0
