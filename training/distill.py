"""Distil the LLM judge into the cross-encoder, list by list.

Each teacher list is one request with the candidates the pipeline really put in front of the
scorer and the judge's P(yes) for each (training/data/teacher/, see its card). The loss reads
the whole list at once:

* pointwise binary cross-entropy to the teacher's P(yes) for every candidate, so the logit
  keeps an absolute meaning: a list where nothing fits (the judge says no to all) must give
  low logits everywhere, not just an order;
* listwise KL divergence from the teacher's distribution over the list (P(yes) normalised)
  to the student's softmax, on lists where something fits: the order among look-alikes is
  what rank 1 needs, and a pointwise loss spends most of its gradient on easy negatives.

    python -m training.distill --teacher training/data/teacher/*.jsonl --out runs/ce-distill \\
        --layers 6 --max-length 64 --parameters 6

Writes ``OUT/final`` (a HF folder with ``train_args.json``), which training/export.py exports.
Lists whose request is on a dev or test server are refused: they are for choosing and reporting.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

log = logging.getLogger("toolrank.distill")


@dataclass(frozen=True)
class TeacherList:
    """One request and the teacher's P(yes) for each of its candidates."""

    id: str
    query: str
    catalog: str                           # "mcp-zero" or "smithery"
    candidates: tuple[tuple[str, str, float], ...]   # (server, tool, p_yes)

    @property
    def has_fit(self) -> bool:
        return max((p for _, _, p in self.candidates), default=0.0) >= 0.5


def read_teacher(paths: Iterable[Path]) -> list[TeacherList]:
    """Teacher lists from JSONL files (``{"id", "query", "catalog", "candidates": [{server, tool, p_yes}]}``)."""
    from retrieval.jsonl import split_lines

    out = []
    for path in paths:
        for n, line in enumerate(split_lines(Path(path).read_text(encoding="utf-8")), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                cands = tuple((c["server"], c["tool"], float(c["p_yes"])) for c in row["candidates"])
                out.append(TeacherList(str(row["id"]), str(row["query"]), str(row.get("catalog", "mcp-zero")), cands))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"{path}:{n}: not a teacher list ({exc})") from None
    return out


def check_train_only(lists: Sequence[TeacherList], split: dict[str, str]) -> None:
    """Refuse any MCP-Zero candidate on a dev or test server: those servers are never trained on."""
    for tl in lists:
        if tl.catalog != "mcp-zero":
            continue
        held = [f"{s} / {t}" for s, t, _ in tl.candidates if split.get(s, "train") != "train"]
        if held:
            raise ValueError(f"teacher list {tl.id} has candidates on dev/test servers ({held[0]}, …): "
                             "remove them; dev and test servers are never trained on")


def list_loss(logits: Any, targets: Any, listwise_weight: float, temperature: float = 1.0) -> Any:
    """BCE to P(yes) over the list, plus KL(teacher || student) over the list where one fits."""
    import torch
    import torch.nn.functional as F

    loss = F.binary_cross_entropy_with_logits(logits, targets)
    total = targets.sum()
    if listwise_weight > 0 and float(targets.max()) >= 0.5 and total > 0:
        teacher = targets / total
        log_student = F.log_softmax(logits / temperature, dim=0)
        kl = torch.sum(teacher * (torch.log(teacher.clamp(min=1e-9)) - log_student))
        loss = loss + listwise_weight * kl
    return loss


