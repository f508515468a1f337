"""Refresh teacher lists with what today's retrieval shows the student: the candidates of the first ``k`` that
no judge has labelled yet, retrieved with the request's blind need (and, with ``--request-too``, the request
alone), over the same catalog the lists were mined from (MCP-Zero train servers, day one and with examples).

    python -m training.refresh_lists mine --lists training/data/teacher/lists_mcpzero.jsonl \
        --needs training/data/needs_blind.jsonl --out runs/refresh/refresh.jsonl --batches runs/refresh/batches \
        --n-batches 6 --limit 1200
    # judges answer each batch with training/data/briefs/teacher_judge.md (one JSON line per request), then
    python -m training.teacher_data join --lists runs/refresh/refresh.jsonl --judged runs/refresh/judged_*.jsonl \
        --catalog mcp-zero --out runs/refresh/judged_lists.jsonl
    python -m training.refresh_lists merge --lists training/data/teacher/lists_mcpzero.jsonl \
        --refresh runs/refresh/judged_lists.jsonl --out training/data/teacher/lists_mcpzero_refreshed.jsonl

Why (docs/limits.md, "After 0.11.0"): of the first ten the need brings, 3.08 on average were never judged.
A judge sees the request only (the label is about what the user asked, never about the need), and the new
candidates in a seeded order (nothing about how they were found).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any

__all__ = ["unjudged", "batch_text", "merge", "agreement", "seed_of", "main"]


def seed_of(key: str) -> int:
    """A stable seed for one request id (the judges' shuffle of its candidates)."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)


def unjudged(row: dict[str, Any], retrieved: list[list[tuple[str, str]]]) -> list[tuple[str, str]]:
    """The candidates of the retrieved lists (in their order, each once) that ``row`` has not judged."""
    judged = {(c["server"], c["tool"]) for c in row["candidates"]}
    out: list[tuple[str, str]] = []
    for ids in retrieved:
        out += [t for t in ids if t not in judged and t not in out]
    return out


def batch_text(rows: list[dict[str, Any]], catalog: Any, description_chars: int = 300) -> str:
    """A judge's batch: each request and its numbered candidates (server / tool — description [parameters])."""
    from retrieval.catalog.model import ToolId

    parts = []
    for row in rows:
        lines = [f"Request {row['id']}: {row['query']}"]
        for i, c in enumerate(row["candidates"], 1):
            tool = catalog[ToolId(c["server"], c["tool"])]
            params = ", ".join(list((tool.input_schema or {}).get("properties", {}) or {})[:8])
            desc = " ".join((tool.description or "").split())[:description_chars]
            lines.append(f"  {i}. {c['server']} / {c['tool']} — {desc}" + (f" [{params}]" if params else ""))
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def merge(lists: list[dict[str, Any]], judged: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Each teacher list with its newly judged candidates appended (a candidate already there is kept as
    judged first); returns the lists and how many candidates were added."""
    extra = {row["id"]: row["candidates"] for row in judged}
    out, added = [], 0
    for row in lists:
        have = {(c["server"], c["tool"]) for c in row["candidates"]}
        new = [c for c in extra.get(row["id"], []) if (c["server"], c["tool"]) not in have]
        added += len(new)
        out.append({**row, "candidates": list(row["candidates"]) + new})
    return out, added


def agreement(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> dict[str, float]:
    """Two judges' answers (``{"id", "n", "p"}`` lines) on the requests both answered with the same ``n``: the
    share of pairs with the same yes/no at 0.5, Cohen's kappa, Pearson's r of the probabilities, the mean
    absolute difference, and how many pairs and requests that is."""
    import numpy as np

    one = {str(r["id"]): r for r in first}
    a, b, requests = [], [], 0
    for r in second:
        o = one.get(str(r["id"]))
        if o is None or int(o.get("n", -1)) != int(r.get("n", -2)):
            continue
        requests += 1
        for i in range(1, int(r["n"]) + 1):
            a.append(float((o.get("p") or {}).get(str(i), 0.0)))
            b.append(float((r.get("p") or {}).get(str(i), 0.0)))
    if not a:
        raise ValueError("no request answered by both judges with the same number of candidates")
    x, y = np.array(a), np.array(b)
    ya, yb = x >= 0.5, y >= 0.5
    same = float(np.mean(ya == yb))
    chance = float(ya.mean() * yb.mean() + (1 - ya.mean()) * (1 - yb.mean()))
    kappa = (same - chance) / (1 - chance) if chance < 1 else 1.0
    r = float(np.corrcoef(x, y)[0, 1]) if x.std() > 0 and y.std() > 0 else float("nan")
    return {"requests": requests, "pairs": len(a), "same_yes_no": same, "kappa": float(kappa), "pearson": r,
            "mean_abs_diff": float(np.mean(np.abs(x - y))), "yes_first": float(ya.mean()), "yes_second": float(yb.mean())}


def _rows(path: Path) -> list[dict[str, Any]]:
    from retrieval.jsonl import read_jsonl

    return [row for _, row in read_jsonl(path)]


def _write(rows: list[dict[str, Any]], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=True) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(out)


def _mine(a: argparse.Namespace) -> int:
    from retrieval.index.embedded import ToolIndex
    from training.needs import read_needs
    from training.teacher_lists import split_catalog

    lists = _rows(a.lists)
    needs = read_needs(a.needs)
    lists = [r for r in lists if r["id"] in needs and needs[r["id"]].get("need")]
    random.Random(a.seed).shuffle(lists)
    lists = lists[: a.limit or None]
    indexes = [ToolIndex.build(split_catalog(a.catalog, with_examples=ex), with_examples=ex) for ex in (False, True)]
    out = []
    try:
        from tqdm import tqdm
        it = tqdm(lists, desc="unjudged candidates", disable=not sys.stderr.isatty())
    except ImportError:  # pragma: no cover - tqdm is a dependency
        it = lists
    for row in it:
        retrieved = []
        for index in indexes:
            queries = [needs[row["id"]]["need"]] + ([None] if a.request_too else [])
            for need in queries:
                retrieved.append([(h.tool_id.server, h.tool_id.tool)
                                  for h in index.retrieve(row["query"], need, None, k=a.k)])
        new = unjudged(row, retrieved)
        if not new:
            continue
        random.Random(seed_of(row["id"])).shuffle(new)
        out.append({"id": row["id"], "query": row["query"], "need": needs[row["id"]]["need"],
                    "candidates": [{"server": s, "tool": t} for s, t in new]})
    _write(out, a.out)
    pairs = sum(len(r["candidates"]) for r in out)
    print(f"{len(lists)} lists read, {len(out)} with unjudged candidates, {pairs} pairs -> {a.out}", file=sys.stderr)
    if a.batches:
        catalog = indexes[0].catalog
        a.batches.mkdir(parents=True, exist_ok=True)
        size = -(-len(out) // max(a.n_batches, 1))
        for b in range(a.n_batches):
            part = out[b * size:(b + 1) * size]
            if part:
                (a.batches / f"batch_{b + 1:02d}.txt").write_text(batch_text(part, catalog), encoding="utf-8")
        print(f"{a.n_batches} judge batches -> {a.batches}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.refresh_lists", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("mine", help="the unjudged candidates of today's first k, and judge batches")
    m.add_argument("--lists", type=Path, required=True, help="teacher lists (JSONL)")
    m.add_argument("--needs", type=Path, required=True, help="blind needs by list id (JSONL)")
    m.add_argument("--catalog", choices=["train", "all"], default="train", help="the servers the lists were mined over")
    m.add_argument("--k", type=int, default=10, help="the first k of each retrieval (default 10: what is scored)")
    m.add_argument("--request-too", action="store_true", help="also the request alone's first k")
    m.add_argument("--limit", type=int, default=0, help="at most this many lists (a seeded sample; 0: all)")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--out", type=Path, required=True, help="refresh lists (JSONL: id, query, need, candidates)")
    m.add_argument("--batches", type=Path, help="a folder for the judges' text batches")
    m.add_argument("--n-batches", type=int, default=6)
    q = sub.add_parser("agree", help="two judges' agreement on the requests both answered")
    q.add_argument("first", type=Path)
    q.add_argument("second", type=Path)
    g = sub.add_parser("merge", help="teacher lists with the judged refresh candidates appended")
    g.add_argument("--lists", type=Path, required=True)
    g.add_argument("--refresh", type=Path, required=True, help="teacher_data join's output over the refresh lists")
    g.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    try:
        if a.cmd == "mine":
            if a.k < 1 or a.n_batches < 1 or a.limit < 0:
                p.error("--k and --n-batches must be at least 1, --limit at least 0")
            return _mine(a)
        if a.cmd == "agree":
            print(json.dumps(agreement(_rows(a.first), _rows(a.second)), indent=1))
            return 0
        lists, added = merge(_rows(a.lists), _rows(a.refresh))
    except (OSError, ValueError, KeyError) as exc:
        p.error(str(exc))
    _write(lists, a.out)
    print(f"{len(lists)} lists, {added} judged candidates added -> {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
