"""What every benchmark shares: the environment stamp of its result files, percentiles, markdown tables.

Every result file carries :func:`environment_stamp` (commit, whether the tree had changes, package and library
versions, the CPU and its vector instructions), so a figure that moves between two runs can be traced to
what changed.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path
from typing import Any, Iterable, Sequence

ROOT = Path(__file__).resolve().parent.parent
LIBRARIES = ("numpy", "onnxruntime", "faiss-cpu", "bm25s", "tokenizers", "scikit-learn", "fastapi", "torch",
             "transformers", "sentence-transformers")
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "fma", "sse4_2", "neon")


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


def environment_stamp(**extra: Any) -> dict[str, Any]:
    """Commit (and whether the working tree differed from it), versions, CPU; ``extra`` added as given."""
    from retrieval.version import package_version

    versions = {}
    for lib in LIBRARIES:
        try:
            versions[lib] = importlib.metadata.version(lib)
        except importlib.metadata.PackageNotFoundError:
            pass
    return {"commit": _git("rev-parse", "--short", "HEAD"), "dirty": bool(_git("status", "--porcelain", "-uno")),
            "toolrank": package_version(), "python": platform.python_version(), "libraries": versions,
            **_cpu(), **extra}


def percentile(values: Iterable[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(list(values), q))


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None) -> str:
    """A markdown table; ``align`` one character per column (``l`` or ``r``; default: left, then right)."""
    align = align or "l" + "r" * (len(headers) - 1)
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)
