"""Generate training data for any catalog: example requests, questions, judgments.

``toolrank generate examples|questions|judgments`` (or :func:`main`) writes JSONL in
the shipped formats (see ``training/data/DATASET_CARD.md``):

* ``examples``: ``{"server", "tool", "examples": [...]}`` per tool;
* ``questions``: ``{"id", "split", "style", "query", "need", "server", "tool"}`` per
  (tool, style), a few styles per tool;
* ``judgments``: ``{"qid", "server", "tool", "p_yes", "source", "model"}`` per
  (question, candidate), candidates from ``--candidates FILE`` or mined by retrieval.

Text comes from an OpenAI-compatible chat-completions endpoint (``TOOLRANK_LLM_BASE_URL``,
``TOOLRANK_LLM_MODEL``, ``TOOLRANK_LLM_API_KEY`` or the matching flags); judgments may
also come from a local GGUF model (``--backend llama-cpp``, needs ``toolrank[llama]``).

Every run is resumable: rows already in the output file are skipped, so an interrupted
run continues where it stopped. Requests run ``--concurrency`` at a time; transient
endpoint failures are retried with exponential backoff. A bad endpoint or a reply that
cannot be used stops the run with exit code 2 and a message; the rows written so far stay.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import random
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from retrieval.catalog.formats import load_catalog, load_examples
from retrieval.catalog.model import Catalog, CatalogError, Tool, ToolId
from retrieval.jsonl import split_lines
from retrieval.writing.llm import ChatClient, GenerationError, LLMConfig
from retrieval.writing.prompting import example_messages, parse_examples
from retrieval.writing.runner import JsonlOutput, RunStats, ask, row_key, run_jobs
from training.judge import JUDGE_METHODS, EndpointJudge, Judgment, LlamaCppJudge
from training.prompting import STYLES, parse_questions, question_messages

__all__ = [
    "CandidatesFn",
    "Judge",
    "RunStats",
    "generate_examples",
    "generate_judgments",
    "generate_questions",
    "index_candidates",
    "load_candidates",
    "load_questions_file",
    "main",
    "question_id",
]

logger = logging.getLogger(__name__)

#: ``candidates_fn(question, k)`` -> candidate tool ids for one question (best first).
CandidatesFn = Callable[[Mapping[str, Any], int], Sequence[tuple[str, str]]]
#: ``judge(query, need, tool)`` -> :class:`~training.judge.Judgment`.
Judge = Callable[[str, "str | None", Tool], Judgment]


def _limited(jobs: list[Any], limit: int | None) -> list[Any]:
    if limit is not None and limit < 0:
        raise GenerationError(f"limit {limit} must be >= 0")
    return jobs if limit is None else jobs[:limit]


# ---------------------------------------------------------------- examples


def generate_examples(catalog: Catalog, client: ChatClient, out: str | Path, *, n: int = 5,
                      temperature: float = 0.8, concurrency: int = 4, limit: int | None = None,
                      attempts: int = 3, show_progress: bool = False) -> RunStats:
    """Write ``n`` example requests per tool of ``catalog`` to ``out`` (JSONL), skipping tools already there.

    Args:
        catalog: the tools to write for.
        client: the endpoint.
        out: output JSONL; rows ``{"server", "tool", "examples"}``.
        n: example requests per tool.
        temperature: sampling temperature.
        concurrency: requests in flight.
        limit: at most this many tools this run.
        attempts: requests per tool when the reply does not parse.
        show_progress: show a tqdm bar on stderr.

    Raises:
        GenerationError: bad endpoint, unusable replies, or bad arguments.
    """
    if n < 1:
        raise GenerationError(f"n={n}: ask for at least one example request per tool")
    store = JsonlOutput(out, row_key("server", "tool", needs=("examples",)))
    jobs = [t for t in catalog if tuple(t.id) not in store.done]
    total = len(catalog)

    def work(tool: Tool) -> list[dict]:
        siblings = [t for t in catalog.server_tools(tool.server) if t.id != tool.id][:40]
        examples = ask(client, example_messages(tool, siblings, n), lambda text: parse_examples(text, n),
                       temperature=temperature, attempts=attempts)
        return [{"server": tool.server, "tool": tool.name, "examples": examples}]

    return run_jobs(_limited(jobs, limit), work, store, total=total, skipped=total - len(jobs),
                    concurrency=concurrency, show_progress=show_progress, desc="examples")


# ---------------------------------------------------------------- questions


def question_id(server: str, tool: str, style: str) -> str:
    """A stable id for the question of one (tool, style): reruns and resumes agree on it."""
    digest = hashlib.sha1(f"{server}\x1f{tool}\x1f{style}".encode("utf-8")).hexdigest()
    return f"q-{digest[:12]}"


def _styles_for(tool: Tool, styles: Sequence[str], per_tool: int, seed: int) -> list[str]:
    if per_tool >= len(styles):
        return list(styles)
    rng = random.Random(f"{seed}\x1f{tool.server}\x1f{tool.name}")
    chosen = set(rng.sample(list(styles), per_tool))
    return [s for s in styles if s in chosen]


def generate_questions(catalog: Catalog, client: ChatClient, out: str | Path, *,
                       styles: Sequence[str] = STYLES, per_tool: int = 3, seed: int = 0,
                       splits: Mapping[str, str] | None = None,
                       neighbours_fn: Callable[[Tool], Sequence[Tool]] | None = None,
                       temperature: float = 0.9, concurrency: int = 4, limit: int | None = None,
                       attempts: int = 3, show_progress: bool = False) -> RunStats:
    """Write questions (with their needs) for every tool of ``catalog``, ``per_tool`` styles each.

    Each tool gets ``per_tool`` of ``styles`` (drawn with ``seed``, stable per tool) in one
    request; a question's id is :func:`question_id`, so a rerun skips what is written.

    Args:
        catalog: the tools to write for.
        client: the endpoint.
        out: output JSONL; rows ``{"id", "split", "style", "query", "need", "server", "tool"}``.
        styles: the styles to draw from (see ``training/prompts/questions.md``).
        per_tool: styles per tool.
        seed: the style draw's seed.
        splits: server -> split name; servers not in it are an error. Default: all ``train``.
        neighbours_fn: the tools shown beside the target so the question fits it alone;
            default: up to 15 other tools of the same server.
        temperature, concurrency, limit, attempts, show_progress: as in :func:`generate_examples`.

    Raises:
        GenerationError: bad endpoint, unusable replies, or bad arguments.
    """
    unknown = [s for s in styles if s not in STYLES]
    if unknown or not styles:
        raise GenerationError(f"style(s) {unknown or styles!r} not among {', '.join(STYLES)}")
    if per_tool < 1:
        raise GenerationError(f"per_tool={per_tool}: write at least one question per tool")
    if splits is not None:
        missing = [s for s in catalog.servers if s not in splits]
        if missing:
            raise GenerationError(f"the splits file names no split for {len(missing)} server(s), "
                                  f"e.g. {missing[0]!r}; add them or drop --splits")
    store = JsonlOutput(out, row_key("id", needs=("style", "query")))
    if neighbours_fn is None:
        def neighbours_fn(tool: Tool) -> list[Tool]:
            return [t for t in catalog.server_tools(tool.server) if t.id != tool.id][:15]

    jobs = []
    total = 0
    for tool in catalog:
        total += 1
        todo = [s for s in _styles_for(tool, styles, per_tool, seed)
                if (question_id(tool.server, tool.name, s),) not in store.done]
        if todo:
            jobs.append((tool, todo))

    def work(job: tuple[Tool, list[str]]) -> list[dict]:
        tool, todo = job
        found = ask(client, question_messages(tool, neighbours_fn(tool), todo),
                    lambda text: parse_questions(text, todo), temperature=temperature, attempts=attempts)
        split = splits[tool.server] if splits is not None else "train"
        return [{"id": question_id(tool.server, tool.name, s), "split": split, "style": s,
                 "query": found[s]["query"], "need": found[s]["need"],
                 "server": tool.server, "tool": tool.name} for s in todo]

    return run_jobs(_limited(jobs, limit), work, store, total=total, skipped=total - len(jobs),
                    concurrency=concurrency, show_progress=show_progress, desc="questions")


# ---------------------------------------------------------------- judgments


def _read_jsonl(path: str | Path, what: str) -> Iterator[tuple[int, dict]]:
    path = Path(path)
    try:
        lines = split_lines(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GenerationError(f"{what} file {str(path)!r} not found") from None
    except UnicodeDecodeError as exc:
        raise GenerationError(f"{what} file {str(path)!r} is not UTF-8 text ({exc})") from None
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise GenerationError(f"{path}, line {lineno}: invalid JSON ({exc})") from None
        if not isinstance(row, dict):
            raise GenerationError(f"{path}, line {lineno}: each line must be a JSON object")
        yield lineno, row


def load_questions_file(path: str | Path) -> list[dict]:
    """Questions JSONL: each line needs ``id`` and ``query``; ``need``, ``server``, ``tool`` optional.

    Raises:
        GenerationError: a line lacks ``id`` or ``query``, or an id repeats.
    """
    out, seen = [], set()
    for lineno, row in _read_jsonl(path, "questions"):
        if not isinstance(row.get("id"), str) or not isinstance(row.get("query"), str) \
                or not row["query"].strip():
            raise GenerationError(f"{path}, line {lineno}: a question needs string fields 'id' and 'query'")
        if row["id"] in seen:
            raise GenerationError(f"{path}, line {lineno}: question id {row['id']!r} repeats")
        seen.add(row["id"])
        out.append(row)
    return out


def load_candidates(path: str | Path) -> dict[str, list[ToolId]]:
    """Candidates JSONL, ``{"qid", "server", "tool"}`` per line, grouped by question in file order."""
    out: dict[str, list[ToolId]] = {}
    for lineno, row in _read_jsonl(path, "candidates"):
        if not all(isinstance(row.get(f), str) for f in ("qid", "server", "tool")):
            raise GenerationError(f"{path}, line {lineno}: a candidate needs string fields 'qid', 'server', 'tool'")
        tid = ToolId(row["server"], row["tool"])
        lst = out.setdefault(row["qid"], [])
        if tid not in lst:
            lst.append(tid)
    return out


def index_candidates(catalog: Catalog) -> CandidatesFn:
    """Candidates mined by the hybrid retriever (``retrieval.index.embedded.ToolIndex``), top ``k`` per request.

    Raises:
        GenerationError: ``retrieval.index.embedded`` cannot be imported.
    """
    try:
        from retrieval.index.embedded import ToolIndex
    except ImportError as exc:
        raise GenerationError(
            f"no --candidates file given, and retrieval.index.embedded.ToolIndex cannot be imported ({exc}); "
            'pass --candidates FILE with {"qid", "server", "tool"} lines') from None
    index = ToolIndex.build(catalog)

    def candidates(question: Mapping[str, Any], k: int) -> list[ToolId]:
        return [ToolId(*h.tool_id) for h in index.retrieve(question["query"], k=k)]

    return candidates


def _labelled(question: Mapping[str, Any]) -> ToolId | None:
    if isinstance(question.get("server"), str) and isinstance(question.get("tool"), str):
        return ToolId(question["server"], question["tool"])
    return None


def generate_judgments(catalog: Catalog, questions: Sequence[Mapping[str, Any]], judge: Judge,
                       out: str | Path, *, candidates: Mapping[str, Sequence[tuple[str, str]]] | None = None,
                       candidates_fn: CandidatesFn | None = None, k: int = 15, model: str = "",
                       concurrency: int = 4, limit: int | None = None,
                       show_progress: bool = False) -> RunStats:
    """Judge (question, candidate tool) pairs and write ``P(yes)`` per pair.

    Each question's candidates are ``candidates[qid]`` when given (as listed), else the
    top ``k`` of ``candidates_fn(question, k + 1)`` other than the labelled tool, else the
    retriever's (:func:`index_candidates`). The question's labelled tool (``server``,
    ``tool``), when it has one, is always judged too.

    Args:
        catalog: the tools candidates are drawn from.
        questions: ``{"id", "query", "need"?, "server"?, "tool"?}`` rows.
        judge: ``judge(query, need, tool) -> Judgment``.
        out: output JSONL; rows ``{"qid", "server", "tool", "p_yes", "source", "model"}``.
        candidates: qid -> candidate ids (a ``--candidates`` file).
        candidates_fn: the hook that mines candidates when ``candidates`` is not given.
        k: candidates per question from ``candidates_fn``.
        model: recorded in each row.
        concurrency, limit, show_progress: as in :func:`generate_examples`.

    Raises:
        GenerationError: an unknown tool, a bad endpoint, or an unusable reply.
    """
    if k < 1:
        raise GenerationError(f"k={k}: judge at least one candidate per question")
    if candidates is None and candidates_fn is None:
        candidates_fn = index_candidates(catalog)
    store = JsonlOutput(out, row_key("qid", "server", "tool", needs=("p_yes",)))
    pairs: list[tuple[Mapping[str, Any], ToolId]] = []
    unknown: list[str] = []
    without = skipped = 0
    for q in questions:
        label = _labelled(q)
        if candidates is not None:
            if q["id"] not in candidates:
                without += 1
            chosen = [ToolId(*c) for c in candidates.get(q["id"], ())]
        else:
            mined = [ToolId(*c) for c in candidates_fn(q, k + 1)]
            chosen = [c for c in mined if c != label][:k]
        if label is not None and label not in chosen:
            chosen.append(label)
        for tid in chosen:
            if tid not in catalog:
                unknown.append(f"{q['id']}: {tid}")
            elif (q["id"], tid.server, tid.tool) in store.done:
                skipped += 1
            else:
                pairs.append((q, tid))
    if unknown:
        raise GenerationError(f"{len(unknown)} candidate(s) are not in the catalog, e.g. {unknown[0]}; "
                              "check --catalog against the questions and candidates files")
    if without:
        logger.warning("%d question(s) have no candidates in the candidates file; only their "
                       "labelled tools are judged", without)

    def work(pair: tuple[Mapping[str, Any], ToolId]) -> list[dict]:
        q, tid = pair
        j = judge(q["query"], q.get("need") or None, catalog[tid])
        if not 0.0 <= j.p_yes <= 1.0:
            raise GenerationError(f"judge returned p_yes={j.p_yes} outside [0, 1] for {q['id']}, {tid}")
        return [{"qid": q["id"], "server": tid.server, "tool": tid.tool, "p_yes": round(float(j.p_yes), 6),
                 "source": j.source, "model": model}]

    return run_jobs(_limited(pairs, limit), work, store, total=len(pairs) + skipped, skipped=skipped,
                    concurrency=concurrency, show_progress=show_progress, desc="judgments")


# ---------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--catalog", help="catalog file (MCP-Zero JSON, wrapped tools/list JSON, or JSONL); "
                                          "default: the shipped MCP-Zero catalog with its example requests")
    common.add_argument("--out", required=True, help="output JSONL; rows already there are skipped (resume)")
    common.add_argument("--concurrency", type=int, default=4, help="requests in flight (default 4)")
    common.add_argument("--limit", type=int, help="at most this many requests this run (for a trial)")
    common.add_argument("--no-progress", action="store_true", help="no progress bar")
    common.add_argument("-v", "--verbose", action="store_true", help="log retries and fallbacks")
    endpoint = argparse.ArgumentParser(add_help=False)
    endpoint.add_argument("--base-url", help="OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1 "
                                             "(default: $TOOLRANK_LLM_BASE_URL)")
    endpoint.add_argument("--model", help="model name (default: $TOOLRANK_LLM_MODEL)")
    endpoint.add_argument("--api-key", help="API key (default: $TOOLRANK_LLM_API_KEY; prefer the variable)")
    endpoint.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default 120)")
    endpoint.add_argument("--max-retries", type=int, default=5,
                          help="retries on 429/5xx/timeouts, with exponential backoff (default 5)")
    endpoint.add_argument("--backoff", type=float, default=1.0, help="first retry wait in seconds (default 1)")
    endpoint.add_argument("--temperature", type=float, help="sampling temperature (default 0.8 examples, "
                                                            "0.9 questions; judgments always 0)")

    parser = argparse.ArgumentParser(
        prog="toolrank generate",
        description="Generate example requests, questions and judgments for a catalog through an "
                    "OpenAI-compatible endpoint (resumable).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{examples,questions,judgments}")
    ex = sub.add_parser("examples", parents=[common, endpoint], help="example requests per tool")
    ex.add_argument("--n", type=int, default=5, help="example requests per tool (default 5)")
    qs = sub.add_parser("questions", parents=[common, endpoint], help="questions with needs, by style")
    qs.add_argument("--styles", default=",".join(STYLES),
                    help=f"comma-separated styles to draw from (default {','.join(STYLES)})")
    qs.add_argument("--per-tool", type=int, default=3, help="styles (questions) per tool (default 3)")
    qs.add_argument("--seed", type=int, default=0, help="seed of the style draw (default 0)")
    qs.add_argument("--splits", help="JSON {server: split} or splits.json {'servers': {...}}; default all train")
    jd = sub.add_parser("judgments", parents=[common, endpoint], help="P(yes) per (question, candidate)")
    jd.add_argument("--questions", required=True, help="questions JSONL ({id, query, need?, server?, tool?})")
    jd.add_argument("--candidates", help='candidates JSONL ({"qid", "server", "tool"}); default: mined by '
                                         "retrieval.index.embedded.ToolIndex")
    jd.add_argument("--examples", help="example requests JSONL to index with the catalog (mining only)")
    jd.add_argument("--k", type=int, default=15, help="mined candidates per question (default 15)")
    jd.add_argument("--method", choices=JUDGE_METHODS, default="auto",
                    help="endpoint judge: token log-probabilities, a stated probability, or auto "
                         "(log-probabilities where the endpoint returns them)")
    jd.add_argument("--backend", choices=("openai", "llama-cpp"), default="openai",
                    help="openai: the endpoint; llama-cpp: a local GGUF model (pip install 'toolrank[llama]')")
    jd.add_argument("--gguf", help="GGUF model file for --backend llama-cpp")
    jd.add_argument("--n-ctx", type=int, default=4096, help="llama-cpp context length (default 4096)")
    jd.add_argument("--n-gpu-layers", type=int, default=0, help="llama-cpp layers on GPU (default 0; -1 all)")
    return parser


def _client(args: argparse.Namespace) -> ChatClient:
    config = LLMConfig.from_env(base_url=args.base_url, model=args.model, api_key=args.api_key,
                                timeout=args.timeout, max_retries=args.max_retries, backoff=args.backoff)
    return ChatClient(config, max_connections=max(1, args.concurrency))


def _load_splits(path: str) -> dict[str, str]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GenerationError(f"splits file {path!r} not found") from None
    except ValueError as exc:
        raise GenerationError(f"splits file {path!r} is not JSON ({exc})") from None
    data = data.get("servers", data) if isinstance(data, dict) else data
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise GenerationError(f"splits file {path!r}: expected {{server: split}} (or {{'servers': {{...}}}})")
    return data


def _catalog(args: argparse.Namespace) -> Catalog:
    if args.catalog:
        return load_catalog(args.catalog)
    from retrieval.catalog.formats import load_default_catalog

    return load_default_catalog(with_examples=True)  # examples only feed candidate mining


def _run_command(args: argparse.Namespace, candidates_fn: CandidatesFn | None) -> RunStats:
    catalog = _catalog(args)
    progress = not args.no_progress
    if args.command == "judgments":
        questions = load_questions_file(args.questions)
        candidates = load_candidates(args.candidates) if args.candidates else None
        if candidates is None and candidates_fn is None and args.examples:
            catalog = catalog.with_examples(load_examples(args.examples))
        if args.backend == "llama-cpp":
            if not args.gguf:
                raise GenerationError("--backend llama-cpp needs --gguf PATH to a .gguf model file")
            judge: Judge = LlamaCppJudge(args.gguf, n_ctx=args.n_ctx, n_gpu_layers=args.n_gpu_layers)
            return generate_judgments(catalog, questions, judge, args.out, candidates=candidates,
                                      candidates_fn=candidates_fn, k=args.k, model=judge.model,
                                      concurrency=1, limit=args.limit, show_progress=progress)
        with _client(args) as client:
            judge = EndpointJudge(client, method=args.method)
            return generate_judgments(catalog, questions, judge, args.out, candidates=candidates,
                                      candidates_fn=candidates_fn, k=args.k, model=client.config.model,
                                      concurrency=args.concurrency, limit=args.limit, show_progress=progress)
    with _client(args) as client:
        if args.command == "examples":
            temperature = 0.8 if args.temperature is None else args.temperature
            return generate_examples(catalog, client, args.out, n=args.n, temperature=temperature,
                                     concurrency=args.concurrency, limit=args.limit, show_progress=progress)
        styles = [s.strip() for s in args.styles.split(",") if s.strip()]
        temperature = 0.9 if args.temperature is None else args.temperature
        return generate_questions(catalog, client, args.out, styles=styles, per_tool=args.per_tool,
                                  seed=args.seed, splits=_load_splits(args.splits) if args.splits else None,
                                  temperature=temperature, concurrency=args.concurrency,
                                  limit=args.limit, show_progress=progress)


def main(argv: list[str] | None = None, *, candidates_fn: CandidatesFn | None = None) -> int:
    """``toolrank generate {examples,questions,judgments} ...``; returns the exit code.

    Args:
        argv: the arguments after ``generate`` (default ``sys.argv[1:]``).
        candidates_fn: mines judgment candidates when no ``--candidates`` file is given
            (default: :func:`index_candidates`).

    Returns:
        0 on success, 2 on a usage, endpoint or data error (message on stderr), 130 on Ctrl-C.
    """
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                            format="%(levelname)s %(name)s: %(message)s")
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request is noise here
    try:
        stats = _run_command(args, candidates_fn)
    except (GenerationError, CatalogError) as exc:
        sys.stderr.write(f"toolrank generate {args.command}: error: {exc}\n"
                         f"(rows already in {args.out} are kept; rerun to resume)\n")
        return 2
    except OSError as exc:
        sys.stderr.write(f"toolrank generate {args.command}: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"toolrank generate {args.command}: interrupted; rerun to resume\n")
        return 130
    sys.stderr.write(f"{args.command}: wrote {stats.rows} rows for {stats.done} requests to {args.out} "
                     f"({stats.skipped} of {stats.total} already there)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
