"""Distil the LLM judge into the cross-encoder, list by list, resumably, choosing on dev.

Each teacher list is one request with the candidates the pipeline put in front of the judge and
its P(yes) for each (training/data/teacher/, see its card). The run is sentence-transformers'
``CrossEncoderTrainer`` over rows ``(request, [tool records], [P(yes)])``, one per list, a step
reading ``--lists-per-step`` whole lists:

* the loss is :class:`training.list_loss.ListLoss`: pointwise binary cross-entropy to the teacher's
  P(yes) for every candidate (the logit keeps an absolute meaning: a list where nothing fits must
  give low logits everywhere), plus KL divergence from the teacher's distribution over the list to
  the student's softmax on lists where something fits (``--listwise-weight``): the order among
  look-alikes is what rank 1 needs;
* a few **deep negatives** per list (``--deep-negatives``) drawn from the hybrid's ranks 21–100
  (``training.pools``), labelled 0: at query time the student scores all 100, not just the
  look-alikes the judge saw.

The request gets a token budget of its own (``--request-tokens``, cut by
:class:`scorer.record.RequestFitter`, the same class the runtime scorer uses), and the pair is
then truncated on the tool side only. With ``--examples-rate`` a share of the MCP-Zero lists
carries each tool's example requests in the record (catalogs with examples), the rest none
(day one), so one student serves both.

A trainer callback (:class:`training.budget.BudgetCallback`) counts the training minutes: every ``--eval-minutes``
of them, at the last step and when ``--minutes`` are spent, it measures dev MRR of the logit alone
over the hybrid's ``--dev-depth`` candidates for a fixed sample of dev questions (``--pools``: with
and without examples, and with the blind need), appends it to ``OUT/curve.jsonl``, keeps the best
checkpoint in ``OUT/best`` (safetensors, full precision) and has the trainer save a resumable
checkpoint in ``OUT/state`` (``--resume`` continues from it); ``OUT/last`` is the model at the end,
with the run's totals. The learning rate warms up, then follows a cosine that ends with the steps
or with ``--minutes``, whichever comes first. A second stage (``--init FIRST/best --start-step N``) continues the same list order
where the first stopped, with a warm-up and cosine of its own; its curve also counts the pairs and
minutes of the stages before it (``total_pairs``, ``total_train_minutes``).

    python -m training.distill --teacher training/data/teacher/lists_*.jsonl \\
        --smithery ../shared/data/smithery/servers --pools runs/pools --out runs/ce-long --minutes 120

**The agent's need** (``--needs``, the blind needs of ``training/needs.py``): a ``--need-rate`` share of
the lists that have one carry it in the record (the request keeps its budget share, see
:class:`scorer.record.RequestFitter`), the rest none, so one student serves callers with and without
a need; ``dev_noex_need`` (``training.pools --needs``) measures it while training.

**Other writers' requests** (``--corpora``): lists from the public training corpora
(``retrieval.evaluation.corpora``, ``train`` use only), each request with its labelled tools at 1 and
the corpus's closest unlabelled BM25 look-alikes at 0 (:func:`corpus_lists`), over the corpus's own
catalog; never a held-out corpus.

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

from .run_record import start_run, trained_data_hash

log = logging.getLogger("toolrank.distill")


@dataclass(frozen=True)
class TeacherList:
    """One request and the teacher's P(yes) for each of its candidates."""

    id: str
    query: str
    catalog: str                           # "mcp-zero" or "smithery"
    candidates: tuple[tuple[str, str, float], ...]   # (server, tool, p_yes)
    day_one: bool = False                  # never trained with example requests in the record

    @property
    def has_fit(self) -> bool:
        return max((p for _, _, p in self.candidates), default=0.0) >= 0.5


