"""A blind judge's answers read back (``benchmarks/judged_flow.py`` writes the items; ``training/thresholds.py``
and the benchmarks read the verdicts): per request id, the judged probability of each candidate it saw."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

__all__ = ["FITS", "base_id", "judged_probabilities", "read_answers", "read_judged", "fits", "proceeded_with"]

FITS = 0.5   # a candidate judged at or above this fits

Judged = dict[str, dict[tuple[str, str], float]]


def base_id(case_id: str) -> str:
    """The request behind an agent-flow case (a no-fit twin is ``<id>:none``)."""
    return case_id[:-5] if case_id.endswith(":none") else case_id


def judged_probabilities(items: list[dict], answers: dict[str, dict]) -> Judged:
    """Per request id, the judge's probability for each candidate it saw (a request whose answer counted
    another number of candidates is left out: the numbers would not line up)."""
    out: Judged = {}
    for it in items:
        ans = answers.get(it["id"])
        n = len(it["candidates"])
        if ans is None or int(ans.get("n", -1)) != n:
            continue
        p = {(c["server"], c["tool"]): 0.0 for c in it["candidates"]}
        for k, v in (ans.get("p") or {}).items():
            if str(k).isdigit() and 1 <= int(k) <= n:
                c = it["candidates"][int(k) - 1]
                p[(c["server"], c["tool"])] = float(v)
        out[it["id"]] = p
    return out


def read_answers(paths: Iterable[Path]) -> dict[str, dict]:
    """The judges' answer lines by request id (a later file's answer replaces an earlier one)."""
    from retrieval.jsonl import read_jsonl

    return {str(r["id"]): r for path in paths for _, r in read_jsonl(path)}


def read_judged(items: Path, answers: Iterable[Path]) -> Judged:
    """:func:`judged_probabilities` of an items file and the judges' answer files."""
    from retrieval.jsonl import read_jsonl

    return judged_probabilities([r for _, r in read_jsonl(items)], read_answers(answers))


def fits(judged: Judged, case_id: str, tool) -> bool | None:
    """Whether the judge accepts ``tool`` (``[server, tool]``) for the request behind ``case_id``; None when it
    did not read that request, or there is no tool."""
    p = judged.get(base_id(case_id))
    if p is None or tool is None:
        return None
    return p.get(tuple(tool), 0.0) >= FITS


def proceeded_with(row: dict) -> list | None:
    """The tool an agent-flow row proceeded with: the first search's first tool, or the second's."""
    tools = row.get("tools1") if row["decision1"] == "proceed" else row.get("tools2")
    return tools[0] if tools else None
