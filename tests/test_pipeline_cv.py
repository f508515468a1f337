"""benchmarks/pipeline_cv.py: dev halvings by server and held-out scoring, on synthetic candidate lists."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("sklearn")

from retrieval.pipeline.confidence import FEATURES  # noqa: E402
from training.calibrate import Collected  # noqa: E402


@pytest.fixture(scope="module")
def cv(load_benchmark):
    return load_benchmark("pipeline_cv")


def synthetic(n_servers: int = 8, per_server: int = 3, k: int = 6, informative: bool = True):
    """Lists in the order collect() makes them (request, need, abstain per question); the right tool sits
    at position 2 so that 'first in the list' is wrong, and only the logit can find it."""
    rng = np.random.default_rng(0)
    col, servers = Collected(), []
    for s in range(n_servers):
        for _ in range(per_server):
            for mode in ("request", "need", "abstain"):
                y = np.zeros(k)
                if mode != "abstain":
                    y[2] = 1.0
                f = {name: rng.normal(size=k) for name in FEATURES}
                f["logit"] = np.where(y > 0, 4.0, -4.0) + 0.1 * rng.normal(size=k) if informative else rng.normal(size=k)
                col.add(f, y, mode)
                servers.append(f"server{s}")
    return col, servers


def test_halvings_are_seeded_balanced_and_differ_between_draws(cv):
    servers = [f"s{i}" for i in range(10)] * 3
    a, b = cv.halvings(servers, 2), cv.halvings(servers, 2)
    assert a == b
    assert all(sorted(h.values()).count(0) == 5 for h in a)
    assert a[0] != a[1]


def test_an_informative_logit_is_found_on_held_out_servers(cv):
    col, servers = synthetic()
    r = cv.cross_validate(col, servers, draws=2)
    assert r["request top1"] == 100.0 and r["need top1"] == 100.0
    assert r["request logit top1"] == 100.0
    assert r["AUROC"] == 1.0


def test_noise_stays_near_chance(cv):
    col, servers = synthetic(informative=False)
    r = cv.cross_validate(col, servers, draws=2)
    assert r["request top1"] < 50.0          # 1 in 6 by chance
    assert 0.2 < r["AUROC"] < 0.8


def test_one_server_cannot_be_halved(cv):
    col, servers = synthetic(n_servers=1)
    with pytest.raises(ValueError, match="too few for two halves"):
        cv.cross_validate(col, servers, draws=1)