def read_teacher(paths: Iterable[Path]) -> list[TeacherList]:
    """Teacher lists from JSONL files (``{"id", "query", "catalog", "candidates": [{server, tool, p_yes}]}``).

    A list with ``"day_one": true`` (``training.question_lists``: its request is one of a tool's own
    example requests) is always trained without example requests in the record.
    """
    from retrieval.jsonl import split_lines

    out = []
    for path in paths:
        for n, line in enumerate(split_lines(Path(path).read_text(encoding="utf-8")), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                cands = tuple((c["server"], c["tool"], float(c["p_yes"])) for c in row["candidates"])
                out.append(TeacherList(str(row["id"]), str(row["query"]), str(row.get("catalog", "mcp-zero")), cands,
                                       bool(row.get("day_one", False))))
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


def trains_with_examples(tl: TeacherList, draw: float, rate: float) -> bool:
    """Whether this step's record for ``tl`` carries example requests: MCP-Zero lists only (Smithery
    tools have none), a ``rate`` share of them (``draw`` is uniform in [0, 1)), never a day-one list."""
    return tl.catalog == "mcp-zero" and not tl.day_one and draw < rate



class Tools:
    """(server, tool) -> Tool over both catalogs a teacher list may come from (MCP-Zero with examples)."""

    def __init__(self, smithery_dir: Path | None):
        from retrieval.catalog.formats import load_default_catalog

        self.catalogs = {"mcp-zero": load_default_catalog(with_examples=True)}
        if smithery_dir is not None:
            from retrieval.catalog.smithery import read_smithery

            self.catalogs["smithery"] = read_smithery(smithery_dir).catalog

    def add(self, catalog: str, tools: Any) -> None:
        self.catalogs[catalog] = tools

    def get(self, catalog: str, server: str, tool: str) -> Any:
        from retrieval.catalog.model import ToolId

        cat = self.catalogs.get(catalog)
        if cat is None:
            raise ValueError(f"teacher lists from the {catalog!r} catalog need --smithery DIR")
        return cat[ToolId(server, tool)]


def corpus_lists(names: Sequence[str], *, per_corpus: int = 500, negatives: int = 8, seed: int = 13
                 ) -> tuple[list[TeacherList], dict[str, Any]]:
    """Lists from other writers' training corpora and their catalogs (keyed ``corpus:NAME``).

    Each request becomes a list: its labelled tools (lenient: any the corpus accepts) with P(yes) 1,
    and the ``negatives`` unlabelled tools BM25 ranks highest over the corpus's catalog with 0 (the
    look-alikes the student must tell apart; no judge saw them, so a few may be unlabelled fits).
    At most ``per_corpus`` requests of each corpus, so none dominates.

    Raises:
        ValueError: a corpus that is not for training (held-out corpora are never trained on).
    """
    from retrieval.evaluation.corpora import CORPORA, load_corpus
    from retrieval.index.bm25 import BM25Index
    from retrieval.index.text import tool_document

    rng = random.Random(seed)
    lists: list[TeacherList] = []
    catalogs: dict[str, Any] = {}
    for name in names:
        if name not in CORPORA:
            raise ValueError(f"unknown corpus {name!r}; known: {', '.join(CORPORA)}")
        if CORPORA[name].use != "train":
            raise ValueError(f"corpus {name!r} is held out ({CORPORA[name].use}), never trained on")
        corpus = load_corpus(name)
        tools = corpus.catalog.tools
        key = f"corpus:{name}"
        catalogs[key] = corpus.catalog
        bm25 = BM25Index.build([tool_document(t, with_examples=False) for t in tools])
        qs = list(corpus.questions)
        rng.shuffle(qs)
        for q in qs[:per_corpus]:
            gold = sorted(t for t in q.lenient_targets if t in corpus.catalog)   # a set: fix the order
            if not gold:
                continue
            rows, _ = bm25.search(q.query, negatives + len(gold) + 4)
            labelled = set(gold)
            negs = [tools[int(r)].id for r in rows if tools[int(r)].id not in labelled][:negatives]
            cands = tuple((t.server, t.tool, 1.0) for t in gold) + tuple((t.server, t.tool, 0.0) for t in negs)
            lists.append(TeacherList(q.id, q.query, key, cands, day_one=True))
    return lists, catalogs


def read_pools(path: Path) -> dict[str, list[tuple[str, str]]]:
    """``training.pools`` output: id -> the hybrid's ranked (server, tool) list."""
    from retrieval.jsonl import read_jsonl

    return {row["id"]: [tuple(c) for c in row["candidates"]] for _, row in read_jsonl(path)}


class Records:
    """Builds the model's (query, tool) texts the way the runtime scorer does."""

    def __init__(self, tokenizer_json: str, args: argparse.Namespace):
        from tokenizers import Tokenizer

        from scorer.record import RequestFitter

        self.fitter = RequestFitter(Tokenizer.from_str(tokenizer_json), args.request_tokens, args.request_cut)
        self.fmt = dict(max_description_chars=args.max_description_chars, parameters=args.parameters,
                        server_description_chars=args.server_description_chars)
        self.examples = args.examples

    def __call__(self, request: str, need: str | None, tools: Sequence[Any], with_examples: bool) -> list[tuple[str, str]]:
        from scorer.record import format_record

        request, need = self.fitter.fit(request, need)
        ex = self.examples if with_examples else 0
        return [format_record(request, need, t, examples=ex, **self.fmt) for t in tools]



@dataclass
class DevSet:
    """A fixed sample of dev questions with the hybrid's candidates, for choosing checkpoints."""

    name: str
    with_examples: bool
    rows: list[dict]
    with_need: bool = False       # score with each row's ``need`` (the blind need of a ``*_need`` pool)


def load_dev(path: Path, n: int, seed: int, with_examples: bool, with_need: bool = False) -> DevSet:
    from retrieval.jsonl import read_jsonl

    rows = [row for _, row in read_jsonl(path)]
    random.Random(seed).shuffle(rows)
    return DevSet(path.stem, with_examples, rows[:n] if n else rows, with_need)


def dev_ranks(model: Any, tok: Any, records: Records, tools: Tools, dev: DevSet, max_length: int,
              depth: int = 100, micro: int = 64) -> list[int]:
    """The right tool's rank by the logit alone over the hybrid's ``depth`` candidates, per dev
    question (0 where retrieval missed it). ``model`` is a transformers model, ``tok`` its tokenizer."""
    import torch

    from .list_loss import pair_logits

    was_training = model.training
    model.eval()
    ranks = []
    with torch.no_grad():
        for row in dev.rows:
            cands = [tuple(c) for c in row["candidates"][:depth]]
            target = tuple(row["target"])
            if target not in cands:
                ranks.append(0)
                continue
            need = row.get("need") if dev.with_need else None
            recs = records(row["query"], need, [tools.get("mcp-zero", s, t) for s, t in cands], dev.with_examples)
            z = pair_logits(model, tok, recs, max_length, micro).cpu().numpy()
            ranks.append(1 + int((z > z[cands.index(target)]).sum()))
    model.train(was_training)
    return ranks


def evaluate_dev(model: Any, tok: Any, records: Records, tools: Tools, dev: DevSet, max_length: int,
                 depth: int = 100, micro: int = 64) -> dict[str, float]:
    """MRR / rank-1 / top-5 of the logit alone over the hybrid's ``depth`` candidates."""
    ranks = dev_ranks(model, tok, records, tools, dev, max_length, depth, micro)
    n = max(1, len(ranks))
    return {"mrr": sum(1.0 / r for r in ranks if r) / n, "top1": sum(r == 1 for r in ranks) / n,
            "top5": sum(1 <= r <= 5 for r in ranks) / n}



def _save_model(dest: Path, model: Any, tok: Any, args: argparse.Namespace, extra: dict) -> None:
    import shutil

    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)   # safetensors, full precision
    tok.save_pretrained(tmp)
    (tmp / "train_args.json").write_text(json.dumps({**{k: (str(v) if isinstance(v, Path) else v)
                                                         for k, v in vars(args).items()
                                                         if not isinstance(v, list)},
                                                      "teacher": [str(t) for t in args.teacher], **extra}, indent=1))
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.distill", description=__doc__.split("\n\n")[0])
    p.add_argument("--teacher", type=Path, nargs="+", required=True, help="teacher list JSONL files")
    p.add_argument("--smithery", type=Path, help="Smithery server folder, for lists over that catalog")
    p.add_argument("--pools", type=Path, help="training.pools output folder (deep negatives and dev pools)")
    p.add_argument("--out", type=Path, required=True, help="run folder: curve.jsonl, best/, last/, state/")
    p.add_argument("--layers", type=int, default=6, help="keep the first N transformer layers of MiniLM (1-6)")
    p.add_argument("--max-length", type=int, default=96, help="tokens per (request, tool) pair")
    p.add_argument("--request-tokens", type=int, default=40, help="token budget of the query side")
    p.add_argument("--request-cut", default="head_tail", help="head_tail | end | start")
    p.add_argument("--max-description-chars", type=int, default=200, help="characters of a tool's description in the record")
    p.add_argument("--parameters", type=int, default=4, help="input-schema parameter names in the record")
    p.add_argument("--server-description-chars", type=int, default=0,
                   help="the server's description in the record, at most this many characters (0 = none)")
    p.add_argument("--examples", type=int, default=2, help="example requests in the record, where there are some")
    p.add_argument("--examples-rate", type=float, default=0.5, help="share of MCP-Zero lists trained with examples")
    p.add_argument("--max-candidates", type=int, default=0, help="judged candidates kept per list (0 = all)")
    p.add_argument("--deep-negatives", type=int, default=3, help="unjudged negatives per list from hybrid ranks 21-100")
    p.add_argument("--lists-per-step", type=int, default=4, help="teacher lists per optimiser step")
    p.add_argument("--micro-batch", type=int, default=32, help="pairs per forward pass")
    p.add_argument("--epochs", type=float, default=3.0, help="passes over the lists (fractional: part of one)")
    p.add_argument("--minutes", type=float, default=0, help="stop training after this many minutes (0 = no bound)")
    p.add_argument("--lr", type=float, default=1e-4, help="peak learning rate")
    p.add_argument("--warmup", type=float, default=0.05, help="warm-up share of the steps (then cosine)")
    p.add_argument("--listwise-weight", type=float, default=1.0, help="weight of the listwise KL term (0 = BCE only)")
    p.add_argument("--max-lists", type=int, default=0, help="cap on lists (0 = all)")
    p.add_argument("--init", type=Path, help="start from this cross-encoder folder (default: MiniLM weights)")
    p.add_argument("--init-base", type=Path, help="take the first --layers layers of this BERT folder")
    p.add_argument("--dev-questions", type=int, default=150, help="dev questions of each pool measured")
    p.add_argument("--dev-depth", type=int, default=30, help="hybrid candidates scored per dev question while training")
    p.add_argument("--eval-minutes", type=float, default=10.0, help="training minutes between dev measurements")
    p.add_argument("--noex-weight", type=float, default=1.0,
                   help="weight of the day-one dev MRR against the with-examples one when choosing the checkpoint")
    p.add_argument("--needs", type=Path, help="blind needs by list id (training/data/needs_blind.jsonl)")
    p.add_argument("--need-rate", type=float, default=0.5, help="share of the lists with a need trained with it")
    p.add_argument("--need-weight", type=float, default=1.0,
                   help="weight of the day-one-with-need dev MRR (dev_noex_need) when choosing the checkpoint")
    p.add_argument("--corpora", nargs="*", default=[], help="other writers' training corpora to add as lists")
    p.add_argument("--per-corpus", type=int, default=500, help="requests taken from each corpus")
    p.add_argument("--freeze-embeddings", action="store_true",
                   help="keep the word embeddings fixed (faster steps; the tool vocabulary stays MiniLM's)")
    p.add_argument("--threads", type=int, default=2, help="CPU threads")
    p.add_argument("--seed", type=int, default=13, help="random seed (list order, draws)")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in OUT/state")
    p.add_argument("--start-step", type=int, default=0,
                   help="a second stage: begin at this step of the same list order (with --init on the first "
                        "stage's weights), with a warm-up and cosine of its own over the remaining steps")
    return p


