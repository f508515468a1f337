"""Load test of the HTTP service on loopback: throughput, latency, memory, catalog updates.

Starts the real service (``python -m serve.cli``) on 127.0.0.1 with an ephemeral port, then:

1. ``POST /v1/search`` and ``POST /v1/score`` with 100 candidates at concurrency 1, 4 and 16:
   throughput, p50/p99 latency, errors; server RSS before and after.
2. Overload (``--skip-overload`` to leave it out): measures capacity (``POST /v1/search`` in a
   closed loop at the server's concurrency), then offers 2x and 4x that rate in an open loop for
   ``--overload-seconds`` each: completed req/s, how many were refused (503 + Retry-After when
   the queue is full or the deadline passes) and the latency of the answered ones, which must stay
   bounded. Then the abandoned-client case: 8 clients send a 791 KiB ``/v1/score`` (200 candidates
   of 4,000 characters) and hang up after 1 s; the next 1-candidate ``/v1/score`` must not wait
   behind the abandoned work (its latency against an idle server's).
3. Catalog updates: restarts with ``--update-workers`` workers sharing one index store and PUTs
   ``--updates`` servers while searches run. Checks that no request fails, that every version a
   client sees holds exactly the updates published up to it (nothing lost, nothing half-written),
   and how long until every worker serves the last one.

Bounded: ``--requests`` per point (default 500), ``--max-seconds`` for everything (default 600).
Prints tables and writes the numbers as JSON (``--out``). Client and server share the machine's
cores, so absolute numbers are a floor. Run from the repository root::

    python benchmarks/load_test.py --requests 50               # quick check
    python benchmarks/load_test.py --catalog FILE --model DIR  # a chosen catalog and scorer
    python benchmarks/load_test.py --only-overload --overload-seconds 20   # the overload table only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import (ROOT, ServiceProcess, environment_stamp, free_port, percentile,  # noqa: E402
                               serve_command, service_env, stamp_line, write_result)

ADMIN_KEY, USER_KEY = "loadtest-admin-key", "loadtest-user-key"

REQUESTS = [
    "list all the DAGs in our Airflow deployment",
    "send a message to the #general channel on slack",
    "create an issue in the github repo about the login bug",
    "what's the weather forecast for Paris tomorrow",
    "query the postgres database for last week's orders",
    "upload this file to my s3 bucket",
    "translate this paragraph into German",
    "find flights from Berlin to Lisbon next Friday",
    "extract structured data from this web page url",
    "summarise the latest pull requests",
    "schedule a meeting with the design team on thursday",
    "search the web for recent news about battery recycling",
    "get the current stock price of NVDA",
    "run a SQL query against the analytics warehouse",
    "read the contents of the file config.yaml",
    "list the kubernetes pods in the staging namespace",
    "generate an image of a lighthouse at dusk",
    "check the status of my last deployment",
    "add a row to the spreadsheet with today's numbers",
    "look up the definition of the word ephemeral",
]


# ------------------------------------------------------------------ server process


def write_tenants(path: Path) -> None:
    import hashlib

    h = lambda k: hashlib.sha256(k.encode()).hexdigest()  # noqa: E731
    path.write_text(
        f'[[tenants]]\nname = "admin"\nadmin = true\nkey_sha256 = ["{h(ADMIN_KEY)}"]\nservers = "*"\n\n'
        f'[[tenants]]\nname = "user"\nkey_sha256 = ["{h(USER_KEY)}"]\nservers = "*"\n'
    )


@dataclass
class Server(ServiceProcess):
    def rss(self) -> int:
        """Resident memory of the server and all its worker processes, in bytes."""
        try:
            root = psutil.Process(self.proc.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0
        total = 0
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return total


def start_server(args: argparse.Namespace, work: Path, store: Path, workers: int, deadline: float,
                 name: str, extra_env: dict[str, str] | None = None) -> Server:
    port = free_port()
    cmd = serve_command(port, "--workers", str(workers), "--config", str(work / "tenants.toml"), "--index", str(store),
                        "--app", args.app, "--log-level", "warning", "--poll-interval", str(args.poll_interval))
    if args.catalog:
        cmd += ["--catalog", str(args.catalog)]
    if args.model:
        cmd += ["--model", str(args.model)]
    if args.no_suggestions:
        cmd += ["--no-suggestions"]
    server = Server.start(cmd, port, work / f"{name}.log", env=service_env(extra_env))
    server.wait_ready(min(deadline, time.monotonic() + args.startup_seconds), f"server ({name})")
    return server


# ------------------------------------------------------------------ measuring


@dataclass
class Point:
    endpoint: str
    concurrency: int
    requests: int = 0
    errors: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        lat = self.latencies_ms
        return {"endpoint": self.endpoint, "concurrency": self.concurrency, "requests": self.requests,
                "errors": self.errors, "statuses": self.statuses,
                "throughput_rps": round(self.requests / self.seconds, 2) if self.seconds else None,
                "p50_ms": round(percentile(lat, 50), 2) if lat else None,
                "p99_ms": round(percentile(lat, 99), 2) if lat else None,
                "mean_ms": round(statistics.fmean(lat), 2) if lat else None}


async def run_point(client: httpx.AsyncClient, endpoint: str, make_body, n: int, concurrency: int,
                    deadline: float) -> Point:
    point = Point(endpoint, concurrency)
    counter = iter(range(n))
    headers = {"Authorization": f"Bearer {USER_KEY}"}

    async def worker() -> None:
        for i in counter:
            if time.monotonic() > deadline:
                return
            t0 = time.perf_counter()
            try:
                r = await client.post(endpoint, json=make_body(i), headers=headers)
                status = str(r.status_code)
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            point.latencies_ms.append((time.perf_counter() - t0) * 1000)
            point.requests += 1
            point.statuses[status] = point.statuses.get(status, 0) + 1
            if status != "200":
                point.errors += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    point.seconds = time.perf_counter() - t0
    return point


def score_candidates(args: argparse.Namespace) -> list[dict[str, str]]:
    tools: list[tuple[str, str, str]] = []
    try:
        from retrieval.catalog.formats import load_catalog, load_default_catalog

        catalog = load_catalog(args.catalog) if args.catalog else load_default_catalog(with_examples=False)
        tools = [(t.server, t.name, t.description) for t in catalog.tools][:100]
    except Exception:  # no catalog available: synthetic candidates
        pass
    while len(tools) < 100:
        i = len(tools)
        tools.append((f"Server {i % 7}", f"tool_{i}", f"Does task number {i} for the user"))
    return [{"id": str(i), "server": s, "name": n, "description": d} for i, (s, n, d) in enumerate(tools)]


async def throughput_phase(args: argparse.Namespace, server: Server, deadline: float) -> tuple[list[dict[str, Any]], int]:
    candidates = score_candidates(args)
    bodies = {
        "/v1/search": lambda i: {"request": REQUESTS[i % len(REQUESTS)]},
        "/v1/score": lambda i: {"request": REQUESTS[i % len(REQUESTS)], "candidates": candidates},
    }
    results, sent = [], 0
    ready = httpx.get(server.base + "/readyz", timeout=10).json()
    if not ready.get("scorer", {}).get("loaded"):
        print("  /v1/score skipped: no scorer model loaded (pass --model DIR)", flush=True)
        del bodies["/v1/score"]
    limits = httpx.Limits(max_connections=max(args.concurrency), max_keepalive_connections=max(args.concurrency))
    async with httpx.AsyncClient(base_url=server.base, timeout=120, limits=limits) as client:
        for endpoint, make_body in bodies.items():
            sent += (await run_point(client, endpoint, make_body, 5, 1, deadline)).requests  # warm-up, not reported
            for c in args.concurrency:
                if time.monotonic() > deadline:
                    break
                point = await run_point(client, endpoint, make_body, args.requests, c, deadline)
                sent += point.requests
                results.append(point.summary())
                s = results[-1]
                print(f"  {endpoint:11} c={c:<3} {s['requests']:>5} req  {s['throughput_rps']:>8} rps  "
                      f"p50 {s['p50_ms']:>8} ms  p99 {s['p99_ms']:>8} ms  errors {s['errors']}", flush=True)
    return results, sent


async def update_phase(args: argparse.Namespace, server: Server, deadline: float) -> dict[str, Any]:
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    user = {"Authorization": f"Bearer {USER_KEY}"}
    names = [f"loadtest-{i:03d}" for i in range(args.updates)]
    published: dict[str, int] = {}         # server name -> index version that first held it
    observations: list[tuple[int, set[str]]] = []
    stats = {"put_errors": 0, "search_requests": 0, "search_errors": 0, "list_errors": 0, "statuses_5xx": 0}
    done = asyncio.Event()

    def note(status: int, kind: str) -> None:
        if status >= 500:
            stats["statuses_5xx"] += 1
        if status != 200 and kind:
            stats[kind] += 1

    async def observe(client: httpx.AsyncClient) -> None:
        r = await client.get("/v1/servers", headers=admin)
        note(r.status_code, "list_errors")
        if r.status_code == 200:
            body = r.json()
            observations.append((body["index_version"],
                                 {s["name"] for s in body["servers"] if s["name"].startswith("loadtest-")}))

    async def writer(client: httpx.AsyncClient) -> None:
        try:
            for i, name in enumerate(names):
                if time.monotonic() > deadline:
                    break
                body = {"description": f"Load test server {i}", "tools": [
                    {"name": "lookup", "description": f"Look up zqx{i} records in the load test store"},
                    {"name": "update", "description": f"Update zqx{i} records", "inputSchema": {"type": "object"}},
                ]}
                r = await client.put(f"/v1/servers/{name}", json=body, headers=admin)
                note(r.status_code, "")
                if r.status_code in (200, 201):
                    published[name] = r.json()["index_version"]
                else:
                    stats["put_errors"] += 1
                await observe(client)
        finally:
            done.set()

    async def searcher(client: httpx.AsyncClient, seed: int) -> None:
        rng = random.Random(seed)
        while not done.is_set() and time.monotonic() < deadline:
            r = await client.post("/v1/search", json={"request": rng.choice(REQUESTS)}, headers=user)
            stats["search_requests"] += 1
            note(r.status_code, "search_errors")
            if r.status_code == 200 and not isinstance(r.json().get("tools"), list):
                stats["search_errors"] += 1

    async with httpx.AsyncClient(base_url=server.base, timeout=120) as client:
        t0 = time.monotonic()
        await asyncio.gather(writer(client), *(searcher(client, s) for s in range(4)))
        write_seconds = time.monotonic() - t0
        # every worker must serve the last version within the bound: N consecutive complete reads
        t1 = time.monotonic()
        bound = args.poll_interval * 3 + 30
        consecutive, pickup = 0, None
        while time.monotonic() - t1 < bound and time.monotonic() < deadline:
            await observe(client)
            if observations and observations[-1][1] >= set(published):
                consecutive += 1
                if consecutive >= 4 * args.update_workers:
                    pickup = round(time.monotonic() - t1, 3)
                    break
            else:
                consecutive = 0
            await asyncio.sleep(0.05)
        # the new tools are searchable
        found = 0
        for i in range(0, len(published), max(1, len(published) // 5)):
            r = await client.post("/v1/search", json={"request": f"look up zqx{i} records", "k": 10}, headers=user)
            note(r.status_code, "search_errors")
            if r.status_code == 200 and any(t["server"] == names[i] for t in r.json()["tools"]):
                found += 1
        probes = len(range(0, len(published), max(1, len(published) // 5)))

    # every observation at version V holds exactly the servers published at versions <= V
    violations = 0
    for version, seen in observations:
        expected = {n for n, v in published.items() if v <= version}
        if seen != expected:
            violations += 1
    return {"updates_requested": len(names), "updates_published": len(published),
            "all_visible_at_end": bool(observations) and observations[-1][1] >= set(names),
            "seconds_until_every_worker_served_last_version": pickup,
            "consistency_violations": violations, "observations": len(observations),
            "write_phase_seconds": round(write_seconds, 2), "searchable_after_update": f"{found}/{probes}",
            **stats}


# ------------------------------------------------------------------ overload


def _percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (0-1) to 0.1 ms; None for no values."""
    return round(percentile(values, 100 * q), 1) if values else None


