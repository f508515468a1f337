"""Public tool-retrieval corpora by other writers (``shared/data/public``) as catalogs and questions.

Every corpus comes in one format (its ``SOURCES.md``): ``<name>/tools.jsonl`` with
``{"server", "tool", "description", "parameters"?}`` and ``<name>/requests.jsonl`` with
``{"id", "request", "tools": [{"server", "tool"}, ...]}``, the first tool the main one. Here a
corpus becomes a :class:`Catalog` (no example requests: day one) and a list of
:class:`~retrieval.evaluation.harness.Query` whose target is the main tool and whose
``acceptable`` tools are the other labelled ones (a multi-tool request is answered by any of them:
the lenient measure).

:data:`CORPORA` is the data card in code: the licence, who wrote the requests, and what each
corpus may be used for. ``train``: licensed, and not re-packaged by an evaluation-only public
benchmark (ToolRet draws on API-Bank, UltraTool, Gorilla, RestBench and ToolAlpaca, so those are
never trained on); ``dev``: held out whole, for choosing checkpoints, thresholds and weights, and
reported per writer; a corpus without a licence is never in a shipped model's training data.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Sequence

from retrieval.catalog.model import Catalog, CatalogError, Tool, ToolId
from retrieval.jsonl import read_jsonl
from .harness import Query

__all__ = ["CORPORA", "Corpus", "CorpusInfo", "load_corpus", "corpora_root", "TRAIN_CORPORA", "DEV_CORPORA",
           "shippable", "shippable_tool"]

Use = Literal["train", "dev"]


@dataclass(frozen=True)
class CorpusInfo:
    licence: str
    writer: str              # who wrote the requests
    use: Use
    why: str = ""


CORPORA: dict[str, CorpusInfo] = {
    "seal_tools": CorpusInfo("Apache-2.0", "LLM self-instruct (gpt-3.5-turbo)", "train"),
    "nestools": CorpusInfo("Apache-2.0", "LLM-generated, manually reviewed", "train"),
    "acebench": CorpusInfo("MIT", "LLM-synthesised, human-checked", "train"),
    "nestful": CorpusInfo("Apache-2.0", "LLM-generated, hand-picked by annotators", "train"),
    "tooltalk": CorpusInfo("MIT", "written and annotated by the authors (human)", "train"),
    "api_bank": CorpusInfo("Apache-2.0", "human-annotated dialogues", "dev",
                           "held out: human-written; re-packaged by ToolRet (evaluation-only)"),
    "restbench": CorpusInfo("MIT", "human-annotated instructions", "dev",
                            "held out: human-written; re-packaged by ToolRet (evaluation-only)"),
    "mcptoolbenchpp": CorpusInfo("none stated", "LLM-generated from MCP tool schemas", "dev",
                                 "held out: the MCP-native corpus; no licence, never trained on"),
    "ultratool": CorpusInfo("none stated", "human experts refined with GPT-4", "dev",
                            "no licence, never trained on; re-packaged by ToolRet"),
    "toolalpaca": CorpusInfo("Apache-2.0", "ChatGPT (simulation)", "dev", "re-packaged by ToolRet (evaluation-only)"),
    "gorilla_apibench": CorpusInfo("Apache-2.0", "GPT-4 self-instruct", "dev", "re-packaged by ToolRet (evaluation-only)"),
}
TRAIN_CORPORA = tuple(n for n, c in CORPORA.items() if c.use == "train")
DEV_CORPORA = tuple(n for n, c in CORPORA.items() if c.use == "dev")


def shippable(kind: str) -> bool:
    """Whether a catalog kind's texts and tool names may be written into the repository (a corpus of the card
    with a licence, or toolrank's own MCP-Zero organisations); results of any other keep ids and digests only."""
    if kind == "mcpzero-org":
        return True
    info = CORPORA.get(kind)   # an unknown kind (a new or misspelt corpus) keeps digests until it is in the card
    return info is not None and info.licence != "none stated"


def shippable_tool(kind: str, tool: Sequence[str]) -> list[str]:
    """``[server, tool]`` as a result file may hold it: unchanged where :func:`shippable`, else a stable
    digest (``["sha1", "<12 hex>"]``) that still matches itself across result files."""
    if shippable(kind) or tool[0] == "sha1":   # a digest stays what it is
        return [str(tool[0]), str(tool[1])]
    return ["sha1", hashlib.sha1(f"{tool[0]}\x1f{tool[1]}".encode()).hexdigest()[:12]]


@dataclass(frozen=True)
class Corpus:
    name: str
    catalog: Catalog
    questions: list[Query]
    info: CorpusInfo


def corpora_root() -> Path:
    """``shared/data/public`` beside the checkout (or ``$TOOLRANK_PUBLIC_CORPORA``)."""
    from retrieval.settings import RetrievalSettings

    configured = RetrievalSettings().public_corpora
    if configured:
        return Path(configured)
    here = Path(__file__).resolve()
    for up in here.parents:
        cand = up.parent / "shared" / "data" / "public"
        if cand.is_dir():
            return cand
    return Path("../shared/data/public")


def _rows(path: Path) -> list[dict]:
    if not path.is_file():
        raise CatalogError(f"{path}: not found")
    try:
        rows = read_jsonl(path)
    except (ValueError, UnicodeDecodeError) as exc:   # the reader names the file and the line
        raise CatalogError(str(exc)) from None
    out = []
    for lineno, row in rows:
        if not isinstance(row, dict):
            raise CatalogError(f"{path}, line {lineno}: not a JSON object")
        out.append(row)
    return out


def load_corpus(name: str, root: str | Path | None = None, *, with_parameters: bool = True) -> Corpus:
    """One corpus as a catalog (no example requests) and its questions.

    ``with_parameters``: keep the tools' parameter schemas (their names and descriptions join the
    tool's text where the index and the scorer read them).

    Raises:
        CatalogError: an unknown corpus, a missing file, or a request naming a tool not in the corpus.
    """
    if name not in CORPORA:
        raise CatalogError(f"unknown corpus {name!r}; known: {', '.join(CORPORA)}")
    folder = Path(root or corpora_root()) / name
    tools: list[Tool] = []
    for row in _rows(folder / "tools.jsonl"):
        schema = row.get("parameters") if with_parameters and isinstance(row.get("parameters"), dict) else None
        tools.append(Tool(str(row["server"]), str(row["tool"]), str(row.get("description") or ""), schema))
    catalog = Catalog(tools)
    questions = []
    for row in _rows(folder / "requests.jsonl"):
        ids = [ToolId(str(t["server"]), str(t["tool"])) for t in row.get("tools") or []]
        missing = [t for t in ids if t not in catalog]
        if not ids or missing:
            raise CatalogError(f"{folder / 'requests.jsonl'}: request {row.get('id')!r} names no tool or tools "
                               f"not in the corpus ({missing[:3]})")
        questions.append(Query(str(row["id"]), str(row["request"]), ids[0], None, None, name, tuple(ids[1:])))
    return Corpus(name, catalog, questions, CORPORA[name])
