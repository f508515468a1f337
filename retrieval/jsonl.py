"""JSON Lines that survive any text: one record per ``"\\n"``, never split inside a record.

``str.splitlines()`` also splits on U+0085, U+2028 and U+2029 (and a few ASCII controls),
which ``json.dumps(..., ensure_ascii=False)`` leaves raw inside strings, so a description
holding one of them used to cut its record in two on the way back. Here records are
written with those three escaped (``json.dumps`` already escapes every control character
below U+0020) and read by splitting on ``"\\n"`` only, which also reads files written the
old way. Non-finite numbers are refused on writing: they are not JSON.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable

__all__ = ["dumps_line", "split_lines", "read_jsonl", "write_jsonl", "round_trips"]

# The line breaks of str.splitlines() that json.dumps(ensure_ascii=False) does not escape.
_RAW_BREAKS = re.compile("[\u0085\u2028\u2029]")


def dumps_line(obj: Any) -> str:
    """One JSON Lines record, without the trailing newline; no raw line break of any kind.

    Raises:
        ValueError: ``obj`` holds NaN or an infinity (not JSON), or cannot be encoded.
    """
    text = json.dumps(obj, ensure_ascii=False, allow_nan=False)
    return _RAW_BREAKS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def split_lines(text: str) -> list[str]:
    """The records of a JSON Lines text: split on ``"\\n"`` only (a ``"\\r"`` before it is dropped).

    A drop-in for ``text.splitlines()`` in JSONL readers: same line numbers for ordinary
    files, but U+2028 and friends inside a string stay where they are.
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_jsonl(path: str | Path) -> list[tuple[int, Any]]:
    """``(line number, record)`` for every non-blank line of a UTF-8 JSON Lines file.

    Raises:
        FileNotFoundError: no such file.
        UnicodeDecodeError: not UTF-8.
        ValueError: a line is not JSON (the message names the file and the line).
    """
    path = Path(path)
    rows = []
    for lineno, line in enumerate(split_lines(path.read_text(encoding="utf-8")), 1):
        if not line.strip():
            continue
        try:
            rows.append((lineno, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}, line {lineno}: invalid JSON: {exc.msg}") from None
        except RecursionError:
            raise ValueError(f"{path}, line {lineno}: JSON nested too deeply") from None
    return rows


def write_jsonl(path: str | Path, rows: Iterable[Any]) -> None:
    """Write ``rows`` as JSON Lines (UTF-8), one :func:`dumps_line` record each."""
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(dumps_line(row) + "\n")


def round_trips(obj: Any) -> bool:
    """Whether ``obj`` comes back equal after :func:`dumps_line`, UTF-8 and ``json.loads``."""
    try:
        return json.loads(dumps_line(obj).encode("utf-8")) == obj
    except (ValueError, TypeError, RecursionError, UnicodeError):
        return False
