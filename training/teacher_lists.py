"""Candidate lists for the LLM teacher: what the pipeline really puts in front of the scorer.

For each request, the hybrid top candidates from an index *with* example requests and from one
*without* (a new catalog on day one), merged in rank order and de-duplicated, plus the
request's own target when retrieval missed it, then shuffled with a seed so a judge cannot
read the label from the position. Only tools of the given catalog are ever candidates, so a
list mined over train servers never shows a dev or test tool.

    python -m training.teacher_lists --requests R.jsonl --catalog train --out lists.jsonl
    python -m training.teacher_lists --requests R.jsonl --smithery DIR --out lists.jsonl

A request line needs ``id`` and ``query``; ``server``/``tool`` (the target) are optional
(absent for requests written to have no fitting tool). Lines with ``skip`` are passed over.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import random
import sys
from pathlib import Path
from typing import Any, Iterable

from retrieval.catalog.formats import load_default_catalog
from retrieval.catalog.model import Catalog, ToolId
from retrieval.index.embedded import ToolIndex

__all__ = ["mine_lists", "split_catalog", "main"]

log = logging.getLogger(__name__)


def split_catalog(split: str, *, with_examples: bool = True) -> Catalog:
    """The shipped catalog restricted to servers of ``split`` (train/dev/test) or ``all``."""
    catalog = load_default_catalog(with_examples=with_examples)
    if split == "all":
        return catalog
    from training.pairs import DATA_DIR

    servers = json.loads((DATA_DIR / "splits.json").read_text())["servers"]
    keep = [t for t in catalog.tools if servers.get(t.server) == split]
    return Catalog(keep, {s: catalog.server_descriptions.get(s, "") for s in {t.server for t in keep}})


def _seed(request_id: str) -> int:
    return int(hashlib.sha256(request_id.encode()).hexdigest()[:8], 16)


def mine_lists(requests: Iterable[dict[str, Any]], indexes: list[ToolIndex], *, per_index: int,
               limit: int) -> Iterable[dict[str, Any]]:
    """One list per request: the top ``per_index`` of each index, merged by rank, at most ``limit``."""
    for r in requests:
        merged: list[ToolId] = []
        sources: dict[str, list[str]] = {}
        for i, index in enumerate(indexes):
            for h in index.retrieve(r["query"], None, None, k=per_index):
                if h.tool_id not in merged:
                    merged.append(h.tool_id)
                sources.setdefault(f"{h.tool_id.server}\x1f{h.tool_id.tool}", []).append(f"{i}:{h.rank}")
        # interleave by rank across indexes is what the merge order already gives for equal k
        merged = merged[:limit]
        target = ToolId(r["server"], r["tool"]) if r.get("server") and r.get("tool") else None
        target_retrieved = target in merged if target else None
        if target is not None and not target_retrieved and any(target in idx.catalog for idx in indexes):
            merged.append(target)
        order = list(merged)
        random.Random(_seed(r["id"])).shuffle(order)
        yield {"id": r["id"], "query": r["query"],
               "candidates": [{"server": t.server, "tool": t.tool,
                               "ranks": sources.get(f"{t.server}\x1f{t.tool}", [])} for t in order],
               "target": ({"server": target.server, "tool": target.tool} if target else None),
               "target_retrieved": target_retrieved}


def _read_requests(path: Path) -> list[dict[str, Any]]:
    from retrieval.jsonl import read_jsonl

    try:
        records = read_jsonl(path)
    except ValueError as exc:   # names the file and the line
        raise SystemExit(f"not JSON: {exc}")
    return [row for _, row in records if not row.get("skip") and str(row.get("query", "")).strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.teacher_lists", description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=Path, required=True, nargs="+")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--catalog", choices=["train", "dev", "test", "all"], help="servers of the shipped catalog")
    src.add_argument("--smithery", type=Path, help="a folder of Smithery server files (no example requests)")
    p.add_argument("--keep-servers", type=Path, help="JSON with a 'kept' list of qualified names (Smithery filter)")
    p.add_argument("--per-index", type=int, default=15)
    p.add_argument("--limit", type=int, default=24)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    requests = [r for path in a.requests for r in _read_requests(path)]
    if a.catalog:
        indexes = [ToolIndex.build(split_catalog(a.catalog, with_examples=True), with_examples=True),
                   ToolIndex.build(split_catalog(a.catalog, with_examples=False), with_examples=False)]
    else:
        from retrieval.catalog.smithery import read_smithery

        catalog = read_smithery(a.smithery).catalog
        if a.keep_servers:
            kept = set(json.loads(a.keep_servers.read_text())["kept"])
            files = {json.loads(f.read_text()).get("qualifiedName"): f for f in sorted(a.smithery.glob("*.json"))}
            log.info("keeping %d of %d Smithery servers", len(kept & set(files)), len(files))
            names = _smithery_names(a.smithery, kept)
            catalog = Catalog([t for t in catalog.tools if t.server in names],
                              {s: d for s, d in catalog.server_descriptions.items() if s in names})
        indexes = [ToolIndex.build(catalog, with_examples=False)]
        # Smithery requests name the server by display name; map to the catalog's server names
        requests = [_smithery_target(r, catalog) for r in requests]
    tmp = a.out.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for row in mine_lists(requests, indexes, per_index=a.per_index if a.catalog else a.limit, limit=a.limit):
            fh.write(json.dumps(row, ensure_ascii=True) + "\n")
    tmp.replace(a.out)
    print(f"{len(requests)} lists -> {a.out}", file=sys.stderr)
    return 0


def _smithery_names(folder: Path, kept: set[str]) -> set[str]:
    from retrieval.catalog.smithery import read_smithery

    load = read_smithery(folder)
    by_qualified = {q: s for q, s in load.renamed.items()}
    names = set()
    for f in sorted(folder.glob("*.json")):
        rec = json.loads(f.read_text())
        q = rec.get("qualifiedName")
        if q in kept and rec.get("tools"):
            names.add(by_qualified.get(q, (rec.get("displayName") or "").strip() or q))
    return names


def _smithery_target(r: dict[str, Any], catalog: Catalog) -> dict[str, Any]:
    if r.get("server") and ToolId(r["server"], r.get("tool", "")) in catalog:
        return r
    for s in catalog.servers:  # a renamed server: "Name (@owner/name)"
        if r.get("qualifiedName") and s.endswith(f"({r['qualifiedName']})") and ToolId(s, r["tool"]) in catalog:
            return {**r, "server": s}
    return r


if __name__ == "__main__":
    raise SystemExit(main())
