"""The request-length term tried on a catalog's probe map (benchmarks/request_shape.py): its one weight is the
likelihood's, and a request's length is read in words."""

import numpy as np
import pytest

from benchmarks import request_shape as rs


def test_the_length_weight_is_recovered_from_fits_that_follow_it():
    rng = np.random.default_rng(3)
    cells = []
    for shift in (-0.5, 0.0, 1.0):   # three catalogs, each with its own map
        z = rng.normal(1.5 + shift, 1.0, 4000)
        f = rng.normal(0.0, 0.8, 4000)
        y = (rng.uniform(size=4000) < 1 / (1 + np.exp(-(z + 0.6 * f)))).astype(float)
        cells.append((z, f, y))
    assert rs.fit_c(cells) == pytest.approx(0.6, abs=0.1)
    assert abs(rs.fit_c([(z, rng.permutation(f), y) for z, f, y in cells])) < 0.1   # no link: no weight


def test_length_is_the_log_of_the_word_count():
    assert rs.log_words("open a bug about the login page") == pytest.approx(np.log(7))
    assert rs.log_words("   ") == 0.0
