"""Prompt files, the tool text every writer reads, and the example-request prompt and its parser.

A prompt file holds named sections, each opened by a line ``<!-- section: NAME -->``; ``system`` is
sent as is, the others are ``string.Template`` texts (``$name``). The example-request prompt is
``retrieval/writing/prompts/examples.md``; the training generator's own prompts (questions,
judgments) live in ``training/prompts/`` and are read with the same :func:`load_prompt`.
"""

from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

from retrieval.catalog.model import Tool

from .llm import MalformedReplyError

__all__ = [
    "PROMPTS_DIR",
    "ContentError",
    "Prompt",
    "clip",
    "example_messages",
    "json_object",
    "load_prompt",
    "parameter_lines",
    "parse_examples",
    "tool_list",
    "tool_text",
]

PROMPTS_DIR = Path(__file__).parent / "prompts"

_SECTION = re.compile(r"^<!--\s*section:\s*([\w-]+)\s*-->\s*$", re.MULTILINE)


class ContentError(MalformedReplyError):
    """The model's text does not follow the requested format (worth asking again)."""


@dataclass(frozen=True)
class Prompt:
    """A prompt file's sections."""

    name: str
    sections: dict[str, str]

    @property
    def system(self) -> str:
        return self.sections["system"]

    def render(self, section: str, **values: Any) -> str:
        """Fill one section's ``$placeholders``.

        Raises:
            KeyError: the section or a placeholder's value is missing.
        """
        return string.Template(self.sections[section]).substitute(values)


@lru_cache(maxsize=None)
def load_prompt(name: str, directory: str | None = None) -> Prompt:
    """Read ``{directory or PROMPTS_DIR}/{name}.md``.

    Raises:
        ValueError: the file is missing or has no ``system`` section.
    """
    path = Path(directory or PROMPTS_DIR) / f"{name}.md"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"prompt file {path} not found") from None
    parts = _SECTION.split(text)
    sections = {parts[i]: parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}
    if "system" not in sections or "user" not in sections:
        raise ValueError(f"prompt file {path} needs '<!-- section: system -->' and "
                         "'<!-- section: user -->' sections")
    return Prompt(name, sections)


def clip(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters (with ``...``)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit].rstrip() + "..."


def parameter_lines(tool: Tool) -> list[str]:
    """One line per parameter of the tool's input schema: name, type, required, description."""
    schema = tool.input_schema or {}
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict):
        return []
    required = set(schema.get("required") or ())
    lines = []
    for pname, spec in props.items():
        spec = spec if isinstance(spec, dict) else {}
        kind = spec.get("type", "any")
        kind = "/".join(map(str, kind)) if isinstance(kind, list) else str(kind)
        flag = ", required" if pname in required else ""
        desc = clip(str(spec.get("description") or ""), 200)
        lines.append(f"- {pname} ({kind}{flag})" + (f": {desc}" if desc else ""))
    return lines


def tool_text(tool: Tool, *, max_description: int = 1500) -> str:
    """A tool as the writers and the judge read it: server, name, description, parameters."""
    lines = [f"Server: {tool.server}"]
    if tool.server_description:
        lines.append(f"Server description: {clip(tool.server_description, 600)}")
    lines.append(f"Tool: {tool.name}")
    lines.append(f"Description: {clip(tool.description, max_description) or '(none given)'}")
    params = parameter_lines(tool)
    lines.append("Parameters:" if params else "Parameters: none")
    lines.extend(params)
    return "\n".join(lines)


def tool_list(tools: Sequence[Tool]) -> str:
    """Other tools, one line each, shown beside the one written for."""
    if not tools:
        return "(none)"
    return "\n".join(f"- {t.server} / {t.name}: {clip(t.description, 160)}" for t in tools)


def messages(name: str, **values: Any) -> list[dict[str, str]]:
    """Chat messages of a prompt file: its system section, and its user section filled with ``values``."""
    prompt = load_prompt(name)
    return [{"role": "system", "content": prompt.system}, {"role": "user", "content": prompt.render("user", **values)}]


def example_messages(tool: Tool, siblings: Sequence[Tool], n: int) -> list[dict[str, str]]:
    """Chat messages asking for ``n`` example requests for ``tool``."""
    return messages("examples", tool=tool_text(tool), siblings=tool_list(siblings), n=n)


def json_object(text: str) -> Any:
    """The JSON object in a reply, tolerating code fences and chatter around it.

    Raises:
        ContentError: no object, or one that does not parse.
    """
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ContentError(f"no JSON object in the reply {text[:160]!r}")
    try:
        return json.loads(text[start:end + 1])
    except ValueError as exc:
        raise ContentError(f"the reply's JSON does not parse ({exc}): {text[start:start + 160]!r}") from None


def parse_examples(text: str, n: int) -> list[str]:
    """``n`` distinct non-empty example requests from a reply ``{"examples": [...]}``.

    Raises:
        ContentError: no such list, or fewer than ``n`` distinct strings (extra ones are dropped).
    """
    data = json_object(text)
    items = data.get("examples") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ContentError(f"the reply has no 'examples' list: {text[:160]!r}")
    out: list[str] = []
    for item in items:
        if isinstance(item, str) and item.strip() and item.strip() not in out:
            out.append(item.strip())
    if len(out) < n:
        raise ContentError(f"the reply has {len(out)} distinct example requests, {n} were asked for")
    return out[:n]
