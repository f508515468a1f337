"""Two ``benchmarks/need_eval.py`` results question by question: the pipeline's rank 1 and top 5 of each
run (set x examples x need) in both, and the exact McNemar test at rank 1 (paired by question id).

    python benchmarks/compare_runs.py OLD.json NEW.json [--stage scorer] [--json OUT]

Used to compare two releases' models on the same questions (need_eval's own paired columns compare
conditions within one model).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import environment_stamp, input_stamps, stamp_line, write_result  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("old", type=Path)
    p.add_argument("new", type=Path)
    p.add_argument("--stage", default="scorer", help="the stage compared (default: the pipeline)")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    from scipy.stats import binomtest

    old, new = (json.loads(x.read_text()) for x in (a.old, a.new))
    rows = []
    print(f"{a.old.name} ({old.get('package')}) vs {a.new.name} ({new.get('package')}), stage {a.stage}\n")
    print("| run | n | old rank 1 / top 5 | new rank 1 / top 5 | new wins / losses at rank 1 | p |")
    print("|---|---:|---:|---:|---:|---:|")
    for key, run in new["runs"].items():
        if key not in old["runs"]:
            continue
        before = {r["id"]: r[a.stage] for r in old["runs"][key]["per_query"]}
        pairs = [(before[r["id"]], r[a.stage]) for r in run["per_query"] if r["id"] in before]
        if not pairs:
            continue
        top1 = lambda x: x == 1   # noqa: E731
        top5 = lambda x: x is not None and x <= 5   # noqa: E731
        wins = sum(top1(n) and not top1(o) for o, n in pairs)
        losses = sum(top1(o) and not top1(n) for o, n in pairs)
        pval = binomtest(wins, wins + losses).pvalue if wins + losses else 1.0
        row = {"run": key, "n": len(pairs),
               "old_top1": 100 * sum(top1(o) for o, _ in pairs) / len(pairs),
               "old_top5": 100 * sum(top5(o) for o, _ in pairs) / len(pairs),
               "new_top1": 100 * sum(top1(n) for _, n in pairs) / len(pairs),
               "new_top5": 100 * sum(top5(n) for _, n in pairs) / len(pairs),
               "wins": wins, "losses": losses, "p": pval}
        rows.append(row)
        print(f"| {key} | {row['n']} | {row['old_top1']:.1f} / {row['old_top5']:.1f} | "
              f"{row['new_top1']:.1f} / {row['new_top5']:.1f} | +{wins} / -{losses} | {pval:.2g} |")
    environment = environment_stamp()
    print("\n" + "\n".join(input_stamps({a.old.name: old, a.new.name: new})) + f"\ncompared with {stamp_line(environment)}")
    if a.json:
        write_result(a.json, {"old": str(a.old), "new": str(a.new), "stage": a.stage, "rows": rows,
                              "inputs_environment": {"old": old.get("environment"), "new": new.get("environment")}},
                     stamp=environment)
    return 0


if __name__ == "__main__":
    sys.exit(main())
