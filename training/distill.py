"""Distil the LLM judge into the cross-encoder, list by list, resumably, choosing on dev.

Each teacher list is one request with the candidates the pipeline put in front of the judge and
its P(yes) for each (training/data/teacher/, see its card). A step reads whole lists:

* pointwise binary cross-entropy to the teacher's P(yes) for every candidate, so the logit keeps
  an absolute meaning (a list where nothing fits must give low logits everywhere);
* listwise KL divergence from the teacher's distribution over the list to the student's softmax,
  on lists where something fits: the order among look-alikes is what rank 1 needs;
* a few **deep negatives** per list (``--deep-negatives``) drawn from the hybrid's ranks 21–100
  (``training.pools``), labelled 0: at query time the student scores all 100, not just the
  look-alikes the judge saw.

The request gets a token budget of its own (``--request-tokens``, cut by
:class:`scorer.record.RequestFitter`, the same class the runtime scorer uses), and the pair is
then truncated on the tool side only. With ``--examples-rate`` a share of the MCP-Zero lists
carries each tool's example requests in the record (catalogs with examples), the rest none
(day one), so one student serves both.

Every ``--eval-minutes`` the run measures dev MRR of the logit alone over the hybrid's 100 for a
fixed sample of dev questions (``--dev-pool``, with and without examples), appends it to
``OUT/curve.jsonl``, keeps the best checkpoint in ``OUT/best`` (safetensors, full precision) and
a resumable state in ``OUT/state`` (``--resume`` continues from it). ``--minutes`` bounds the
training time. A second stage (``--init FIRST/best --start-step N``) continues the same list order
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


def forward(model: Any, tok: Any, recs: Sequence[tuple[str, str]], max_length: int, micro: int) -> Any:
    """Logits for ``recs`` in order, computed in length-sorted micro-batches (little padding)."""
    import torch

    enc = tok([q for q, _ in recs], [d for _, d in recs], truncation="only_second", max_length=max_length)
    lengths = [len(ids) for ids in enc["input_ids"]]
    order = sorted(range(len(recs)), key=lambda i: lengths[i])
    parts, where = [], []
    for s in range(0, len(order), micro):
        idx = order[s:s + micro]
        batch = tok.pad({k: [enc[k][i] for i in idx] for k in enc.keys()}, return_tensors="pt")
        parts.append(model(**batch).logits.view(-1))
        where += idx
    logits = torch.cat(parts)
    inverse = torch.empty(len(where), dtype=torch.long)
    inverse[torch.tensor(where)] = torch.arange(len(where))
    return logits[inverse]


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
    question (0 where retrieval missed it)."""
    import torch

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
            z = forward(model, tok, recs, max_length, micro).numpy()
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


