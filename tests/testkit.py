"""Helpers shared by the service and MCP tests: waiting for a condition, a free loopback port, a
tenants file from plain dicts, and ``toolrank serve`` as a real subprocess.

Every wait here is an upper bound for something that must happen (generous, so a busy machine
does not fail a test), never a speed measurement: speed is measured in benchmarks/.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, TypeVar

import httpx

from serve.tenants import hash_key

__all__ = ["REPO", "WAIT_S", "wait_until", "free_port", "tenants_toml", "Service", "service_process"]

REPO = Path(__file__).resolve().parents[1]
WAIT_S = 60.0  # how long to wait for something that must happen (a bound, not a measurement)

T = TypeVar("T")


def wait_until(condition: Callable[[], T], what: str = "condition", timeout_s: float = WAIT_S,
               every_s: float = 0.01) -> T:
    """Poll ``condition`` until it returns something true, and return that.

    Raises:
        AssertionError: it was still false after ``timeout_s`` seconds (``what`` says what was awaited).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not reached in {timeout_s:g} s"
        time.sleep(every_s)


def free_port() -> int:
    """A loopback port that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tenants_toml(*tenants: dict[str, Any]) -> str:
    """A tenants file: each tenant a dict of its fields, with ``key`` (a plain API key, stored as its
    SHA-256) instead of ``key_sha256``, and ``policy`` as a dict."""
    out = []
    for spec in tenants:
        spec = dict(spec)
        policy = spec.pop("policy", None)
        key = spec.pop("key", None)
        if key is not None:
            spec["key_sha256"] = [hash_key(key)]
        out.append("[[tenants]]")
        out += [f"{name} = {json.dumps(value)}" for name, value in spec.items()]
        if policy:
            out.append("[tenants.policy]")
            out += [f"{name} = {json.dumps(value)}" for name, value in policy.items()]
        out.append("")
    return "\n".join(out)


@dataclass
class Service:
    """A ``toolrank serve`` subprocess: its process, base URL and log; ``stderr`` once it stopped."""

    proc: subprocess.Popen
    base: str
    log: Path
    stderr: str = ""


@contextlib.contextmanager
def service_process(args: Sequence[str], log: Path, *, python_path: Sequence[Path] = (),
                    env: dict[str, str] | None = None, ready_within_s: float = WAIT_S) -> Iterator[Service]:
    """``python -m serve.cli ARGS --port P`` on loopback, ready (``/readyz`` 200) when entered; stopped
    with SIGTERM (a graceful shutdown) on exit, its stderr (written to ``log``) then in ``.stderr``.

    The child gets no ``TOOLRANK_*`` variable of this process, the checkout and ``python_path`` on its
    ``PYTHONPATH``, one OpenMP thread, then ``env``.
    """
    port = free_port()
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLRANK_")}
    child_env.update(PYTHONPATH=os.pathsep.join(str(p) for p in (REPO, *python_path)), OMP_NUM_THREADS="1")
    child_env.update(env or {})
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "serve.cli", *args, "--port", str(port)], cwd=REPO,
                                env=child_env, stdout=subprocess.DEVNULL, stderr=err, text=True)
    service = Service(proc, f"http://127.0.0.1:{port}", log)
    try:
        def ready() -> bool:
            assert proc.poll() is None, f"the service exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
            with contextlib.suppress(httpx.TransportError):
                return httpx.get(f"{service.base}/readyz", timeout=2).status_code == 200
            return False

        wait_until(ready, "the service's /readyz", ready_within_s, every_s=0.1)
        yield service
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        service.stderr = log.read_text()
