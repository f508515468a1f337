"""benchmarks/load_test.py: the open-loop overload measurement and its table (no server needed)."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest


@pytest.fixture(scope="module")
def load_test():
    # registered in sys.modules while it loads: its dataclasses look their module up there
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "load_test.py"
    spec = importlib.util.spec_from_file_location("load_test", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["load_test"] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop("load_test", None)
    return module


def test_open_loop_counts_answers_refusals_and_errors(load_test):
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(time.perf_counter())
        n = len(calls)
        if n % 3 == 0:
            return httpx.Response(503, headers={"Retry-After": "2"}, json={"error": {"code": "overloaded"}})
        if n % 7 == 0:
            return httpx.Response(500, json={"error": {"code": "internal_error"}})
        return httpx.Response(200, json={})

    async def run():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://x") as client:
            return await load_test.open_loop(client, "/v1/search", lambda i: {"request": str(i)}, rate=50.0,
                                             seconds=0.4, deadline=time.monotonic() + 10)

    out = asyncio.run(run())
    assert out["requests"] == len(calls) == 20                      # 50 req/s for 0.4 s, whatever the answers
    assert out["refused"] == sum(1 for n in range(1, 21) if n % 3 == 0)
    assert out["other_errors"] == sum(1 for n in range(1, 21) if n % 7 == 0 and n % 3)
    assert out["ok"] == 20 - out["refused"] - out["other_errors"] and out["retry_after_s"] == [2, 2]
    # spread over the period, not a burst: request n is never sent before n / rate s (a slow machine
    # may send later; only a lower bound on the time taken can be checked without flaking)
    assert all(calls[n] - calls[0] >= n / 50 - 0.005 for n in range(20))
    assert out["offered_rps"] <= 20 / (19 / 50) + 0.5


def test_overload_table_and_heavy_body(load_test):
    assert 780 <= len(json.dumps({"request": "x", "candidates": load_test.heavy_candidates()})) / 1024 <= 800
    table = load_test.overload_table({
        "capacity": {"concurrency": 4, "capacity_rps": 4.5, "throughput_rps": 4.5, "requests": 60, "errors": 0,
                     "statuses": {"200": 60}, "p50_ms": 800.0, "p99_ms": 1200.0},
        "levels": [{"load": "2x", "offered_rps": 9.0, "answered_rps": 4.4, "ok": 88, "refused": 92,
                    "other_errors": 0, "ok_p50_ms": 4000.0, "ok_p99_ms": 4600.0, "ok_max_ms": 4700.0}],
        "abandoned": {"abandoning_clients": 8, "heavy_body_kib": 791.0, "hang_up_after_s": 1.0,
                      "next_small_request_ms": 120.0, "idle_small_request_ms": 40.0, "one_heavy_request_ms": 3000.0,
                      "abandoned_requests_stopped": 8}})
    assert "| 2x (open loop) | 9.0 | 4.4 | 88 | 92 | 0 | 4000.0 | 4600.0 | 4700.0 |" in table
    assert "next 1-candidate /v1/score 120.0 ms" in table
