"""Sentence embeddings through onnxruntime: the dense side of retrieval without torch."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

__all__ = ["Encoder", "OnnxEncoder", "default_encoder_path", "EncoderLoadError"]

log = logging.getLogger(__name__)


class EncoderLoadError(ValueError):
    """The encoder folder is missing or incomplete."""


class Encoder(Protocol):
    """Anything that turns texts into L2-normalised float32 rows."""

    name: str
    dim: int

    def encode(self, texts: Sequence[str], *, batch_size: int = 64, show_progress: bool = False) -> np.ndarray: ...


def default_encoder_path() -> Path:
    """``$TOOLRANK_MODELS/toolrank-encoder``, else the package's own copy (see scorer.locations)."""
    from scorer.locations import ENCODER, models_root
    return models_root() / ENCODER


class OnnxEncoder:
    """Mean-pooled, normalised MiniLM embeddings from an ONNX export (see training/export_encoder.py)."""

    def __init__(self, path: str | Path | None = None, *, threads: int = 2, max_length: int | None = None):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        path = Path(path) if path is not None else default_encoder_path()
        missing = [f for f in ("model.onnx", "tokenizer.json", "config.json") if not (path / f).exists()]
        if missing:
            raise EncoderLoadError(
                f"encoder folder {path} lacks {', '.join(missing)}; "
                "export it with `python -m training.export_encoder --out DIR`"
            )
        cfg = json.loads((path / "config.json").read_text())
        self.name = cfg.get("name", path.name)
        self.dim = int(cfg.get("dim", 384))
        self.max_length = int(max_length or cfg.get("max_length", 256))
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.tokenizer.enable_truncation(self.max_length)
        self.tokenizer.no_padding()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # The CPU arena keeps the peak of a long-text batch for the life of the process
        # (measured: +630 MiB after embedding Smithery tools); without it RSS settles.
        opts.enable_cpu_mem_arena = False
        self.session = ort.InferenceSession(str(path / "model.onnx"), opts, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self.session.get_inputs()}

    def encode(self, texts: Sequence[str], *, batch_size: int = 16, show_progress: bool = False) -> np.ndarray:
        if not len(texts):
            return np.zeros((0, self.dim), dtype=np.float32)
        encodings = self.tokenizer.encode_batch(list(texts))
        # Length-sorted batches: padding costs as much as real tokens.
        order = np.argsort([len(e.ids) for e in encodings], kind="stable")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        batches = range(0, len(order), batch_size)
        if show_progress:
            from tqdm import tqdm
            # disable=None: a bar on a terminal only, not a line per batch in a log file
            batches = tqdm(batches, desc="embedding", unit="batch", disable=None)
        for start in batches:
            idx = order[start:start + batch_size]
            width = max(len(encodings[i].ids) for i in idx)
            ids = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1
            feed = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._inputs:
                feed["token_type_ids"] = np.zeros_like(ids)
            states = self.session.run(None, feed)[0]
            m = mask[..., None].astype(np.float32)
            pooled = (states * m).sum(1) / np.clip(m.sum(1), 1e-9, None)
            out[idx] = pooled
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.clip(norms, 1e-12, None)