async def open_loop(client: httpx.AsyncClient, endpoint: str, make_body, rate: float, seconds: float,
                    deadline: float) -> dict[str, Any]:
    """Requests at a fixed rate whatever the answers (an open loop): what clients do under overload."""
    headers = {"Authorization": f"Bearer {USER_KEY}"}
    outcomes: list[tuple[str, float, str | None]] = []

    async def one(i: int) -> None:
        t0 = time.perf_counter()
        try:
            r = await client.post(endpoint, json=make_body(i), headers=headers)
            status, retry = str(r.status_code), r.headers.get("retry-after")
        except httpx.HTTPError as exc:
            status, retry = type(exc).__name__, None
        outcomes.append((status, (time.perf_counter() - t0) * 1000, retry))

    tasks, t0, i = [], time.perf_counter(), 0
    while i / rate < seconds and time.monotonic() < deadline:
        wait = t0 + i / rate - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        tasks.append(asyncio.create_task(one(i)))
        i += 1
    sent_for = time.perf_counter() - t0
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - t0
    ok = [ms for status, ms, _ in outcomes if status == "200"]
    statuses: dict[str, int] = {}
    for status, _, _ in outcomes:
        statuses[status] = statuses.get(status, 0) + 1
    refused = [ms for status, ms, _ in outcomes if status in ("503", "429")]
    retry_after = sorted({int(r) for status, _, r in outcomes if status in ("503", "429") and r and r.isdigit()})
    return {"offered_rps": round(len(outcomes) / sent_for, 2) if sent_for else None, "requests": len(outcomes),
            "answered_rps": round(len(ok) / elapsed, 2) if elapsed else None, "ok": len(ok),
            "refused": len(refused), "other_errors": len(outcomes) - len(ok) - len(refused), "statuses": statuses,
            "ok_p50_ms": _percentile(ok, 0.5), "ok_p99_ms": _percentile(ok, 0.99),
            "ok_max_ms": round(max(ok), 1) if ok else None, "refused_p99_ms": _percentile(refused, 0.99),
            "retry_after_s": retry_after[:1] + retry_after[-1:] if retry_after else []}


