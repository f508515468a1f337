"""The HTTP service as a subprocess on loopback, for the benchmarks that measure it over real HTTP
(load_test.py, slow_clients.py, memory_soak.py): a free port, the child's environment, waiting
until ``/readyz`` answers 200, and a graceful stop.

Not a benchmark itself; the scripts import it from their own folder.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import httpx

__all__ = ["HOST", "REPO", "ServiceProcess", "free_port", "service_env"]

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"  # loopback only, by construction


def free_port() -> int:
    """A port nothing listens on now (the kernel's choice)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def service_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a service child: no ``TOOLRANK_*`` of ours, the checkout
    importable, one OpenMP thread unless set; then ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLRANK_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    return env


@dataclass
class ServiceProcess:
    """A started service: its process, base URL and log file."""

    proc: subprocess.Popen
    base: str
    log: Path

    def wait_ready(self, until: float, what: str = "server") -> None:
        """Wait until ``/readyz`` answers 200, or ``time.monotonic()`` passes ``until``.

        Raises:
            RuntimeError: the process exited, or was not ready in time (it is stopped then); the
                message ends with the tail of its log.
        """
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{what} exited with {self.proc.returncode} during start-up; log:\n"
                                   f"{self._log_tail()}")
            try:
                if httpx.get(self.base + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > until:
                self.stop()
                raise RuntimeError(f"{what} not ready in time; log:\n{self._log_tail()}")
            time.sleep(0.25)

    def stop(self) -> int | None:
        """SIGTERM (a graceful shutdown), then SIGKILL after 30 s; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def _log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else "(no log)"
