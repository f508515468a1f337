"""A training run's learning curve: dev MRR / rank 1 against pairs (or rows) seen.

    python benchmarks/learning_curve.py runs/ce-long/curve.jsonl --out benchmarks/results/learning_curve
    python benchmarks/learning_curve.py STAGE1/curve.jsonl STAGE2/curve.jsonl --out ...   # stages, end to end
    python benchmarks/learning_curve.py runs/enc-long/curve.jsonl --out benchmarks/results/encoder_curve

Reads the ``curve.jsonl`` that ``training/distill.py`` (the cross-encoder: the logit alone over the
hybrid's candidates) or ``training/train_encoder.py`` (the dense encoder: dense and hybrid retrieval,
day one) appends at every measurement, prints a table
and writes ``OUT.png`` (and ``OUT.json``, a copy of the rows, so the figure can be remade from the
repository after the run folder is gone).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import stamp_figure, stamp_line, write_result  # noqa: E402

from retrieval.jsonl import read_jsonl  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("curve", type=Path, nargs="+",
                   help="curve.jsonl of a distillation run (or a saved .json copy); several: its stages, in order "
                        "(a later stage's rows count the earlier stages' pairs and minutes)")
    p.add_argument("--out", type=Path, help="write OUT.png and OUT.json")
    p.add_argument("--sets", help="comma-separated dev sets to print and plot (default: every one), "
                   "e.g. hybrid,need_hybrid,smithery_hybrid,corpora_hybrid")
    a = p.parse_args(argv)
    rows = []
    for stage, curve in enumerate(a.curve, 1):
        if not curve.is_file():
            p.error(f"{curve}: no such file")
        text = curve.read_text(encoding="utf-8")
        found = json.loads(text)["rows"] if curve.suffix == ".json" else [r for _, r in read_jsonl(curve)]
        seen = set()
        for r in found:   # a resumed run re-evaluates the step it resumed at: keep the first
            if r["step"] in seen:
                continue
            seen.add(r["step"])
            r = {"stage": r.get("stage", stage), **r}
            if "rows_seen" in r:   # the encoder's curve: rows (request, card[, negative]), figures in percent
                r["pairs"] = r["rows_seen"]
                r.update({k: v / 100 for k, v in r.items() if k.endswith(("_top1", "_top5", "_r20"))})
            if "total_pairs" in r:   # a later stage: pairs and minutes since the first stage began
                r["pairs"], r["train_minutes"] = r["total_pairs"], r["total_train_minutes"]
            rows.append(r)
    sets = sorted({k[: -len("_mrr")] for r in rows for k in r if k.endswith("_mrr")})
    if a.sets:
        wanted = [x.strip() for x in a.sets.split(",") if x.strip()]
        unknown = sorted(set(wanted) - set(sets))
        if unknown:
            p.error(f"--sets: no {', '.join(unknown)} in the curve; it has {', '.join(sets)}")
        sets = wanted
    head = "| stage | step | pairs seen | training minutes | " + " | ".join(f"{s} MRR | {s} rank 1 | {s} top 5" for s in sets) + " |"
    print(head)
    print("|" + "---:|" * (4 + 3 * len(sets)))
    for r in rows:
        cells = [str(r["stage"]), str(r["step"]), f"{r['pairs']:,}", f"{r['train_minutes']:.0f}"]
        for s in sets:
            cells += [f"{r.get(f'{s}_mrr', float('nan')):.3f}", f"{100 * r.get(f'{s}_top1', float('nan')):.1f}",
                      f"{100 * r.get(f'{s}_top5', float('nan')):.1f}"]
        print("| " + " | ".join(cells) + " |")
    print("\n" + stamp_line())
    if a.out:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        a.out.parent.mkdir(parents=True, exist_ok=True)
        fig, ax = plt.subplots(figsize=(7, 4))
        for s in sets:
            ax.plot([r["pairs"] for r in rows], [r[f"{s}_mrr"] for r in rows], marker="o", label=f"{s} MRR")
            if all(f"{s}_top1" in r for r in rows):
                ax.plot([r["pairs"] for r in rows], [r[f"{s}_top1"] for r in rows], marker=".", linestyle="--",
                        label=f"{s} rank 1")
        for r in rows:
            ax.annotate(f"{r['train_minutes']:.0f} min", (r["pairs"], r[f"{sets[0]}_mrr"]), fontsize=7,
                        textcoords="offset points", xytext=(0, 6), ha="center")
        ax.set_xlabel("(request, tool) pairs seen")
        encoder = any("rows_seen" in r for r in rows)
        ax.set_ylabel("dev, day-one retrieval" if encoder else "dev, logit alone over the hybrid's first candidates")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        stamp_figure(fig)
        fig.savefig(a.out.with_suffix(".png"), dpi=120)
        write_result(a.out.with_suffix(".json"), {"rows": rows, "curves": [str(c) for c in a.curve]})
        print(f"wrote {a.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
