"""Server memory over many requests: does RSS stop growing? (loopback only, bounded)

    python benchmarks/memory_soak.py --requests 5000 [--score-top 20] [--out benchmarks/results/memory_soak.json]

Starts `toolrank serve` on 127.0.0.1 with one tenant (whose policy may set score_top), sends
/v1/search requests one at a time (dev questions, cycled), and samples the server's RSS.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import (ROOT, ServiceProcess, environment_stamp, free_port, serve_command,  # noqa: E402
                               stamp_line, write_result)
from retrieval.jsonl import read_jsonl  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=5000)
    p.add_argument("--score-top", type=int)
    p.add_argument("--max-seconds", type=float, default=900)
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    from serve.tenants import hash_key

    policy = f"\n[tenants.policy]\nscore_top = {a.score_top}\n" if a.score_top else ""
    cfg = Path(tempfile.mkdtemp()) / "tenants.toml"
    cfg.write_text(f'[[tenants]]\nname = "soak"\nkey_sha256 = ["{hash_key("k-soak")}"]\nservers = "*"\n{policy}')
    port = free_port()
    # this process's environment as it is (its TOOLRANK_CACHE, its threads): the service as the user runs it
    server = ServiceProcess.start(serve_command(port, "--config", str(cfg)), port, cfg.parent / "server.log",
                                  env=os.environ)
    proc = server.proc
    questions = [row["query"] for _, row in read_jsonl(ROOT / "training" / "data" / "questions.jsonl")
                 if row.get("split") == "dev"]
    samples = []
    try:
        server.wait_ready(time.monotonic() + 120)
        client = httpx.Client(base_url=server.base, headers={"X-API-Key": "k-soak"}, timeout=60)
        rss = lambda: psutil.Process(proc.pid).memory_info().rss / 2**20  # noqa: E731
        samples.append((0, rss()))
        errors, start = 0, time.time()
        for i in range(1, a.requests + 1):
            r = client.post("/v1/search", json={"request": questions[i % len(questions)]})
            errors += r.status_code != 200
            if i % 500 == 0 or i == a.requests:
                samples.append((i, rss()))
                print(f"{i:>6} requests  RSS {samples[-1][1]:7.1f} MiB  errors {errors}", flush=True)
            if time.time() - start > a.max_seconds:
                print(f"stopped at the time cap after {i} requests", flush=True)
                break
        out = {"environment": environment_stamp(), "score_top": a.score_top, "samples": samples, "errors": errors,
               "seconds": time.time() - start}
        print(stamp_line(out["environment"]))
        if a.out:
            write_result(a.out, out)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