def _save_state(out: Path, model: Any, tok: Any, opt: Any, sched: Any, state: dict) -> None:
    """Resumable state, written aside and then renamed, so a kill mid-save keeps the last one."""
    import shutil

    import torch

    tmp = out / "state.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    torch.save({"opt": opt.state_dict(), "sched": sched.state_dict(), "torch_rng": torch.get_rng_state()},
               tmp / "optimizer.pt")
    (tmp / "progress.json").write_text(json.dumps(state))
    final = out / "state"
    old = out / "state.old"
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)


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
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--max-length", type=int, default=96)
    p.add_argument("--request-tokens", type=int, default=40, help="token budget of the query side")
    p.add_argument("--request-cut", default="head_tail", help="head_tail | end | start")
    p.add_argument("--max-description-chars", type=int, default=200)
    p.add_argument("--parameters", type=int, default=4, help="input-schema parameter names in the record")
    p.add_argument("--server-description-chars", type=int, default=0,
                   help="the server's description in the record, at most this many characters (0 = none)")
    p.add_argument("--examples", type=int, default=2, help="example requests in the record, where there are some")
    p.add_argument("--examples-rate", type=float, default=0.5, help="share of MCP-Zero lists trained with examples")
    p.add_argument("--max-candidates", type=int, default=0, help="judged candidates kept per list (0 = all)")
    p.add_argument("--deep-negatives", type=int, default=3, help="unjudged negatives per list from hybrid ranks 21-100")
    p.add_argument("--lists-per-step", type=int, default=4)
    p.add_argument("--micro-batch", type=int, default=32)
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--minutes", type=float, default=0, help="stop training after this many minutes (0 = no bound)")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=float, default=0.05, help="warm-up share of the steps (then cosine)")
    p.add_argument("--listwise-weight", type=float, default=1.0)
    p.add_argument("--max-lists", type=int, default=0, help="cap on lists (0 = all)")
    p.add_argument("--init", type=Path, help="start from this cross-encoder folder (default: MiniLM weights)")
    p.add_argument("--init-base", type=Path, help="take the first --layers layers of this BERT folder")
    p.add_argument("--dev-questions", type=int, default=150)
    p.add_argument("--dev-depth", type=int, default=30, help="hybrid candidates scored per dev question while training")
    p.add_argument("--eval-minutes", type=float, default=10.0)
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
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--resume", action="store_true", help="continue from OUT/state")
    p.add_argument("--start-step", type=int, default=0,
                   help="a second stage: begin at this step of the same list order (with --init on the first "
                        "stage's weights), with a warm-up and cosine of its own over the remaining steps")
    return p


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
    if a.start_step and not a.init:
        p.error("--start-step continues an earlier stage: give its weights with --init")
    if not 0.0 <= a.need_rate <= 1.0:
        p.error(f"--need-rate must be in [0, 1], got {a.need_rate}")
    if a.needs and not a.needs.is_file():
        p.error(f"--needs {a.needs}: no such file")
    if a.resume and not (a.out / "state" / "progress.json").exists():
        p.error(f"--resume: {a.out / 'state'} holds no saved state; start without --resume")
    from scorer.record import REQUEST_CUTS

    if a.request_cut not in REQUEST_CUTS:
        p.error(f"--request-cut must be one of {REQUEST_CUTS}")
    from .train import init_model_dir, start_run, trained_data_hash

    t0 = start_run(a)
    import torch
    from tqdm import tqdm
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from . import modeling  # noqa: F401  (registers the mean-pooling model class)
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
    rng = random.Random(a.seed)
    rng.shuffle(lists)
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
    state_dir = a.out / "state"
    if a.resume:
        init = state_dir
    else:
        init = a.init or init_model_dir(a.layers, a.out / "init", base=a.init_base)
    # fp32 whatever the saved dtype: released weights are kept in fp16, and fp16 training on a CPU crawls.
    model = AutoModelForSequenceClassification.from_pretrained(init, num_labels=1, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(init)
    records = Records(tok.backend_tokenizer.to_str(), a)
    devs = []
    if a.pools:
        for tag, ex, with_need in (("dev_ex", True, False), ("dev_noex", False, False), ("dev_noex_need", False, True)):
            if (a.pools / f"{tag}.jsonl").exists() and (with_need is False or a.needs):
                devs.append(load_dev(a.pools / f"{tag}.jsonl", a.dev_questions, 7, ex, with_need))

    # Lists in a fixed order per epoch; steps group lists of similar request length.
    steps_per_epoch = math.ceil(len(lists) / a.lists_per_step)
    steps = max(1, int(steps_per_epoch * a.epochs))
    if a.start_step >= steps:
        p.error(f"--start-step {a.start_step} is past the last step ({steps}); raise --epochs")

    def epoch_steps(epoch: int) -> list[list[int]]:
        r = random.Random(a.seed * 1000 + epoch)
        idx = list(range(len(lists)))
        r.shuffle(idx)
        chunks = [idx[i:i + 64] for i in range(0, len(idx), 64)]
        out = []
        for ch in chunks:
            ch.sort(key=lambda i: len(lists[i].query))
            out += [ch[i:i + a.lists_per_step] for i in range(0, len(ch), a.lists_per_step)]
        r.shuffle(out)
        return out

    def step_lists(step: int) -> list[TeacherList]:
        epoch, k = divmod(step, steps_per_epoch)
        return [lists[i] for i in epoch_steps(epoch)[k]]

    if a.freeze_embeddings:
        model.base_model.embeddings.word_embeddings.weight.requires_grad_(False)
    opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=a.lr, weight_decay=0.01)
    first = a.start_step
    warmup = max(1, int((steps - first) * a.warmup))
    progress = {"step": first, "pairs": 0, "train_seconds": 0.0, "best": -1.0, "running": None, "start_step": first}
    # What earlier stages trained, so the curve reads in pairs and minutes since the first step.
    prior = {"pairs": 0, "train_minutes": 0.0}
    prior_args = (a.init / "train_args.json") if a.init else None
    if prior_args and prior_args.exists():
        earlier = json.loads(prior_args.read_text())
        point = earlier.get("checkpoint", {})
        if not point and "progress" in earlier:   # a last/ folder written before it carried its totals
            point = {"pairs": earlier["progress"]["pairs"], "train_minutes": earlier["progress"]["train_seconds"] / 60}
        prior = {"pairs": point.get("total_pairs", point.get("pairs", 0)),
                 "train_minutes": point.get("total_train_minutes", point.get("train_minutes", 0.0))}
    budget = a.minutes * 60 if a.minutes else math.inf

    def lr_factor(s: int) -> float:
        # Warm-up over the first steps, then a cosine that ends with the steps or with the time
        # budget, whichever comes first: a run bounded by minutes still anneals to zero.
        done = max(max(0, s - warmup) / max(1, steps - progress["start_step"] - warmup), progress["train_seconds"] / budget)
        return min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, done)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    if a.resume:
        saved = torch.load(state_dir / "optimizer.pt", weights_only=False)
        opt.load_state_dict(saved["opt"])
        sched.load_state_dict(saved["sched"])
        torch.set_rng_state(saved["torch_rng"])
        progress.update(json.loads((state_dir / "progress.json").read_text()))
        log.info("resumed at step %d (%d pairs, %.0f s of training)", progress["step"], progress["pairs"],
                 progress["train_seconds"])
    log.info("%d teacher lists (%d with a fit), %d steps of %d lists, deep negatives %d, dev %s",
             len(lists), sum(t.has_fit for t in lists), steps, a.lists_per_step, a.deep_negatives,
             [f"{d.name}:{len(d.rows)}" for d in devs])
    curve_path = a.out / "curve.jsonl"

    def checkpoint(final: bool = False) -> None:
        row = {"step": progress["step"], "pairs": progress["pairs"], "train_minutes": round(progress["train_seconds"] / 60, 2),
               "lr": sched.get_last_lr()[0], "loss": progress["running"],
               "total_pairs": prior["pairs"] + progress["pairs"],
               "total_train_minutes": round(prior["train_minutes"] + progress["train_seconds"] / 60, 2)}
        te = time.time()
        for dev in devs:
            m = evaluate_dev(model, tok, records, tools, dev, a.max_length, depth=a.dev_depth)
            row.update({f"{dev.name}_{k}": round(v, 4) for k, v in m.items()})
        row["eval_seconds"] = round(time.time() - te, 1)
        weights = {d.name: (a.need_weight if d.with_need else a.noex_weight if not d.with_examples else 1.0)
                   for d in devs}
        score = sum(weights[d.name] * row.get(f"{d.name}_mrr", 0.0) for d in devs) / max(1e-9, sum(weights.values()))
        row["score"] = round(score, 4)
        with curve_path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        log.info("checkpoint %s", row)
        if score > progress["best"] or not devs:
            progress["best"] = score
            _save_model(a.out / "best", model, tok, a, {"checkpoint": row})
        progress["last_eval_train_seconds"] = progress["train_seconds"]
        _save_state(a.out, model, tok, opt, sched, progress)

    if not a.resume and devs:
        checkpoint()
    model.train()
    bar = tqdm(range(progress["step"], steps), desc="distil", unit="step", disable=None, initial=progress["step"], total=steps)
    for step in bar:
        ts = time.time()
        batch = step_lists(step)
        srng = random.Random(f"{a.seed}:{step}")
        opt.zero_grad()
        recs, targets, sizes = [], [], []
        for tl in batch:
            cands = [c for c in tl.candidates]
            if a.max_candidates:
                keep = [c for c in cands if c[2] >= 0.5]
                rest = sorted((c for c in cands if c[2] < 0.5), key=lambda c: -c[2])
                cands = (keep + rest)[: a.max_candidates]
            judged = {(s, t) for s, t, _ in tl.candidates}
            deep = [c for c in pools.get(tl.id, [])[20:] if c not in judged]
            cands += [(s, t, 0.0) for s, t in srng.sample(deep, min(a.deep_negatives, len(deep)))]
            with_ex = trains_with_examples(tl, srng.random(), a.examples_rate)
            need = needs.get(tl.id) if srng.random() < a.need_rate else None
            recs += records(tl.query, need, [tools.get(tl.catalog, s, t) for s, t, _ in cands], with_ex)
            targets.append(torch.tensor([c[2] for c in cands], dtype=torch.float32))
            sizes.append(len(cands))
        logits = forward(model, tok, recs, a.max_length, a.micro_batch)
        loss = sum(list_loss(z, t, a.listwise_weight) for z, t in zip(torch.split(logits, sizes), targets)) / len(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        total = float(loss.detach())
        progress["running"] = total if progress["running"] is None else 0.98 * progress["running"] + 0.02 * total
        progress["step"] = step + 1
        progress["pairs"] += len(recs)
        progress["train_seconds"] += time.time() - ts
        bar.set_postfix(loss=f"{progress['running']:.4f}", pairs=progress["pairs"])
        if step % 50 == 0:
            log.info("step %d/%d loss %.4f pairs %d (%.1f pairs/s)", step, steps, progress["running"], progress["pairs"],
                     progress["pairs"] / max(1e-9, progress["train_seconds"]))
        if progress["train_seconds"] - progress.get("last_eval_train_seconds", 0.0) >= a.eval_minutes * 60:
            checkpoint()
        if progress["train_seconds"] >= budget:
            log.info("time budget of %.0f minutes spent at step %d", a.minutes, step + 1)
            break
    checkpoint(final=True)
    # the totals since the first stage, so a next stage started from last/ counts on from them
    _save_model(a.out / "last", model, tok, a, {"progress": progress, "checkpoint": {
        "step": progress["step"], "total_pairs": prior["pairs"] + progress["pairs"],
        "total_train_minutes": round(prior["train_minutes"] + progress["train_seconds"] / 60, 2)}})
    (a.out / "best" / "train_args.json").write_text(json.dumps(
        {**json.loads((a.out / "best" / "train_args.json").read_text()),
         "training_data_hash": trained_data_hash(*a.teacher), "wall_seconds": round(time.time() - t0)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