def plan_steps(lists: Sequence[TeacherList], lists_per_step: int, epochs: float, seed: int) -> list[list[int]]:
    """The lists of every step of the run, in order (the loop's order before the library trainer, so a
    ``--start-step`` stage continues an older run): each epoch shuffles the lists, sorts chunks of 64
    by request length (a step holds similar lengths: little padding), cuts them into steps of
    ``lists_per_step`` and shuffles the steps; an epoch is ``ceil(lists / lists_per_step)`` steps of
    that order. ``epochs`` may be fractional."""
    per_epoch = math.ceil(len(lists) / lists_per_step)
    orders: dict[int, list[list[int]]] = {}

    def epoch_steps(epoch: int) -> list[list[int]]:
        if epoch not in orders:
            r = random.Random(seed * 1000 + epoch)
            idx = list(range(len(lists)))
            r.shuffle(idx)
            out = []
            for s in range(0, len(idx), 64):
                ch = sorted(idx[s:s + 64], key=lambda i: len(lists[i].query))
                out += [ch[i:i + lists_per_step] for i in range(0, len(ch), lists_per_step)]
            r.shuffle(out)
            orders[epoch] = out
        return orders[epoch]

    return [epoch_steps(e)[k] for e, k in (divmod(s, per_epoch) for s in range(max(1, int(per_epoch * epochs))))]


