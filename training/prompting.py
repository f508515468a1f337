"""The training generator's prompts (questions, judgments): loaded from ``training/prompts/*.md``,
rendered, and their replies parsed.

The prompt-file format, the tool text every writer reads, and the example-request prompt and its
parser are :mod:`retrieval.writing.prompting` (index time writes example requests too).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from retrieval.catalog.model import Tool
from retrieval.writing.prompting import (
    ContentError,
    Prompt,
    clip,
    json_object,
    parameter_lines,
    tool_list,
    tool_text,
)
from retrieval.writing.prompting import load_prompt as _load_prompt

__all__ = [
    "JUDGMENT_QUESTION",
    "PROMPTS_DIR",
    "STYLES",
    "judgment_messages",
    "load_prompt",
    "parse_questions",
    "question_messages",
    "request_record",
]

PROMPTS_DIR = Path(__file__).parent / "prompts"

JUDGMENT_QUESTION = (
    "Would this tool, called with suitable arguments, itself do what the user asked? "
    "A merely related tool, or one that needs another tool to finish the job, is not enough."
)

STYLES = ("explicit", "function", "category", "goal", "problem")


def load_prompt(name: str) -> Prompt:
    """``training/prompts/{name}.md`` (questions, judgments).

    Raises:
        ValueError: the file is missing or malformed.
    """
    return _load_prompt(name, str(PROMPTS_DIR))


def question_messages(tool: Tool, neighbours: Sequence[Tool], styles: Sequence[str]) -> list[dict[str, str]]:
    """Chat messages asking for one question (with its need) per style for ``tool``."""
    prompt = load_prompt("questions")
    user = prompt.render("user", tool=tool_text(tool), neighbours=tool_list(neighbours),
                         styles=", ".join(styles))
    return [{"role": "system", "content": prompt.system}, {"role": "user", "content": user}]


def request_record(query: str, need: str | None, tool: Tool, *, max_description: int = 1500) -> str:
    """The request and the candidate, in the record layout the scorer reads (see DESIGN.md)."""
    lines = [f"User request: {query}"]
    if need:
        lines.append(f"The assistant is looking for: {need}")
    desc = clip(tool.description, max_description) or "(no description)"
    lines.append(f"Candidate tool: {tool.server} / {tool.name}: {desc}")
    if tool.server_description:
        lines.append(f"Server description: {clip(tool.server_description, 600)}")
    params = parameter_lines(tool)
    lines.append("Parameters:" if params else "Parameters: none")
    lines.extend(params)
    return "\n".join(lines)


def judgment_messages(query: str, need: str | None, tool: Tool, mode: str) -> list[dict[str, str]]:
    """Chat messages asking :data:`JUDGMENT_QUESTION` about one candidate.

    Args:
        mode: ``logprobs`` (answer one word, yes or no) or ``verbalised`` (answer a probability).
    """
    prompt = load_prompt("judgments")
    answer = prompt.sections[f"answer-{mode}"]
    user = prompt.render("user", record=request_record(query, need, tool),
                         question=JUDGMENT_QUESTION, answer=answer)
    return [{"role": "system", "content": prompt.system}, {"role": "user", "content": user}]


def parse_questions(text: str, styles: Sequence[str]) -> dict[str, dict[str, str]]:
    """One ``{"query", "need"}`` per requested style from ``{"questions": [...]}``.

    Raises:
        ContentError: a style is missing, or a query or need is empty.
    """
    data = json_object(text)
    items = data.get("questions") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ContentError(f"the reply has no 'questions' list: {text[:160]!r}")
    found: dict[str, dict[str, str]] = {}
    for item in items:
        if not isinstance(item, dict):
            continue
        style, query, need = item.get("style"), item.get("query"), item.get("need")
        if style in styles and style not in found and isinstance(query, str) and query.strip() \
                and isinstance(need, str) and need.strip():
            found[style] = {"query": query.strip(), "need": need.strip()}
    missing = [s for s in styles if s not in found]
    if missing:
        raise ContentError(f"the reply lacks a complete question for style(s) {', '.join(missing)}")
    return found
