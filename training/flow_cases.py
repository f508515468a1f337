"""The agent-flow cases (issue 34): requests on catalogs shaped like users', each answerable request
with its no-fit twin, built the same way for the benchmark (``benchmarks/agent_flow.py``) and for the
confidence fit over catalogs of several writers (``training/calibrate.py --catalogs``).

Catalogs, all day one (no example requests), each request with the needs an agent wrote blind
(``training/data/needs_blind.jsonl``: ``need`` first, the sharper ``need2`` on the second attempt):

* ``mcpzero-org``: organisations of 10-30 servers drawn from the split's servers (always the
  labelled one), as eligibility over the shipped catalog's day-one index. No-fit: the same request
  with every labelled tool's server removed from its organisation, and the written no-fit requests
  of the split on an organisation that holds their near server.
* one catalog per public corpus (``retrieval.evaluation.corpora``): its own tools. No-fit: the same
  request with its labelled tools made ineligible (look-alikes of one domain remain).

``SETS["report"]``: MCP-Zero test and the held-out corpora (never fitted on); ``SETS["fit"]``: MCP-Zero
dev and the training corpora (what the confidence model, the tail and the decision zones are fitted on).
"""

from __future__ import annotations

import random
from pathlib import Path

from retrieval.catalog.eligibility import Eligibility
from retrieval.evaluation.agent_flow import Case
from retrieval.evaluation.corpora import CORPORA, load_corpus
from retrieval.evaluation.harness import load_queries
from retrieval.jsonl import read_jsonl

from .needs import read_needs

__all__ = ["SETS", "NEEDS", "load_needs", "mcpzero_cases", "corpus_cases"]

_DATA = Path(__file__).resolve().parent / "data"
_ROOT = _DATA.parent.parent

QUESTIONS = _DATA / "questions.jsonl"
INDEPENDENT = _ROOT / "benchmarks" / "data" / "independent_questions.jsonl"
NOFIT = _DATA / "nofit.jsonl"
NEEDS = _DATA / "needs_blind.jsonl"
SETS = {"report": ("test", [n for n, c in CORPORA.items() if c.use == "dev"]),
        "fit": ("dev", [n for n, c in CORPORA.items() if c.use == "train"])}


def load_needs(path: Path = NEEDS) -> dict[str, dict]:
    return read_needs(path) if path.exists() else {}


def _with_needs(case: Case, needs: dict[str, dict], qid: str) -> Case | None:
    n = needs.get(qid)
    if not n or not n.get("need"):
        return None
    return Case(case.id, case.request, case.catalog, case.eligible, case.targets, n["need"], n.get("need2"))


def mcpzero_cases(split: str, needs: dict, n: int, rng: random.Random, index) -> list[Case]:
    from .pairs import load_split

    servers = sorted(s for s, part in load_split().items() if part == split and s in set(index.catalog.servers))
    pool = list(load_queries(QUESTIONS, split=split))
    if split == "test":
        pool += load_queries(INDEPENDENT, split="independent")
    rng.shuffle(pool)
    cases = []
    for q in pool:
        if len([c for c in cases if c.targets]) >= n:
            break
        size = rng.randint(10, 30)
        org = {q.target.server} | set(rng.sample([s for s in servers if s != q.target.server], size - 1))
        targets = frozenset(t for t in q.lenient_targets if t.server in org)
        base = Case(q.id, q.query, "mcpzero-org", Eligibility.of(servers=sorted(org)), targets)
        ans = _with_needs(base, needs, q.id)
        if ans is None:
            continue
        cases.append(ans)
        drop = {t.server for t in q.lenient_targets}
        none_org = sorted(s for s in org if s not in drop)
        cases.append(Case(q.id + ":none", q.query, "mcpzero-org", Eligibility.of(servers=none_org), frozenset(),
                          ans.need, ans.need2))
    nofit = [row for _, row in read_jsonl(NOFIT) if row.get("split") == split and row.get("near_server") in servers]
    rng.shuffle(nofit)
    for row in nofit[:n]:
        size = rng.randint(10, 30)
        org = {row["near_server"]} | set(rng.sample([s for s in servers if s != row["near_server"]], size - 1))
        c = _with_needs(Case(row["id"], row["query"], "mcpzero-org", Eligibility.of(servers=sorted(org))), needs,
                        row["id"])
        if c is not None:
            cases.append(c)
    return cases


def corpus_cases(name: str, needs: dict, n: int, rng: random.Random) -> tuple[list[Case], object]:
    corpus = load_corpus(name)
    qs = [q for q in corpus.questions if q.id in needs]
    rng.shuffle(qs)
    cases = []
    every = [t.id for t in corpus.catalog.tools]
    for q in qs[:n]:
        base = _with_needs(Case(q.id, q.query, name, Eligibility(), frozenset(q.lenient_targets)), needs, q.id)
        if base is None:   # its blind need is empty
            continue
        cases.append(base)
        rest = [t for t in every if t not in q.lenient_targets]
        cases.append(Case(q.id + ":none", q.query, name, Eligibility.of(tools=rest), frozenset(), base.need, base.need2))
    return cases, corpus.catalog
