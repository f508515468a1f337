"""Day-one training lists from the catalog's own labelled requests (train servers only).

The teacher lists (``training/data/teacher/``) hold 4,470 requests the LLM judge went through. The
catalog has many more requests whose right tool is known: 5,913 train-split questions and five
example requests for each of the 1,971 train-split tools. This writes them as lists in the teacher
format, so ``training.distill`` can read them beside the teacher's (``--teacher FILE``):

* the candidates are the labelled tool, the hybrid's next ``--hard`` tools for the request over the
  **train servers indexed without example requests** (the day-one index: a request must not find its
  tool through its own example), and ``--deep`` tools from the hybrid's ranks 21-100;
* labels: the labelled tool 1.0; a candidate the judge rated for that question
  (``training/data/judgments.jsonl``) keeps its P(yes); any other 0.0, except tools with the labelled
  tool's name on another server (mirrors of one API), which are left out rather than called wrong;
* lists built from an example request carry ``"day_one": true``: the record must never show that
  tool's own example requests (the request is one of them), so they always train the day-one record.

    python -m training.question_lists --out runs/question_lists.jsonl --examples-per-tool 1

Only train servers are read; dev and test questions and servers never enter.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import random
import sys
from collections import defaultdict
from pathlib import Path

log = logging.getLogger("toolrank.question_lists")


def _id(prefix: str, *parts: str) -> str:
    return prefix + hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:12]


def candidates_for(target: tuple[str, str], hits: list[tuple[str, str]], labels: dict[tuple[str, str], float], *,
                   hard: int, deep: int, seed: str) -> list[dict]:
    """The labelled tool (1.0), the next ``hard`` of the hybrid's ``hits`` and ``deep`` drawn from its
    ranks 21-100; a judged candidate keeps the judge's P(yes), the rest 0.0. Tools named like the
    labelled one (the same API on another server) are left out: they are not known to be wrong."""
    rest = [c for c in hits if c != target and c[1] != target[1]]
    picked = rest[:hard]
    pool = [c for c in hits[20:] if c in rest[hard:]]
    picked += random.Random(seed).sample(pool, min(deep, len(pool)))
    return [{"server": target[0], "tool": target[1], "p_yes": 1.0}] + [
        {"server": s, "tool": t, "p_yes": labels.get((s, t), 0.0)} for s, t in picked]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.question_lists", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="lists JSONL to write")
    p.add_argument("--hard", type=int, default=12, help="hybrid candidates after the labelled tool")
    p.add_argument("--deep", type=int, default=3, help="candidates drawn from the hybrid's ranks 21-100")
    p.add_argument("--examples-per-tool", type=int, default=1, help="example requests per train tool made into lists")
    p.add_argument("--no-questions", action="store_true", help="leave out the train-split questions")
    p.add_argument("--seed", type=int, default=13)
    a = p.parse_args(argv)
    if a.hard < 1 or a.deep < 0 or a.examples_per_tool < 0:
        p.error("--hard must be >= 1, --deep and --examples-per-tool >= 0")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from tqdm import tqdm

    from retrieval.evaluation.harness import load_queries
    from retrieval.index.embedded import ToolIndex

    from .dataset import load_judgments
    from .pairs import DATA_DIR
    from .teacher_lists import split_catalog

    with_ex = split_catalog("train", with_examples=True)
    train_servers = {t.server for t in with_ex.tools}
    requests: list[dict] = []   # {id, query, target, day_one}
    if not a.no_questions:
        for q in load_queries(DATA_DIR / "questions.jsonl", split="train"):
            if q.target.server in train_servers:
                requests.append({"id": _id("qx", q.id), "query": q.query, "qid": q.id,
                                 "target": (q.target.server, q.target.tool), "day_one": False})
    rng = random.Random(a.seed)
    for t in with_ex.tools:
        for e in rng.sample(list(t.examples), min(a.examples_per_tool, len(t.examples))):
            requests.append({"id": _id("xe", t.server, t.name, e), "query": e, "qid": None,
                             "target": (t.server, t.name), "day_one": True})
    judged: dict[str, dict[tuple[str, str], float]] = defaultdict(dict)
    for j in load_judgments():
        judged[j["qid"]][(j["server"], j["tool"])] = float(j["p_yes"])
    index = ToolIndex.build(with_ex.without_examples(), with_examples=False, show_progress=True)
    n_judged = 0
    a.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = a.out.with_name(a.out.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for r in tqdm(requests, desc="lists", disable=None):
            hits = [(h.tool_id.server, h.tool_id.tool) for h in index.retrieve(r["query"], None, None, k=100)]
            labels = judged.get(r["qid"], {}) if r["qid"] else {}
            cands = candidates_for(r["target"], hits, labels, hard=a.hard, deep=a.deep, seed=r["id"])
            n_judged += sum((c["server"], c["tool"]) in labels for c in cands[1:])
            f.write(json.dumps({"id": r["id"], "query": r["query"], "catalog": "mcp-zero", "day_one": r["day_one"],
                                "source": "example" if r["day_one"] else "question", "candidates": cands}) + "\n")
    tmp.replace(a.out)
    log.info("wrote %d lists (%d from questions, %d from example requests; %d candidates with a judge's label) to %s",
             len(requests), sum(not r["day_one"] for r in requests), sum(r["day_one"] for r in requests),
             n_judged, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
