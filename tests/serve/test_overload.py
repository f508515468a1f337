"""Finding 4: bounded work. A full queue answers 503 at once, a request past its deadline stops,
work whose client hung up stops (and never starts if it was still queued), tenants have rates.

Every check here is about what happened and in which order (the work was stopped, the refusal
came while the slot was still held), never about how long it took: the speed of the same cases is
measured by benchmarks/load_test.py (the overload phase and its abandoned-client case)."""

from __future__ import annotations

import json
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from serve.admission import Admission, QueueFull, RateLimiter
from serve_fakes import KEYS, FakeIndex, SlowPipeline, auth, demo_catalog, read_file_log
from testkit import service_process, tenants_toml, wait_until

HERE = Path(__file__).resolve().parent


@pytest.fixture
def slow():
    p = SlowPipeline(FakeIndex(demo_catalog()))
    yield p
    p.gate.set()


def test_a_full_queue_is_refused_at_once_with_retry_after(make_client, slow):
    c = make_client(slow, max_concurrency=1, max_queue=1, index_dir=None)
    admission = c.app.state.toolrank.admission
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(c.post, "/v1/search", json={"request": "slow first"}, headers=auth("acme"))
        wait_until(lambda: ("start", "slow first") in slow.log)
        queued = pool.submit(c.post, "/v1/search", json={"request": "slow queued"}, headers=auth("acme"))
        wait_until(lambda: admission.waiting == 1)
        r = c.post("/v1/search", json={"request": "send an email"}, headers=auth("acme"))
        # refused while the slot was still held and the queue still full: it did not wait for either
        assert ("done", "slow first") not in slow.log and admission.waiting == 1 and not queued.done()
        assert r.status_code == 503 and r.json()["error"]["code"] == "overloaded"
        assert int(r.headers["retry-after"]) >= 1
        slow.gate.set()
        assert first.result().status_code == 200 and queued.result().status_code == 200
    assert c.post("/v1/search", json={"request": "send an email"}, headers=auth("acme")).status_code == 200
    metrics = c.get("/metrics", headers=auth("ops")).text
    assert 'toolrank_rejections_total{reason="queue_full"} 1.0' in metrics


def test_work_past_its_deadline_is_stopped(make_client, slow):
    c = make_client(slow, request_timeout_s=0.3, index_dir=None)
    r = c.post("/v1/score", json={"request": "slow scoring", "candidates": [{"id": "1", "name": "a"}]},
               headers=auth("acme"))
    assert r.status_code == 503 and r.json()["error"]["code"] == "deadline_exceeded" and "retry-after" in r.headers
    assert slow.log == [("start", "slow scoring"), ("stopped", "slow scoring", "deadline")]  # stopped, not finished


def test_a_request_waiting_past_its_deadline_leaves_the_queue(make_client, slow):
    c = make_client(slow, max_concurrency=1, request_timeout_s=0.5, index_dir=None)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(c.post, "/v1/search", json={"request": "stubborn first"}, headers=auth("acme"))
        wait_until(lambda: ("start", "stubborn first") in slow.log)
        r = c.post("/v1/search", json={"request": "slow second"}, headers=auth("acme"))
        assert r.status_code == 503 and r.json()["error"]["code"] == "deadline_exceeded"
        first.result()
    assert ("start", "slow second") not in slow.log


def hang_up(client, body: dict, after_s: float, path: str = "/v1/search") -> list[dict]:
    """Send one request straight to the ASGI app and disconnect ``after_s`` seconds later."""
    import anyio

    payload = json.dumps(body).encode()
    sent: list[dict] = []

    async def call() -> None:
        delivered = False

        async def receive() -> dict:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": payload, "more_body": False}
            await anyio.sleep(after_s)
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
                 "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"),
                             (b"content-length", str(len(payload)).encode()),
                             (b"authorization", f"Bearer {KEYS['acme']}".encode())],
                 "client": ("127.0.0.1", 50000), "server": ("testserver", 80)}
        await client.app(scope, receive, send)

    client.portal.call(call)
    return sent


def test_work_of_a_client_that_hung_up_is_stopped(make_client, slow):
    c = make_client(slow, index_dir=None)
    sent = hang_up(c, {"request": "slow abandoned"}, after_s=0.2)
    assert slow.log == [("start", "slow abandoned"), ("stopped", "slow abandoned", "disconnected")]
    assert sent[0]["status"] == 499
    metrics = c.get("/metrics", headers=auth("ops")).text
    assert 'toolrank_rejections_total{reason="client_gone"} 1.0' in metrics


