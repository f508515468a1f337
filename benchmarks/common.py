"""What every benchmark shares: the environment stamp of its result files, percentiles, markdown tables,
the service started in a subprocess, and scenarios run each in a fresh subprocess.

Every result file carries :func:`environment_stamp` (commit, whether the tree had changes, package and library
versions, the CPU, its cores and vector instructions), so a figure that moves between two runs can be traced to
what changed: JSON under an ``"environment"`` key (:func:`write_result`), text as a :func:`stamp_line`, a plot
in its footer (:func:`stamp_figure`). Each script prints the stamp line with its table.

Scripts import this module as ``benchmarks.common``; run as a file (``python benchmarks/x.py``) they first put
the repository root on ``sys.path``, run as a module (``python -m benchmarks.x``) it is there already.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

__all__ = ["HOST", "ROOT", "ServiceProcess", "environment_stamp", "format_cell", "free_port", "input_stamps", "markdown_table",
           "median", "percentile", "print_table", "run_scenarios", "serve_command", "service_env", "stamp_figure", "stamp_line",
           "timed", "write_result"]

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"  # services are started on loopback only, by construction
LIBRARIES = ("numpy", "onnxruntime", "faiss-cpu", "bm25s", "tokenizers", "scikit-learn", "fastapi", "torch",
             "transformers", "sentence-transformers")
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "fma", "sse4_2", "neon")


# --------------------------------------------------------------------------- the environment stamp


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _cpu() -> dict[str, Any]:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().split("\n"):
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                model = value.strip()
            elif key.strip() in ("flags", "Features"):
                flags |= set(value.split())
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "cpu_flags": sorted(f for f in CPU_FLAGS if f in flags)}


@functools.lru_cache(maxsize=1)
def _stamp() -> dict[str, Any]:
    from retrieval.version import package_version

    versions = {}
    for lib in LIBRARIES:
        try:
            versions[lib] = importlib.metadata.version(lib)
        except importlib.metadata.PackageNotFoundError:
            pass
    return {"commit": _git("rev-parse", "--short", "HEAD"), "dirty": bool(_git("status", "--porcelain", "-uno")),
            "toolrank": package_version(), "python": platform.python_version(), "libraries": versions,
            **_cpu(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}


def environment_stamp(**extra: Any) -> dict[str, Any]:
    """Commit (and whether tracked files differed from it), versions, CPU, cores, vector instructions,
    ``OMP_NUM_THREADS``; ``extra`` added as given. Read once per process (a new dict each call)."""
    stamp = _stamp()
    return {**stamp, "libraries": dict(stamp["libraries"]), "cpu_flags": list(stamp["cpu_flags"]), **extra}


def stamp_line(stamp: Mapping[str, Any] | None = None) -> str:
    """The stamp as one line of text, for printed tables and text result files."""
    s = environment_stamp() if stamp is None else stamp
    libs = ", ".join(f"{k} {v}" for k, v in (s.get("libraries") or {}).items())
    commit = f"{s.get('commit') or '?'}{' + uncommitted changes' if s.get('dirty') else ''}"
    return (f"environment: commit {commit}, toolrank {s.get('toolrank')}, Python {s.get('python')}"
            + (f", {libs}" if libs else "")
            + f"; {s.get('cpu')}, {s.get('cores')} cores, {' '.join(s.get('cpu_flags') or []) or 'no listed vector flags'}"
            + (f", OMP_NUM_THREADS={s['omp_num_threads']}" if s.get("omp_num_threads") else ""))


def write_result(path: Path, data: Mapping[str, Any], *, indent: int | None = 1,
                 stamp: Mapping[str, Any] | None = None) -> Path:
    """Write ``data`` as JSON with the environment stamp under ``"environment"`` (kept if ``data`` has one);
    the folder is made. Its other keys are written as given."""
    if not isinstance(data, Mapping):
        raise TypeError(f"write_result takes a dict (got {type(data).__name__}); wrap a list as {{'rows': [...]}}")
    if "environment" in data:
        out = dict(data)
    else:
        out = {"environment": dict(stamp) if stamp is not None else environment_stamp(), **data}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=indent) + "\n")
    return path


def input_stamps(results: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """For a script that reads result files (name -> parsed JSON): one line per distinct stamp among them,
    naming the files that carry it; files written before the stamp are listed as such."""
    groups: dict[str, list[str]] = {}
    for name, result in results.items():
        stamp = result.get("environment") if isinstance(result, Mapping) else None
        key = stamp_line(stamp) if stamp else "environment: not recorded (written before the stamp)"
        groups.setdefault(key, []).append(str(name))
    return [f"{', '.join(names)}: {line}" for line, names in groups.items()]


def stamp_figure(fig: Any, stamp: Mapping[str, Any] | None = None) -> None:
    """The stamp (commit, versions of the numeric libraries, CPU) as a small footer of a matplotlib figure;
    call after ``tight_layout``."""
    s = environment_stamp() if stamp is None else stamp
    libs = s.get("libraries") or {}
    short = ", ".join(f"{k} {libs[k]}" for k in ("numpy", "onnxruntime", "faiss-cpu", "torch") if k in libs)
    text = (f"toolrank {s.get('toolrank')} @ {s.get('commit') or '?'}{'+' if s.get('dirty') else ''}; "
            f"Python {s.get('python')}, {short}; {s.get('cpu')}, {s.get('cores')} cores")
    fig.subplots_adjust(bottom=max(fig.subplotpars.bottom, 0.14))
    fig.text(0.01, 0.005, text, fontsize=6, color="grey", ha="left", va="bottom")


# --------------------------------------------------------------------------- numbers and tables


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q``-th percentile (0-100, linear interpolation); NaN for no values."""
    import numpy as np

    values = list(values)
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else float("nan")


