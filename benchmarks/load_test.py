"""Load test of the HTTP service on loopback: throughput, latency, memory, catalog updates.

Starts the real service (``python -m serve.cli``) on 127.0.0.1 with an ephemeral port, then:

1. ``POST /v1/search`` and ``POST /v1/score`` with 100 candidates at concurrency 1, 4 and 16:
   throughput, p50/p99 latency, errors; server RSS before and after.
2. Catalog updates: restarts with ``--update-workers`` workers sharing one index store and PUTs
   ``--updates`` servers while searches run. Checks that no request fails, that every version a
   client sees holds exactly the updates published up to it (nothing lost, nothing half-written),
   and how long until every worker serves the last one.

Bounded: ``--requests`` per point (default 500), ``--max-seconds`` for everything (default 600).
Prints tables and writes the numbers as JSON (``--out``). Client and server share the machine's
cores, so absolute numbers are a floor. Run from the repository root::

    python benchmarks/load_test.py --requests 50               # quick check
    python benchmarks/load_test.py --catalog FILE --model DIR  # a chosen catalog and scorer
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

REPO = Path(__file__).resolve().parents[1]
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_tenants(path: Path) -> None:
    import hashlib

    h = lambda k: hashlib.sha256(k.encode()).hexdigest()  # noqa: E731
    path.write_text(
        f'[[tenants]]\nname = "admin"\nadmin = true\nkey_sha256 = ["{h(ADMIN_KEY)}"]\nservers = "*"\n\n'
        f'[[tenants]]\nname = "user"\nkey_sha256 = ["{h(USER_KEY)}"]\nservers = "*"\n'
    )


@dataclass
class Server:
    proc: subprocess.Popen
    base: str
    log: Path

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

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_server(args: argparse.Namespace, work: Path, store: Path, workers: int, deadline: float,
                 name: str) -> Server:
    port = free_port()
    cmd = [sys.executable, "-m", "serve.cli", "--host", "127.0.0.1", "--port", str(port),
           "--workers", str(workers), "--config", str(work / "tenants.toml"), "--index", str(store),
           "--app", args.app, "--log-level", "warning", "--poll-interval", str(args.poll_interval)]
    if args.catalog:
        cmd += ["--catalog", str(args.catalog)]
    if args.model:
        cmd += ["--model", str(args.model)]
    if args.no_suggestions:
        cmd += ["--no-suggestions"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLRANK_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.setdefault("OMP_NUM_THREADS", "1")
    log = work / f"{name}.log"
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    server = Server(proc, f"http://127.0.0.1:{port}", log)
    limit = min(deadline, time.monotonic() + args.startup_seconds)
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} during start-up; log:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(server.base + "/readyz", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        if time.monotonic() > limit:
            server.stop()
            raise RuntimeError(f"server not ready after {args.startup_seconds}s; log:\n{log.read_text()[-3000:]}")
        time.sleep(0.25)


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
        lat = sorted(self.latencies_ms)
        pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else None  # noqa: E731
        return {"endpoint": self.endpoint, "concurrency": self.concurrency, "requests": self.requests,
                "errors": self.errors, "statuses": self.statuses,
                "throughput_rps": round(self.requests / self.seconds, 2) if self.seconds else None,
                "p50_ms": round(pct(0.50), 2) if lat else None, "p99_ms": round(pct(0.99), 2) if lat else None,
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
        from retrieval.catalog import load_catalog, load_default_catalog

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
    p.add_argument("--skip-updates", action="store_true", help="only the throughput phase")
    p.add_argument("--out", type=Path, default=REPO / "runs" / "load_test.json", help="JSON results file")
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
    report: dict[str, Any] = {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                              "cpu_count": os.cpu_count(), "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    failed = False
    try:
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
        if not args.skip_updates and time.monotonic() < deadline:
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

    print()
    if report.get("points"):
        print(table(report["points"]))
        print(f"\nserver RSS: {report.get('rss_before_mb')} MiB before, {report.get('rss_after_mb')} MiB after "
              f"{report.get('requests_between_rss')} requests; start-up {report.get('startup_seconds')} s")
    if report.get("updates"):
        print("\ncatalog updates:")
        for k, v in report["updates"].items():
            print(f"  {k}: {v}")
    if report.get("error"):
        print(f"\nERROR: {report['error']}", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"\nwrote {args.out}")
    errors = sum(p["errors"] for p in report.get("points", []))
    u = report.get("updates", {})
    bad_updates = u and (u["statuses_5xx"] or u["search_errors"] or u["consistency_violations"] or u["put_errors"]
                         or not u["all_visible_at_end"])
    return 1 if failed or errors or bad_updates else 0


if __name__ == "__main__":
    raise SystemExit(main())
