"""Learning from use, measured as a learning curve on the test servers (docs/day-one.md).

Starts from the test servers' tools *without* example requests (``training/data/splits.json``),
replays requests as usage (the agent calls the labelled tool, which the search must have
offered among its first ``--offered`` tools, or nothing is learned), and ranks the test
questions (``training/data/questions.jsonl``, split ``test``) with what was learned
(:func:`retrieval.index.learned.retrieve_with_learned`). Rank 1 / top 5 against uses per tool:

* ``other question``: the tools with two test questions; one question is the use, the other is
  ranked (and then the other way round). 0 or 1 use per tool: real, unseen requests.
* ``shipped examples as requests``: the first 1, 2 or 5 shipped example requests of each tool
  with a test question are replayed as its uses; every test question is ranked. (Test questions
  are at most two per tool, so the shipped example requests stand in for more uses.)
* ``noisy``: the same with 10% / 20% of the successful calls credited to a *wrong* tool of those
  offered (the agent called something else that also "worked").
* beside them: the shipped example requests in the index (the day-thirty product).

Ranking is retrieval-only (``hybrid``: BM25 + dense, fused), not the scorer: the scorer is
too slow for this many conditions on a shared CPU, and learned examples act on retrieval.

    python benchmarks/usage_examples.py            # table on stdout, JSON + PNG in benchmarks/results/
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, environment_stamp, stamp_figure, stamp_line, write_result  # noqa: E402

from retrieval.catalog.formats import load_default_catalog  # noqa: E402
from retrieval.catalog.model import Catalog, ToolId  # noqa: E402
from retrieval.index.embedded import ToolIndex  # noqa: E402
from retrieval.index.learned import LearnedExamples, retrieve_with_learned  # noqa: E402
from retrieval.jsonl import read_jsonl  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
USES = (0, 1, 2, 5)


class CachingEncoder:
    """The index's encoder with a memory: each text is embedded once per run."""

    def __init__(self, inner: Any):
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self._cache: dict[str, Any] = {}

    def encode(self, texts: Sequence[str], **kwargs: Any):
        import numpy as np
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            for t, v in zip(missing, self.inner.encode(missing, **kwargs)):
                self._cache[t] = v
        return np.stack([self._cache[t] for t in texts]) if texts else self.inner.encode([])


def test_catalog(split: str = "test") -> tuple[Catalog, list[dict]]:
    splits = json.loads((ROOT / "training" / "data" / "splits.json").read_text())["servers"]
    full = load_default_catalog(with_examples=True)
    cat = Catalog([t for t in full if splits.get(t.server) == split], full.server_descriptions)
    questions = [row for _, row in read_jsonl(ROOT / "training" / "data" / "questions.jsonl") if row["split"] == split]
    questions = [q for q in questions if ToolId(q["server"], q["tool"]) in cat]
    return cat, questions


def ranks(index: ToolIndex, questions: Sequence[dict], learned: LearnedExamples | None) -> list[int | None]:
    out = []
    for q in questions:
        hits = retrieve_with_learned(index, learned, q["query"], None, None, k=5)
        target = ToolId(q["server"], q["tool"])
        out.append(next((h.rank for h in hits if h.tool_id == target), None))
    return out


def figures(r: Sequence[int | None]) -> dict[str, float]:
    n = len(r)
    return {"rank1": 100.0 * sum(x == 1 for x in r) / n, "top5": 100.0 * sum(x is not None for x in r) / n, "n": n}