def median(values: Iterable[float]) -> float:
    return percentile(values, 50)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and the seconds it took."""
    t0 = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - t0


def format_cell(v: Any, digits: int | None = None) -> str:
    """A table cell: ``-`` for None and NaN, thousands separators, floats with ``digits`` decimals (default:
    none from 100 up, else two)."""
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        if digits is not None:
            return f"{v:.{digits}f}"
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None,
                   digits: int | None = None) -> str:
    """A markdown table with padded columns; cells through :func:`format_cell`. ``align``: one character per
    column, ``l`` or ``r`` (default: the first column left, the others right)."""
    cells = [[str(h) for h in headers]] + [[format_cell(v, digits) for v in r] for r in rows]
    align = align or "l" + "r" * (len(headers) - 1)
    if len(align) != len(headers):
        raise ValueError(f"align {align!r} has {len(align)} characters for {len(headers)} columns; give one per column")
    widths = [max(3, *(len(row[i]) for row in cells)) for i in range(len(headers))]

    def line(row: Sequence[str], head: bool = False) -> str:
        return "| " + " | ".join(c.ljust(w) if head or a == "l" else c.rjust(w)
                                 for c, w, a in zip(row, widths, align)) + " |"

    rule = "|" + "|".join("-" * (w + 1) + ":" if a == "r" else "-" * (w + 2) for w, a in zip(widths, align)) + "|"
    return "\n".join([line(cells[0], head=True), rule, *(line(r) for r in cells[1:])])


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None,
                digits: int | None = None) -> None:
    """Print :func:`markdown_table`."""
    print(markdown_table(headers, rows, align, digits))


# --------------------------------------------------------------------------- scenarios in subprocesses


def run_scenarios(scenarios: Sequence[str], argv_of: Callable[[str], list[str]], *, wall_key: str | None = None,
                  after_each: Callable[[list[dict[str, Any]]], None] | None = None) -> list[dict[str, Any]] | None:
    """Run each scenario in a fresh process (``argv_of(scenario)``, from the repository root) whose last line of
    output is its result as JSON, so its memory is its own. ``wall_key``: also record its seconds there;
    ``after_each``: called with the results so far (to write them as they come). None if one failed (its
    error output printed)."""
    results: list[dict[str, Any]] = []
    for s in scenarios:
        t0 = time.perf_counter()
        proc = subprocess.run(argv_of(s), capture_output=True, text=True, cwd=ROOT)
        if proc.returncode != 0:
            print(f"scenario {s} failed:\n{proc.stderr[-3000:]}", file=sys.stderr)
            return None
        result = json.loads(proc.stdout.strip().rsplit("\n", 1)[-1])
        wall = time.perf_counter() - t0
        if wall_key:
            result[wall_key] = wall
        results.append(result)
        print(f"  {s}: done in {wall:.0f}s", file=sys.stderr, flush=True)
        if after_each:
            after_each(results)
    return results


# --------------------------------------------------------------------------- the HTTP service as a subprocess


def free_port() -> int:
    """A port nothing listens on now (the kernel's choice)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def service_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a service child: no ``TOOLRANK_*`` of ours, the checkout
    importable, one OpenMP thread unless set; then ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLRANK_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    return env


def serve_command(port: int, *args: str) -> list[str]:
    """``toolrank serve`` (``python -m serve.cli``) on loopback at ``port``, then ``args``."""
    return [sys.executable, "-m", "serve.cli", "--host", HOST, "--port", str(port), *args]


@dataclass
class ServiceProcess:
    """A started service: its process, base URL and log file (benchmarks that measure it over real HTTP:
    load_test.py, slow_clients.py, memory_soak.py)."""

    proc: subprocess.Popen
    base: str
    log: Path

    @classmethod
    def start(cls, cmd: Sequence[str], port: int, log: Path, *, env: Mapping[str, str] | None = None,
              preexec_fn: Callable[[], None] | None = None, **fields: Any):
        """Start ``cmd`` (listening on ``HOST:port``) from the repository root, its output to ``log``;
        ``env`` default :func:`service_env`; ``fields``: a subclass's own. Call :meth:`wait_ready` next."""
        with open(log, "w") as out:
            proc = subprocess.Popen(list(cmd), cwd=ROOT, env=dict(env) if env is not None else service_env(),
                                    stdout=out, stderr=subprocess.STDOUT, preexec_fn=preexec_fn)
        return cls(proc, f"http://{HOST}:{port}", log, **fields)

    def wait_ready(self, until: float, what: str = "server") -> None:
        """Wait until ``/readyz`` answers 200, or ``time.monotonic()`` passes ``until``.

        Raises:
            RuntimeError: the process exited, or was not ready in time (it is stopped then); the
                message ends with the tail of its log.
        """
        import httpx

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
