"""Example requests written at index time, for the user's own tools (docs/day-one.md).

``toolrank index ... --write-examples`` and ``PUT /v1/servers/{name}?write_examples=true`` ask
the configured LLM endpoint (``TOOLRANK_LLM_BASE_URL``, ``TOOLRANK_LLM_MODEL``,
``TOOLRANK_LLM_API_KEY``: the generator's settings) for five example requests per tool that has
none, with the generator's prompt (the shipped style, ``retrieval/writing/prompts/examples.md``),
through the client and runner of :mod:`retrieval.writing` that ``toolrank generate`` uses too.

Written examples go to a cache, a JSONL file of ``{"server", "tool", "hash", "examples"}`` rows,
keyed by the tool's content hash without examples: a tool whose name, description, schema and
server description are unchanged is never written again, and an interrupted run resumes where
it stopped (each finished tool is appended at once). When the endpoint fails, the tools it
could not do are indexed without examples, and :class:`ExampleOutcome` says which and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from retrieval.catalog.model import Catalog, Tool, ToolId
from retrieval.writing.llm import ChatClient, GenerationError, LLMConfig
from retrieval.writing.prompting import example_messages, parse_examples
from retrieval.writing.runner import JsonlOutput, ask, read_rows, row_key, run_jobs

__all__ = ["ExamplePlan", "ExampleOutcome", "bare_hash", "load_cache", "plan_examples", "write_examples",
           "OUTPUT_TOKENS_PER_EXAMPLE"]

MAX_EXAMPLE_CHARS = 4000           # the HTTP API's cap on one given example request
OUTPUT_TOKENS_PER_EXAMPLE = 30     # a shipped example request is ~20 words; JSON quoting on top


def bare_hash(tool: Tool) -> str:
    """The tool's content hash without its example requests: what the cache is keyed by."""
    return tool.with_examples(()).content_hash()


def load_cache(path: str | Path) -> dict[tuple[str, str, str], list[str]]:
    """``(server, tool, hash) -> examples`` of a cache file (empty when there is none).

    Raises:
        ValueError: a line that is not a cache row (names the file and line).
    """
    def key(row: dict) -> tuple[str, str, str]:
        ex = row["examples"]
        if not isinstance(ex, list) or not all(isinstance(e, str) for e in ex):
            raise TypeError("examples")
        return row["server"], row["tool"], row["hash"]

    rows = read_rows(path, key, what="an example cache row ({server, tool, hash, examples})")
    return {k: [c for c in map(clean_example, row["examples"]) if c] for k, row in rows.items()}


def _siblings(catalog: Catalog, tool: Tool) -> list[Tool]:
    return [t for t in catalog.server_tools(tool.server) if t.id != tool.id][:40]


@dataclass
class ExamplePlan:
    """What a run would do: the tools to write for, those the cache already has, and the cost."""

    todo: list[Tool]
    cached: dict[ToolId, list[str]]
    own: int                      # tools that came with example requests of their own
    input_tokens: int | None      # None when no token counter was given
    output_tokens: int

    def format(self) -> str:
        prompt = "" if self.input_tokens is None else f"{self.input_tokens:,} prompt tokens and "
        return (f"{len(self.todo)} tool(s) need example requests ({len(self.cached)} cached, {self.own} have their "
                f"own): about {prompt}{self.output_tokens:,} completion tokens ({len(self.todo)} requests)")


def plan_examples(catalog: Catalog, cache: str | Path, *, n: int = 5,
                  count_tokens: Callable[[str], int] | None = None) -> ExamplePlan:
    """Which tools of ``catalog`` need example requests written (no request is sent).

    Args:
        count_tokens: counts a prompt text's tokens (the CLI passes the pipeline's ``TokenCounter``);
            without it the plan's ``input_tokens`` is None.
    """
    rows = load_cache(cache)
    todo, cached, own = [], {}, 0
    for tool in catalog:
        if tool.examples:
            own += 1
            continue
        found = rows.get((tool.server, tool.name, bare_hash(tool)))
        if found is not None:
            cached[tool.id] = found
        else:
            todo.append(tool)
    tokens_in = None if count_tokens is None else \
        sum(count_tokens(m["content"]) + 4 for t in todo for m in example_messages(t, _siblings(catalog, t), n))
    return ExamplePlan(todo, cached, own, tokens_in, len(todo) * (n * OUTPUT_TOKENS_PER_EXAMPLE + 10))