class Usage:
    """Replays uses: a request is learned for the labelled tool when the search offered it; with
    probability ``noise`` the call is credited to a wrong offered tool instead."""

    def __init__(self, index: ToolIndex, offered: int, noise: float, seed: int):
        self.index, self.offered, self.noise = index, offered, noise
        self.rng = random.Random(seed)
        self.stats = defaultdict(int)
        self._offers: dict[str, list[ToolId]] = {}

    def offers(self, request: str) -> list[ToolId]:
        if request not in self._offers:   # offered by the day-one index (no learning yet)
            self._offers[request] = [h.tool_id for h in self.index.retrieve(request, k=self.offered)]
        return self._offers[request]

    def learn(self, uses: Sequence[tuple[str, ToolId]]) -> LearnedExamples:
        learned = LearnedExamples()
        for t, (request, label) in enumerate(uses):
            offered = self.offers(request)
            wrong = [o for o in offered if o != label]
            if self.noise and wrong and self.rng.random() < self.noise:
                learned = learned.add(wrong[self.rng.randrange(len(wrong))], request, at=t)
                self.stats["wrong"] += 1
            elif label in offered:
                learned = learned.add(label, request, at=t)
                self.stats["learned"] += 1
            else:
                self.stats["not_offered"] += 1
        return learned


def run(args: argparse.Namespace) -> dict[str, Any]:
    from retrieval.index.encoder import OnnxEncoder

    import dataclasses

    from retrieval.index.fusion import FusionConfig

    t0 = time.time()
    cat, questions = test_catalog(args.split)
    encoder = CachingEncoder(OnnxEncoder())
    # the day-one index fuses as the product's would (0.12.0: FusionConfig.day_one() for a catalog without
    # example requests; --fusion examples: the with-examples weights every run before 0.12.0 used)
    base = FusionConfig.for_catalog(cat.without_examples().tools, True) if args.fusion == "product" else FusionConfig()
    fusion = dataclasses.replace(base, **({} if args.w_learned is None else {"w_learned_bm25": args.w_learned}),
                                 **({} if args.learned_lexical is None else {"learned_lexical": args.learned_lexical}))
    day_one = ToolIndex.build(cat.without_examples(), encoder=encoder, show_progress=True, fusion=fusion)
    shipped = ToolIndex.build(cat, encoder=encoder, show_progress=True)
    print(f"{args.split} servers: {len(cat.servers)}, tools: {len(cat)}, questions: {len(questions)} "
          f"(indexes built in {time.time() - t0:.0f} s)", file=sys.stderr)
    rows: list[dict[str, Any]] = []

    def add(series: str, uses: int, noise: float, r: list, stats: dict | None = None) -> None:
        rows.append({"series": series, "uses": uses, "noise": noise, **figures(r), **(stats or {})})
        print(f"  {series:32s} uses={uses} noise={noise:.0%}: {rows[-1]['rank1']:.1f} / {rows[-1]['top5']:.1f}",
              file=sys.stderr)

    # 1. real usage: the other test question of the same tool
    by_tool: dict[ToolId, list[dict]] = defaultdict(list)
    for q in questions:
        by_tool[ToolId(q["server"], q["tool"])].append(q)
    pairs = [qs[:2] for qs in by_tool.values() if len(qs) >= 2]
    paired = [q for p in pairs for q in p]
    add("other question", 0, 0.0, ranks(day_one, paired, None))
    for noise in ([] if args.quick else args.noise):
        r: list = []
        usage = Usage(day_one, args.offered, noise, args.seed)
        for fold in (0, 1):
            learned = usage.learn([(p[fold]["query"], ToolId(p[fold]["server"], p[fold]["tool"])) for p in pairs])
            r += ranks(day_one, [p[1 - fold] for p in pairs], learned)
        add("other question", 1, noise, r, dict(usage.stats))
    if not args.quick:
        add("shipped examples in the index", 0, 0.0, ranks(shipped, paired, None))

    # 2. shipped example requests replayed as uses, every test question ranked
    used = list(dict.fromkeys(ToolId(q["server"], q["tool"]) for q in questions))
    for noise in ([0.0] if args.quick else args.noise):
        for u in ((0, 5) if args.quick else USES):
            if u == 0:
                if noise == 0:
                    add("shipped examples as requests", 0, 0.0, ranks(day_one, questions, None))
                continue
            usage = Usage(day_one, args.offered, noise, args.seed)
            # uses interleaved across tools, the way calls arrive
            stream = [(cat[tid].examples[i], tid) for i in range(u) for tid in used if i < len(cat[tid].examples)]
            add("shipped examples as requests", u, noise, ranks(day_one, questions, usage.learn(stream)),
                dict(usage.stats))
    add("shipped examples in the index", 0, 0.0, ranks(shipped, questions, None))
    return {"environment": environment_stamp(), "ranking": "retrieval only (hybrid: BM25 + dense, fused; no scorer)", "split": args.split,
            "fusion": args.fusion, "w_learned_bm25": fusion.w_learned_bm25, "learned_lexical": fusion.learned_lexical, "quick": args.quick, "offered": args.offered, "seed": args.seed, "servers": len(cat.servers), "tools": len(cat),
            "questions": len(questions), "paired_questions": len(paired), "seconds": round(time.time() - t0),
            "rows": rows}


