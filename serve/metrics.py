"""Prometheus metrics: requests by endpoint and status, latency per endpoint, decisions.

Each app gets its own registry (so tests can build many apps in one process). With several
uvicorn workers set ``PROMETHEUS_MULTIPROC_DIR`` to an empty folder before start: every worker
then writes its values there and ``/metrics`` answers for all of them together.
"""

from __future__ import annotations

import os

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["Metrics", "CONTENT_TYPE_LATEST"]

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """The service's metrics, in a registry of its own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("toolrank_http_requests", "HTTP requests by endpoint, method and status.",
                                ["endpoint", "method", "status"], registry=r)
        self.latency = Histogram("toolrank_http_request_seconds", "Time to answer a request, by endpoint.",
                                 ["endpoint"], buckets=_LATENCY_BUCKETS, registry=r)
        self.decisions = Counter("toolrank_search_decisions", "Search decisions: proceed, search_again, no_fit.",
                                 ["decision"], registry=r)
        self.rejections = Counter("toolrank_rejections", "Requests refused or stopped under load: queue_full, "
                                  "deadline, client_gone, rate_limited.", ["reason"], registry=r)
        self.catalog_updates = Counter("toolrank_catalog_updates", "Catalog changes applied by this worker.",
                                       ["operation"], registry=r)
        self.index_version = Gauge("toolrank_index_version", "Index version this worker serves.",
                                   registry=r, multiprocess_mode="max")
        self.index_swaps = Counter("toolrank_index_swaps", "Newer index versions picked up from the store.",
                                   registry=r)

    def render(self) -> bytes:
        """The exposition text for ``GET /metrics``."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry)
        return generate_latest(self.registry)
