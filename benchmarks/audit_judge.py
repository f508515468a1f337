"""Does the audits' judge prompt agree with the judges the benchmarks read? (0.18.0)

    python benchmarks/audit_judge.py items --out runs/audit_judge          # batches: the product's prompt, verbatim
    # judges (an LLM each) answer every item as the endpoint would -> answers_*.jsonl
    python benchmarks/audit_judge.py read --dir benchmarks/data/audit_judge/tool --out benchmarks/results/audit_judge_tool.json

An audit (``serve/audits.py``) asks the operator's endpoint ``retrieval/writing/prompts/probe_judge.md`` about one
search's first tool; ``audit_recalibration.py`` simulated audits with the benchmarks' own verdicts (a labelled
first tool, or a blind judge briefed with ``results/judged_flow/brief.md`` who saw the first five tools of both
modes at once). This draws ``--per-kind`` answerable first searches (with the need) of each held-out kind, sends
each (request, first tool) pair with the product's prompt, word for word, to judges who see nothing else, and
reads their verdicts against the benchmarks': agreement, Cohen's kappa, the fit rate each gives, and the ECE the
audit recalibration reaches when fitted on the prompt's verdicts and read against the benchmarks' (cross-fitted
as ``audit_recalibration.py`` does, on these rows).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import markdown_table, stamp_line, write_result  # noqa: E402

MODE = "need"


def items(out: Path, per_kind: int, seed: int, n_batches: int, question: str = "probe_judge",
          which: str = "report") -> int:
    from benchmarks.catalog_calibration import first_fits
    from benchmarks.catalog_probes import _request_texts, judged_set
    from benchmarks.judged_flow import _Catalogs
    from retrieval.catalog.model import ToolId
    from retrieval.jsonl import write_jsonl
    from retrieval.writing.prompting import load_prompt, tool_text

    rows, fits, _ = judged_set(which)
    rows = [r for r in rows if r.get("answerable") and r.get("mode") == MODE and r.get("tools1")
            and (r.get("right1") or fits(r) is not None)]
    catalogs, rng, chosen = _Catalogs(), random.Random(seed), []
    for kind in sorted({r["catalog"] for r in rows}):
        mine = sorted((r for r in rows if r["catalog"] == kind), key=lambda r: r["id"])
        chosen += rng.sample(mine, min(per_kind, len(mine)))
    texts = _request_texts({r["id"] for r in chosen}, which)
    prompt = load_prompt(question)
    out.mkdir(parents=True, exist_ok=True)
    kept = []
    for i, r in enumerate(chosen):
        real = catalogs.real(r["catalog"], r["tools1"][0])
        tool = catalogs.catalog(r["catalog"]).get(ToolId(*real)) if real is not None else None
        if tool is None or r["id"] not in texts:
            continue
        kept.append({"id": f"aj{i:04d}", "row": r["id"], "catalog": r["catalog"], "best1": r["best1"],
                     "fits": bool(first_fits(r, fits)),
                     "user": prompt.render("user", request=texts[r["id"]], tool=tool_text(tool))})
    (out / "system.md").write_text(prompt.system + "\n", encoding="utf-8")
    write_jsonl(out / "items.jsonl", [{k: v for k, v in it.items() if k != "user"} for it in kept])
    order = list(kept)
    random.Random(seed + 1).shuffle(order)
    for b in range(n_batches):
        part = order[b::n_batches]
        (out / f"batch_{b + 1:02d}.txt").write_text(
            "\n\n".join(f"=== item {it['id']} ===\n{it['user']}" for it in part) + "\n", encoding="utf-8")
    print(f"{len(kept)} items over {len({it['catalog'] for it in kept})} kinds -> {out}, {n_batches} batches "
          f"(system prompt in system.md)")
    return 0


def read(folder: Path, out: Path, seed: int) -> int:
    from benchmarks.audit_recalibration import cross_fitted
    from retrieval.evaluation.stats import ece
    from retrieval.jsonl import read_jsonl
    from retrieval.pipeline.recalibration import AUDIT_PULL

    its = {r["id"]: r for _, r in read_jsonl(folder / "items.jsonl")}
    answers = {}
    for path in sorted(folder.glob("answers_*.jsonl")):
        for _, a in read_jsonl(path):
            if a.get("id") in its and isinstance(a.get("p_yes"), (int, float)):
                answers.setdefault(a["id"], float(a["p_yes"]))
    missing = len(its) - len(answers)
    if not answers:
        print(f"error: {folder}: no answers_*.jsonl", file=sys.stderr)
        return 2
    table, rows = {}, []
    for kind in sorted({it["catalog"] for it in its.values()}) + ["all"]:
        sel = [it for i, it in its.items() if i in answers and (kind == "all" or it["catalog"] == kind)]
        bench = np.array([it["fits"] for it in sel], dtype=float)
        prompt = np.array([answers[it["id"]] >= 0.5 for it in sel], dtype=float)
        p = np.array([it["best1"] for it in sel])
        agree = float(np.mean(bench == prompt))
        pe = bench.mean() * prompt.mean() + (1 - bench.mean()) * (1 - prompt.mean())
        kappa = float((agree - pe) / (1 - pe)) if pe < 1 else float("nan")
        cell = {"n": len(sel), "agree": agree, "kappa": kappa, "bench_fits": float(bench.mean()),
                "prompt_fits": float(prompt.mean()), "shipped_ece": float(ece(p, bench))}
        if kind != "all" and len(sel) >= 60:   # the audit map fitted on the prompt's verdicts, read on the benchmarks'
            rng = np.random.default_rng(seed)
            reads = [float(ece(cross_fitted(p, prompt, (1.0, 0.0), 40, AUDIT_PULL, rng), bench)) for _ in range(20)]
            same = [float(ece(cross_fitted(p, bench, (1.0, 0.0), 40, AUDIT_PULL, rng), bench)) for _ in range(20)]
            cell["ece_prompt_audits"], cell["ece_bench_audits"] = float(np.median(reads)), float(np.median(same))
        table[kind] = cell
        rows.append([kind, cell["n"], f"{agree:.1%}", f"{kappa:.2f}", f"{cell['bench_fits']:.0%}",
                     f"{cell['prompt_fits']:.0%}", f"{cell['shipped_ece']:.3f}",
                     f"{cell['ece_bench_audits']:.3f}" if "ece_bench_audits" in cell else "–",
                     f"{cell['ece_prompt_audits']:.3f}" if "ece_prompt_audits" in cell else "–"])
    text = "\n".join([
        "# The audits' judge prompt against the benchmarks' verdicts (first tools of answerable first searches, "
        "with the need)", "",
        markdown_table(["catalog", "n", "agree", "kappa", "fits (benchmarks)", "fits (audit prompt)", "shipped ECE",
                        "ECE, 40 audits judged as the benchmarks", "ECE, 40 audits judged by the prompt"], rows), "",
        "ECE columns: the audit recalibration (pulled towards the identity: no catalog map here) fitted on 40 audits "
        "drawn outside each fifth and read against the benchmarks' verdicts, median of 20 draws."
        + (f" {missing} items unanswered, left out." if missing else ""), "", stamp_line()])
    print(text)
    write_result(out, {"table": table, "missing": missing}, indent=1)
    out.with_suffix(".md").write_text(text + "\n", encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("items")
    i.add_argument("--out", type=Path, required=True)
    i.add_argument("--per-kind", type=int, default=100)
    i.add_argument("--batches", type=int, default=4)
    i.add_argument("--seed", type=int, default=0)
    i.add_argument("--set", choices=("report", "fit"), default="report",
                   help="the held-out kinds (report) or the fit catalogs (fit: where the default question is chosen)")
    i.add_argument("--question", choices=("probe_judge", "audit_step"), default="probe_judge",
                   help="the prompt: the teacher's question (TOOLRANK_AUDIT_QUESTION=tool) or a step of a plan (step)")
    r = sub.add_parser("read")
    r.add_argument("--dir", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if a.cmd == "items":
        return items(a.out, a.per_kind, a.seed, a.batches, a.question, a.set)
    return read(a.dir, a.out, a.seed)


if __name__ == "__main__":
    raise SystemExit(main())
