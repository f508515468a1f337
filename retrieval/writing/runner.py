"""Asking an LLM for many rows, resumably: a JSONL file that knows what it holds, a bounded pool of
requests written back in order, and ask-and-parse with retries on unusable text.

Index-time example requests (:mod:`retrieval.index.examples`) and the training data generator
(:mod:`training.generate`) both run on it.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Hashable, Iterator, Sequence

from retrieval.jsonl import dumps_line, split_lines

from .llm import ChatClient, GenerationError
from .prompting import ContentError

__all__ = ["JsonlOutput", "RunStats", "ask", "read_rows", "row_key", "run_jobs"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunStats:
    """What one run did: jobs in all, skipped as already written, done now, rows written now."""

    total: int
    skipped: int
    done: int
    rows: int


class JsonlOutput:
    """An append-only JSONL file that knows which keys it already holds."""

    def __init__(self, path: str | Path, key: Callable[[dict], Hashable]):
        self.path = Path(path)
        self.key = key
        self.done: set[Hashable] = set()
        self._lock = threading.Lock()
        self._read()

    def _read(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            head, _, tail = data.rpartition(b"\n")
            try:
                json.loads(tail)
                data += b"\n"
            except ValueError:
                logger.warning("%s: dropping an unfinished last line (an interrupted run)", self.path)
                data = head + b"\n" if head else b""
            self.path.write_bytes(data)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GenerationError(f"{self.path}: not UTF-8 text ({exc}); write to another --out file") from None
        for lineno, line in enumerate(split_lines(text), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                self.done.add(self.key(row))
            except (ValueError, KeyError, TypeError):
                raise GenerationError(
                    f"{self.path}, line {lineno}: not a row of this kind; fix or remove the line, "
                    "or write to another --out file") from None

    def append(self, rows: Sequence[dict]) -> None:
        if not rows:
            return
        text = "".join(dumps_line(r) + "\n" for r in rows)
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(text)
            self.done.update(self.key(r) for r in rows)


def row_key(*fields: str, needs: Sequence[str] = ()) -> Callable[[dict], Hashable]:
    """A row's resume key; KeyError when the row lacks a field of its kind."""
    def key(row: dict) -> Hashable:
        missing = [name for name in needs if name not in row]
        if missing:
            raise KeyError(missing[0])
        return tuple(row[f] for f in fields)
    return key


def read_rows(path: str | Path, key: Callable[[dict], Hashable], *, what: str) -> dict[Hashable, dict]:
    """``key(row) -> row`` of every line of a JSONL file (empty when there is none); ``key`` raises KeyError,
    TypeError or ValueError for a row that is not ``what``.

    Raises:
        ValueError: a line that is not ``what`` (names the file and line).
    """
    from retrieval.jsonl import read_jsonl

    path = Path(path)
    if not path.exists():
        return {}
    out = {}
    for lineno, row in read_jsonl(path):
        try:
            out[key(row)] = row
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}, line {lineno}: not {what}; remove the line or use another file") from None
    return out


def run_jobs(jobs: Sequence[Any], work: Callable[[Any], list[dict]], out: JsonlOutput, *,
             total: int, skipped: int, concurrency: int, show_progress: bool, desc: str,
             deadline: float | None = None) -> RunStats:
    """Run ``work`` over ``jobs`` with at most ``concurrency`` in flight, appending rows in job order.

    A finished job's rows are written once every earlier job's are (so the file follows
    the catalog or questions order); on an error or interruption, whatever has finished
    is written anyway. The first GenerationError stops new submissions; jobs already
    running finish and their rows are kept; then the error is raised. Past ``deadline`` (a
    ``time.monotonic()`` value) nothing new starts and jobs still running are abandoned (their rows
    are not written): a :class:`GenerationError` says how many were left.
    """
    from tqdm import tqdm

    if concurrency < 1:
        raise GenerationError(f"concurrency {concurrency} must be >= 1")
    done = rows = 0
    error: BaseException | None = None
    ready: dict[int, list[dict]] = {}
    next_write = 0
    bar = tqdm(total=len(jobs), desc=desc, unit="req", disable=not show_progress, file=sys.stderr)
    pending: Iterator[tuple[int, Any]] = iter(enumerate(jobs))
    in_flight: dict[Future, int] = {}
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="toolrank-gen")
    late = False

    def submit() -> None:
        item = next(pending, None)
        if item is not None:
            in_flight[pool.submit(work, item[1])] = item[0]

    try:
        for _ in range(concurrency):  # no queue: after an error, nothing new starts
            submit()
        while in_flight:
            left = None if deadline is None else deadline - time.monotonic()
            finished, _ = wait(in_flight, timeout=None if left is None else max(0.0, left),
                               return_when=FIRST_COMPLETED)
            if not finished:   # the deadline passed with jobs still running: abandon them
                late = True
                error = error or GenerationError(
                    f"the time allowed ran out with {len(jobs) - done} of {len(jobs)} job(s) unfinished")
                break
            for fut in finished:
                index = in_flight.pop(fut)
                try:
                    ready[index] = fut.result()
                except GenerationError as exc:
                    error = error or exc
                    continue
                done += 1
                rows += len(ready[index])
                bar.update(1)
                if error is None:
                    submit()
            while next_write in ready:
                out.append(ready.pop(next_write))
                next_write += 1
            if error is not None and not in_flight:
                break
    finally:
        pool.shutdown(wait=not late, cancel_futures=True)
        for index in sorted(ready):
            out.append(ready.pop(index))
        bar.close()
    if error is not None:
        raise error
    return RunStats(total=total, skipped=skipped, done=done, rows=rows)


def ask(client: ChatClient, messages: list[dict[str, str]], parse: Callable[[str], Any], *,
        temperature: float, attempts: int) -> Any:
    """Ask and parse; ask again (up to ``attempts`` times in all) when the text is unusable."""
    for attempt in range(attempts):
        reply = client.chat(messages, temperature=temperature)
        try:
            return parse(reply.text)
        except ContentError as exc:
            if attempt + 1 >= attempts:
                raise ContentError(f"{exc} (after {attempts} attempts; the model may not follow the "
                                   "prompt, try another --model)") from None
            logger.info("unusable reply, asking again")   # the reply itself may echo a user's request:
            logger.debug("the unusable reply: %s", exc)    # only at debug
    raise AssertionError("unreachable")
