"""Dense search in FAISS over tool vectors (several passages per tool are supported: a tool scores its best)."""

from __future__ import annotations

import faiss
import numpy as np

__all__ = ["DenseIndex"]


class DenseIndex:
    """Exact inner-product search over normalised passage vectors.

    ``owner[j]`` is the tool row of passage ``j``. Eligibility is applied inside FAISS
    with an ID selector, so an organisation gets its own best k, not the global k filtered.
    """

    def __init__(self, vectors: np.ndarray, owner: np.ndarray, n_tools: int):
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.owner = np.asarray(owner, dtype=np.int64)
        self.n_tools = n_tools
        self.dim = self.vectors.shape[1] if self.vectors.ndim == 2 else 0
        self.faiss = faiss.IndexFlatIP(self.dim) if self.dim else None
        if self.faiss is not None and len(self.vectors):
            self.faiss.add(self.vectors)
        # Passages of each tool, for turning a tool mask into a passage selector.
        self.passages_per_tool = np.bincount(self.owner, minlength=n_tools) if len(self.owner) else np.zeros(n_tools, int)

    def search(self, query_vec: np.ndarray, k: int, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (tool rows, cosine scores) among tools allowed by ``mask``."""
        if self.faiss is None or not len(self.vectors) or k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        q = np.ascontiguousarray(query_vec.reshape(1, -1), dtype=np.float32)
        params = None
        n_candidates = len(self.vectors)
        if mask is not None:
            allowed = np.flatnonzero(mask[self.owner]).astype(np.int64)
            if not len(allowed):
                return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
            params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(allowed))
            n_candidates = len(allowed)
        # Enough passages that k distinct tools survive the max-per-tool aggregation.
        per_tool = int(self.passages_per_tool.max()) if len(self.passages_per_tool) else 1
        k_pass = min(n_candidates, k * max(per_tool, 1))
        scores, ids = self.faiss.search(q, k_pass, params=params)
        scores, ids = scores[0], ids[0]
        valid = ids >= 0
        owners = self.owner[ids[valid]]
        best: dict[int, float] = {}
        for o, s in zip(owners.tolist(), scores[valid].tolist()):
            if o not in best:
                best[o] = s
        rows = np.fromiter(best.keys(), dtype=np.int64, count=len(best))[:k]
        vals = np.fromiter(best.values(), dtype=np.float32, count=len(best))[:k]
        return rows, vals
