"""Lexical search with bm25s: stemmed, stop words removed, eligibility applied before ranking.

A search restricted by a mask is scored with the statistics of the allowed documents only
(their number, average length and document frequencies), so what a tenant gets never
depends on documents it cannot see: the scores equal, bit for bit, those of a bm25s index
built over the allowed documents alone. They are computed from the term frequencies kept
beside the bm25s index (``term_freqs.npz``), with bm25s' own formulas and float types.
Without a mask (every document eligible) bm25s answers directly, as before.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import bm25s
import numpy as np
import Stemmer
from bm25s.scoring import _select_idf_scorer, _select_tfc_scorer

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


_TF_FILE = "term_freqs.npz"


@dataclass(frozen=True)
class _TermFrequencies:
    """Postings by term: documents ``docs[indptr[t]:indptr[t+1]]`` hold term ``t`` ``tf[...]`` times."""

    indptr: np.ndarray   # int64, n_vocab + 1
    docs: np.ndarray     # int32, ascending within a term
    tf: np.ndarray       # float32, as bm25s counts them
    doc_len: np.ndarray  # int64, tokens per document

    @classmethod
    def from_tokens(cls, corpus: list[list[str]], vocab: dict[str, int]) -> "_TermFrequencies":
        terms, docs, counts = [], [], []
        for d, tokens in enumerate(corpus):
            for token, n in Counter(tokens).items():
                terms.append(vocab[token])
                docs.append(d)
                counts.append(n)
        terms_a = np.asarray(terms, dtype=np.int64)
        docs_a = np.asarray(docs, dtype=np.int32)
        order = np.lexsort((docs_a, terms_a))
        n_vocab = max(vocab.values(), default=-1) + 1
        indptr = np.zeros(n_vocab + 1, dtype=np.int64)
        np.cumsum(np.bincount(terms_a, minlength=n_vocab), out=indptr[1:])
        return cls(indptr, docs_a[order], np.asarray(counts, dtype=np.float32)[order],
                   np.asarray([len(t) for t in corpus], dtype=np.int64))

    def save(self, path: Path) -> None:
        np.savez(path, indptr=self.indptr, docs=self.docs, tf=self.tf, doc_len=self.doc_len)

    @classmethod
    def load(cls, path: Path) -> "_TermFrequencies":
        with np.load(path, allow_pickle=False) as z:
            return cls(z["indptr"], z["docs"], z["tf"], z["doc_len"])


class BM25Index:
    """BM25 over one document per tool; rows follow the tool table's order.

    ``term_frequencies`` is what a masked search is scored from (built by :meth:`build`,
    saved and loaded with the index); an index loaded from a folder written before it
    existed has none, and :attr:`tenant_invariant` is False: rebuild it from the documents.
    """

    def __init__(self, retriever: bm25s.BM25, n_docs: int, *, term_frequencies: _TermFrequencies | None = None):
        self.retriever = retriever
        self.n_docs = n_docs
        self._tf = term_frequencies
        self._warned = False

    @property
    def tenant_invariant(self) -> bool:
        """Whether masked searches use the allowed documents' statistics only (always, once built)."""
        return self.n_docs == 0 or self._tf is not None

    @classmethod
    def build(cls, documents: Sequence[str], *, k1: float = 1.2, b: float = 0.75) -> "BM25Index":
        retriever = bm25s.BM25(k1=k1, b=b)
        tf = None
        if documents:
            corpus = tokenize(documents)
            retriever.index(corpus, show_progress=False)
            if retriever.method in retriever.methods_requiring_nonoccurrence:  # pragma: no cover - not used
                raise ValueError(f"BM25 method {retriever.method!r} is not supported; use 'lucene'")
            tf = _TermFrequencies.from_tokens(corpus, retriever.vocab_dict)
        return cls(retriever, len(documents), term_frequencies=tf)

    def _query_ids(self, query: str) -> list[int]:
        vocab = self.retriever.vocab_dict
        return [vocab[t] for t in tokenize([query])[0] if t in vocab]

    def scores(self, query: str, mask: np.ndarray | None = None) -> np.ndarray:
        """BM25 score of every document (0 where nothing matched).

        With ``mask`` (a bool per document) only allowed documents score, and they are scored
        with the allowed documents' statistics, exactly as an index of those documents alone.
        """
        if self.n_docs == 0:
            return np.zeros(0, dtype=np.float32)
        if mask is not None:
            mask = np.asarray(mask, dtype=bool)
            if mask.shape != (self.n_docs,):
                raise ValueError(f"mask has shape {mask.shape}; pass one bool per document ({self.n_docs})")
            if self._tf is not None:
                return self._masked_scores(self._query_ids(query), mask)
            if not self._warned:
                self._warned = True
                log.warning("BM25 index without term frequencies (saved by an older version): masked searches "
                            "use whole-index statistics; rebuild the index to make them tenant-invariant")
        ids = self._query_ids(query)
        if not ids:
            return np.zeros(self.n_docs, dtype=np.float32)
        scores = np.asarray(self.retriever.get_scores(ids), dtype=np.float32)
        return scores if mask is None else np.where(mask, scores, np.float32(0.0))

    def _masked_scores(self, token_ids: list[int], mask: np.ndarray) -> np.ndarray:
        """bm25s' scoring with N, the average length and document frequencies of the allowed documents."""
        tf = self._tf

        def postings():
            for t in token_ids:
                lo, hi = tf.indptr[t], tf.indptr[t + 1]
                keep = mask[tf.docs[lo:hi]]
                yield tf.docs[lo:hi][keep], tf.tf[lo:hi][keep]

        return self.score_postings(postings(), tf.doc_len, mask)

    def score_postings(self, postings, doc_len: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """bm25s' scoring (lucene idf and tf component, float32 storage, float32 sums in query order) of
        one query given, per query term in order, its ``(documents, term counts)`` — distinct documents,
        all allowed by ``mask`` — over documents of lengths ``doc_len``: N and the average length are the
        allowed documents' (all of them without a mask). The masked search and a tenant's documents
        extended with its learned requests (``retrieval.index.learned``) both score through here."""
        r = self.retriever
        scores = np.zeros(len(doc_len), dtype=np.float32)
        n_allowed = len(doc_len) if mask is None else int(np.count_nonzero(mask))
        if n_allowed == 0:
            return scores
        avg_len = doc_len.mean() if mask is None else doc_len[mask].mean()  # as bm25s: the mean of the lengths
        idf_of = _select_idf_scorer(r.idf_method)
        tfc_of = _select_tfc_scorer(r.method)
        for docs, counts in postings:
            if not len(docs):
                continue
            idf = np.float32(idf_of(len(docs), N=n_allowed))
            tfc = tfc_of(tf_array=counts, l_d=doc_len[docs], l_avg=avg_len, k1=r.k1, b=r.b, delta=r.delta)
            np.add.at(scores, docs, (idf * tfc).astype(np.float32))
        return scores

    def search(self, query: str, k: int, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (rows, scores) among rows allowed by ``mask``; rows with score 0 are dropped.

        Under a mask, equal scores rank by row, so hidden rows never decide an order.
        """
        if mask is None:
            return _top_positive(self.scores(query), k)
        return _top_positive_by_row(self.scores(query, mask), k)

    def save(self, directory: Path) -> None:
        if self.n_docs == 0:  # bm25s cannot save an unindexed retriever; load() reads nothing then
            Path(directory).mkdir(parents=True, exist_ok=True)
            return
        self.retriever.save(str(directory), show_progress=False)
        if self._tf is not None:
            self._tf.save(Path(directory) / _TF_FILE)

    @classmethod
    def load(cls, directory: Path, n_docs: int) -> "BM25Index":
        if n_docs == 0:
            return cls(bm25s.BM25(), 0)
        tf_path = Path(directory) / _TF_FILE
        tf = _TermFrequencies.load(tf_path) if tf_path.exists() else None
        if tf is not None and len(tf.doc_len) != n_docs:
            raise ValueError(f"{tf_path}: {len(tf.doc_len)} documents, the index has {n_docs}; rebuild the index")
        return cls(bm25s.BM25.load(str(directory), show_progress=False, verbosity=0), n_docs, term_frequencies=tf)


def _top_positive(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    k = min(k, int((scores > 0).sum()))
    if k <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    top = np.argpartition(-scores, k - 1)[:k]
    top = top[np.argsort(-scores[top], kind="stable")]
    return top.astype(np.int64), scores[top]


def _top_positive_by_row(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    rows = np.flatnonzero(scores > 0)
    if k <= 0 or not len(rows):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    top = rows[np.lexsort((rows, -scores[rows]))[:k]]
    return top.astype(np.int64), scores[top]
