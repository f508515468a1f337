"""Training pairs for the cross-encoder: positives, judged look-alikes, mined hard negatives.

Everything is restricted to train-split servers: negatives are mined from the hybrid
top-100 *inside* the train servers, so no dev or test tool is ever seen in training.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import Catalog, ToolId
from retrieval.index.embedded import ToolIndex
from retrieval.jsonl import split_lines

__all__ = ["PairConfig", "Pair", "load_split", "build_pairs", "data_hash"]

log = logging.getLogger(__name__)
DATA_DIR = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True, kw_only=True)
class PairConfig:
    """How many of each kind of pair a training question contributes."""

    top_negatives: int = 3       # sampled from the first 10 unjudged hits (hardest)
    deep_negatives: int = 2      # sampled from ranks 11-100
    need_rate: float = 0.3       # share of pairs that carry the need line (the rest: request alone)
    seed: int = 13

    def __post_init__(self) -> None:
        if self.top_negatives < 0 or self.deep_negatives < 0:
            raise ValueError(f"negative counts must be >= 0, got {self.top_negatives} and {self.deep_negatives}")
        if not 0.0 <= self.need_rate <= 1.0:
            raise ValueError(f"need_rate must lie in [0, 1], got {self.need_rate}")


@dataclass(frozen=True)
class Pair:
    qid: str
    request: str
    need: str | None
    tool: ToolId
    label: float
    kind: str          # positive | judged | mined


def load_split(path: Path | None = None) -> dict[str, str]:
    return json.loads(Path(path or DATA_DIR / "splits.json").read_text())["servers"]


def load_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in split_lines(Path(path).read_text(encoding="utf-8")) if line.strip()]


def data_hash(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:  # name and length first, so bytes cannot move between files unnoticed
        data = Path(p).read_bytes()
        h.update(f"{Path(p).name}:{len(data)}:".encode())
        h.update(data)
    return h.hexdigest()[:16]


def build_pairs(index: ToolIndex, questions: list[dict], judgments: list[dict], split: dict[str, str],
                cfg: PairConfig = PairConfig(), *, show_progress: bool = True) -> list[Pair]:
    """All training pairs for ``questions`` (train split only; anything else is refused)."""
    catalog: Catalog = index.catalog
    train_servers = {s for s, sp in split.items() if sp == "train"}
    bad = [q["id"] for q in questions if split.get(q["server"]) != "train"]
    if bad:
        raise ValueError(f"{len(bad)} questions are not on train servers (e.g. {bad[0]}); pairs come from train only")
    eligible = Eligibility.of(servers=train_servers)
    judged: dict[str, dict[ToolId, float]] = defaultdict(dict)
    for j in judgments:
        tid = ToolId(j["server"], j["tool"])
        if j["server"] not in train_servers:
            raise ValueError(f"judgment {j['qid']} names a non-train tool {tid}")
        judged[j["qid"]][tid] = float(j["p_yes"])
    rng = random.Random(cfg.seed)
    pairs: list[Pair] = []
    it = questions
    if show_progress:
        from tqdm import tqdm
        it = tqdm(questions, desc="mining", unit="q")
    for q in it:
        target = ToolId(q["server"], q["tool"])
        need = q.get("need") if rng.random() < cfg.need_rate else None
        pairs.append(Pair(q["id"], q["query"], need, target, 1.0, "positive"))
        js = judged.get(q["id"], {})
        for tid, p in js.items():
            if tid != target and tid in catalog:
                pairs.append(Pair(q["id"], q["query"], need, tid, p, "judged"))
        hits = [h.tool_id for h in index.retrieve(q["query"], None, eligible, k=100) if h.tool_id != target]
        # Unjudged look-alikes near the top may be true alternatives; the judged ones are
        # already in, so mined negatives skip anything judged.
        hits = [t for t in hits if t not in js]
        top, deep = hits[:10], hits[10:]
        for tid in rng.sample(top, min(cfg.top_negatives, len(top))) + rng.sample(deep, min(cfg.deep_negatives, len(deep))):
            pairs.append(Pair(q["id"], q["query"], need, tid, 0.0, "mined"))
    return pairs
