"""Richer tool cards: do the parameters' names and descriptions help retrieval? Measured on and off.

    python benchmarks/tool_cards.py [--corpora api_bank,restbench,mcptoolbenchpp,toolalpaca] [--n 200]

For each catalog (MCP-Zero dev day one over the whole catalog; each held-out corpus over its own
tools), the hybrid's rank 1 / top 5 (lenient for corpora) with the request alone and with the blind
need, indexing each tool's description as it is ("off") or followed by "Parameters: name (description),
..." cut at 300 characters ("on"). Same encoder, same fusion; only the text differs.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, stamp_line, write_result  # noqa: E402

from retrieval.evaluation.corpora import load_corpus  # noqa: E402
from retrieval.catalog.formats import load_default_catalog  # noqa: E402
from retrieval.catalog.model import Catalog, Tool  # noqa: E402
from retrieval.evaluation.harness import load_queries  # noqa: E402
from retrieval.index.embedded import ToolIndex  # noqa: E402
from retrieval.index.encoder import OnnxEncoder  # noqa: E402
from training.needs import read_needs  # noqa: E402


def parameter_text(schema: dict | None, limit: int = 300) -> str:
    props = (schema or {}).get("properties") or {}
    if not isinstance(props, dict) or not props:
        return ""
    parts = []
    for name, spec in props.items():
        desc = spec.get("description", "") if isinstance(spec, dict) else ""
        parts.append(f"{name} ({' '.join(str(desc).split())[:80]})" if desc else str(name))
    return ("Parameters: " + ", ".join(parts))[:limit]


def with_parameters(catalog: Catalog) -> Catalog:
    tools = []
    for t in catalog.tools:
        extra = parameter_text(t.input_schema)
        tools.append(Tool(t.server, t.name, f"{t.description} {extra}".strip() if extra else t.description,
                          t.input_schema, t.server_description, t.examples))
    return Catalog(tools, catalog.server_descriptions)


def measure(index: ToolIndex, qs, needs) -> dict:
    out = {}
    for cond in ("request", "need"):
        r1 = t5 = 0
        for q in qs:
            need = needs.get(q.id, {}).get("need") if cond == "need" else None
            top = [h.tool_id for h in index.retrieve(q.query, need, k=5)]
            r1 += bool(top) and top[0] in q.lenient_targets
            t5 += any(t in q.lenient_targets for t in top)
        out[cond] = (round(100 * r1 / len(qs), 1), round(100 * t5 / len(qs), 1))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpora", default="api_bank,restbench,mcptoolbenchpp,toolalpaca")
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "tool_cards.json")
    a = p.parse_args(argv)
    needs = read_needs()
    enc = OnnxEncoder()
    sets = [("mcp-zero dev (day one)", load_default_catalog(with_examples=False),
             load_queries(ROOT / "training" / "data" / "questions.jsonl", split="dev"))]
    for name in a.corpora.split(","):
        c = load_corpus(name)
        qs = [q for q in c.questions if q.id in needs]   # the sample whose blind needs were written
        random.Random(0).shuffle(qs)
        sets.append((name, c.catalog, qs[: a.n]))
    res = {}
    print("| catalog | cards | request alone: rank 1 / top 5 | with blind need |\n|---|---|---|---|")
    for name, catalog, qs in sets:
        have = sum(bool(parameter_text(t.input_schema)) for t in catalog.tools)
        for label, cat in (("off", catalog), ("on", with_parameters(catalog))):
            m = measure(ToolIndex.build(cat, encoder=enc, with_examples=False), qs, needs)
            res[f"{name} / {label}"] = {**m, "tools_with_parameters": have, "tools": len(catalog.tools), "n": len(qs)}
            print(f"| {name} ({have}/{len(catalog.tools)} with parameters, {len(qs)} requests) | {label} | "
                  f"{m['request'][0]} / {m['request'][1]} | {m['need'][0]} / {m['need'][1]} |", flush=True)
    print("\n" + stamp_line())
    write_result(a.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
