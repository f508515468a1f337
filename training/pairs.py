"""The training data's shared helpers: the server split, a JSONL reader and the data hash.

(The module's 0.1.0 pair mining for the pointwise fine-tune is retired: git history before issue 37.)
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from retrieval.jsonl import split_lines

__all__ = ["DATA_DIR", "load_split", "load_jsonl", "data_hash"]

DATA_DIR = Path(__file__).resolve().parent / "data"


def load_split(path: Path | None = None) -> dict[str, str]:
    """Server -> "train" | "dev" | "test" (training/data/splits.json)."""
    return json.loads(Path(path or DATA_DIR / "splits.json").read_text())["servers"]


def load_jsonl(path: Path) -> list[dict]:
    """Every non-blank line of a JSONL file, parsed."""
    return [json.loads(line) for line in split_lines(Path(path).read_text(encoding="utf-8")) if line.strip()]


def data_hash(*paths: Path) -> str:
    """16 hex digits of SHA-256 over the files' names, lengths and bytes."""
    h = hashlib.sha256()
    for p in paths:  # name and length first, so bytes cannot move between files unnoticed
        data = Path(p).read_bytes()
        h.update(f"{Path(p).name}:{len(data)}:".encode())
        h.update(data)
    return h.hexdigest()[:16]
