"""Calibrated probability per candidate: the scorer's logit joined with retrieval evidence.

A 22M-parameter cross-encoder alone ranks worse than the hybrid retrieval on requests
that describe a symptom (the example requests carry that knowledge, and only retrieval
sees them). So the probability is a logistic model over the cross-encoder logit *and*
the retrieval evidence of the same candidate list, fitted on dev questions
(training/calibrate.py). Being logistic, it is calibrated by construction on data like
dev; ECE is reported on test.

A per-candidate logistic model is calibrated over *all* candidates, but the best one of
each list is picked for being the highest, and its probability came out 0.08 off on dev
(picking the maximum of 100 noisy scores favours the lucky). So an optional second stage,
fitted on the top-10 of each dev list, maps the first stage's score ``s`` to
``sigmoid(a*s + b*(s - max s) + c*[s is the list's best] + d)``: monotone in ``s`` within a
list (``a + b > 0``, ``c >= 0``) and, for the lists' best candidates, across lists (``a > 0``),
so it changes no ranking and no abstention AUROC, only what the numbers mean.

One feature is not about the candidate's text: ``named_other`` is 1 when the request
names a server explicitly ("on Discord, edit message ...", "ServiceNow: delete workflow
...") and the candidate belongs to another server. Requests that name a platform which is
not connected were the most confident wrong answers when nothing fits (a Telegram tool
for a Discord request); the names come from the public registry and the tenant's eligible
servers only (see ``Pipeline.named_servers``), so a hidden server never counts.
``mentions_server`` is its positive, looser twin: the candidate's server is named anywhere
in the request, however casually ("send a slack msg", "create a linear ticket"); too weak
to restrict a search, but users write platforms that way (same names, same privacy rule).

The same class without a logit (``uses_logit=False``) gives a retrieval-only probability,
so the pipeline decides sensibly even without a model.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Collection, Sequence

import numpy as np

from retrieval.catalog.model import Tool
from retrieval.index.hits import Hit
from scorer.calibration import sigmoid

if TYPE_CHECKING:
    from scorer import Scorer

__all__ = ["FEATURES", "RETRIEVAL_FEATURES", "EXPERIMENTAL_FEATURES", "ConfidenceModel", "ListCalibration", "TailCalibration", "TAIL_FILE",
           "candidate_features", "combiner_file", "head_fits",
           "default_confidence_path", "first_logits"]

MISSING_RANK = 201.0  # a candidate absent from one list sits just past its depth
RETRIEVAL_FEATURES = ("log_fused_rank", "log_bm25_rank", "log_dense_rank", "dense_score", "dense_gap",
                      "bm25_rel", "bm25_over_5th", "fused_rel", "named_other", "mentions_server",
                      "has_need", "log_need_rank", "need_dense_score", "need_dense_gap", "log_eligible")
FEATURES = ("logit", "logit_gap") + RETRIEVAL_FEATURES
# tried in 0.10.0 and in no shipped model (docs/results.md): fitted only when named (``calibrate --features``);
# ``log_eligible`` does not vary over one catalog's lists
EXPERIMENTAL_FEATURES = ("has_need", "log_need_rank", "need_dense_score", "need_dense_gap", "log_eligible")
_NEED_VIEW = frozenset(("has_need", "log_need_rank", "need_dense_score", "need_dense_gap"))


def candidate_features(hits: Sequence[Hit], logits: np.ndarray | None = None,
                       named_servers: Collection[str] = (),
                       mentioned_servers: Collection[str] = (),
                       n_eligible: int | None = None,
                       only: Collection[str] | None = None) -> dict[str, np.ndarray]:
    """Per-candidate features of one ranked list (all relative ones are within this list).

    ``only``: the features a model reads (default: all); the need's view and ``log_eligible`` are
    computed only when named, so a search pays for what its models read.

    ``named_servers``: the servers the request names explicitly (empty when it names none).
    ``mentioned_servers``: the servers whose name appears anywhere in it, however casually
    ("send a slack msg"); see :meth:`ServerMentionMatcher.find` with ``loose=True``.
    ``n_eligible``: how many tools the search could return (the catalog as this tenant sees it;
    default: the list's length). A confidence model fitted over catalogs of many sizes reads it
    (``log_eligible``): a rank-1 cosine of 0.5 means more among 30 tools than among 3,000.

    The need's own lists (``has_need``, ``log_need_rank``, ``need_dense_score``, ``need_dense_gap``):
    how the agent's need alone, the easy text to match, sees the candidate. Without a need they
    repeat the request's view (``has_need`` 0), so one model reads lists with and without one.
    """
    n = len(hits)
    f: dict[str, np.ndarray] = {}
    fused = np.array([h.score for h in hits], dtype=np.float64)
    f["log_fused_rank"] = np.log(np.array([h.rank for h in hits], dtype=np.float64))
    f["log_bm25_rank"] = np.log(np.array([h.bm25_rank or MISSING_RANK for h in hits], dtype=np.float64))
    f["log_dense_rank"] = np.log(np.array([h.dense_rank or MISSING_RANK for h in hits], dtype=np.float64))
    dense = np.array([h.dense_score if h.dense_score is not None else np.nan for h in hits], dtype=np.float64)
    floor = np.nanmin(dense) if n and np.isfinite(dense).any() else 0.0
    dense = np.where(np.isfinite(dense), dense, floor)
    f["dense_score"] = dense
    f["dense_gap"] = dense - (dense.max() if n else 0.0)
    bm25 = np.array([h.bm25_score or 0.0 for h in hits], dtype=np.float64)
    f["bm25_rel"] = bm25 / bm25.max() if n and bm25.max() > 0 else np.zeros(n)
    # How far this candidate's lexical match stands out from the list's fifth best: where a
    # tool fits it usually stands out, where none does the top is a plateau of look-alikes
    # (a query-performance signal; on dev folds abstention AUROC 0.849 -> 0.871).
    fifth = np.sort(f["bm25_rel"])[-min(5, n)] if n else 0.0
    f["bm25_over_5th"] = f["bm25_rel"] - fifth
    f["fused_rel"] = fused / fused.max() if n and fused.max() > 0 else np.zeros(n)
    named = set(named_servers)
    f["named_other"] = np.array([float(bool(named) and h.tool_id.server not in named) for h in hits])
    mentioned = set(mentioned_servers)
    f["mentions_server"] = np.array([float(h.tool_id.server in mentioned) for h in hits])
    wanted = FEATURES if only is None else frozenset(only)
    if not _NEED_VIEW.isdisjoint(wanted):
        _need_view(f, hits, dense, floor)
    if "log_eligible" in wanted:
        f["log_eligible"] = np.full(n, np.log(max(int(n_eligible if n_eligible is not None else n), 1)))
    if logits is not None:
        z = np.asarray(logits, dtype=np.float64)
        f["logit"] = z
        f["logit_gap"] = z - (z.max() if n else 0.0)
    return f


def _need_view(f: dict[str, np.ndarray], hits: Sequence[Hit], dense: np.ndarray, floor: float) -> None:
    """The need's own lists as features (into ``f``); without a need they repeat the request's view."""
    n = len(hits)
    has_need = any(h.need_bm25_rank is not None or h.need_dense_rank is not None for h in hits)
    f["has_need"] = np.full(n, float(has_need))
    if has_need:
        need_rank = [min(h.need_bm25_rank or MISSING_RANK, h.need_dense_rank or MISSING_RANK) for h in hits]
        need_dense = np.array([h.need_dense_score if h.need_dense_score is not None else np.nan for h in hits],
                              dtype=np.float64)
        need_dense = np.where(np.isfinite(need_dense), need_dense,
                              np.nanmin(need_dense) if np.isfinite(need_dense).any() else floor)
    else:
        need_rank = [min(h.bm25_rank or MISSING_RANK, h.dense_rank or MISSING_RANK) for h in hits]
        need_dense = dense
    f["log_need_rank"] = np.log(np.array(need_rank, dtype=np.float64))
    f["need_dense_score"] = need_dense
    f["need_dense_gap"] = need_dense - (need_dense.max() if n else 0.0)


@dataclass(frozen=True)
class ListCalibration:
    """Second stage: ``a*s + b*(s - max s) + c*[s == max s] + d`` over one list's first-stage scores."""

    a: float = 1.0
    b: float = 0.0
    c: float = 0.0
    d: float = 0.0

    def __post_init__(self) -> None:
        if not all(np.isfinite(v) for v in (self.a, self.b, self.c, self.d)):
            raise ValueError(f"list calibration: parameters must be finite, got {self}")
        # a + b > 0 and c >= 0 keep each list's order; a > 0 keeps the order of the lists'
        # best candidates, so a higher first-stage best never gets a lower probability.
        if self.a <= 0 or self.a + self.b <= 0 or self.c < 0:
            raise ValueError(f"list calibration must keep each list's order (a > 0, a + b > 0, c >= 0), got {self}")

    @staticmethod
    def terms(s: np.ndarray) -> np.ndarray:
        """One row per candidate: ``[s, s - max s, s is the best]`` (what a, b, c multiply)."""
        top = s.max() if len(s) else 0.0
        return np.stack([s, s - top, (s == top).astype(np.float64)], axis=1)

    def apply(self, s: np.ndarray) -> np.ndarray:
        if not len(s):
            return s
        return self.terms(s) @ np.array([self.a, self.b, self.c]) + self.d


@dataclass(frozen=True)
class ConfidenceModel:
    """p = sigmoid(list_calibration(w . standardised(features) + b))."""

    features: tuple[str, ...]
    weights: tuple[float, ...]
    bias: float
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    fitted_on: str = ""
    list_calibration: ListCalibration | None = None

    def __post_init__(self) -> None:
        k = len(self.features)
        if not (len(self.weights) == len(self.mean) == len(self.scale) == k):
            raise ValueError(f"confidence model: {k} features but {len(self.weights)} weights, "
                             f"{len(self.mean)} means, {len(self.scale)} scales")
        if not all(np.isfinite(s) and s > 0 for s in self.scale):
            raise ValueError(f"confidence model: every scale must be a positive number, got {list(self.scale)}; "
                             "refit it with training/calibrate.py")
        unknown = set(self.features) - set(FEATURES)
        if unknown:
            raise ValueError(f"confidence model: unknown features {sorted(unknown)}; known: {FEATURES}")

    @property
    def uses_logit(self) -> bool:
        return "logit" in self.features or "logit_gap" in self.features

    @property
    def uses_eligible(self) -> bool:
        """Whether it reads the catalog's size (so a search must count the eligible tools)."""
        return "log_eligible" in self.features

    def matrix(self, feats: dict[str, np.ndarray]) -> np.ndarray:
        missing = [name for name in self.features if name not in feats]
        if missing:
            raise ValueError(f"confidence model needs features {missing}; pass the scorer's logits")
        n = len(next(iter(feats.values()))) if feats else 0
        # no features: a constant (bias-only) model, one row per candidate
        x = np.stack([feats[name] for name in self.features], axis=1) if self.features else np.zeros((n, 0))
        return (x - np.asarray(self.mean)) / np.asarray(self.scale)

    def first_stage(self, feats: dict[str, np.ndarray]) -> np.ndarray:
        """Per-candidate score before the list calibration (what the second stage is fitted on)."""
        return self.matrix(feats) @ np.asarray(self.weights) + self.bias

    def decision_values(self, feats: dict[str, np.ndarray]) -> np.ndarray:
        s = self.first_stage(feats)
        return self.list_calibration.apply(s) if self.list_calibration is not None else s

    def probabilities(self, hits: Sequence[Hit], logits: np.ndarray | None = None,
                      named_servers: Collection[str] = (), mentioned_servers: Collection[str] = (),
                      n_eligible: int | None = None) -> np.ndarray:
        if not len(hits):
            return np.zeros(0)
        return self.probabilities_from_features(candidate_features(hits, logits, named_servers, mentioned_servers,
                                                                   n_eligible, only=self.features))

    def probabilities_from_features(self, feats: dict[str, np.ndarray]) -> np.ndarray:
        z = self.decision_values(feats)
        return sigmoid(z)

    def to_dict(self) -> dict:
        d = {"features": list(self.features), "weights": list(self.weights), "bias": self.bias,
             "mean": list(self.mean), "scale": list(self.scale), "fitted_on": self.fitted_on}
        if self.list_calibration is not None:
            d["list_calibration"] = asdict(self.list_calibration)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ConfidenceModel":
        try:
            lc = d.get("list_calibration")
            return cls(tuple(d["features"]), tuple(float(x) for x in d["weights"]), float(d["bias"]),
                       tuple(float(x) for x in d["mean"]), tuple(float(x) for x in d["scale"]), d.get("fitted_on", ""),
                       ListCalibration(**{k: float(v) for k, v in lc.items()}) if lc is not None else None)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"malformed confidence model: {exc}") from None

    @classmethod
    def load(cls, path: str | Path) -> "ConfidenceModel":
        path = Path(path)
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except FileNotFoundError:
            raise ValueError(f"{path}: confidence model not found") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: invalid JSON ({exc.msg})") from None

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))



