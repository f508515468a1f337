"""Print the README's quality tables (markdown) from the JSON files benchmarks/ablation.py writes.

    python benchmarks/make_tables.py benchmarks/results

The tables go to stdout; the environment stamps of the files they come from (and of this run) to stderr.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import input_stamps, stamp_line  # noqa: E402

RUNS = [  # (file stem, label)
    ("test_ex", "test, request alone, examples indexed"),
    ("test_ex_need", "test, request + need, examples indexed"),
    ("test_noex", "test, request alone, no examples (day one)"),
    ("test_noex_need", "test, request + need, no examples"),
    ("test_org30", "test, 30-server organisations, request alone"),
    ("dev_ex", "dev (selection/calibration set), request alone"),
    ("train_sample", "200 train questions (seen in training), request alone"),
    ("independent_ex", "independent requests (test servers), request alone, examples indexed"),
    ("independent_noex", "independent requests (test servers), request alone, no examples"),
]


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def print_paired(reports: dict) -> None:
    """The scorer against each retrieval stage, question by question, for the held-out runs."""
    rows = [(stem, label, r["paired_top1"]) for stem, label in RUNS if stem.startswith(("test_", "independent_"))
            for r in [reports.get(stem)] if r and "paired_top1" in r]
    if not rows:
        return
    styles = sorted(next(iter(rows[0][2]["against"].values()))["by_style"])
    print(f"\nPaired, top 1, test and independent requests: the {rows[0][2]['stage']} against each retrieval stage, questions it wins / loses "
          "(it is right at rank 1 and the stage is not / the reverse), with the exact two-sided McNemar p:\n")
    print("| run | against | all | " + " | ".join(styles) + " |")
    print("|---|---|---:|" + "---:|" * len(styles))
    for _, label, paired in rows:
        for other, c in paired["against"].items():
            cells = [c] + [c["by_style"].get(s) for s in styles]
            print(f"| {label} | {other} | " + " | ".join(
                "-" if v is None else f"+{v['wins']} / −{v['losses']} ({v['p']:.2g})" for v in cells) + " |")


def print_targets(d: Path) -> None:
    """The distillation and abstention targets (issues 15 and 18) against the runs that measure them."""
    load = lambda stem: json.loads((d / f"{stem}.json").read_text()) if (d / f"{stem}.json").exists() else None
    ex, noex, ind_ex, ind_noex = load("test_ex"), load("test_noex"), load("independent_ex"), load("independent_noex")
    ab, real = load("test_abstain"), load("test_nofit")
    rows = []
    r1 = lambda x: round(100 * x, 1)    # targets are stated to one decimal, as the tables print them

    def row(target, value, ok):
        rows.append(f"| {target} | {value} | {'met' if ok else 'not met'} |")

    def paired(r):
        c = r["paired_top1"]["against"]["retrieval-confidence"]
        return f"+{c['wins']} / −{c['losses']} (p = {c['p']:.2g})", c["p"] < 0.01 and c["wins"] > c["losses"]

    if ex:
        s = ex["stages"]
        scored = f"the hybrid's first {ex['score_top']}" if ex.get("score_top") else "the candidates the pipeline scores"
        row(f"logit alone over {scored}, examples indexed: rank 1 ≥ 80% and not below the hybrid",
            f"{pct(s['logit']['top1'])} (hybrid {pct(s['hybrid']['top1'])})",
            s["logit"]["top1"] >= 0.80 and s["logit"]["top1"] >= s["hybrid"]["top1"])
        row("no regression with examples: rank 1 / top 5 ≥ 84.1 / 97.6", f"{pct(s['scorer']['top1'])} / {pct(s['scorer']['top5'])}",
            r1(s["scorer"]["top1"]) >= 84.1 and r1(s["scorer"]["top5"]) >= 97.6)
        v, ok = paired(ex)
        row("pipeline beats retrieval-only confidence at rank 1, p < 0.01 (test, examples)", v, ok)
    if noex:
        z = noex["stages"]["logit"]["top1"]
        row("logit alone, no examples (day one): rank 1 ≥ 65%", pct(z), z >= 0.65)
        s = noex["stages"]["scorer"]
        row("no examples (day one): rank 1 ≥ 70%, top 5 ≥ 90%", f"{pct(s['top1'])} / {pct(s['top5'])}",
            s["top1"] >= 0.70 and s["top5"] >= 0.90)
        v, ok = paired(noex)
        row("pipeline beats retrieval-only confidence, p < 0.01 (test, no examples)", v, ok)
    if ind_noex:
        s = ind_noex["stages"]["scorer"]
        row("independent requests, no examples: top 5 ≥ 88%", pct(s["top5"]), s["top5"] >= 0.88)
    if ind_ex:
        v, ok = paired(ind_ex)
        row("pipeline beats retrieval-only confidence, p < 0.01 (independent requests)", v, ok)
    if ab:
        a = ab["abstention"]["auroc_request"]
        row("abstention AUROC, simulation (labelled servers removed) ≥ 0.93", f"{a:.3f}", a >= 0.93)
    if real:
        a = real["abstention_real"]
        row("abstention AUROC on requests written to have no tool ≥ 0.92", f"{a['auroc']:.3f}", a["auroc"] >= 0.92)
        none, fit = a["decisions"]["none"]["proceed"], a["decisions"]["fit"]["proceed"]
        row("at the shipped threshold: proceed ≤ 10% with no tool, ≥ 85% with one", f"{pct(none)} / {pct(fit)}",
            none <= 0.10 and fit >= 0.85)
        row("ECE of the best probability on the mixture ≤ 0.05", f"{a['ece_best']:.3f}", a["ece_best"] <= 0.05)
    if rows:
        print("| target (test, request alone, all servers) | measured | |\n|---|---:|---|")
        print("\n".join(rows))
        print()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    d = Path(argv[0] if argv else "benchmarks/results")
    reports = {stem: json.loads((d / f"{stem}.json").read_text()) for stem, _ in RUNS if (d / f"{stem}.json").exists()}
    if reports and "paired_top1" in next(iter(reports.values())) and \
            "retrieval-confidence" in next(iter(reports.values()))["paired_top1"]["against"]:
        print_targets(d)
    print("| run | n | stage | top 1 | top 5 | top 20 | recall@100 | top 1 (lenient) | top 5 (lenient) |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for stem, label in RUNS:
        r = reports.get(stem)
        if not r:
            continue
        for stage, m in r["stages"].items():
            print(f"| {label} | {r['n']} | {stage} | {pct(m['top1'])} | {pct(m['top5'])} | {pct(m['top20'])} | "
                  f"{pct(m['recall100'])} | {pct(m['top1_lenient'])} | {pct(m['top5_lenient'])} |")
    for stem in ("test_ex", "test_noex", "test_ex_need", "independent_ex"):
        r = reports.get(stem)
        if not r:
            continue
        styles = sorted(next(iter(r["stages"].values()))["by_style"])
        print(f"\nBy style, {dict(RUNS)[stem]} (top 1 / top 5):\n")
        print("| stage | " + " | ".join(f"{s} (n={r['stages']['hybrid']['by_style'][s]['n']})" for s in styles) + " |")
        print("|---|" + "---:|" * len(styles))
        for stage, m in r["stages"].items():
            print(f"| {stage} | " + " | ".join(f"{pct(m['by_style'][s]['top1'])} / {pct(m['by_style'][s]['top5'])}" for s in styles) + " |")
    print_paired(reports)
    ab = reports.get("test_abstain") or (json.loads((d / "test_abstain.json").read_text()) if (d / "test_abstain.json").exists() else None)
    if ab and "abstention" in ab:
        a = ab["abstention"]
        print("\nAbstention (test questions; each run with its fitting tools eligible, and with their servers removed):\n")
        print("| measure | value |\n|---|---:|")
        print(f"| AUROC of the best probability, request alone | {a['auroc_request']:.3f} |")
        print(f"| AUROC after the second attempt (with the need) | {a['auroc_final']:.3f} |")
        print(f"| proceed on the first try, a tool fits / none fits | {pct(a['proceed_first_when_fit'])} / {pct(a['proceed_first_when_none'])} |")
        print(f"| final no_fit, a tool fits / none fits | {pct(a['no_fit_share_when_fit'])} / {pct(a['no_fit_share_when_none'])} |")
        print(f"| top 5 holds a fitting tool (final, when one fits) | {pct(a['top5_when_fit'])} |")
        if "token_reduction_mean" in ab:
            print(f"| mean token reduction of the returned definitions | {pct(ab['token_reduction_mean'])} |")
    real = d / "test_nofit.json"
    if real.exists():
        a = json.loads(real.read_text())["abstention_real"]
        print(f"\nRequests written to have no tool (test side, {a['n_none']}) against the {a['n_fit']} test questions, "
              f"first search, request alone, proceed threshold {json.loads(real.read_text())['proceed_threshold']}:\n")
        print("| measure | value |\n|---|---:|")
        print(f"| AUROC of the best probability | {a['auroc']:.3f} |")
        for kind, k in a["by_kind"].items():
            print(f"| … {kind.replace('_', ' ')} only (n={k['n']}): AUROC / proceed | {k['auroc']:.3f} / {pct(k['proceed'])} |")
        d_ = a["decisions"]
        print(f"| proceed / search_again / no_fit, a tool fits | {pct(d_['fit']['proceed'])} / {pct(d_['fit']['search_again'])} / {pct(d_['fit']['no_fit'])} |")
        print(f"| proceed / search_again / no_fit, no tool | {pct(d_['none']['proceed'])} / {pct(d_['none']['search_again'])} / {pct(d_['none']['no_fit'])} |")
        print(f"| top 5 holds a fitting tool, among proceeds | {pct(a['top5_among_proceed_fit'])} |")
        print(f"| ECE of the best probability on the mixture | {a['ece_best']:.3f} |")
    ind = d / "independent_abstain.json"
    if ind.exists():
        a = json.loads(ind.read_text())["abstention"]
        # These requests have no need line, so there is no second attempt to report.
        print("\nAbstention on the independent requests (request alone, no need line):\n")
        print("| measure | value |\n|---|---:|")
        print(f"| AUROC of the best probability | {a['auroc_request']:.3f} |")
        print(f"| proceed, a tool fits / none fits | {pct(a['proceed_first_when_fit'])} / {pct(a['proceed_first_when_none'])} |")
    # The environment each table's numbers were measured in (the inputs' stamps) and this printing's, on
    # stderr: stdout stays the markdown that is pasted into the docs.
    read = {f.name: json.loads(f.read_text()) for f in sorted(d.glob("*.json"))
            if f.stem in dict(RUNS) or f.stem in ("test_abstain", "test_nofit", "independent_abstain")}
    print("\nMeasured in:\n" + "\n".join(f"- {line}" for line in input_stamps(read))
          + f"\nPrinted with {stamp_line()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