class ListRows:
    """Turns (step, list) rows into the trainer's ``query``, ``docs``, ``labels`` columns when they are read.

    Each row draws, from a generator seeded by the run seed, its step and its list, the deep
    negatives added to the list (unjudged, labelled 0), whether the record carries example
    requests (``--examples-rate``) and whether it carries the list's blind need (``--need-rate``):
    the same draws on a resumed run.
    """

    def __init__(self, lists: Sequence[TeacherList], records: Records, tools: Tools, args: argparse.Namespace,
                 pools: dict[str, list[tuple[str, str]]], needs: dict[str, str]):
        self.lists, self.records, self.tools, self.args = lists, records, tools, args
        self.pools, self.needs = pools, needs

    def row(self, step: int, index: int) -> tuple[str, list[str], list[float]]:
        a, tl = self.args, self.lists[index]
        rng = random.Random(f"{a.seed}:{step}:{index}")
        cands = list(tl.candidates)
        if a.max_candidates:
            keep = [c for c in cands if c[2] >= 0.5]
            rest = sorted((c for c in cands if c[2] < 0.5), key=lambda c: -c[2])
            cands = (keep + rest)[: a.max_candidates]
        judged = {(s, t) for s, t, _ in tl.candidates}
        deep = [c for c in self.pools.get(tl.id, [])[20:] if c not in judged]
        cands += [(s, t, 0.0) for s, t in rng.sample(deep, min(a.deep_negatives, len(deep)))]
        with_ex = trains_with_examples(tl, rng.random(), a.examples_rate)
        need = self.needs.get(tl.id) if rng.random() < a.need_rate else None
        recs = self.records(tl.query, need, [self.tools.get(tl.catalog, s, t) for s, t, _ in cands], with_ex)
        return recs[0][0], [d for _, d in recs], [c[2] for c in cands]

    def __call__(self, batch: dict[str, list]) -> dict[str, list]:
        out: dict[str, list] = {"query": [], "docs": [], "labels": []}
        for step, index in zip(batch["step"], batch["list"]):
            query, docs, labels = self.row(step, index)
            out["query"].append(query)
            out["docs"].append(docs)
            out["labels"].append(labels)
        return out