def table(report: dict[str, Any]) -> str:
    lines = [f"Ranking: {report['ranking']}; a use is learned only when the tool was among the first "
             f"{report['offered']} offered.", "",
             "| usage replayed | uses per tool | wrong credits | questions | rank 1 | top 5 |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in report["rows"]:
        uses = "—" if r["series"].endswith("in the index") else str(r["uses"])
        lines.append(f"| {r['series']} | {uses} | {r['noise']:.0%} | {r['n']} | {r['rank1']:.1f} | {r['top5']:.1f} |")
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharex=True)
    rows = report["rows"]
    shipped = next(r for r in reversed(rows) if r["series"] == "shipped examples in the index")
    for ax, metric, title in ((axes[0], "rank1", "rank 1 (%)"), (axes[1], "top5", "top 5 (%)")):
        for noise in sorted({r["noise"] for r in rows}):
            pts = [r for r in rows if r["series"] == "shipped examples as requests" and
                   (r["noise"] == noise or r["uses"] == 0)]
            pts.sort(key=lambda r: r["uses"])
            ax.plot([r["uses"] for r in pts], [r[metric] for r in pts], marker="o",
                    label=f"shipped examples as requests, {noise:.0%} wrong")
        other = [r for r in rows if r["series"] == "other question" and r["noise"] == 0]
        ax.plot([r["uses"] for r in other], [r[metric] for r in other], marker="s", linestyle="--",
                label=f"other test question (n={other[0]['n']})")
        ax.axhline(shipped[metric], color="grey", linestyle=":", label="shipped examples in the index")
        ax.set_xlabel("observed uses per tool")
        ax.set_title(title)
        ax.set_xticks(list(USES))
    axes[0].legend(fontsize=7, loc="lower right")
    fig.suptitle("Learning from use on the test servers (retrieval-only ranking)")
    fig.tight_layout()
    stamp_figure(fig, report.get("environment"))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--offered", type=int, default=10, help="tools a search offers (default 10, the policy's max)")
    p.add_argument("--noise", type=float, nargs="+", default=[0.0, 0.1, 0.2],
                   help="shares of calls credited to a wrong offered tool (default 0 0.1 0.2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--split", choices=("dev", "test"), default="test",
                   help="servers and questions (choose settings on dev, report on test)")
    p.add_argument("--w-learned", type=float, help="weight of the learned requests' lexical list (default: FusionConfig's)")
    p.add_argument("--learned-lexical", choices=("document", "list", "both"),
                   help="where learned requests count lexically (default: FusionConfig's): in their tool's BM25 "
                        "document, as a list of their own (0.9.0), or both")
    p.add_argument("--fusion", choices=("product", "examples"), default="product",
                   help="the day-one index's fusion weights: the product's for a catalog without examples "
                        "(default), or the with-examples weights (before 0.12.0)")
    p.add_argument("--quick", action="store_true", help="only 0 and 5 clean uses of shipped examples, and the index")
    p.add_argument("--out", type=Path, default=RESULTS / "usage_examples.json")
    a = p.parse_args(argv)
    if not all(0.0 <= n < 1.0 for n in a.noise) or 0.0 not in a.noise:
        p.error("--noise: shares in [0, 1), including 0 (the clean curve)")
    report = run(a)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    write_result(a.out, report)
    png = plot(report, a.out.with_suffix(".png")) if not a.quick else a.out
    print(table(report))
    print(stamp_line(report["environment"]))
    print(f"\nsaved {a.out} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
