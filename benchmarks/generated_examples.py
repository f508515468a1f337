"""Day one with generated examples: do freshly written example requests reach the shipped ones?

Issue 25's measure. The 75 test servers' 556 tools get five example requests written by the
generator's prompt (``training/prompts/examples.md``, rendered per tool by
``training.prompting.example_messages``, siblings included), by writers who never saw the shipped
examples or any question (``benchmarks/data/generated_examples_test.jsonl``, see
``benchmarks/data/README.md``). Three indexes of the same catalog, the test questions ranked on
each through ``toolrank eval`` (the product's own path):

* ``shipped``: every tool with its shipped example requests (the day-thirty product);
* ``generated``: the test servers' tools with the generated examples, every other tool with its
  shipped ones (what ``toolrank index --write-examples`` gives a user's own servers);
* ``none``: no example requests anywhere (day one without the generator).

    python benchmarks/generated_examples.py [--queries test,independent] [--score-top 10]

Prints a table (rank 1 / top 5 per stage) and the gap of ``generated`` to ``shipped``; writes
``benchmarks/results/generated_examples.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, environment_stamp, stamp_line, write_result  # noqa: E402

from retrieval.jsonl import read_jsonl  # noqa: E402

GENERATED = ROOT / "benchmarks" / "data" / "generated_examples_test.jsonl"
SHIPPED = ROOT / "retrieval" / "data" / "mcp_zero" / "examples.jsonl"
CATALOG = ROOT / "retrieval" / "data" / "mcp_zero" / "mcp_tools_cleaned.json"
QUERIES = {"test": (ROOT / "training" / "data" / "questions.jsonl", "test"),
           "independent": (ROOT / "benchmarks" / "data" / "independent_questions.jsonl", "independent")}
RESULTS = ROOT / "benchmarks" / "results"
CONDITIONS = ("shipped", "generated", "none")


def read_rows(path: Path) -> list[dict]:
    return [row for _, row in read_jsonl(path)]


def merged_examples(dest: Path) -> int:
    """Shipped examples with the generated ones in place of the test servers'; returns how many replaced."""
    generated = {(r["server"], r["tool"]): r["examples"] for r in read_rows(GENERATED)}
    rows, replaced = [], 0
    for r in read_rows(SHIPPED):
        key = (r["server"], r["tool"])
        if key in generated:
            r = {**r, "examples": generated.pop(key)}
            replaced += 1
        rows.append(r)
    if generated:
        raise SystemExit(f"{GENERATED}: {len(generated)} rows name no tool of the catalog, e.g. {next(iter(generated))}")
    dest.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return replaced


def written_examples_index(path: Path):
    """The shipped catalog indexed with example requests only where a user's index-time writer would have written
    them for these measurements: the 75 test servers' tools with the generated ones (GENERATED), every other tool
    without any (a test organisation never sees them); built once into ``path``."""
    from retrieval.catalog.formats import load_default_catalog
    from retrieval.catalog.model import ToolId
    from retrieval.index.embedded import ToolIndex

    if (path / "manifest.json").exists():
        return ToolIndex.load(path)
    examples = {ToolId(r["server"], r["tool"]): list(r["examples"]) for r in read_rows(GENERATED)}
    index = ToolIndex.build(load_default_catalog(with_examples=False).with_examples(examples), with_examples=True,
                            show_progress=True)
    index.save(path)
    return index


def toolrank_command() -> str:
    """The installed ``toolrank`` command beside this interpreter (the product's own entry point)."""
    found = shutil.which("toolrank", path=str(Path(sys.executable).parent)) or shutil.which("toolrank")
    if not found:
        raise SystemExit("no `toolrank` command: install the project first (see the README)")
    return found


def run_eval(condition: str, queries: str, stages: str, score_top: int, examples: Path) -> dict:
    path, split = QUERIES[queries]
    cmd = [toolrank_command(), "eval", "--queries", str(path), "--split", split,
           "--stages", stages, "--score-top", str(score_top), "--json"]
    if condition == "generated":
        cmd += ["--catalog", str(CATALOG), "--examples", str(examples)]
    elif condition == "none":
        cmd += ["--no-examples"]
    t0 = time.time()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=os.environ.copy())
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    report = json.loads(out.stdout)
    report["wall_seconds"] = round(time.time() - t0, 1)
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--queries", default="test,independent", help="comma-separated: test, independent")
    p.add_argument("--stages", default="hybrid,retrieval-confidence,scorer")
    p.add_argument("--score-top", type=int, default=10)
    p.add_argument("--conditions", default=",".join(CONDITIONS),
                   help="comma-separated: shipped, generated, none (shipped and none are also benchmarks/ablation.py's "
                        "test_ex and test_noex)")
    p.add_argument("--out", type=Path, default=RESULTS / "generated_examples.json")
    a = p.parse_args(argv)
    unknown = [q for q in a.queries.split(",") if q not in QUERIES]
    if unknown:
        p.error(f"--queries: unknown {unknown}; choose from {sorted(QUERIES)}")
    conditions = [c for c in a.conditions.split(",") if c]
    if not conditions or set(conditions) - set(CONDITIONS):
        p.error(f"--conditions: choose from {', '.join(CONDITIONS)}")
    if not GENERATED.exists():
        p.error(f"{GENERATED} is missing")
    results: dict = {"environment": environment_stamp(), "score_top": a.score_top, "stages": a.stages.split(","), "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        examples = Path(tmp) / "examples.jsonl"
        results["replaced_tools"] = merged_examples(examples)
        for queries in a.queries.split(","):
            for condition in conditions:
                print(f"{queries} / {condition} ...", file=sys.stderr, flush=True)
                rep = run_eval(condition, queries, a.stages, a.score_top, examples)
                results["runs"][f"{queries}/{condition}"] = rep
    write_result(a.out, results)

    stages = results["stages"]
    print(f"\nrank 1 / top 5 (%), test servers' tools with shipped, generated or no example requests "
          f"(scorer reads the first {a.score_top}; {results['replaced_tools']} tools' examples generated)\n")
    print("| queries | examples | n | " + " | ".join(stages) + " |")
    print("|---|---|---:|" + "---:|" * len(stages))
    for key, rep in results["runs"].items():
        queries, condition = key.split("/")
        cells = [f"{100 * rep['stages'][s]['top1']:.1f} / {100 * rep['stages'][s]['top5']:.1f}" for s in stages]
        print(f"| {queries} | {condition} | {rep['n']} | " + " | ".join(cells) + " |")
    last = stages[-1]
    print()
    for queries in a.queries.split(","):
        got = {c: results["runs"][f"{queries}/{c}"]["stages"][last]["top1"] for c in conditions}
        if "generated" in got and "shipped" in got:
            print(f"{queries}: {last} rank 1, generated − shipped = {100 * (got['generated'] - got['shipped']):+.1f} points")
        if "none" in got and "shipped" in got:
            print(f"{queries}: {last} rank 1, none − shipped = {100 * (got['none'] - got['shipped']):+.1f} points")
    print(f"\n{stamp_line(results['environment'])}\nwritten {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
