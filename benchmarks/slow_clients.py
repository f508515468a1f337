"""Slow clients against the HTTP service, on loopback: does /healthz and search stay available?

Starts the service twice on 127.0.0.1 (ephemeral ports) with a lowered file-descriptor limit
(``--fd-limit``, default 256: the issue's ~1,000 sockets at a quarter of the scale):

* **unbounded**: uvicorn's defaults, as ``toolrank serve`` ran before issue 24 (no header or body
  deadline, no connection cap, no rate-limited accept-error log);
* **bounded**: ``toolrank serve`` (header deadline, connection cap with eviction, TCP_NODELAY).

For each it measures ``GET /healthz`` and ``POST /v1/search`` (a new connection per request, as a
health checker or a fresh client would) three times: before the attack, while ``--slow`` connections
(default 300) dribble header bytes (one every ``--drip`` s, reconnecting when the server closes
them), and after they stop. It counts the server's ``socket.accept() out of system resource`` log lines.

Bounded in count (``--slow``, ``--probes``) and time (``--hold-seconds``, ``--max-seconds``); it stops
by itself and only ever connects to 127.0.0.1. The catalog is a small generated one (retrieval
plus the shipped scorer when it is present). Run from the repository root::

    nice -n 19 python benchmarks/slow_clients.py                     # 300 slow connections, fd limit 256
    python benchmarks/slow_clients.py --slow 1000 --fd-limit 1024    # the issue's scale
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import (HOST, ServiceProcess, environment_stamp, free_port, median, serve_command,  # noqa: E402
                               service_env, stamp_line, write_result)

KEY = "slow-clients-bench-key"

# The service as it ran before issue 24: uvicorn's own protocol and the event loop's own error log.
UNBOUNDED = """
import sys, uvicorn
import serve.app
from serve.logs import log_config
serve.app.install_quiet_accept_errors = lambda loop: None
uvicorn.run("serve.app:create_app", factory=True, host="127.0.0.1", port=int(sys.argv[1]),
            log_config=log_config("warning"), access_log=False, server_header=False)