@dataclass(frozen=True)
class TailCalibration:
    """The probability of a candidate the cross-encoder did not read (past ``score_top``):
    ``sigmoid(a + b*logit(r) + c*log(rank) + d*log(eligible tools) + e*log(expected fits in the head))``
    where ``r`` is the retrieval-only model's probability and the expected fits in the head are the sum of
    the scored candidates' probabilities. The catalog's size is a feature: on a 50-tool catalog rank 30 is a
    tool of the same small domain, on 3,000 tools it is noise. The head's sum says how many tools the request
    needs: a task of several steps has several fitting tools, and more of them past rank 10 (0.9.0's tail,
    without it, read 0.08-0.36x the observed rate on multi-tool corpora). Fitted on the agent-flow rows of
    the fit catalogs (``training/tail.py``); ``fitted_on`` says which. A file without ``e`` is 0.9.0's."""

    a: float
    b: float
    c: float
    d: float
    fitted_on: str = ""
    e: float = 0.0

    def probabilities(self, retrieval_p: np.ndarray, ranks: np.ndarray, n_eligible: int,
                      head_p: np.ndarray | None = None) -> np.ndarray:
        r = np.clip(np.asarray(retrieval_p, dtype=np.float64), 1e-6, 1 - 1e-6)
        z = self.a + self.b * np.log(r / (1 - r)) + self.c * np.log(np.asarray(ranks, dtype=np.float64)) \
            + self.d * np.log(max(int(n_eligible), 1))
        if self.e:
            if head_p is None:
                raise ValueError("this tail calibration reads the head: pass the scored candidates' probabilities")
            z = z + self.e * head_fits(head_p)
        return sigmoid(z)

    @classmethod
    def load(cls, path: str | Path) -> "TailCalibration":
        try:
            d = json.loads(Path(path).read_text())
            return cls(float(d["a"]), float(d["b"]), float(d["c"]), float(d["d"]), str(d.get("fitted_on", "")),
                       float(d.get("e", 0.0)))
        except (OSError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: malformed tail calibration ({exc})") from None

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=1))


