"""Where to cut a request longer than its token budget: head + tail, the end, the start, or the pair
tokeniser's ``longest_first`` (0.2.0: the end of the request went first). Prints a table.

    python benchmarks/request_cut.py --model models/toolrank-reranker --k 30

Dev questions (``training/data/questions.jsonl``, split dev) whose query side exceeds the model's
request budget are the only ones a cut changes; each is scored over the hybrid's first K (examples
indexed) with the same exported model, served four ways through copies of its config. Reports the
logit-alone rank 1 and MRR of the labelled tool on those questions.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, stamp_line, write_result  # noqa: E402

from retrieval.evaluation.harness import load_queries  # noqa: E402
from retrieval.index.default import load_or_build_default  # noqa: E402
from scorer import Scorer  # noqa: E402
from scorer.record import RequestFitter  # noqa: E402

VARIANTS = {  # name: (request_cut, request_tokens or None = the model's, truncation)
    "head + tail (shipped)": ("head_tail", None, "only_second"),
    "keep the end": ("end", None, "only_second"),
    "keep the start": ("start", None, "only_second"),
    "no request budget, longest_first (0.2.0)": ("head_tail", 0, "longest_first"),
}


def variant(model: Path, tmp: Path, name: str, cut: str, tokens: int | None, truncation: str) -> Path:
    config = json.loads((model / "config.json").read_text())
    out = tmp / str(abs(hash(name)))
    out.mkdir()
    for f in model.iterdir():
        if f.is_file() and f.name != "config.json":
            (out / f.name).symlink_to(f.resolve())
    config["record"]["request_cut"] = cut
    if tokens is not None:
        config["record"]["request_tokens"] = tokens
    config["truncation"] = truncation
    (out / "config.json").write_text(json.dumps(config))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--k", type=int, default=30)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    base = Scorer.load(a.model, threads=a.threads)
    budget = base.config.request_tokens
    if not budget:
        p.error(f"{a.model} has no request budget (record.request_tokens) to compare cuts against")
    fitter = RequestFitter(base.encoder.tokenizer, budget)
    queries = load_queries(ROOT / "training" / "data" / "questions.jsonl", split="dev")
    long = [q for q in queries if fitter.fit(q.query, None)[0] != " ".join(q.query.split())]
    index = load_or_build_default(with_examples=True)
    lists = [(q, [h.tool_id for h in index.retrieve(q.query, None, None, k=a.k)]) for q in long]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (cut, tokens, truncation) in VARIANTS.items():
            scorer = Scorer.load(variant(a.model, Path(tmp), name, cut, tokens, truncation), threads=a.threads)
            rr = []
            for q, ids in lists:
                if q.target not in ids:
                    rr.append(0.0)
                    continue
                z = scorer.logits(q.query, None, [index.catalog[t] for t in ids])
                rr.append(1.0 / (1 + int((z > z[ids.index(q.target)]).sum())))
            rows.append({"variant": name, "questions": len(rr), "top1": float(np.mean([r == 1.0 for r in rr])),
                         "mrr": float(np.mean(rr))})
    print(f"{len(long)} of {len(queries)} dev questions exceed the {budget}-token request budget; "
          f"logit alone over the hybrid's first {a.k} (examples indexed)\n")
    print("| cut | questions | rank 1 % | MRR |\n|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['variant']} | {r['questions']} | {100 * r['top1']:.1f} | {r['mrr']:.3f} |")
    print("\n" + stamp_line())
    if a.json:
        write_result(a.json, {"budget": budget, "k": a.k, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
