"""Finding 4: bounded work. A full queue answers 503 at once, a request past its deadline stops,
work whose client hung up stops (and never starts if it was still queued), tenants have rates."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from serve.admission import Admission, QueueFull, RateLimiter
from serve_fakes import KEYS, SlowPipeline, auth, demo_catalog, FakeIndex, hash_key

REPO = Path(__file__).resolve().parents[2]


def wait_for(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


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
        wait_for(lambda: ("start", "slow first") in slow.log)
        queued = pool.submit(c.post, "/v1/search", json={"request": "slow queued"}, headers=auth("acme"))
        wait_for(lambda: admission.waiting == 1)
        started = time.monotonic()
        r = c.post("/v1/search", json={"request": "send an email"}, headers=auth("acme"))
        assert time.monotonic() - started < 1.0
        assert r.status_code == 503 and r.json()["error"]["code"] == "overloaded"
        assert int(r.headers["retry-after"]) >= 1
        slow.gate.set()
        assert first.result().status_code == 200 and queued.result().status_code == 200
    assert c.post("/v1/search", json={"request": "send an email"}, headers=auth("acme")).status_code == 200
    metrics = c.get("/metrics", headers=auth("ops")).text
    assert 'toolrank_rejections_total{reason="queue_full"} 1.0' in metrics


def test_work_past_its_deadline_is_stopped(make_client, slow):
    c = make_client(slow, request_timeout_s=0.3, index_dir=None)
    started = time.monotonic()
    r = c.post("/v1/score", json={"request": "slow scoring", "candidates": [{"id": "1", "name": "a"}]},
               headers=auth("acme"))
    assert time.monotonic() - started < 3.0
    assert r.status_code == 503 and r.json()["error"]["code"] == "deadline_exceeded" and "retry-after" in r.headers
    assert ("stopped", "slow scoring", "deadline") in slow.log


def test_a_request_waiting_past_its_deadline_leaves_the_queue(make_client, slow):
    c = make_client(slow, max_concurrency=1, request_timeout_s=0.5, index_dir=None)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(c.post, "/v1/search", json={"request": "stubborn first"}, headers=auth("acme"))
        wait_for(lambda: ("start", "stubborn first") in slow.log)
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
    started = time.monotonic()
    sent = hang_up(c, {"request": "slow abandoned"}, after_s=0.2)
    assert time.monotonic() - started < 3.0
    assert ("stopped", "slow abandoned", "disconnected") in slow.log
    assert sent[0]["status"] == 499
    metrics = c.get("/metrics", headers=auth("ops")).text
    assert 'toolrank_rejections_total{reason="client_gone"} 1.0' in metrics


def test_a_queued_request_whose_client_left_never_runs(make_client, slow):
    c = make_client(slow, max_concurrency=1, index_dir=None)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(c.post, "/v1/search", json={"request": "slow first"}, headers=auth("acme"))
        wait_for(lambda: ("start", "slow first") in slow.log)
        hang_up(c, {"request": "slow gone"}, after_s=0.1)
        assert c.app.state.toolrank.admission.waiting == 0
        slow.gate.set()
        assert first.result().status_code == 200
    assert not any(entry[1] == "slow gone" for entry in slow.log)


def test_tenant_rate_limits(make_client, tmp_path):
    path = tmp_path / "rated.toml"
    path.write_text(f"""
[[tenants]]
name = "ops"
admin = true
key_sha256 = ["{hash_key(KEYS['ops'])}"]
servers = "*"

[[tenants]]
name = "acme"
key_sha256 = ["{hash_key(KEYS['acme'])}"]
servers = ["Alpha Mail"]
rate_per_s = 0.5
burst = 2
""")
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


def test_abandoned_clients_do_not_delay_the_next_request_under_uvicorn(tenants_file, tmp_path):
    """The finding's case over real HTTP: clients send heavy work and hang up after 0.3 s; the next
    quick request is answered at once instead of after all the abandoned work."""
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLRANK_")}
    env.update(PYTHONPATH=os.pathsep.join([str(REPO), str(Path(__file__).parent)]), OMP_NUM_THREADS="1",
               TOOLRANK_MAX_CONCURRENCY="2")
    proc = subprocess.Popen([sys.executable, "-m", "serve.cli", "--app", "serve_fakes:slow_app_from_env",
                             "--config", str(tenants_file), "--port", str(port), "--log-level", "warning"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    headers = {"X-API-Key": KEYS["acme"]}
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "service did not start"
            time.sleep(0.1)

        def abandon(i: int) -> None:
            with pytest.raises(httpx.TimeoutException):
                httpx.post(f"{base}/v1/search", json={"request": f"slow work {i}"}, headers=headers, timeout=0.3)

        threads = [threading.Thread(target=abandon, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        started = time.monotonic()
        r = httpx.post(f"{base}/v1/search", json={"request": "send an email message"}, headers=headers, timeout=30)
        waited = time.monotonic() - started
        assert r.status_code == 200, r.text
        # 6 abandoned requests of 10 s on 2 slots would hold it 30 s; stopped work frees the slots at once
        assert waited < 2.0, f"the next request waited {waited:.1f} s behind abandoned work"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