def head_fits(head_p: np.ndarray | None) -> float:
    """``log`` of the expected number of fitting tools among the scored candidates (floored at 0.01)."""
    total = float(np.sum(head_p)) if head_p is not None and len(head_p) else 0.0
    return float(np.log(max(total, 0.01)))


TAIL_FILE = "tail_calibration.json"



def first_logits(scorer: "Scorer", request: str, need: str | None, tools: Sequence[Tool],
                 score_top: int | None) -> np.ndarray:
    """The logits the confidence model reads for ranked ``tools``: the scorer's for the first
    ``score_top`` (all when None), the lowest of those for the rest, so an unscored tool ranks below
    every scored one with the same retrieval evidence."""
    n = len(tools) if score_top is None else min(score_top, len(tools))
    scored = np.asarray(scorer.logits(request, need, list(tools[:n])), dtype=np.float64)
    logits = np.full(len(tools), scored.min() if len(scored) else 0.0)
    logits[:n] = scored
    return logits

def combiner_file(with_examples: bool = True) -> str:
    """File name of a confidence model fitted for an index with (or without) example requests.

    Without examples retrieval is weaker and the same evidence means less (dense search
    finds the right tool at rank 1 for 56% of dev requests, against 74% with them), so the
    weights are fitted separately; the index knows which kind it is."""
    return "combiner.json" if with_examples else "combiner-noex.json"


def default_confidence_path(with_examples: bool = True) -> Path:
    """Retrieval-only confidence, fitted on dev; used when no scorer model is loaded."""
    name = "retrieval_confidence.json" if with_examples else "retrieval_confidence-noex.json"
    return Path(__file__).parent.parent / "data" / name
