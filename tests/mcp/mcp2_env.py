"""A virtual environment with the mcp 2.x SDK, for the test servers written against it
(tests/mcp/servers/*_v2.py): the gateway and the harvester run on the project's pinned mcp 1.x
client, and must work with servers built on either major version.

Built once from ``tests/mcp/mcp2/requirements.lock`` (every package pinned with its hashes;
``requirements.in`` says how to regenerate it), under ``$TOOLRANK_CACHE/test-envs/`` (else the
checkout's ``.cache/``), in a folder named after the lock's hash and the Python version, so a new
lock builds a new environment. A file lock keeps parallel test runs from building it twice.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCK = HERE / "mcp2" / "requirements.lock"
REQUIRE = "TOOLRANK_REQUIRE_MCP2"      # set (CI does): failing to build the environment fails the tests
BUILD_TIMEOUT_S = 900


class Mcp2Unavailable(RuntimeError):
    """The mcp 2.x environment could not be built (offline, or the registry refused)."""


def pinned_version() -> str:
    """The mcp version the lock pins."""
    for line in LOCK.read_text().splitlines():
        if line.startswith("mcp=="):
            return line.split("==", 1)[1].split()[0].rstrip("\\").strip()
    raise ValueError(f"{LOCK} pins no mcp")


def env_dir() -> Path:
    cache = Path(os.environ.get("TOOLRANK_CACHE") or HERE.parent.parent / ".cache")
    key = hashlib.sha256(LOCK.read_bytes() + f"{sys.implementation.name}{sys.version_info[:2]}".encode()).hexdigest()
    return cache / "test-envs" / f"mcp2-{key[:16]}"


def _python(root: Path) -> Path:
    return root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _run(args: list[str], what: str) -> None:
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise Mcp2Unavailable(f"{what}: timed out after {BUILD_TIMEOUT_S} s") from None
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise Mcp2Unavailable(f"{what} failed (exit {done.returncode}):\n{tail}")


def build_or_find() -> Path:
    """The Python of the mcp 2.x environment, built first if it is not there (or is incomplete).

    Raises:
        Mcp2Unavailable: it cannot be built (pip's last lines say why).
    """
    from filelock import FileLock

    root = env_dir()
    python, ready = _python(root), root / ".ready"
    want = pinned_version()
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root) + ".lock", timeout=BUILD_TIMEOUT_S + 60):
        if ready.is_file() and ready.read_text().strip() == want and python.exists():
            return python
        shutil.rmtree(root, ignore_errors=True)          # a build that stopped half-way
        _run([sys.executable, "-m", "venv", str(root)], f"python -m venv {root}")
        _run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input",
              "--require-hashes", "--no-deps", "--only-binary", ":all:", "--retries", "2", "--timeout", "30",
              "-r", str(LOCK)], f"pip install -r {LOCK.relative_to(HERE.parent.parent)}")
        check = "import importlib.metadata as m, mcp.server.mcpserver; print(m.version('mcp'))"
        got = subprocess.run([str(python), "-c", check], capture_output=True, text=True, timeout=120)
        if got.returncode != 0 or got.stdout.strip() != want:
            raise Mcp2Unavailable(f"the environment in {root} does not import mcp {want}: "
                                  f"{(got.stdout + got.stderr).strip()[-500:]}")
        ready.write_text(want + "\n")
    return python
