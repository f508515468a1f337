"""Candidate pools for training and choosing the cross-encoder: the hybrid's top 100 per request.

At query time the student scores everything retrieval hands it (up to 100 candidates), so it
must see more than the judged look-alikes while it learns, and it must be chosen on the same
thing it will do. This writes, once, into ``OUT/``:

* ``teacher.jsonl`` — for every teacher list, the hybrid's top 100 over the catalog it was mined
  from (MCP-Zero **train** servers without examples, or Smithery), so training can add a few
  deep negatives from ranks 21–100 that the judge never saw (they are labelled 0);
* ``{dev,test}_{ex,noex}.jsonl`` — for every dev/test question, the hybrid's top 100 over the
  whole shipped catalog, with and without example requests indexed;
* with ``--needs`` (the blind needs, ``training/needs.py``), ``{dev,test}_{ex,noex}_need.jsonl`` — the
  same questions retrieved with the agent's blind need beside the request, the need in each row's
  ``need`` (the author-written need of ``questions.jsonl`` is never used there).

    python -m training.pools --smithery ../shared/data/smithery/servers --out runs/pools
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

log = logging.getLogger("toolrank.pools")


def _ids(hits) -> list[list[str]]:
    return [[h.tool_id.server, h.tool_id.tool] for h in hits]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.pools", description=__doc__.split("\n\n")[0])
    p.add_argument("--smithery", type=Path, help="Smithery server folder, for the Smithery teacher lists")
    p.add_argument("--teacher", type=Path, nargs="*", default=None, help="teacher list files (default: all shipped)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--k", type=int, default=100)
    p.add_argument("--needs", type=Path, help="blind needs (training/data/needs_blind.jsonl): also write *_need.jsonl pools")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from tqdm import tqdm

    from retrieval.catalog.formats import load_default_catalog
    from retrieval.evaluation.harness import load_queries
    from retrieval.index.default import load_or_build_default
    from retrieval.index.embedded import ToolIndex

    from .distill import read_teacher
    from .pairs import DATA_DIR
    from .teacher_lists import split_catalog

    a.out.mkdir(parents=True, exist_ok=True)
    for split in ("dev", "test"):
        queries = load_queries(DATA_DIR / "questions.jsonl", split=split)
        for tag, ex in (("ex", True), ("noex", False)):
            index = load_or_build_default(with_examples=ex, show_progress=True)
            path = a.out / f"{split}_{tag}.jsonl"
            with path.open("w", encoding="utf-8") as f:
                for q in tqdm(queries, desc=f"{split} {tag}"):
                    hits = index.retrieve(q.query, None, None, k=a.k)
                    f.write(json.dumps({"id": q.id, "query": q.query, "need": q.need, "style": q.style,
                                        "target": [q.target.server, q.target.tool],
                                        "candidates": _ids(hits)}) + "\n")
            log.info("wrote %s", path)
            if a.needs is None:
                continue
            from .needs import read_needs

            blind = read_needs(a.needs)
            path = a.out / f"{split}_{tag}_need.jsonl"
            with path.open("w", encoding="utf-8") as f:
                for q in tqdm(queries, desc=f"{split} {tag} need"):
                    need = blind.get(q.id, {}).get("need")
                    if not need:
                        continue
                    hits = index.retrieve(q.query, need, None, k=a.k)
                    f.write(json.dumps({"id": q.id, "query": q.query, "need": need, "style": q.style,
                                        "target": [q.target.server, q.target.tool],
                                        "candidates": _ids(hits)}) + "\n")
            log.info("wrote %s", path)

    files = a.teacher or sorted((DATA_DIR / "teacher").glob("lists_*.jsonl"))
    lists = read_teacher(files)
    indexes = {"mcp-zero": ToolIndex.build(split_catalog("train", with_examples=False), with_examples=False,
                                           show_progress=True)}
    if any(t.catalog == "smithery" for t in lists):
        if a.smithery is None:
            p.error("the teacher lists include Smithery lists: pass --smithery DIR")
        from retrieval.catalog.smithery import read_smithery

        indexes["smithery"] = ToolIndex.build(read_smithery(a.smithery).catalog, with_examples=False,
                                              show_progress=True)
    with (a.out / "teacher.jsonl").open("w", encoding="utf-8") as f:
        for tl in tqdm(lists, desc="teacher pools"):
            hits = indexes[tl.catalog].retrieve(tl.query, None, None, k=a.k)
            f.write(json.dumps({"id": tl.id, "catalog": tl.catalog, "candidates": _ids(hits)}) + "\n")
    log.info("wrote %s", a.out / "teacher.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