@dataclass
class ExampleOutcome:
    """The catalog with every example request there is, and what happened."""

    catalog: Catalog
    written: int                  # tools written by the endpoint this run
    cached: int                   # tools whose examples came from the cache
    missing: list[ToolId] = field(default_factory=list)   # tools left without examples
    error: str | None = None      # why the endpoint stopped, when it did

    def format(self) -> str:
        text = f"example requests: {self.written} tool(s) written, {self.cached} from the cache"
        if self.missing:
            text += (f"; {len(self.missing)} tool(s) indexed WITHOUT example requests"
                     + (f" because the endpoint failed: {self.error}" if self.error else "")
                     + " (the index is usable; rerun to write them)")
        return text


def clean_example(text: str) -> str:
    """An LLM-written example request as API input is kept: whitespace folded, control characters dropped,
    cut to :data:`MAX_EXAMPLE_CHARS` (the HTTP API's cap on a given example)."""
    text = "".join(ch for ch in text if ch.isprintable() or ch.isspace())
    text = " ".join(text.split())
    return text[:MAX_EXAMPLE_CHARS].rstrip()


def write_examples(catalog: Catalog, client: ChatClient | None, cache: str | Path, *, n: int = 5,
                   temperature: float = 0.8, concurrency: int = 4, attempts: int = 3, show_progress: bool = False,
                   deadline_s: float | None = None) -> ExampleOutcome:
    """Write example requests for the tools of ``catalog`` that have none (cached by content hash).

    Never raises for the endpoint: its failure leaves those tools without examples, and says so.
    ``deadline_s`` bounds the whole call: tools not written by then stay without examples (said so).
    Each example is cleaned and capped like API input (:func:`clean_example`).
    """
    plan = plan_examples(catalog, cache, n=n)
    out = JsonlOutput(cache, row_key("server", "tool", "hash", needs=("examples",)))

    def work(tool: Tool) -> list[dict]:
        examples = ask(client, example_messages(tool, _siblings(catalog, tool), n),
                       lambda text: [e for e in map(clean_example, parse_examples(text, n)) if e],
                       temperature=temperature, attempts=attempts)
        return [{"server": tool.server, "tool": tool.name, "hash": bare_hash(tool), "examples": examples}]

    error = None
    written = 0
    if plan.todo:
        try:
            import time

            stats = run_jobs(plan.todo, work, out, total=len(plan.todo), skipped=0, concurrency=concurrency,
                             show_progress=show_progress, desc="example requests",
                             deadline=None if deadline_s is None else time.monotonic() + deadline_s)
            written = stats.done
        except GenerationError as exc:
            error = str(exc)
        except Exception as exc:   # a broken connection or an odd reply: the index must still be built
            error = f"{type(exc).__name__}: {exc}"
    rows = load_cache(cache)
    examples: dict[ToolId, list[str]] = {}
    missing = []
    for tool in catalog:
        if tool.examples:
            continue
        found = rows.get((tool.server, tool.name, bare_hash(tool)))
        if found is None:
            missing.append(tool.id)
        else:
            examples[tool.id] = found
    if error is not None:
        written = len(examples) - len(plan.cached)
    return ExampleOutcome(catalog.with_examples(examples, strict=False), written, len(plan.cached), missing, error)


def llm_client(concurrency: int = 4) -> ChatClient:
    """A chat client from the ``TOOLRANK_LLM_*`` settings.

    Raises:
        ValueError: the endpoint is not configured (the message names the variables).
    """
    return ChatClient(LLMConfig.from_env(), max_connections=max(1, concurrency))


def format_dry_run(plan: ExamplePlan) -> str:
    return "dry run, nothing written: " + plan.format()


def cache_beside(path: str | Path, what: str = "examples") -> Path:
    """The default cache of an index folder: ``<folder>.<what>.jsonl`` beside it (the folder is
    replaced whole on every save)."""
    path = Path(path)
    return path.with_name(f"{path.name}.{what}.jsonl")

