"""The agent flow read against a blind judge (issue 34): are the "no-fit" requests that proceed really without
a fitting tool, and how calibrated is the best probability against what fits rather than what was labelled?

    python benchmarks/judged_flow.py mine --flow runs/s13/flow_report_base.json --out runs/s13/judge/items.jsonl \
        --batches runs/s13/judge/batches --n-batches 8
    # blind judges answer each batch with training/data/briefs/teacher_judge.md (one JSON line per request), then
    python benchmarks/judged_flow.py report --flow benchmarks/results/agent_flow_report.json \
        --items runs/s13/judge/items.jsonl --judged runs/s13/judge/judged_*.jsonl [--second runs/s13/judge/second_*.jsonl] \
        --out benchmarks/results/judged_flow.json

The no-fit cases of the agent flow are *twins*: a corpus request with its labelled tools made ineligible, or an
MCP-Zero request with its labelled servers removed from the organisation. Look-alikes stay (MCPToolBench++'s
playwright and puppeteer browsers, ToolAlpaca's several holiday APIs), so a twin that proceeds may proceed
rightly. Each request is judged once, on the union of the first five tools every mode's first and second
search offered (answerable and twin alike) and its labelled tools, shuffled with a seed per request; the judge
sees the request alone (never the need, the label or any order). A tool counts as fitting at a judged
probability of 0.5 or more.

Reported per catalog kind and mode, beside the strict figures of ``benchmarks/agent_flow.py``:

* no-fit requests: the share that proceed with a tool the judge says does not fit (a wrong proceed); the twins
  none of whose offered tools the judge accepts (*judged no-fit*) and the share of those that proceed;
* answerable requests: the share whose first tool fits (labelled or judged), and the ECE of the best
  probability against it, beside the strict ECE; with each ECE the ECE a perfectly calibrated model would
  show on the same probabilities and count (:func:`retrieval.evaluation.stats.ece_floor`), since 100 requests
  alone put a calibrated model near 0.08.

The judges are of one model family (the teacher's): a second judge on a sample measures their agreement.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, environment_stamp, stamp_line, write_result  # noqa: E402

FITS = 0.5


def _base(case_id: str) -> str:
    return case_id[:-5] if case_id.endswith(":none") else case_id


def _labels() -> dict[str, list[tuple[str, str]]]:
    """Every labelled (and lenient) tool by request id: the MCP-Zero questions and the corpora's."""
    from retrieval.evaluation.corpora import CORPORA, load_corpus
    from retrieval.evaluation.harness import load_queries
    from training.flow_cases import INDEPENDENT, QUESTIONS

    out: dict[str, list[tuple[str, str]]] = {}
    for q in [*load_queries(QUESTIONS), *load_queries(INDEPENDENT, split="independent")]:
        out[q.id] = sorted((t.server, t.tool) for t in q.lenient_targets)
    for name, spec in CORPORA.items():
        if spec.use == "dev":
            for q in load_corpus(name).questions:
                out[q.id] = sorted((t.server, t.tool) for t in q.lenient_targets)
    return out