@dataclass
class DistillRun:
    """What the trainer's callback needs of a run: its model, dev sets, totals and output folder."""

    args: argparse.Namespace
    model: Any                      # the CrossEncoder
    loss: Any                       # the ListLoss (its last batch's loss and pairs)
    records: Records
    tools: Tools
    devs: list[DevSet]
    steps: int
    start_step: int
    progress: dict
    prior: dict
    resumed: bool = False
    scheduler: Any = None

    @property
    def budget(self) -> float:
        return self.args.minutes * 60 if self.args.minutes else math.inf

    def checkpoint(self) -> dict:
        """Measure the dev sets, append the curve row, keep ``best/`` if it is the best so far."""
        a, progress = self.args, self.progress
        row = {"step": progress["step"], "pairs": progress["pairs"],
               "train_minutes": round(progress["train_seconds"] / 60, 2),
               "lr": self.scheduler.get_last_lr()[0] if self.scheduler else a.lr, "loss": progress["running"],
               **self.totals()}
        te = time.time()
        for dev in self.devs:
            m = evaluate_dev(self.model.model, self.model.tokenizer, self.records, self.tools, dev, a.max_length,
                             depth=a.dev_depth)
            row.update({f"{dev.name}_{k}": round(v, 4) for k, v in m.items()})
        row["eval_seconds"] = round(time.time() - te, 1)
        weights = {d.name: (a.need_weight if d.with_need else a.noex_weight if not d.with_examples else 1.0)
                   for d in self.devs}
        score = sum(weights[d.name] * row.get(f"{d.name}_mrr", 0.0) for d in self.devs) / max(1e-9, sum(weights.values()))
        row["score"] = round(score, 4)
        with (a.out / "curve.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        log.info("checkpoint %s", row)
        if score > progress["best"] or not self.devs:
            progress["best"] = score
            _save_model(a.out / "best", self.model.model, self.model.tokenizer, a, {"checkpoint": row})
        progress["last_eval_train_seconds"] = progress["train_seconds"]
        return row

    def totals(self) -> dict:
        """The step and the pairs and minutes since the first stage (``prior`` plus this run's)."""
        return {"step": self.progress["step"], "total_pairs": self.prior["pairs"] + self.progress["pairs"],
                "total_train_minutes": round(self.prior["train_minutes"] + self.progress["train_seconds"] / 60, 2)}


def prior_totals(init: Path | None) -> dict:
    """Pairs and minutes of the stages before ``init`` (its ``train_args.json``), so a curve counts on from them."""
    path = (init / "train_args.json") if init else None
    if not path or not path.exists():
        return {"pairs": 0, "train_minutes": 0.0}
    earlier = json.loads(path.read_text())
    point = earlier.get("checkpoint", {})
    if not point and "progress" in earlier:   # a last/ folder written before it carried its totals
        point = {"pairs": earlier["progress"]["pairs"], "train_minutes": earlier["progress"]["train_seconds"] / 60}
    return {"pairs": point.get("total_pairs", point.get("pairs", 0)),
            "train_minutes": point.get("total_train_minutes", point.get("train_minutes", 0.0))}


def last_state(out: Path) -> Path | None:
    """The newest resumable checkpoint of a run (``OUT/state/checkpoint-N`` with its ``progress.json``)."""
    folders = [p for p in (out / "state").glob("checkpoint-*") if (p / "progress.json").is_file()]
    return max(folders, key=lambda p: int(p.name.rsplit("-", 1)[1]), default=None)


class PlannedBatches:
    """The trainer's batch sampler: the rows of each planned step, step after step (picklable, so
    the training arguments saved with a checkpoint keep it)."""

    def __init__(self, groups: list[list[int]]):
        self.groups = groups
        self.batch_size = max((len(g) for g in groups), default=1)
        self.drop_last = False

    def __call__(self, dataset: Any, **_: Any) -> "PlannedBatches":
        return self

    def __iter__(self):
        return iter(self.groups)

    def __len__(self) -> int:
        return len(self.groups)


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    for path in a.teacher:
        if not path.is_file():
            p.error(f"--teacher {path}: no such file")
    if not 1 <= a.layers <= 6:
        p.error(f"--layers must be 1..6, got {a.layers}")
    if a.init and not (a.init / "config.json").exists():
        p.error(f"--init {a.init}: not a model folder (no config.json)")
    if a.init_base and not (a.init_base / "config.json").exists():
        p.error(f"--init-base {a.init_base}: not a model folder (no config.json)")
    if a.start_step and not a.init:
        p.error("--start-step continues an earlier stage: give its weights with --init")
    if not 0.0 <= a.need_rate <= 1.0:
        p.error(f"--need-rate must be in [0, 1], got {a.need_rate}")
    if a.needs and not a.needs.is_file():
        p.error(f"--needs {a.needs}: no such file")
    state = last_state(a.out) if a.resume else None
    if a.resume and state is None:
        if (a.out / "state" / "progress.json").is_file():   # the hand loop's state, before issue 37
            p.error(f"--resume: {a.out / 'state'} was written by the training loop before the library trainer and "
                    "cannot be resumed; continue from its weights as a new stage: --init "
                    f"{a.out / 'state'} --start-step N (N: the step in its progress.json) and another --out")
        p.error(f"--resume: {a.out / 'state'} holds no saved checkpoint; start without --resume")
    from scorer.record import REQUEST_CUTS

    if a.request_cut not in REQUEST_CUTS:
        p.error(f"--request-cut must be one of {REQUEST_CUTS}")
    t0 = start_run(a)
    import torch
    from datasets import Dataset
    from sentence_transformers.cross_encoder import CrossEncoder, CrossEncoderTrainer, CrossEncoderTrainingArguments

    from .budget import BudgetCallback
    from .list_loss import ListLoss

    from .modeling import init_model_dir   # also registers the mean-pooling model class
    from .pairs import load_split

    lists = read_teacher(a.teacher)
    try:
        check_train_only(lists, load_split())
    except ValueError as exc:
        p.error(str(exc))
    tools = Tools(a.smithery)
    if a.corpora:
        try:
            more, catalogs = corpus_lists(a.corpora, per_corpus=a.per_corpus, seed=a.seed)
        except ValueError as exc:
            p.error(str(exc))
        for key, cat in catalogs.items():
            tools.add(key, cat)
        log.info("corpus lists: %d from %s", len(more), ", ".join(a.corpora))
        lists += more
    random.Random(a.seed).shuffle(lists)
    if a.max_lists:
        lists = lists[: a.max_lists]
    needs: dict[str, str] = {}
    if a.needs:
        from .needs import read_needs

        needs = {k: v["need"] for k, v in read_needs(a.needs).items() if v.get("need")}
        log.info("blind needs for %d of %d lists, trained with at rate %.2f",
                 sum(t.id in needs for t in lists), len(lists), a.need_rate)
    pools = read_pools(a.pools / "teacher.jsonl") if a.pools and a.deep_negatives else {}
    a.out.mkdir(parents=True, exist_ok=True)
    init = state or a.init or init_model_dir(a.layers, a.out / "init", base=a.init_base)
    # fp32 whatever the saved dtype: released weights are kept in fp16, and fp16 training on a CPU crawls.
    model = CrossEncoder(str(init), num_labels=1, max_length=a.max_length, local_files_only=True,
                         model_kwargs={"dtype": torch.float32})
    records = Records(model.tokenizer.backend_tokenizer.to_str(), a)
    devs = []
    if a.pools:
        for tag, ex, with_need in (("dev_ex", True, False), ("dev_noex", False, False), ("dev_noex_need", False, True)):
            if (a.pools / f"{tag}.jsonl").exists() and (with_need is False or a.needs):
                devs.append(load_dev(a.pools / f"{tag}.jsonl", a.dev_questions, 7, ex, with_need))

    plan = plan_steps(lists, a.lists_per_step, a.epochs, a.seed)
    if a.start_step >= len(plan):
        p.error(f"--start-step {a.start_step} is past the last step ({len(plan)}); raise --epochs")
    steps_here = [(s, i) for s in range(a.start_step, len(plan)) for i in plan[s]]
    groups, n = [], 0
    for s in range(a.start_step, len(plan)):
        groups.append(list(range(n, n + len(plan[s]))))
        n += len(plan[s])
    dataset = Dataset.from_dict({"step": [s for s, _ in steps_here], "list": [i for _, i in steps_here]})
    dataset = dataset.with_transform(ListRows(lists, records, tools, a, pools, needs))

    if a.freeze_embeddings:
        model.model.base_model.embeddings.word_embeddings.weight.requires_grad_(False)
    loss = ListLoss(model, listwise_weight=a.listwise_weight, max_length=a.max_length, micro_batch=a.micro_batch)
    progress = {"step": a.start_step, "pairs": 0, "train_seconds": 0.0, "best": -1.0, "running": None,
                "start_step": a.start_step}
    if state:
        progress.update(json.loads((state / "progress.json").read_text()))
        log.info("resuming from %s: step %d (%d pairs, %.0f s of training)", state, progress["step"],
                 progress["pairs"], progress["train_seconds"])
    run = DistillRun(a, model, loss, records, tools, devs, len(plan), a.start_step, progress, prior_totals(a.init),
                     resumed=state is not None)
    # Warm-up, then a cosine that ends with the steps or with the time budget, whichever comes
    # first: a run bounded by minutes still anneals to zero. A later stage has a schedule of its own.
    opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=a.lr, weight_decay=0.01)
    run_steps = len(groups)
    warmup = max(1, int(run_steps * a.warmup))

    def lr_factor(s: int) -> float:
        done = max(max(0, s - warmup) / max(1, run_steps - warmup), progress["train_seconds"] / run.budget)
        return min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, done)))

    run.scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    log.info("%d teacher lists (%d with a fit), %d steps of %d lists from step %d, deep negatives %d, dev %s",
             len(lists), sum(t.has_fit for t in lists), len(plan), a.lists_per_step, a.start_step, a.deep_negatives,
             [f"{d.name}:{len(d.rows)}" for d in devs])
    args = CrossEncoderTrainingArguments(
        output_dir=str(a.out / "state"), max_steps=run_steps, per_device_train_batch_size=a.lists_per_step,
        learning_rate=a.lr, max_grad_norm=1.0, seed=a.seed, logging_steps=50, eval_strategy="no",
        save_strategy="no", report_to="none", dataloader_num_workers=0,
        batch_sampler=PlannedBatches(groups), use_cpu=not torch.cuda.is_available())
    trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=dataset, loss=loss,
                                  callbacks=[BudgetCallback(run)], optimizers=(opt, run.scheduler))
    trainer.train(resume_from_checkpoint=str(state) if state else None)
    # the totals since the first stage, so a next stage started from last/ counts on from them
    _save_model(a.out / "last", model.model, model.tokenizer, a, {"progress": progress, "checkpoint": run.totals()})
    best = a.out / "best" / "train_args.json"
    best.write_text(json.dumps({**json.loads(best.read_text()), "training_data_hash": trained_data_hash(*a.teacher),
                                "wall_seconds": round(time.time() - t0)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