def heavy_candidates() -> list[dict[str, str]]:
    """200 candidates of 4,000 characters: a 791 KiB body, the largest /v1/score accepts."""
    words = "allocate shard index repository message channel forecast invoice deploy schedule ".split()
    rng = random.Random(7)
    out = []
    for i in range(200):
        text = " ".join(rng.choice(words) for _ in range(800))[:3990]
        out.append({"id": f"c{i}", "server": f"Server {i % 9}", "name": f"tool_{i}", "description": text})
    return out


async def abandoned_clients(server: Server, n: int = 8, hang_up_s: float = 1.0) -> dict[str, Any]:
    """n clients send the heaviest /v1/score and hang up after ``hang_up_s``; then one small request."""
    headers = {"Authorization": f"Bearer {USER_KEY}"}
    small = {"request": "create an issue about the login bug",
             "candidates": [{"id": "1", "server": "GitHub", "name": "create_issue",
                             "description": "Create a new issue in a repository"}]}
    heavy = {"request": "allocate the shards of the search index", "candidates": heavy_candidates()}
    size = len(json.dumps(heavy).encode())

    async def small_ms(client: httpx.AsyncClient) -> tuple[float, int]:
        t0 = time.perf_counter()
        r = await client.post("/v1/score", json=small, headers=headers)
        return round((time.perf_counter() - t0) * 1000, 1), r.status_code

    async def heavy_once(client: httpx.AsyncClient) -> tuple[int, float]:
        t0 = time.perf_counter()
        r = await client.post("/v1/score", json=heavy, headers=headers)
        return r.status_code, round((time.perf_counter() - t0) * 1000, 1)

    async with httpx.AsyncClient(base_url=server.base, timeout=300) as client:
        idle = [await small_ms(client) for _ in range(3)][-1]
        heavy_status, heavy_ms = await heavy_once(client)  # one heavy request served in full, for scale

    async def abandon() -> str:
        async with httpx.AsyncClient(base_url=server.base, timeout=hang_up_s) as c:
            try:
                r = await c.post("/v1/score", json=heavy, headers=headers)
                return str(r.status_code)
            except httpx.TimeoutException:
                return "hung up"

    gone = await asyncio.gather(*(abandon() for _ in range(n)))
    async with httpx.AsyncClient(base_url=server.base, timeout=300) as client:
        after = await small_ms(client)
        await asyncio.sleep(0.5)
        metrics = (await client.get("/metrics", headers={"Authorization": f"Bearer {ADMIN_KEY}"})).text
    stopped = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                  if line.startswith('toolrank_rejections_total{reason="client_gone"}'))
    return {"heavy_body_kib": round(size / 1024, 1), "one_heavy_request_ms": heavy_ms, "heavy_status": heavy_status,
            "abandoning_clients": n, "hang_up_after_s": hang_up_s, "abandoned_outcomes": gone,
            "next_small_request_ms": after[0], "next_small_status": after[1], "idle_small_request_ms": idle[0],
            "abandoned_requests_stopped": int(stopped)}


