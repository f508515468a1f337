"""What every training run does around its trainer: start-up settings and the record saved beside the model."""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import time
from pathlib import Path

__all__ = ["start_run", "trained_data_hash", "write_run_record"]

log = logging.getLogger("toolrank.train")


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
    """Hash of what a run really trained on: its teacher lists (or pairs) and the tool text
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
