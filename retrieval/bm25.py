"""Lexical search with bm25s: stemmed, stop words removed, eligibility applied before ranking."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Sequence

import bm25s
import numpy as np
import Stemmer

from .text import split_identifier

__all__ = ["BM25Index", "tokenize"]

log = logging.getLogger(__name__)
# bm25s sets its own logger to DEBUG, which prints "Building index from tokens" on every build.
logging.getLogger("bm25s").setLevel(logging.WARNING)
_STEMMER = Stemmer.Stemmer("english")
_IDENT = re.compile(r"\b\w*(?:[a-z][A-Z]|_|-)\w*\b")


def _expand_identifiers(text: str) -> str:
    """Add the parts of snake_case / camelCase words, so `get_shards` also matches 'shards'."""
    extra = [" ".join(split_identifier(m.group(0))) for m in _IDENT.finditer(text)]
    return text + (" " + " ".join(extra) if extra else "")


def tokenize(texts: Sequence[str]) -> list[list[str]]:
    return bm25s.tokenize([_expand_identifiers(t) for t in texts], stopwords="en", stemmer=_STEMMER,
                          return_ids=False, show_progress=False)


class BM25Index:
    """BM25 over one document per tool; rows follow the tool table's order."""

    def __init__(self, retriever: bm25s.BM25, n_docs: int):
        self.retriever = retriever
        self.n_docs = n_docs

    @classmethod
    def build(cls, documents: Sequence[str], *, k1: float = 1.2, b: float = 0.75) -> "BM25Index":
        retriever = bm25s.BM25(k1=k1, b=b)
        if documents:
            retriever.index(tokenize(documents), show_progress=False)
        return cls(retriever, len(documents))

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document (0 where nothing matched)."""
        if self.n_docs == 0:
            return np.zeros(0, dtype=np.float32)
        vocab = self.retriever.vocab_dict
        tokens = [t for t in tokenize([query])[0] if t in vocab]
        if not tokens:
            return np.zeros(self.n_docs, dtype=np.float32)
        return np.asarray(self.retriever.get_scores(tokens), dtype=np.float32)

    def search(self, query: str, k: int, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (rows, scores) among rows allowed by ``mask``; rows with score 0 are dropped."""
        scores = self.scores(query)
        if mask is not None:
            scores = np.where(mask, scores, 0.0)
        return _top_positive(scores, k)

    def save(self, directory: Path) -> None:
        if self.n_docs == 0:  # bm25s cannot save an unindexed retriever; load() reads nothing then
            Path(directory).mkdir(parents=True, exist_ok=True)
            return
        self.retriever.save(str(directory), show_progress=False)

    @classmethod
    def load(cls, directory: Path, n_docs: int) -> "BM25Index":
        if n_docs == 0:
            return cls(bm25s.BM25(), 0)
        return cls(bm25s.BM25.load(str(directory), show_progress=False, verbosity=0), n_docs)


def _top_positive(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    k = min(k, int((scores > 0).sum()))
    if k <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    top = np.argpartition(-scores, k - 1)[:k]
    top = top[np.argsort(-scores[top], kind="stable")]
    return top.astype(np.int64), scores[top]