async def overload_phase(args: argparse.Namespace, server: Server, deadline: float) -> dict[str, Any]:
    body = lambda i: {"request": REQUESTS[i % len(REQUESTS)]}  # noqa: E731
    out: dict[str, Any] = {"server_settings": {"max_concurrency": args.server_concurrency, "max_queue": args.queue,
                                               "max_queue_wait_s": args.queue_wait, "request_timeout_s": args.deadline}}
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=200)
    async with httpx.AsyncClient(base_url=server.base, timeout=120, limits=limits) as client:
        await run_point(client, "/v1/search", body, 5, 1, deadline)  # warm-up
        base = await run_point(client, "/v1/search", body, args.capacity_requests, args.server_concurrency, deadline)
        capacity = base.requests / base.seconds
        out["capacity"] = {**base.summary(), "capacity_rps": round(capacity, 2)}
        print(f"  capacity: {capacity:.2f} req/s (closed loop, concurrency {args.server_concurrency})", flush=True)
        out["levels"] = []
        for factor in args.overload_factors:
            if time.monotonic() > deadline:
                break
            level = await open_loop(client, "/v1/search", body, factor * capacity, args.overload_seconds, deadline)
            out["levels"].append({"load": f"{factor:g}x", **level})
            print(f"  {factor:g}x: offered {level['offered_rps']} rps, answered {level['answered_rps']} rps, "
                  f"ok {level['ok']}, refused {level['refused']}, other {level['other_errors']}, "
                  f"ok p50 {level['ok_p50_ms']} ms p99 {level['ok_p99_ms']} ms max {level['ok_max_ms']} ms", flush=True)
            await asyncio.sleep(min(5.0, args.deadline))  # let the queue drain between levels
    ready = httpx.get(server.base + "/readyz", timeout=10).json()
    if ready.get("scorer", {}).get("loaded") and time.monotonic() < deadline:
        out["abandoned"] = await abandoned_clients(server)
        a = out["abandoned"]
        print(f"  abandoned: {a['abandoning_clients']} x {a['heavy_body_kib']} KiB /v1/score hung up after "
              f"{a['hang_up_after_s']} s; next 1-candidate request {a['next_small_request_ms']} ms "
              f"(idle {a['idle_small_request_ms']} ms; one heavy request in full {a['one_heavy_request_ms']} ms)",
              flush=True)
    else:
        print("  abandoned-client case skipped: no scorer model loaded (pass --model DIR)", flush=True)
    return out


