"""Cross-encoder students side by side on dev questions that chose no checkpoint.

A distillation run picks its checkpoint on the first ``--skip`` questions of each dev pool (80 by
default, ``training.distill --dev-questions``, shuffled with the same seed); this script ranks the
*other* dev questions with each student's logit alone over the hybrid's first ``--depth`` candidates
(the pools of ``training.pools``), with and without example requests in the record, and with the
agents' blind needs where ``training.pools --needs`` wrote those pools; and tests the first two
students against each other (exact McNemar on rank 1, paired).

    python benchmarks/student_dev.py models/toolrank-reranker/weights runs/ce-dense2/best \
        [--pools runs/pools] [--depth 20] [--skip 80] [--json benchmarks/results/student_dev.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import environment_stamp, stamp_line, write_result  # noqa: E402


def ranks(folder: Path, dev, depth: int, tools, threads: int) -> list[int]:
    """The right tool's rank (1-based; 0 when retrieval missed it) for every dev question."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    import training.modeling  # noqa: F401  (the mean-pooling model class)
    from training.distill import Records, build_parser, dev_ranks

    torch.set_num_threads(threads)
    # the record the student was trained on; a setting its train_args.json predates takes distill's default
    trained, defaults = json.loads((folder / "train_args.json").read_text()), build_parser()
    args = SimpleNamespace(**{k: trained.get(k, defaults.get_default(k)) for k in (
        "max_length", "request_tokens", "request_cut", "max_description_chars", "parameters",
        "server_description_chars", "examples")})
    model = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=1, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(folder)
    records = Records(tok.backend_tokenizer.to_str(), args)
    return dev_ranks(model, tok, records, tools, dev, args.max_length, depth)


def summary(r: list[int]) -> dict[str, float]:
    n = len(r)
    return {"n": n, "top1": sum(x == 1 for x in r) / n, "top5": sum(1 <= x <= 5 for x in r) / n,
            "mrr": sum(1 / x for x in r if x) / n}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("students", nargs="+", type=Path, help="cross-encoder folders (torch weights + train_args.json)")
    p.add_argument("--pools", type=Path, default=Path("runs/pools"))
    p.add_argument("--smithery", type=Path, default=Path("../shared/data/smithery/servers"))
    p.add_argument("--depth", type=int, default=20)
    p.add_argument("--skip", type=int, default=80, help="dev questions the runs chose checkpoints on")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    for s in a.students:
        if not (s / "train_args.json").is_file():
            p.error(f"{s}: not a student folder (no train_args.json)")
    from scipy.stats import binomtest

    from training.distill import Tools, load_dev

    tools = Tools(a.smithery)
    result: dict = {"environment": environment_stamp(), "depth": a.depth, "skip": a.skip, "students": [str(s) for s in a.students], "sets": {}}
    print(f"logit alone over the hybrid's first {a.depth}; dev questions after the first {a.skip} of each pool")
    print(f"{'set':<13} {'student':<40} {'n':>4} {'rank 1':>7} {'top 5':>6} {'MRR':>6}")
    # the *_need pools (training.pools --needs): day one, the agent's blind need in the record
    sets = [("dev_ex", True, False), ("dev_noex", False, False), ("dev_noex_need", False, True),
            ("dev_ex_need", True, True)]
    for tag, with_ex, with_need in sets:
        if not (a.pools / f"{tag}.jsonl").exists():
            continue
        dev = load_dev(a.pools / f"{tag}.jsonl", 0, 7, with_ex, with_need)   # the seed distill shuffles with
        dev.rows = dev.rows[a.skip:]
        per = {str(s): ranks(s, dev, a.depth, tools, a.threads) for s in a.students}
        entry = {name: summary(r) for name, r in per.items()}
        for name, m in entry.items():
            print(f"{tag:<13} {name:<40} {m['n']:>4} {100 * m['top1']:>7.1f} {100 * m['top5']:>6.1f} {m['mrr']:>6.3f}")
        if len(a.students) >= 2:
            first, second = (per[str(s)] for s in a.students[:2])
            wins = sum(y == 1 and x != 1 for x, y in zip(first, second))
            losses = sum(x == 1 and y != 1 for x, y in zip(first, second))
            pval = binomtest(wins, wins + losses).pvalue if wins + losses else 1.0
            entry["paired_top1"] = {"second_wins": wins, "second_losses": losses, "p": pval}
            print(f"{'':<9} second vs first at rank 1: +{wins} / -{losses} (exact McNemar p {pval:.3f})")
        result["sets"][tag] = entry
    if a.json:
        write_result(a.json, result)
    print("\n" + stamp_line(result["environment"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