"""

SERVERS = [("GitHub", ["create_issue", "list_pull_requests", "merge_pull_request", "search_code"]),
           ("Slack", ["post_message", "list_channels", "upload_file"]),
           ("Postgres", ["run_query", "list_tables", "describe_table"]),
           ("Weather", ["forecast", "current_conditions"]),
           ("S3", ["upload_object", "list_buckets", "delete_object"]),
           ("Gmail", ["send_email", "search_mail", "create_draft"])]


def write_inputs(work: Path) -> None:
    import hashlib

    lines = [json.dumps({"server": server, "name": tool, "description": f"{tool.replace('_', ' ')} on {server}"})
             for server, tools in SERVERS for tool in tools]
    (work / "catalog.jsonl").write_text("\n".join(lines) + "\n")
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    (work / "tenants.toml").write_text(f'[[tenants]]\nname = "bench"\nadmin = true\nkey_sha256 = ["{digest}"]\n'
                                       'servers = "*"\n')


@dataclass
class Server(ServiceProcess):
    name: str = "server"

    def open_fds(self) -> int | None:
        """Descriptors the server process holds now (Linux; None elsewhere)."""
        try:
            return len(os.listdir(f"/proc/{self.proc.pid}/fd"))
        except OSError:
            return None

    def accept_errors(self) -> int:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text.count("out of system resource")


def start(name: str, args: argparse.Namespace, work: Path, deadline: float) -> Server:
    port = free_port()
    env = service_env()
    store, catalog, tenants = work / "store", work / "catalog.jsonl", work / "tenants.toml"
    if name == "unbounded":  # what the CLI set up, then plain uvicorn
        env.update(TOOLRANK_CONFIG=str(tenants), TOOLRANK_INDEX_DIR=str(store), TOOLRANK_CATALOG=str(catalog),
                   TOOLRANK_PUBLIC_SUGGESTIONS="0")
        cmd = [sys.executable, "-c", UNBOUNDED, str(port)]
    else:
        cmd = serve_command(port, "--config", str(tenants), "--index", str(store), "--catalog", str(catalog),
                            "--no-suggestions", "--log-level", "warning")
        env["TOOLRANK_HEADER_TIMEOUT_S"] = str(args.header_timeout)
    limit = args.fd_limit

    def lower_fd_limit() -> None:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(limit, hard), hard))

    server = Server.start(cmd, port, work / f"{name}.log", env=env, preexec_fn=lower_fd_limit, name=name)
    server.wait_ready(min(deadline, time.monotonic() + args.startup_seconds), f"{name} server")
    return server


# ------------------------------------------------------------------ slow clients


class SlowClients:
    """``n`` connections that send header bytes slowly and reconnect when closed, until stopped."""

    def __init__(self, port: int, n: int, drip_s: float):
        self.port, self.n, self.drip_s = port, n, drip_s
        self.held = 0
        self.closed_by_server = 0
        self.connect_failures = 0
        self.stop = asyncio.Event()

    async def one(self, i: int) -> None:
        while not self.stop.is_set():
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, self.port), 5)
            except (OSError, asyncio.TimeoutError):
                self.connect_failures += 1
                await asyncio.sleep(0.5)
                continue
            self.held += 1
            try:
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: bench\r\n")
                while not self.stop.is_set():
                    await writer.drain()
                    try:
                        data = await asyncio.wait_for(reader.read(4096), self.drip_s)
                    except asyncio.TimeoutError:
                        writer.write(b"X-Slow: %d\r\n" % i)  # one more header line, never the blank line
                        continue
                    if not data:
                        self.closed_by_server += 1
                        break
            except OSError:
                self.closed_by_server += 1
            finally:
                self.held -= 1
                writer.close()
            await asyncio.sleep(0.2)

    async def run(self) -> None:
        await asyncio.gather(*(self.one(i) for i in range(self.n)))


# ------------------------------------------------------------------ probes


async def probe(base: str, n: int, timeout_s: float) -> dict[str, Any]:
    """``n`` health checks and ``n`` searches, one at a time, each on a new connection."""
    out: dict[str, Any] = {}
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=timeout_s,
                                 headers={"X-API-Key": KEY}) as client:
        for name, call in (("healthz", lambda: client.get("/healthz")),
                           ("search", lambda: client.post("/v1/search", json={"request": "open an issue about the "
                                                                              "login bug on github"}))):
            ms, failed, why = [], 0, {}
            for _ in range(n):
                t0 = time.perf_counter()
                try:
                    r = await call()
                    reason = "" if r.status_code == 200 else f"HTTP {r.status_code}"
                except httpx.HTTPError as exc:
                    reason = type(exc).__name__
                if not reason:
                    ms.append((time.perf_counter() - t0) * 1000)
                else:
                    failed += 1
                    why[reason] = why.get(reason, 0) + 1
            out[name] = {"ok": len(ms), "failed": failed, "failures": why,
                         "p50_ms": round(median(ms), 1) if ms else None,
                         "max_ms": round(max(ms), 1) if ms else None}
    return out


async def attack(server: Server, args: argparse.Namespace) -> list[dict[str, Any]]:
    port = int(server.base.rsplit(":", 1)[1])
    rows = [{"phase": "before", "held": 0, "server_fds": server.open_fds(),
             **await probe(server.base, args.probes, args.timeout)}]
    slow = SlowClients(port, args.slow, args.drip)
    task = asyncio.create_task(slow.run())
    await asyncio.sleep(args.settle)
    fds = server.open_fds()
    during = await asyncio.wait_for(probe(server.base, args.probes, args.timeout), args.hold_seconds)
    rows.append({"phase": f"{args.slow} slow", "held": slow.held, "server_fds": fds, **during})
    remaining = args.hold_seconds - args.settle
    if remaining > 0:
        await asyncio.sleep(min(remaining, 2.0))
    slow.stop.set()
    await asyncio.wait_for(task, 30)
    rows[-1].update(closed_by_server=slow.closed_by_server, connect_failures=slow.connect_failures)
    await asyncio.sleep(1.0)
    rows.append({"phase": "after", "held": 0, "server_fds": server.open_fds(),
                 **await probe(server.base, args.probes, args.timeout)})
    return rows


def table(results: dict[str, list[dict[str, Any]]], accept_errors: dict[str, int]) -> str:
    def cell(m: dict[str, Any]) -> str:
        kinds = ", ".join(f"{k} × {v}" for k, v in m.get("failures", {}).items())
        if not m["ok"]:
            return f"— ({m['failed']} failed: {kinds})"
        fail = f", {m['failed']} failed: {kinds}" if m["failed"] else ""
        return f"{m['p50_ms']} / {m['max_ms']}{fail}"

    lines = ["| server | phase | slow connections open (client side) | server's open descriptors | "
             "/healthz p50 / max ms | /v1/search p50 / max ms | slow connections closed by the server | "
             "accept-error log lines (whole run) |", "|---|---|---:|---:|---|---|---:|---:|"]
    for name, rows in results.items():
        for r in rows:
            closed = r.get("closed_by_server", "")
            errors = accept_errors.get(name, 0) if r["phase"] == "after" else ""
            lines.append(f"| {name} | {r['phase']} | {r['held']} | {r.get('server_fds', '')} | {cell(r['healthz'])} | "
                         f"{cell(r['search'])} | {closed} | {errors} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--slow", type=int, default=300, help="slow connections to hold (default 300, at most 5000)")
    p.add_argument("--fd-limit", type=int, default=256, help="the servers' file-descriptor limit (default 256)")
    p.add_argument("--drip", type=float, default=1.0, help="seconds between header bytes of a slow client")
    p.add_argument("--header-timeout", type=float, default=10.0, help="the bounded server's header deadline")
    p.add_argument("--probes", type=int, default=10, help="health checks and searches per phase (default 10)")
    p.add_argument("--timeout", type=float, default=3.0, help="a probe's timeout in seconds (a failure past it)")
    p.add_argument("--settle", type=float, default=3.0, help="seconds for the slow clients to connect")
    p.add_argument("--hold-seconds", type=float, default=120.0, help="longest the slow clients are held")
    p.add_argument("--startup-seconds", type=float, default=240.0, help="longest a server may take to start")
    p.add_argument("--max-seconds", type=float, default=900.0, help="bound for the whole run")
    p.add_argument("--only", choices=["unbounded", "bounded"], help="run one server only")
    p.add_argument("--out", type=Path, help="write the table (Markdown) and numbers (JSON next to it) here")
    args = p.parse_args(argv)
    if not 1 <= args.slow <= 5000 or not 1 <= args.probes <= 1000 or args.fd_limit < 64:
        p.error("--slow 1..5000, --probes 1..1000, --fd-limit at least 64")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft_needed = args.slow + 64
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft_needed, resource.getrlimit(resource.RLIMIT_NOFILE)[0]),
                                                    hard), hard))  # the client side holds them all
    deadline = time.monotonic() + args.max_seconds
    work = Path(tempfile.mkdtemp(prefix="toolrank-slow-"))
    write_inputs(work)
    results: dict[str, list[dict[str, Any]]] = {}
    accept_errors: dict[str, int] = {}
    try:
        for name in ("unbounded", "bounded"):
            if args.only and name != args.only:
                continue
            print(f"{name}: starting (fd limit {args.fd_limit}) ...", flush=True)
            server = start(name, args, work, deadline)
            try:
                results[name] = asyncio.run(asyncio.wait_for(attack(server, args),
                                                             max(1.0, deadline - time.monotonic())))
            finally:
                server.stop()
                accept_errors[name] = server.accept_errors()
            print(json.dumps({name: results[name]}), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = table(results, accept_errors)
    header = (f"{args.slow} slow connections (a header byte every {args.drip:g} s, reconnecting when closed), "
              f"server fd limit {args.fd_limit}, {args.probes} probes per phase (new connection each, "
              f"{args.timeout:g} s timeout), bounded server's header deadline {args.header_timeout:g} s; "
              f"{os.cpu_count()} CPU(s), {time.strftime('%Y-%m-%d')}")
    stamp = environment_stamp()
    print(header + "\n\n" + text + "\n\n" + stamp_line(stamp))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(header + "\n\n" + text + "\n\n" + stamp_line(stamp) + "\n")
        write_result(args.out.with_suffix(".json"), {"settings": {k: str(v) for k, v in vars(args).items()},
                                                     "results": results, "accept_error_log_lines": accept_errors},
                     stamp=stamp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
