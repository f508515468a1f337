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

from retrieval.evaluation.judged import (FITS, base_id as _base, fits as _fits,  # noqa: E402,F401
                                         judged_probabilities, proceeded_with, read_answers, read_judged)
from retrieval.evaluation.stats import poisson_at_least, poisson_loglik, poisson_p  # noqa: E402


def _labels() -> dict[str, list[tuple[str, str]]]:
    """Every labelled (and lenient) tool by request id: the MCP-Zero questions and the corpora's."""
    from retrieval.evaluation.corpora import CORPORA, load_corpus
    from retrieval.evaluation.harness import load_queries
    from training.flow_cases import INDEPENDENT, QUESTIONS

    out: dict[str, list[tuple[str, str]]] = {}
    for q in [*load_queries(QUESTIONS), *load_queries(INDEPENDENT, split="independent")]:
        out[q.id] = sorted((t.server, t.tool) for t in q.lenient_targets)
    for name, spec in CORPORA.items():
        if spec.use in ("dev", "train"):   # the report set's corpora and the fit set's
            for q in load_corpus(name).questions:
                out[q.id] = sorted((t.server, t.tool) for t in q.lenient_targets)
    return out


class _Catalogs:
    """Each catalog kind's catalog (loaded once) and, per kind, a result file's tool (a digest where the corpus
    has no licence) back to the catalog's ``[server, tool]``; and, asked for, its day-one index as the agent
    flow searches it (:meth:`index`)."""

    def __init__(self) -> None:
        self._catalogs: dict[str, object] = {}
        self._real: dict[str, dict[tuple[str, str], list[str]]] = {}
        self._indexes: dict[str, object] = {}
        self._encoder = None

    def index(self, kind: str):
        """The kind's catalog indexed as ``agent_flow.flow_rows`` indexes it (day one, every tool in one pass;
        MCP-Zero organisations search the shipped catalog's default index), built once."""
        if kind not in self._indexes:
            from retrieval.index.default import load_or_build_default
            from retrieval.index.embedded import ToolIndex
            from retrieval.index.encoder import OnnxEncoder

            if kind == "mcpzero-org":
                self._indexes[kind] = load_or_build_default(with_examples=False, show_progress=True)
            else:
                self._encoder = self._encoder or OnnxEncoder()
                self._indexes[kind] = ToolIndex(self.catalog(kind), self._encoder, with_examples=False)
        return self._indexes[kind]

    def use(self, kind: str, index) -> None:
        """Search ``kind`` on ``index`` instead (e.g. its tools with written example requests)."""
        self._indexes[kind] = index

    def catalog(self, kind: str):
        if kind not in self._catalogs:
            from retrieval.evaluation.corpora import load_corpus, shippable_tool

            cat = self.index(kind).catalog if kind == "mcpzero-org" else load_corpus(kind).catalog
            self._catalogs[kind] = cat
            self._real[kind] = {tuple(shippable_tool(kind, (t.id.server, t.id.tool))): [t.id.server, t.id.tool]
                                for t in cat.tools}
        return self._catalogs[kind]

    def real(self, kind: str, tool) -> list[str] | None:
        """The catalog's ``[server, tool]`` behind a result file's, or None (no longer in the catalog)."""
        self.catalog(kind)
        return self._real[kind].get(tuple(tool))


