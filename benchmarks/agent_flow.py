"""The agent-flow benchmark (issue 34): the documented flow end to end on catalogs shaped like users'.

    python benchmarks/agent_flow.py --set report [--n 150] [--modes need,late_need,request_only]
    python benchmarks/agent_flow.py --set fit --always-second --out benchmarks/results/agent_flow_fit.json

The catalogs and their cases (MCP-Zero organisations and one catalog per public corpus, day one, each
answerable request with its no-fit twin and the needs an agent wrote blind) are
``training/flow_cases.py``'s.

``--set report``: MCP-Zero test and the held-out corpora (never fitted on). ``--set fit``: MCP-Zero
dev and the training corpora (what training/thresholds.py chooses the decision zones on).
Prints one Markdown table; writes every row and the summary as JSON.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from pathlib import Path

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, environment_stamp, stamp_figure, stamp_line, write_result  # noqa: E402

from retrieval.evaluation.agent_flow import MODES, flow_report, format_flow, run_flow, shippable_rows  # noqa: E402
from training.flow_cases import NEEDS, SETS, corpus_cases, load_needs, mcpzero_cases  # noqa: E402

def plot_reliability(rows: list[dict], path: Path, mode: str = "need") -> Path | None:
    """One reliability diagram per catalog kind: the first answer's best probability (10 bins) against how
    often its first tool was right, answerable requests of ``mode``."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    import numpy as np

    kinds = sorted({r["catalog"] for r in rows})
    ncols = min(4, len(kinds))
    nrows = -(-len(kinds) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.2 * ncols, 3.2 * nrows), squeeze=False)
    for ax in axes.flat[len(kinds):]:
        ax.axis("off")
    for ax, kind in zip(axes.flat, kinds):
        rs = [r for r in rows if r["catalog"] == kind and r["mode"] == mode and r["answerable"]]
        p = np.array([r["best1"] for r in rs])
        y = np.array([r["right1"] for r in rs], dtype=float)
        bins = np.minimum((p * 10).astype(int), 9)
        xs = [p[bins == b].mean() for b in range(10) if (bins == b).sum() >= 3]
        ys = [y[bins == b].mean() for b in range(10) if (bins == b).sum() >= 3]
        ns = [(bins == b).sum() for b in range(10) if (bins == b).sum() >= 3]
        ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--")
        ax.scatter(xs, ys, s=[8 + 2 * n for n in ns])
        ax.plot(xs, ys)
        ax.set_title(f"{kind} (n={len(rs)})", fontsize=9)
        ax.set_xlabel("best probability")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
    for row in axes:
        row[0].set_ylabel("share whose first tool is right")
    fig.suptitle(f"reliability of the first answer's best probability, day one, mode '{mode}'", fontsize=10)
    fig.tight_layout()
    stamp_figure(fig)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def flow_rows(split: str, corpora: list[str], needs: dict, n: int, modes: list[str], scorer, policy, rng: random.Random,
              *, mcpzero: bool = True, answerable_only: bool = False, **run: bool) -> list[dict]:
    """The flow's rows over the set's catalogs (MCP-Zero organisations of ``split``, then each corpus), their
    cases drawn from ``rng`` in that order (the same seed gives the same cases); ``run``: ``run_flow``'s options."""
    from retrieval.index.default import load_or_build_default
    from retrieval.index.embedded import ToolIndex
    from retrieval.index.encoder import OnnxEncoder
    from retrieval.pipeline.flow import Pipeline

    def kept(cases):
        return [c for c in cases if c.answerable] if answerable_only else cases

    rows: list[dict] = []
    if mcpzero:
        index = load_or_build_default(with_examples=False, show_progress=True)
        cases = kept(mcpzero_cases(split, needs, n, rng, index))
        rows += run_flow(Pipeline(index, scorer, policy=policy), cases, modes, show_progress=True, desc="mcpzero-org",
                         **run)
    encoder = None
    for name in corpora:
        cases, catalog = corpus_cases(name, needs, n, rng)
        if not cases:
            print(f"[{name}: no requests with blind needs; skipped]")
            continue
        encoder = encoder or OnnxEncoder()
        pipe = Pipeline(ToolIndex(catalog, encoder, with_examples=False), scorer, policy=policy)
        rows += run_flow(pipe, kept(cases), modes, show_progress=True, desc=name, **run)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--set", choices=sorted(SETS), default="report")
    p.add_argument("--n", type=int, default=150, help="answerable requests per catalog kind (each with its no-fit twin)")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--model", type=Path, default=ROOT / "models" / "toolrank-reranker")
    p.add_argument("--corpora", help="comma-separated corpora (default: the set's)")
    p.add_argument("--no-mcpzero", action="store_true")
    p.add_argument("--always-second", action="store_true", help="run attempt 2 after a proceed too (for fitting)")
    p.add_argument("--proceed-threshold", type=float)
    p.add_argument("--no-fit-below", type=float)
    p.add_argument("--out", type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2, help="CPU threads of the scorer (default 2)")
    p.add_argument("--plot-only", type=Path, help="redraw the reliability diagrams of an earlier run's JSON")
    a = p.parse_args(argv)
    if a.plot_only:
        rows = json.loads(a.plot_only.read_text())["rows"]
        for mode in sorted({r["mode"] for r in rows}):
            print(plot_reliability(rows, a.plot_only.with_name(f"{a.plot_only.stem}_reliability_{mode}.png"), mode))
        return 0
    logging.basicConfig(level=logging.WARNING)
    from benchmarks.ablation import CachedScorer
    from retrieval.pipeline.decision import Policy
    from retrieval.version import package_version
    from scorer import Scorer

    needs = load_needs()
    if not needs:
        print(f"error: no blind needs at {NEEDS}", file=sys.stderr)
        return 2
    split, corpora = SETS[a.set]
    corpora = a.corpora.split(",") if a.corpora else corpora
    modes = a.modes.split(",")
    policy = Policy().with_overrides(proceed_threshold=a.proceed_threshold, no_fit_below=a.no_fit_below)
    scorer = CachedScorer(Scorer.load(a.model, threads=a.threads))
    t0 = time.time()
    rows = flow_rows(split, corpora, needs, a.n, modes, scorer, policy, random.Random(a.seed),
                     mcpzero=not a.no_mcpzero, always_second=a.always_second)
    rep = flow_report(rows)
    stamp = {"set": a.set, "policy": {"proceed_threshold": policy.proceed_threshold, "no_fit_below": policy.no_fit_below,
                                      "score_top": policy.score_top},
             "package": package_version(), "seconds": round(time.time() - t0, 1), "n": a.n}
    environment = environment_stamp()
    stamp["commit"] = environment["commit"]
    print(f"agent flow, {a.set} set, {stamp}\n")
    print(format_flow(rep))
    print(stamp_line(environment))
    out = a.out or ROOT / "benchmarks" / "results" / f"agent_flow_{a.set}.json"
    write_result(out, {**stamp, "environment": environment, "report": rep, "rows": shippable_rows(rows)}, indent=0)
    for mode in modes:
        png = plot_reliability(rows, out.with_name(f"{out.stem}_reliability_{mode}.png"), mode)
        if png:
            print(f"reliability diagram: {png.relative_to(ROOT) if png.is_relative_to(ROOT) else png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
