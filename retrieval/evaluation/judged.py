"""A blind judge's answers read back (``benchmarks/judged_flow.py`` writes the items; ``training/thresholds.py``
and the benchmarks read the verdicts): per request id, the judged probability of each candidate it saw."""

from __future__ import annotations

__all__ = ["FITS", "base_id", "judged_probabilities"]

FITS = 0.5   # a candidate judged at or above this fits


def base_id(case_id: str) -> str:
    """The request behind an agent-flow case (a no-fit twin is ``<id>:none``)."""
    return case_id[:-5] if case_id.endswith(":none") else case_id


def judged_probabilities(items: list[dict], answers: dict[str, dict]) -> dict[str, dict[tuple[str, str], float]]:
    """Per request id, the judge's probability for each candidate it saw (a request whose answer counted
    another number of candidates is left out: the numbers would not line up)."""
    out: dict[str, dict[tuple[str, str], float]] = {}
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