def overload_table(o: dict[str, Any]) -> str:
    lines = ["| load | offered req/s | answered req/s | ok | refused (503/429) | other errors | ok p50 ms | ok p99 ms | ok max ms |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    c = o.get("capacity", {})
    if c:
        lines.append(f"| 1x (closed loop, c={c['concurrency']}) | {c['capacity_rps']} | {c['throughput_rps']} | "
                     f"{c['requests'] - c['errors']} | {c['statuses'].get('503', 0)} | "
                     f"{c['errors'] - c['statuses'].get('503', 0)} | {c['p50_ms']} | {c['p99_ms']} | - |")
    for lv in o.get("levels", []):
        lines.append(f"| {lv['load']} (open loop) | {lv['offered_rps']} | {lv['answered_rps']} | {lv['ok']} | "
                     f"{lv['refused']} | {lv['other_errors']} | {lv['ok_p50_ms']} | {lv['ok_p99_ms']} | {lv['ok_max_ms']} |")
    a = o.get("abandoned")
    if a:
        lines.append(f"\nabandoned clients: {a['abandoning_clients']} x {a['heavy_body_kib']} KiB /v1/score, hung up "
                     f"after {a['hang_up_after_s']} s -> next 1-candidate /v1/score {a['next_small_request_ms']} ms "
                     f"(idle {a['idle_small_request_ms']} ms; one heavy request served in full: "
                     f"{a['one_heavy_request_ms']} ms; abandoned requests stopped: {a['abandoned_requests_stopped']})")
    return "\n".join(lines)


# ------------------------------------------------------------------ main


def table(rows: list[dict[str, Any]]) -> str:
    head = f"| {'endpoint':<10} | {'conc.':>5} | {'requests':>8} | {'req/s':>8} | {'p50 ms':>8} | {'p99 ms':>8} | {'errors':>6} |"
    lines = [head, "|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|"]
    for r in rows:
        lines.append(f"| {r['endpoint']:<10} | {r['concurrency']:>5} | {r['requests']:>8} | {r['throughput_rps']!s:>8} "
                     f"| {r['p50_ms']!s:>8} | {r['p99_ms']!s:>8} | {r['errors']:>6} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=500, help="requests per (endpoint, concurrency) point")
    p.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 16],
                   help="comma-separated concurrency levels (default 1,4,16)")
    p.add_argument("--workers", type=int, default=1, help="server workers for the throughput phase")
    p.add_argument("--update-workers", type=int, default=2, help="server workers for the update phase")
    p.add_argument("--updates", type=int, default=50, help="servers PUT during the update phase")
    p.add_argument("--poll-interval", type=float, default=2.0, help="server's index poll interval (s)")
    p.add_argument("--catalog", type=Path, help="catalog to build the index from (default: the shipped one)")
    p.add_argument("--index", type=Path, help="a saved index or index store to start from (copied, never changed)")
    p.add_argument("--model", type=Path, help="scorer model folder")
    p.add_argument("--no-suggestions", action="store_true", help="serve without public no_fit suggestions")
    p.add_argument("--app", default="serve.app:create_app", help="app factory (MODULE:FACTORY)")
    p.add_argument("--max-seconds", type=float, default=600, help="hard cap on the whole run")
    p.add_argument("--startup-seconds", type=float, default=300, help="how long the server may take to get ready")
    p.add_argument("--skip-updates", action="store_true", help="leave out the catalog update phase")
    p.add_argument("--skip-overload", action="store_true", help="leave out the overload phase")
    p.add_argument("--only-overload", action="store_true", help="only the overload phase")
    p.add_argument("--overload-seconds", type=float, default=20.0, help="seconds of each overload level")
    p.add_argument("--overload-factors", type=lambda s: [float(x) for x in s.split(",")], default=[2.0, 4.0],
                   help="offered load as multiples of the measured capacity (default 2,4)")
    p.add_argument("--capacity-requests", type=int, default=60, help="requests of the capacity measurement")
    p.add_argument("--server-concurrency", type=int, default=4, help="server's max_concurrency in the overload phase")
    p.add_argument("--queue", type=int, default=16, help="server's max_queue in the overload phase")
    p.add_argument("--queue-wait", type=float, default=5.0, help="server's max_queue_wait_s in the overload phase")
    p.add_argument("--deadline", type=float, default=30.0, help="server's request_timeout_s in the overload phase")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "load_test.json", help="JSON results file")
    args = p.parse_args(argv)
    if args.requests < 1 or args.updates < 0 or not args.concurrency or min(args.concurrency) < 1:
        p.error("--requests and --concurrency must be positive, --updates not negative")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    deadline = time.monotonic() + args.max_seconds
    work = Path(tempfile.mkdtemp(prefix="toolrank-load-"))
    store = work / "store"
    if args.index:
        shutil.copytree(args.index, store)
    write_tenants(work / "tenants.toml")
    report: dict[str, Any] = {"environment": environment_stamp(), "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                              "cpu_count": os.cpu_count(), "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    failed = False
    try:
        if not args.only_overload:
            print(f"starting the service ({args.workers} worker(s)) ...", flush=True)
            t0 = time.monotonic()
            server = start_server(args, work, store, args.workers, deadline, "throughput")
            report["startup_seconds"] = round(time.monotonic() - t0, 1)
            try:
                report["rss_before_mb"] = round(server.rss() / 2**20, 1)
                report["points"], sent = asyncio.run(throughput_phase(args, server, deadline))
                report["rss_after_mb"] = round(server.rss() / 2**20, 1)
                report["requests_between_rss"] = sent
            finally:
                report["throughput_exit_code"] = server.stop()
        if not args.skip_overload and time.monotonic() < deadline:
            print(f"overload (1 worker, max_concurrency {args.server_concurrency}, max_queue {args.queue}, "
                  f"max_queue_wait {args.queue_wait:g} s, deadline {args.deadline:g} s) ...", flush=True)
            server = start_server(args, work, store, 1, deadline, "overload", extra_env={
                "TOOLRANK_MAX_CONCURRENCY": str(args.server_concurrency), "TOOLRANK_MAX_QUEUE": str(args.queue),
                "TOOLRANK_MAX_QUEUE_WAIT_S": str(args.queue_wait), "TOOLRANK_REQUEST_TIMEOUT_S": str(args.deadline)})
            try:
                report["overload"] = asyncio.run(overload_phase(args, server, deadline))
            finally:
                server.stop()
        if not args.skip_updates and not args.only_overload and time.monotonic() < deadline:
            print(f"catalog updates with {args.update_workers} worker(s) ...", flush=True)
            server = start_server(args, work, store, args.update_workers, deadline, "updates")
            try:
                report["updates"] = asyncio.run(update_phase(args, server, deadline))
            finally:
                server.stop()
        report["truncated_by_time_cap"] = time.monotonic() > deadline
    except Exception as exc:
        report["error"] = str(exc)
        failed = True
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print("\n" + stamp_line(report["environment"]))
    if report.get("points"):
        print(table(report["points"]))
        print(f"\nserver RSS: {report.get('rss_before_mb')} MiB before, {report.get('rss_after_mb')} MiB after "
              f"{report.get('requests_between_rss')} requests; start-up {report.get('startup_seconds')} s")
    if report.get("overload"):
        print("\noverload (/v1/search):")
        print(overload_table(report["overload"]))
    if report.get("updates"):
        print("\ncatalog updates:")
        for k, v in report["updates"].items():
            print(f"  {k}: {v}")
    if report.get("error"):
        print(f"\nERROR: {report['error']}", file=sys.stderr)
    write_result(args.out, report)
    print(f"\nwrote {args.out}")
    errors = sum(p["errors"] for p in report.get("points", []))
    u = report.get("updates", {})
    bad_updates = u and (u["statuses_5xx"] or u["search_errors"] or u["consistency_violations"] or u["put_errors"]
                         or not u["all_visible_at_end"])
    o = report.get("overload", {})
    bad_overload = o and (any(lv["other_errors"] for lv in o.get("levels", []))
                          or o.get("abandoned", {}).get("next_small_status", 200) != 200)
    return 1 if failed or errors or bad_updates or bad_overload else 0


if __name__ == "__main__":
    raise SystemExit(main())