def _write(out: list[dict], a: argparse.Namespace, catalogs: _Catalogs, order_seed: int, what: str) -> None:
    """The items (request texts filled in; as the repository may hold them) and, with ``--batches``, the judges'
    batches (real texts), every batch a mix of catalogs."""
    from retrieval.jsonl import write_jsonl
    from training.refresh_lists import batch_text

    queries = _queries(a.flow, {o["id"] for o in out})
    for o in out:
        o["query"] = queries[o["id"]]
    a.out.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(a.out, shippable_items(out))
    print(f"{len(out)} requests, {sum(len(o['candidates']) for o in out)} {what} -> {a.out}", file=sys.stderr)
    if a.batches:
        a.batches.mkdir(parents=True, exist_ok=True)
        order = list(out)
        random.Random(order_seed).shuffle(order)
        size = -(-len(order) // a.n_batches)
        sizes = {}
        for b in range(a.n_batches):
            part = order[b * size:(b + 1) * size]
            if part:
                text = "\n".join(batch_text([o], catalogs.catalog(o["catalog"])) for o in part)
                (a.batches / f"batch_{b + 1:02d}.txt").write_text(text, encoding="utf-8")
                sizes[b + 1] = len(part)
        print(f"judge batches -> {a.batches}: {sizes}", file=sys.stderr)


def _item(case_id: str, kind: str, cands: list[list[str]], seed_key: str) -> dict:
    from training.refresh_lists import seed_of

    cands = list(cands)
    random.Random(seed_of(seed_key)).shuffle(cands)
    return {"id": case_id, "catalog": kind, "query": None, "candidates": [{"server": s, "tool": t} for s, t in cands]}


def mine(a: argparse.Namespace) -> int:
    from retrieval.catalog.model import ToolId
    from retrieval.evaluation.corpora import shippable_tool

    rows = json.loads(a.flow.read_text())["rows"]
    labels = _labels()
    catalogs = _Catalogs()
    if a.misses_only:   # only the first searches whose first tool is not labelled: the rest are right already
        rows = [dict(r, tools1=r.get("tools1", [])[:3], tools2=[]) for r in rows if r["answerable"] and not r["right1"]]
    items: dict[str, dict] = {}
    for r in rows:
        base, kind = _base(r["id"]), r["catalog"]
        item = items.setdefault(base, {"catalog": kind, "cands": []})
        lists = [r.get("tools1", []), r.get("tools2", [])]
        if r["answerable"]:
            lists.append([shippable_tool(kind, t) for t in labels.get(base, [])])
        for lst in lists:
            for t in lst:
                name = catalogs.real(kind, t)   # rows hold digests where the corpus has no licence
                if name is not None and name not in item["cands"]:
                    item["cands"].append(name)
    out = [_item(base, item["catalog"], cands, base) for base, item in items.items()
           if (cands := [c for c in item["cands"] if ToolId(*c) in catalogs.catalog(item["catalog"])])]
    _write(out, a, catalogs, 34, "candidates")
    return 0


def mine_tail(a: argparse.Namespace) -> int:
    """Judge items of the candidates just past the scored head (ranks 11-20 by default), the answerable requests
    of one mode: what the probabilities past the head claim, read against what fits."""
    rows = [r for r in json.loads(a.flow.read_text())["rows"]
            if r["answerable"] and r["mode"] == a.mode and r.get("tail_ids")]
    catalogs = _Catalogs()
    if a.labelled_past is not None:   # the labelled tools further down (what the labels' tail rate counts past the judged ranks)
        out = [_item(r["id"], r["catalog"], names, "labelled-tail:" + r["id"]) for r in rows
               if (names := [name for t, rank in zip(r.get("tail_labelled", []), r.get("tail_labelled_ranks", []))
                             if rank > a.labelled_past and (name := catalogs.real(r["catalog"], t))])]
        _write(out, a, catalogs, 36, f"labelled tools past rank {a.labelled_past}")
        return 0
    out = [_item(r["id"], r["catalog"], [name for t in r["tail_ids"] if (name := catalogs.real(r["catalog"], t))],
                 "tail:" + r["id"]) for r in rows]
    _write(out, a, catalogs, 35, "candidates past the head")
    return 0


def labelled_tail_report(rows: list[dict], judged: dict, past: int = 20, mode: str = "need") -> dict[str, dict]:
    """Per catalog kind, the labelled tools past rank ``past`` of the answerable requests of ``mode`` and how
    many of those the judge read accepts: how much of the labels' tail rate is tools that do what was asked; and
    the fits the tail probabilities expect past that rank (``expected``): the accepted labelled tools are a lower
    bound on the fits there (the unlabelled ones past the rank were not judged)."""
    out: dict[str, dict] = {}
    for r in rows:
        if not r["answerable"] or r["mode"] != mode:
            continue
        cell = out.setdefault(r["catalog"], {"labelled": 0, "read": 0, "fit": 0, "expected": 0.0})
        if "head_p" in r:   # tail_p[i] is rank len(head_p) + 1 + i
            cell["expected"] += float(sum(r.get("tail_p", [])[max(0, past - len(r["head_p"])):]))
        for t, rank in zip(r.get("tail_labelled", []), r.get("tail_labelled_ranks", [])):
            if rank <= past:
                continue
            cell["labelled"] += 1
            p = judged.get(r["id"], {}).get(tuple(t))
            if p is not None:
                cell["read"] += 1
                cell["fit"] += int(p >= FITS)
    for cell in out.values():
        cell["fit_share"] = cell["fit"] / cell["read"] if cell["read"] else None
        cell["p_at_least"] = poisson_at_least(cell["fit"], cell["expected"])
    return dict(sorted(out.items()))


def report_labelled_tail(a: argparse.Namespace) -> int:
    judged = read_judged(a.items, a.judged)
    rows = json.loads(a.flow.read_text())["rows"]
    rep = labelled_tail_report(rows, judged, a.labelled_past, a.mode)
    write_result(a.out, {"environment": environment_stamp(), "flow": a.flow.name, "mode": a.mode,
                         "past": a.labelled_past, "report": rep}, indent=1)
    print(f"labelled tools past rank {a.labelled_past} of the first search ({a.mode}), read by the judge\n")
    print("| catalog | labelled past rank | judged | judged to fit (at least that many fits there) | "
          "fits the tail expects there | P(at least that many) |\n|---|---:|---:|---:|---:|---:|")
    for kind, c in rep.items():
        share = f"{c['fit']} ({c['fit_share']:.0%})" if c["fit_share"] is not None else "-"
        print(f"| {kind} | {c['labelled']} | {c['read']} | {share} | {c['expected']:.1f} | {c['p_at_least']:.2g} |")
    print(stamp_line(environment_stamp()))
    return 0


def retail(rows: list[dict], tail) -> list[dict]:
    """Rows whose tail probabilities are re-read with another tail calibration (``tail_p`` from the rows' own
    evidence: the retrieval-only probability, the rank, the eligible tools and the head's probabilities), as
    the pipeline would compute them with it."""
    import numpy as np

    out = []
    for r in rows:
        if "tail_r" in r and "head_p" in r:
            first = len(r["head_p"]) + 1
            ranks = np.arange(first, first + len(r["tail_r"]))
            p = tail.probabilities(np.asarray(r["tail_r"]), ranks, int(r.get("n_eligible", 1)), np.asarray(r["head_p"]))
            r = dict(r, tail_p=[round(float(x), 6) for x in p])
        out.append(r)
    return out


def tail_report(rows: list[dict], judged: dict, mode: str = "need", ranks: int = 10) -> dict[str, dict]:
    """Per catalog kind, ranks 11 to 10 + ``ranks`` of the answerable requests: the mean predicted probability,
    the share labelled, the share labelled or judged to fit, and predicted over each; the expected number of
    fits (the sum of the predicted) and the Poisson p-value of each observed count against it."""
    import numpy as np

    out: dict[str, dict] = {}
    for kind in sorted({r["catalog"] for r in rows}):
        pred, lab, fit, judge = [], [], [], []
        for r in rows:
            if r["catalog"] != kind or r["mode"] != mode or not r["answerable"] or r["id"] not in judged:
                continue
            j = judged[r["id"]]
            for p, f, t in zip(r["tail_p"][:ranks], r["tail_fit"][:ranks], r["tail_ids"][:ranks]):
                if tuple(t) not in j:   # a candidate the judge did not read counts neither way
                    continue
                pred.append(p)
                lab.append(bool(f))
                judge.append(j.get(tuple(t), 0.0) >= FITS)
                fit.append(bool(f) or judge[-1])
        if not pred:
            continue
        mp, ml, mf, mj = float(np.mean(pred)), float(np.mean(lab)), float(np.mean(fit)), float(np.mean(judge))
        expected = float(np.sum(pred))
        out[kind] = {"candidates": len(pred), "predicted": mp, "labelled": ml, "fits": mf, "judged": mj,
                     "labelled_n": int(sum(lab)), "fits_n": int(sum(fit)), "judged_n": int(sum(judge)),
                     "labelled_judged_n": int(sum(a and b for a, b in zip(lab, judge))),
                     "ratio_labelled": mp / ml if ml else None, "ratio_fits": mp / mf if mf else None,
                     "ratio_judged": mp / mj if mj else None,   # None: nothing observed to divide by
                     "expected": expected, "p_labelled": poisson_p(int(sum(lab)), expected),
                     "p_judged": poisson_p(int(sum(judge)), expected), "p_fits": poisson_p(int(sum(fit)), expected),
                     "loglik_judged": poisson_loglik(int(sum(judge)), expected)}
    return out


def _ratio(x: float | None) -> str:
    return "none observed" if x is None else f"{x:.2f}"


def report_tail(a: argparse.Namespace) -> int:
    judged = read_judged(a.items, a.judged)
    flow = json.loads(a.flow.read_text())
    rows = flow["rows"]
    if a.tail:   # the same evidence, read with another tail calibration
        from retrieval.pipeline.confidence import TailCalibration

        try:
            rows = retail(rows, TailCalibration.load(a.tail))
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    rep = tail_report(rows, judged, a.mode)
    write_result(a.out, {"environment": environment_stamp(), "flow": a.flow.name, "mode": a.mode,
                         "tail": str(a.tail) if a.tail else "as the flow ran", "judged": len(judged), "report": rep},
                 indent=1)
    print(f"ranks 11-20 of the first search ({a.mode}), {len(judged)} requests judged: predicted against observed"
          + (f" (tail probabilities re-read with {a.tail})" if a.tail else "") + "\n")
    print("| catalog | candidates | predicted | expected fits | labelled (n; judged to fit) | judged to fit (n) | "
          "labelled or judged (n) | pred / labelled (p) | pred / judged (p) | pred / either (p) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kind, r in rep.items():
        print(f"| {kind} | {r['candidates']} | {r['predicted']:.4f} | {r['expected']:.1f} | {r['labelled']:.4f} "
              f"({r['labelled_n']}; {r['labelled_judged_n']}) | {r['judged']:.4f} ({r['judged_n']}) | {r['fits']:.4f} "
              f"({r['fits_n']}) | {_ratio(r['ratio_labelled'])} ({r['p_labelled']:.2g}) | {_ratio(r['ratio_judged'])} "
              f"({r['p_judged']:.2g}) | {_ratio(r['ratio_fits'])} ({r['p_fits']:.2g}) |")
    print("(p: two-sided Poisson p-value of the observed count where the predicted probabilities expect the sum)")
    print("Poisson log-likelihood of the judged counts, summed over the kinds: "
          f"{sum(r['loglik_judged'] for r in rep.values()):.1f}; without Gorilla's hubs: "
          f"{sum(r['loglik_judged'] for k, r in rep.items() if not k.startswith('gorilla')):.1f}")
    print(stamp_line(environment_stamp()))
    return 0


def agree(a: argparse.Namespace) -> int:
    """Two sets of judges on the same items: yes/no agreement and Cohen's kappa overall and per catalog kind."""
    from retrieval.jsonl import read_jsonl
    from training.refresh_lists import agreement

    kind = {str(r["id"]): r["catalog"] for _, r in read_jsonl(a.items)}
    first, second = read_answers(a.first), read_answers(a.second)
    table = {}
    for name in ["all", *sorted({kind[i] for i in second if i in kind})]:
        pick = (lambda i: True) if name == "all" else (lambda i, n=name: kind.get(i) == n)
        try:
            table[name] = agreement([r for i, r in first.items() if pick(i)], [r for i, r in second.items() if pick(i)])
        except ValueError as exc:
            print(f"error: {name}: {exc}", file=sys.stderr)
            return 2
    write_result(a.out, {"environment": environment_stamp(), "first": [str(x) for x in a.first],
                         "second": [str(x) for x in a.second], "agreement": table}, indent=1)
    print("| kind | requests | pairs | yes (first / second) | same yes/no | kappa | mean abs diff |\n|---|---:|---:|---|---:|---:|---:|")
    for name, g in table.items():
        print(f"| {name} | {g['requests']} | {g['pairs']} | {g['yes_first']:.1%} / {g['yes_second']:.1%} | "
              f"{g['same_yes_no']:.1%} | {g['kappa']:.2f} | {g['mean_abs_diff']:.3f} |")
    print(stamp_line(environment_stamp()))
    return 0


def write_judge_batches(rows: list[dict], text: dict[str, str], out: Path, n_batches: int, seed: int, *,
                        asked: set[str] | None = None, seen: dict[str, set] | None = None,
                        later: str = "") -> list[dict]:
    """The judge's items for flow rows, and its batches: each request (``asked``: these only) with the first five
    tools of every row of it, minus the tools ``seen`` already judged for it (a request judged before keeps
    its id with ``later`` appended), shuffled with a seed per request; ``out/judge_items.jsonl`` as the rows
    name tools (digests where a corpus has no licence, so the answers line up) and ``out/judge_batch_NN.txt``."""
    from retrieval.evaluation.judged import base_id
    from retrieval.jsonl import write_jsonl
    from training.refresh_lists import batch_text, seed_of

    seen = seen or {}
    catalogs, cands = _Catalogs(), {}
    for r in rows:
        pid = base_id(r["id"])
        if asked is not None and pid not in asked:
            continue
        got = cands.setdefault(pid, (r["catalog"], {}))[1]
        for t in r.get("tools1", [])[:5]:
            real = catalogs.real(r["catalog"], t)
            if real is not None and tuple(t) not in seen.get(pid, set()):
                got[tuple(real)] = None
    items = []
    for pid in sorted(cands):
        kind, got = cands[pid]
        order = list(got)
        random.Random(seed_of(f"{seed}:{pid}")).shuffle(order)
        items.append({"id": pid + (later if pid in seen else ""), "catalog": kind, "query": text[pid],
                      "candidates": [{"server": a, "tool": b} for a, b in order]})
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "judge_items.jsonl", shippable_items(items))
    batches = list(items)
    random.Random(seed).shuffle(batches)
    for b in range(n_batches):
        part = batches[b::n_batches]
        (out / f"judge_batch_{b + 1:02d}.txt").write_text(
            "\n".join(batch_text([o], catalogs.catalog(o["catalog"])) for o in part), encoding="utf-8")
    return items


def shippable_items(items: list[dict]) -> list[dict]:
    """Items as the repository may hold them: a corpus without a licence keeps ids and candidate digests only
    (the digests the agent-flow rows hold, so the judge's answers still line up)."""
    from retrieval.evaluation.corpora import shippable, shippable_tool

    out = []
    for it in items:
        if shippable(it["catalog"]):
            out.append(it)
            continue
        cands = [dict(zip(("server", "tool"), shippable_tool(it["catalog"], (c["server"], c["tool"]))))
                 for c in it["candidates"]]
        out.append({**it, "query": None, "candidates": cands})
    return out


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
        if spec.use in ("dev", "train"):   # the report set's corpora and the fit set's
            for q in load_corpus(name).questions:
                out[q.id] = q.query
    missing = ids - set(out)
    if missing:
        raise SystemExit(f"error: no request text for {len(missing)} ids (e.g. {sorted(missing)[:3]})")
    return {i: out[i] for i in ids}


def judged_report(rows: list[dict], judged: dict[str, dict[tuple[str, str], float]],
                  labels: dict[str, list[tuple[str, str]]], *, seed: int = 0) -> dict:
    """Per catalog kind and mode: the no-fit requests' proceeds read by the judge, and the best probability's
    ECE against the first tool fitting (labelled or judged), each ECE with a calibrated model's floor."""
    import numpy as np

    from retrieval.evaluation.agent_flow import MODES
    from retrieval.evaluation.corpora import shippable_tool
    from retrieval.evaluation.stats import ece, ece_floor

    def fits(case_id: str, tool) -> bool | None:
        return _fits(judged, case_id, tool)

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
                            "label_judged_fit": float(np.mean([max((judged[_base(r["id"])].get(
                                tuple(shippable_tool(kind, t)), 0.0) for t in labels.get(_base(r["id"]), [])),
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
    answers = read_answers(a.judged)
    judged = judged_probabilities(items, answers)
    flow = json.loads(a.flow.read_text())
    rep = judged_report(flow["rows"], judged, _labels())
    out = {"environment": environment_stamp(), "flow": str(a.flow.relative_to(ROOT) if a.flow.is_relative_to(ROOT) else a.flow),
           "flow_commit": flow.get("commit"), "policy": flow.get("policy"), "items": len(items), "judged": len(judged),
           "report": rep}
    if a.second:
        out["second_judge"] = agreement(list(answers.values()), list(read_answers(a.second).values()))
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
    m.add_argument("--misses-only", action="store_true",
                   help="only answerable first searches whose first tool is not labelled (their first three tools "
                        "and the labels): what a calibration against labelled-or-judged fits needs judged")
    r = sub.add_parser("report", help="an agent-flow run read against the judge's answers")
    r.add_argument("--flow", type=Path, required=True)
    r.add_argument("--items", type=Path, required=True)
    r.add_argument("--judged", type=Path, nargs="+", required=True)
    r.add_argument("--second", type=Path, nargs="*")
    r.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "judged_flow.json")
    t = sub.add_parser("mine-tail", help="the judge's batches of the candidates past the scored head")
    t.add_argument("--flow", type=Path, required=True)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--batches", type=Path)
    t.add_argument("--n-batches", type=int, default=8)
    t.add_argument("--mode", default="need")
    t.add_argument("--labelled-past", type=int, metavar="RANK",
                   help="instead: the labelled tools past this rank (rows of 0.14.0 on: tail_labelled)")
    rl = sub.add_parser("report-labelled-tail", help="the labelled tools past a rank read against the judge")
    rl.add_argument("--flow", type=Path, required=True)
    rl.add_argument("--items", type=Path, required=True)
    rl.add_argument("--judged", type=Path, nargs="+", required=True)
    rl.add_argument("--labelled-past", type=int, default=20)
    rl.add_argument("--mode", default="need")
    rl.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "judged_labelled_tail.json")
    ag = sub.add_parser("agree", help="two sets of judges on the same items: agreement and kappa per kind")
    ag.add_argument("--items", type=Path, required=True)
    ag.add_argument("--first", type=Path, nargs="+", required=True)
    ag.add_argument("--second", type=Path, nargs="+", required=True)
    ag.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "judge_agreement.json")
    rt = sub.add_parser("report-tail", help="ranks 11-20 read against the judge's answers")
    rt.add_argument("--flow", type=Path, required=True)
    rt.add_argument("--items", type=Path, required=True)
    rt.add_argument("--judged", type=Path, nargs="+", required=True)
    rt.add_argument("--mode", default="need")
    rt.add_argument("--tail", type=Path, help="re-read the rows' tail probabilities with this tail calibration")
    rt.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "judged_tail.json")
    a = p.parse_args(argv)
    return {"mine": mine, "report": report, "mine-tail": mine_tail, "report-tail": report_tail,
            "report-labelled-tail": report_labelled_tail, "agree": agree}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
