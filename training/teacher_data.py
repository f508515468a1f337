"""Join candidate lists (training/teacher_lists.py) with the judges' answers into teacher lists.

A judge answers one line per request, ``{"id", "n", "p": {"<candidate number>": p_yes}}``,
numbering the candidates of the list it was shown from 1; candidates it left out are 0.
A line whose ``n`` differs from the list's length was judged on another list and is refused.

    python -m training.teacher_data join --lists L.jsonl --judged J1.jsonl J2.jsonl \\
        --catalog mcp-zero --out training/data/teacher/mcpzero.jsonl
    python -m training.teacher_data legacy --out training/data/teacher/legacy.jsonl   # judgments.jsonl
    python -m training.teacher_data nofit --requests R.jsonl --lists L.jsonl --judged J.jsonl \
        --out training/data/nofit.jsonl       # no-fit requests the judge confirmed (no candidate >= 0.5)

Output lines: ``{"id", "query", "catalog", "candidates": [{"server", "tool", "p_yes"}]}``
(no target: the teacher's probabilities are the labels).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Iterable

__all__ = ["join", "legacy_lists", "main"]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    from retrieval.jsonl import read_jsonl

    return [row for _, row in read_jsonl(path)]


def join(lists: Iterable[dict[str, Any]], judged: Iterable[dict[str, Any]], catalog: str) -> tuple[list[dict], dict]:
    """Teacher lists for every list a judge answered; returns them and counts of what was dropped."""
    answers: dict[str, dict[str, Any]] = {}
    for row in judged:
        answers[str(row["id"])] = row            # a later answer for the same id wins (a re-judged line)
    out, stats = [], {"lists": 0, "judged": 0, "missing": 0, "length_mismatch": 0}
    for row in lists:
        stats["lists"] += 1
        ans = answers.get(row["id"])
        if ans is None:
            stats["missing"] += 1
            continue
        n = len(row["candidates"])
        if int(ans.get("n", n)) != n or any(not 1 <= int(k) <= n for k in (ans.get("p") or {})):
            stats["length_mismatch"] += 1
            continue
        probs = {int(k): min(1.0, max(0.0, float(v))) for k, v in (ans.get("p") or {}).items()}
        out.append({"id": row["id"], "query": row["query"], "catalog": catalog,
                    "candidates": [{"server": c["server"], "tool": c["tool"], "p_yes": probs.get(i, 0.0)}
                                   for i, c in enumerate(row["candidates"], 1)]})
        stats["judged"] += 1
    return out, stats


def legacy_lists() -> list[dict]:
    """The shipped judgments (800 train questions × ~13 candidates) as teacher lists."""
    from .pairs import DATA_DIR

    questions = {q["id"]: q for q in _jsonl(DATA_DIR / "questions.jsonl")}
    by_q: dict[str, list[dict]] = {}
    for j in _jsonl(DATA_DIR / "judgments.jsonl"):
        by_q.setdefault(j["qid"], []).append({"server": j["server"], "tool": j["tool"], "p_yes": float(j["p_yes"])})
    return [{"id": qid, "query": questions[qid]["query"], "catalog": "mcp-zero", "candidates": cands}
            for qid, cands in by_q.items()]


def confirmed_nofit(requests: Iterable[dict[str, Any]], lists: Iterable[dict[str, Any]],
                    judged: Iterable[dict[str, Any]]) -> tuple[list[dict], list[str]]:
    """No-fit requests whose judged list has no candidate at 0.5 or more, with the judge's best;
    returns them and the ids sent back (a candidate fits after all, or the list was not judged)."""
    teacher, _ = join(lists, judged, "mcp-zero")
    best = {t["id"]: max((c["p_yes"] for c in t["candidates"]), default=0.0) for t in teacher}
    keep, back = [], []
    for r in requests:
        if r["id"] not in best or best[r["id"]] >= 0.5:
            back.append(r["id"])
            continue
        keep.append({**r, "judge_best_p": best[r["id"]]})
    return keep, back


def _write(rows: list[dict], out: Path) -> None:
    from retrieval.jsonl import write_jsonl

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    write_jsonl(tmp, rows)     # line separators escaped: any text round-trips
    tmp.replace(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.teacher_data", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    j = sub.add_parser("join")
    j.add_argument("--lists", type=Path, required=True)
    j.add_argument("--judged", type=Path, nargs="+", required=True)
    j.add_argument("--catalog", choices=["mcp-zero", "smithery"], required=True)
    j.add_argument("--out", type=Path, required=True)
    g = sub.add_parser("legacy")
    g.add_argument("--out", type=Path, required=True)
    n = sub.add_parser("nofit")
    n.add_argument("--requests", type=Path, nargs="+", required=True)
    n.add_argument("--lists", type=Path, nargs="+", required=True)
    n.add_argument("--judged", type=Path, nargs="+", required=True)
    n.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    try:
        if a.cmd == "join":
            rows, stats = join(_jsonl(a.lists), [r for f in a.judged for r in _jsonl(f)], a.catalog)
            print(json.dumps(stats), file=sys.stderr)
        elif a.cmd == "nofit":
            rows, back = confirmed_nofit([r for f in a.requests for r in _jsonl(f)],
                                         [r for f in a.lists for r in _jsonl(f)],
                                         [r for f in a.judged for r in _jsonl(f)])
            print(f"sent back (a candidate fits, or not judged): {', '.join(back) or 'none'}", file=sys.stderr)
        else:
            rows = legacy_lists()
        _write(rows, a.out)
    except (OSError, ValueError, KeyError) as exc:
        print(f"teacher_data: {exc}", file=sys.stderr)
        return 2
    print(f"{len(rows)} teacher lists -> {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