def mine(a: argparse.Namespace) -> int:
    from retrieval.catalog.model import ToolId
    from retrieval.evaluation.corpora import load_corpus
    from retrieval.index.default import load_or_build_default
    from retrieval.jsonl import write_jsonl
    from training.refresh_lists import batch_text, seed_of

    rows = json.loads(a.flow.read_text())["rows"]
    labels = _labels()
    items: dict[str, dict] = {}
    for r in rows:
        base = _base(r["id"])
        item = items.setdefault(base, {"id": base, "catalog": r["catalog"], "cands": []})
        lists = [r.get("tools1", []), r.get("tools2", [])]
        if r["answerable"]:
            lists.append(labels.get(base, []))
        for lst in lists:
            for server, tool in lst:
                if [server, tool] not in item["cands"]:
                    item["cands"].append([server, tool])
    catalogs: dict[str, object] = {}
    out, texts = [], {}
    for base, item in items.items():
        kind = item["catalog"]
        if kind not in catalogs:
            catalogs[kind] = (load_or_build_default(with_examples=False, show_progress=True).catalog
                              if kind == "mcpzero-org" else load_corpus(kind).catalog)
        catalog = catalogs[kind]
        cands = [c for c in item["cands"] if ToolId(*c) in catalog]
        if not cands:
            continue
        random.Random(seed_of(base)).shuffle(cands)
        out.append({"id": base, "catalog": kind, "query": None,
                    "candidates": [{"server": s, "tool": t} for s, t in cands]})
    queries = _queries(a.flow, {o["id"] for o in out})
    for o in out:
        o["query"] = queries[o["id"]]
    a.out.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(a.out, out)
    print(f"{len(out)} requests, {sum(len(o['candidates']) for o in out)} candidates -> {a.out}", file=sys.stderr)
    if a.batches:
        a.batches.mkdir(parents=True, exist_ok=True)
        order = list(out)
        random.Random(34).shuffle(order)   # every batch a mix of catalogs
        size = -(-len(order) // a.n_batches)
        for b in range(a.n_batches):
            part = order[b * size:(b + 1) * size]
            if not part:
                continue
            text = "\n".join(batch_text([o], catalogs[o["catalog"]]) for o in part)
            (a.batches / f"batch_{b + 1:02d}.txt").write_text(text, encoding="utf-8")
            texts[b + 1] = len(part)
        print(f"judge batches -> {a.batches}: {texts}", file=sys.stderr)
    return 0


def _queries(flow: Path, ids: set[str]) -> dict[str, str]:
    """The request text of each judged id, rebuilt from the same sources the flow cases read."""
    from retrieval.evaluation.corpora import CORPORA, load_corpus
    from retrieval.evaluation.harness import load_queries
    from retrieval.jsonl import read_jsonl
    from training.flow_cases import INDEPENDENT, NOFIT, QUESTIONS

    out: dict[str, str] = {}
    for q in [*load_queries(QUESTIONS), *load_queries(INDEPENDENT, split="independent")]:
        out[q.id] = q.query
    for _, row in read_jsonl(NOFIT):
        out[str(row["id"])] = row["query"]
    for name, spec in CORPORA.items():
        if spec.use == "dev":
            for q in load_corpus(name).questions:
                out[q.id] = q.query
    missing = ids - set(out)
    if missing:
        raise SystemExit(f"error: no request text for {len(missing)} ids (e.g. {sorted(missing)[:3]})")
    return {i: out[i] for i in ids}


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


def judged_report(rows: list[dict], judged: dict[str, dict[tuple[str, str], float]],
                  labels: dict[str, list[tuple[str, str]]], *, seed: int = 0) -> dict:
    """Per catalog kind and mode: the no-fit requests' proceeds read by the judge, and the best probability's
    ECE against the first tool fitting (labelled or judged), each ECE with a calibrated model's floor."""
    import numpy as np

    from retrieval.evaluation.agent_flow import MODES
    from retrieval.evaluation.stats import ece, ece_floor

    def fits(case_id: str, tool) -> bool | None:
        p = judged.get(_base(case_id))
        if p is None or tool is None:
            return None
        return p.get(tuple(tool), 0.0) >= FITS

    out: dict[str, dict] = {}
    for kind in sorted({r["catalog"] for r in rows}):
        for mode in MODES:
            rs = [r for r in rows if r["catalog"] == kind and r["mode"] == mode]
            if not rs:
                continue
            none = [r for r in rs if not r["answerable"] and _base(r["id"]) in judged]
            ans = [r for r in rs if r["answerable"] and _base(r["id"]) in judged]
            rep: dict = {"no_fit_judged": len(none), "answerable_judged": len(ans)}
            proceeded = [r for r in none if r["decision1"] == "proceed" or r["decision"] == "proceed"]

            def proceeded_with(r):
                return (r.get("tools1") or [None])[0] if r["decision1"] == "proceed" else (r.get("tools2") or [None])[0]
            wrong = [r for r in proceeded if not fits(r["id"], proceeded_with(r))]
            clean = [r for r in none if not any(fits(r["id"], t) for t in [*r.get("tools1", []), *r.get("tools2", [])])]
            rep.update({
                "nofit_proceed": len(proceeded) / max(len(none), 1),
                "nofit_proceed_fitting": (len(proceeded) - len(wrong)) / max(len(none), 1),
                "nofit_wrong_proceed": len(wrong) / max(len(none), 1),
                "judged_no_fit": len(clean),
                "judged_no_fit_proceed": sum(r in proceeded for r in clean) / max(len(clean), 1),
                "judged_no_fit_end_no_fit": sum(r["decision"] == "no_fit" for r in clean) / max(len(clean), 1),
            })
            if ans:
                best = np.array([r["best1"] for r in ans])
                strict = np.array([r["right1"] for r in ans], dtype=float)
                either = np.array([bool(r["right1"]) or bool(fits(r["id"], (r.get("tools1") or [None])[0]))
                                   for r in ans], dtype=float)
                floor = ece_floor(best, seed=seed)
                rep.update({"rank1_strict": float(strict.mean()), "rank1_fits": float(either.mean()),
                            "ece_strict": float(ece(best, strict)), "ece_fits": float(ece(best, either)),
                            "ece_calibrated_median": floor["median"], "ece_calibrated_p95": floor["p95"],
                            "mean_best": float(best.mean()),
                            "label_judged_fit": float(np.mean([max((judged[_base(r["id"])].get(t, 0.0)
                                                                    for t in labels.get(_base(r["id"]), [])),
                                                                   default=0.0) >= FITS for r in ans]))})
            out.setdefault(kind, {})[mode] = rep
    return out


def format_report(rep: dict) -> str:
    lines = ["| catalog | mode | no-fit judged | no-fit: proceed (strict) | with a fitting tool | wrong proceed | "
             "judged no-fit: n, proceed | first tool fits: strict / judged | ECE strict / judged (calibrated: median, p95) |",
             "|" + "---|" * 9]
    for kind, modes in rep.items():
        for mode, r in modes.items():
            ece_cell = (f"{r['ece_strict']:.3f} / {r['ece_fits']:.3f} ({r['ece_calibrated_median']:.3f}, "
                        f"{r['ece_calibrated_p95']:.3f})" if "ece_strict" in r else "-")
            fits_cell = f"{r['rank1_strict']:.1%} / {r['rank1_fits']:.1%}" if "rank1_strict" in r else "-"
            lines.append(f"| {kind} | {mode} | {r['no_fit_judged']} | {r['nofit_proceed']:.1%} | "
                         f"{r['nofit_proceed_fitting']:.1%} | {r['nofit_wrong_proceed']:.1%} | "
                         f"{r['judged_no_fit']}, {r['judged_no_fit_proceed']:.1%} | {fits_cell} | {ece_cell} |")
    return "\n".join(lines)


def report(a: argparse.Namespace) -> int:
    from retrieval.jsonl import read_jsonl
    from training.refresh_lists import agreement

    items = [r for _, r in read_jsonl(a.items)]
    answers = {str(r["id"]): r for path in a.judged for _, r in read_jsonl(path)}
    judged = judged_probabilities(items, answers)
    flow = json.loads(a.flow.read_text())
    rep = judged_report(flow["rows"], judged, _labels())
    out = {"environment": environment_stamp(), "flow": str(a.flow.relative_to(ROOT) if a.flow.is_relative_to(ROOT) else a.flow),
           "flow_commit": flow.get("commit"), "policy": flow.get("policy"), "items": len(items), "judged": len(judged),
           "report": rep}
    if a.second:
        second = [r for path in a.second for _, r in read_jsonl(path)]
        out["second_judge"] = agreement(list(answers.values()), second)
    write_result(a.out, out, indent=1)
    print(f"agent flow {out['flow']} (policy {flow.get('policy')}) read against a blind judge: "
          f"{len(judged)} of {len(items)} requests judged\n")
    print(format_report(rep))
    if a.second:
        ag = out["second_judge"]
        print(f"\nsecond judge on {ag['requests']} requests ({ag['pairs']} pairs): same yes/no {ag['same_yes_no']:.1%}, "
              f"kappa {ag['kappa']:.2f}")
    print(stamp_line(out["environment"]))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("mine", help="the judge's batches from an agent-flow run")
    m.add_argument("--flow", type=Path, required=True)
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--batches", type=Path)
    m.add_argument("--n-batches", type=int, default=8)
    r = sub.add_parser("report", help="an agent-flow run read against the judge's answers")
    r.add_argument("--flow", type=Path, required=True)
    r.add_argument("--items", type=Path, required=True)
    r.add_argument("--judged", type=Path, nargs="+", required=True)
    r.add_argument("--second", type=Path, nargs="*")
    r.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "judged_flow.json")
    a = p.parse_args(argv)
    return mine(a) if a.cmd == "mine" else report(a)


if __name__ == "__main__":
    sys.exit(main())