class Tools:
    """(server, tool) -> Tool over both catalogs a teacher list may come from."""

    def __init__(self, smithery_dir: Path | None):
        from retrieval.catalog import load_default_catalog

        self.catalogs = {"mcp-zero": load_default_catalog(with_examples=False)}
        if smithery_dir is not None:
            from retrieval.smithery import read_smithery

            self.catalogs["smithery"] = read_smithery(smithery_dir).catalog

    def get(self, catalog: str, server: str, tool: str) -> Any:
        from retrieval.catalog import ToolId

        cat = self.catalogs.get(catalog)
        if cat is None:
            raise ValueError(f"teacher lists from the {catalog!r} catalog need --smithery DIR")
        return cat[ToolId(server, tool)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.distill", description=__doc__.split("\n\n")[0])
    p.add_argument("--teacher", type=Path, nargs="+", required=True, help="teacher list JSONL files")
    p.add_argument("--smithery", type=Path, help="Smithery server folder, for lists over that catalog")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--max-length", type=int, default=64)
    p.add_argument("--max-description-chars", type=int, default=200)
    p.add_argument("--parameters", type=int, default=6, help="input-schema parameter names in the record")
    p.add_argument("--max-candidates", type=int, default=16, help="candidates kept per list (fits first, then the rest)")
    p.add_argument("--lists-per-step", type=int, default=4)
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=4e-5)
    p.add_argument("--listwise-weight", type=float, default=1.0)
    p.add_argument("--max-lists", type=int, default=0, help="cap on lists (0 = all)")
    p.add_argument("--init", type=Path, help="continue from this cross-encoder folder")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--save-every", type=int, default=0, help="also save OUT/step-N every N steps (0 = only final)")
    a = p.parse_args(argv)
    for path in a.teacher:
        if not path.is_file():
            p.error(f"--teacher {path}: no such file")
    if not 1 <= a.layers <= 6:
        p.error(f"--layers must be 1..6, got {a.layers}")
    if a.init and not (a.init / "config.json").exists():
        p.error(f"--init {a.init}: not a model folder (no config.json)")
    from .train import init_model_dir, start_run, trained_data_hash, write_run_record

    t0 = start_run(a)
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from scorer.record import format_record

    from . import modeling  # noqa: F401  (registers the mean-pooling model class)
    from .pairs import load_split
    lists = read_teacher(a.teacher)
    try:
        check_train_only(lists, load_split())
    except ValueError as exc:
        p.error(str(exc))
    rng = random.Random(a.seed)
    rng.shuffle(lists)
    if a.max_lists:
        lists = lists[: a.max_lists]
    tools = Tools(a.smithery)
    init = a.init or init_model_dir(a.layers, a.out / "init")
    model = AutoModelForSequenceClassification.from_pretrained(init, num_labels=1)
    tok = AutoTokenizer.from_pretrained(init)
    fmt = dict(max_description_chars=a.max_description_chars, parameters=a.parameters)

    def records(tl: TeacherList) -> tuple[list[tuple[str, str]], list[float]]:
        # Every fit, then the negatives the judge hesitated on (the look-alikes), then a random rest.
        keep = [c for c in tl.candidates if c[2] >= 0.5]
        rest = [c for c in tl.candidates if c[2] < 0.5]
        rng.shuffle(rest)
        rest.sort(key=lambda c: -c[2])  # stable: equal probabilities stay in random order
        keep = (keep + rest)[: a.max_candidates]
        return ([format_record(tl.query, None, tools.get(tl.catalog, s, t), **fmt) for s, t, _ in keep],
                [c[2] for c in keep])

    steps = max(1, int(math.ceil(len(lists) * a.epochs / a.lists_per_step)))
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    warmup = max(1, steps // 16)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * max(0.0, (steps - s) / max(1, steps - warmup)))
    model.train()
    log.info("%d teacher lists (%d with a fit), %d steps of %d lists", len(lists), sum(t.has_fit for t in lists),
             steps, a.lists_per_step)
    from tqdm import tqdm

    order = [lists[i % len(lists)] for i in range(steps * a.lists_per_step)]
    running = None
    bar = tqdm(range(steps), desc="distil", unit="step", disable=None)
    for step in bar:
        batch = order[step * a.lists_per_step:(step + 1) * a.lists_per_step]
        opt.zero_grad()
        # One forward pass over every candidate of the step's lists, then each list's own loss.
        recs, targets, sizes = [], [], []
        for tl in batch:
            r, t = records(tl)
            recs += r
            targets.append(torch.tensor(t, dtype=torch.float32))
            sizes.append(len(r))
        enc = tok([q for q, _ in recs], [d for _, d in recs], truncation="longest_first",
                  max_length=a.max_length, padding=True, return_tensors="pt")
        logits = model(**enc).logits.view(-1)
        loss = sum(list_loss(z, t, a.listwise_weight) for z, t in zip(torch.split(logits, sizes), targets)) / len(batch)
        loss.backward()
        total = float(loss.detach())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        running = total if running is None else 0.98 * running + 0.02 * total
        bar.set_postfix(loss=f"{running:.4f}")
        if step % 10 == 0:
            log.info("step %d/%d loss %.4f (%.0fs)", step, steps, running, time.time() - t0)
        if a.save_every and step and step % a.save_every == 0:
            model.save_pretrained(a.out / f"step-{step}")
            tok.save_pretrained(a.out / f"step-{step}")
    final = a.out / "final"
    model.save_pretrained(final)
    tok.save_pretrained(final)
    n_pairs = sum(min(len(t.candidates), a.max_candidates) for t in lists)
    write_run_record(final, a, n_pairs, t0, trained_data_hash(*a.teacher))
    return 0


if __name__ == "__main__":
    sys.exit(main())