def test_a_queued_request_whose_client_left_never_runs(make_client, slow):
    c = make_client(slow, max_concurrency=1, index_dir=None)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(c.post, "/v1/search", json={"request": "slow first"}, headers=auth("acme"))
        wait_until(lambda: ("start", "slow first") in slow.log)
        hang_up(c, {"request": "slow gone"}, after_s=0.1)
        assert c.app.state.toolrank.admission.waiting == 0
        slow.gate.set()
        assert first.result().status_code == 200
    assert not any(entry[1] == "slow gone" for entry in slow.log)


def test_tenant_rate_limits(make_client, tmp_path):
    path = tmp_path / "rated.toml"
    path.write_text(tenants_toml({"name": "ops", "admin": True, "key": KEYS["ops"], "servers": "*"},
                                 {"name": "acme", "key": KEYS["acme"], "servers": ["Alpha Mail"], "rate_per_s": 0.5,
                                  "burst": 2}))
    c = make_client(config=path, index_dir=None)
    body = {"request": "send an email"}
    assert [c.post("/v1/search", json=body, headers=auth("acme")).status_code for _ in range(2)] == [200, 200]
    r = c.post("/v1/search", json=body, headers=auth("acme"))
    assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limited" and r.headers["retry-after"] == "2"
    assert c.post("/v1/search", json=body, headers=auth("ops")).status_code == 200  # other tenants unaffected


def test_rate_limiter_and_admission_units():
    bucket = RateLimiter()
    assert [bucket.take("t", 1.0, 2, now=0.0) for _ in range(3)] == [0.0, 0.0, 1.0]
    assert bucket.take("t", 1.0, 2, now=1.0) == 0.0 and bucket.take("u", 1.0, 1, now=1.0) == 0.0
    with pytest.raises(ValueError):
        Admission(0, 1)

    import asyncio

    async def run() -> None:
        a = Admission(1, 0)
        await a.acquire(1.0)
        with pytest.raises(QueueFull):
            await a.acquire(1.0)
        a.release(0.5)
        await a.acquire(1.0)
        a.release()

    asyncio.run(run())

    async def by_time() -> None:  # the expected wait, not only the count, bounds the queue
        a = Admission(1, 100, max_wait_s=2.0)
        a._service_s = 1.5
        await a.acquire(1.0)
        waiter = asyncio.ensure_future(a.acquire(10.0))   # expected wait 1.5 s: queued
        await asyncio.sleep(0.01)
        assert a.waiting == 1 and a.expected_wait() == 3.0
        with pytest.raises(QueueFull) as refused:          # expected wait 3 s > 2 s: refused at once
            await a.acquire(10.0)
        assert refused.value.retry_after == 5              # (1 waiting + 1 running + 1) x 1.5 s
        a.release()
        await waiter
        a.release()

    asyncio.run(by_time())


def test_abandoned_clients_work_is_stopped_under_uvicorn(tenants_file, tmp_path):
    """The finding's case over real HTTP: clients send heavy work and hang up once it runs; the work
    stops at its next checkpoint instead of running to its end, and the next quick request is
    answered. (How fast, against an idle server: benchmarks/load_test.py.)"""
    log = tmp_path / "pipeline.jsonl"

    def events(kind: str) -> list[tuple]:
        return [e for e in read_file_log(log) if e[0] == kind]

    args = ["--app", "serve_fakes:slow_app_from_env", "--config", str(tenants_file), "--log-level", "warning"]
    with service_process(args, tmp_path / "server.log", python_path=[HERE],
                         env={"TOOLRANK_MAX_CONCURRENCY": "2", "SLOW_PIPELINE_LOG": str(log)}) as service:
        port = int(service.base.rsplit(":", 1)[1])
        clients = []
        for i in range(6):
            body = json.dumps({"request": f"slow work {i}"}).encode()
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"POST /v1/search HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                      + f"X-API-Key: {KEYS['acme']}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
            clients.append(s)
        wait_until(lambda: len(events("start")) == 2, "two slow searches running (2 slots)")
        running = sorted(e[1] for e in events("start"))
        for s in clients:   # hang up: on the running work and on the queued requests
            s.close()
        wait_until(lambda: sorted(e[1] for e in events("stopped")) == running, "the abandoned work stopped")
        r = httpx.post(f"{service.base}/v1/search", json={"request": "send an email message"},
                       headers={"X-API-Key": KEYS["acme"]}, timeout=120)
        assert r.status_code == 200, r.text
    assert sorted(events("stopped")) == [("stopped", w, "disconnected") for w in running]
    assert events("done") == []                                      # no abandoned work ran to its end
