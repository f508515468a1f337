"""The record the cross-encoder (and the LLM judge) reads: one function, used everywhere.

Training, distillation, the LLM teacher and the runtime scorer all build their text
with :func:`format_record`, so what the model was trained on and what it sees in
production cannot drift apart. Any change to the produced text must bump
:data:`RECORD_FORMAT_VERSION`; a model folder records the version it was trained
with and :class:`scorer.Scorer` refuses to load a mismatch.

The pair looks like this (query side, then tool side)::

    User request: {request}
    The assistant is looking for: {need}            (omitted when need is empty)

    Candidate tool: {server} / {tool name}: {description, truncated at a word boundary with '…'}
    Examples: {example 1} | {example 2}             (only when examples > 0 and the tool has some)
    Parameters: {name 1}, {name 2}, …               (only when parameters > 0 and the schema has some)
    Server: {the server's description, truncated}    (only when server_description_chars > 0; version 2)

A new catalog has no example requests, but every MCP tool has an input schema: its
parameter names say what the tool acts on (``calendar_id``, ``new_name``), which is what
tells "rename" from "create" when descriptions are thin. The server's description (version 2)
says what the tool's platform *is* ("Apache Airflow: workflow orchestration"), which a request
often names instead of the tool ("every workflow on our scheduler"). It comes last, so when a long
record is cut to the model's length it is the first thing to go.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence


class Tool(Protocol):
    """What a record reads of a tool (:class:`retrieval.catalog.model.Tool` has it); scorer imports nothing from above."""

    server: str
    name: str
    description: str
    examples: Sequence[str]
    input_schema: dict[str, Any] | None

__all__ = ["RECORD_FORMAT_VERSION", "READABLE_RECORD_VERSIONS", "ELLIPSIS", "REQUEST_CUTS", "RequestFitter", "format_record", "record_text",
           "truncate_at_word"]

RECORD_FORMAT_VERSION = 2
"""Version of the text produced by :func:`format_record`; bump on any change to it."""

READABLE_RECORD_VERSIONS = (1, 2)
"""Model folders this package builds records for. Version 2 only added the optional server line:
with ``server_description_chars=0`` it writes exactly version 1's text."""

ELLIPSIS = "…"

# Characters dropped from the end of a truncated description before the ellipsis,
# so that "reads a file, " does not become "reads a file,…".
_TRAILING = " ,;:-–—/|([{"


def _clean(text: Any) -> str:
    """Collapse every run of whitespace (newlines, tabs, NBSP…) to one space and strip."""
    if text is None:
        return ""
    return " ".join(str(text).split())


def truncate_at_word(text: str, max_chars: int) -> str:
    """Shorten ``text`` to at most ``max_chars`` characters, cutting at a word boundary.

    Whitespace is normalised first. When the text has to be cut, the result ends with
    ``'…'`` and its length, ellipsis included, is at most ``max_chars``. A single word
    longer than the budget is cut inside the word.

    Args:
        text: The text to shorten.
        max_chars: The budget in characters, at least 2 (one character and the ellipsis).

    Returns:
        The normalised text, unchanged when it fits.

    Raises:
        ValueError: ``max_chars`` is smaller than 2.
    """
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 2:
        raise ValueError(f"max_chars must be an int >= 2, got {max_chars!r}; pass a larger budget")
    text = _clean(text)
    if len(text) <= max_chars:
        return text
    limit = max_chars - len(ELLIPSIS)
    if text[limit] == " ":  # the cut falls exactly between two words
        cut = text[:limit]
    else:
        space = text.rfind(" ", 0, limit)
        cut = text[:space] if space > 0 else text[:limit]
    cut = cut.rstrip(_TRAILING) or text[:limit]
    return cut + ELLIPSIS


def format_record(
    request: str,
    need: str | None,
    tool: "Tool",
    *,
    max_description_chars: int = 300,
    examples: int = 0,
    parameters: int = 0,
    server_description_chars: int = 0,
) -> tuple[str, str]:
    """Build the (query_text, tool_text) pair the cross-encoder scores.

    Whitespace in every field is normalised (runs of whitespace become one space), so
    two records that differ only in formatting are the same record. Inputs are never
    modified.

    Args:
        request: The user's request, as the assistant received it. Must not be blank.
        need: What the assistant is looking for, in its own words; ``None`` or blank
            omits the line.
        tool: Any object with ``server``, ``name``, ``description`` and ``examples``
            attributes (normally :class:`retrieval.catalog.model.Tool`).
        max_description_chars: Budget for the description, ellipsis included (>= 2).
        examples: How many of the tool's example requests to append (0 = none).
        parameters: How many of the tool's input-schema parameter names to append (0 = none).
        server_description_chars: Budget for the server's description line (0 = no line).

    Returns:
        ``(query_text, tool_text)``, ready for a cross-encoder's pair tokeniser.

    Raises:
        ValueError: ``request`` is blank, ``examples`` is negative, or
            ``max_description_chars`` is below 2.
    """
    query = _clean(request)
    if not query:
        raise ValueError("request is empty: pass the user's request text to format_record")
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 0:
        raise ValueError(f"examples must be an int >= 0, got {examples!r}")
    if isinstance(max_description_chars, bool) or not isinstance(max_description_chars, int) \
            or max_description_chars < 2:
        raise ValueError(
            f"max_description_chars must be an int >= 2, got {max_description_chars!r}; "
            "use the value recorded in the model's config.json"
        )

    query_text = f"User request: {query}"
    need_text = _clean(need)
    if need_text:
        query_text += f"\nThe assistant is looking for: {need_text}"

    server = _clean(getattr(tool, "server", ""))
    name = _clean(getattr(tool, "name", ""))
    description = truncate_at_word(getattr(tool, "description", "") or "", max_description_chars)
    # /v1/score candidates may come without a server: then the record names the tool alone.
    tool_text = f"Candidate tool: {server} / {name}" if server else f"Candidate tool: {name}"
    if description:
        tool_text += f": {description}"
    if examples:
        picked = [e for e in (_clean(x) for x in (getattr(tool, "examples", None) or ())) if e][:examples]
        if picked:
            tool_text += "\nExamples: " + " | ".join(picked)
    if parameters:
        names = _parameter_names(getattr(tool, "input_schema", None))[:parameters]
        if names:
            tool_text += "\nParameters: " + ", ".join(names)
    if server_description_chars:
        if isinstance(server_description_chars, bool) or not isinstance(server_description_chars, int) \
                or server_description_chars < 2:
            raise ValueError(f"server_description_chars must be 0 or an int >= 2, got {server_description_chars!r}")
        about = truncate_at_word(getattr(tool, "server_description", "") or "", server_description_chars)
        if about:
            tool_text += f"\nServer: {about}"
    return query_text, tool_text


REQUEST_CUTS = ("head_tail", "end", "start")
"""How a request longer than its token budget is cut: keep its start and its end (``head_tail``),
only its end (``end``: the ask is often the last sentence) or only its start (``start``)."""


class RequestFitter:
    """Cuts the *request* to a token budget of its own, once per request, before any pairing.

    A pair tokeniser that truncates ``longest_first`` cuts the end of a long request, where the
    actual ask often is, and cuts it differently for each candidate of the list (a longer
    description takes more from the request). Here the query side (``User request: …`` and the
    need line) gets at most ``budget`` tokens, cut where it loses least, and the pair is then
    truncated on the tool side only, so every candidate of a list sees the same request text.
    Training (``training/distill.py``) and the runtime scorer use this same class.

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` (the model's ``tokenizer.json``); a copy without
            truncation or padding is kept.
        budget: tokens for the whole query side, special tokens excluded (>= 16).
        cut: one of :data:`REQUEST_CUTS`.
        head_share: with ``head_tail``, the share of the request budget kept from its start.
    """

    def __init__(self, tokenizer: Any, budget: int, cut: str = "head_tail", head_share: float = 0.34):
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 16:
            raise ValueError(f"request budget must be an int >= 16 tokens, got {budget!r}")
        if cut not in REQUEST_CUTS:
            raise ValueError(f"request cut must be one of {REQUEST_CUTS}, got {cut!r}")
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_str(tokenizer.to_str())
        self._tok.no_truncation()
        self._tok.no_padding()
        self.budget = budget
        self.cut = cut
        self.head_share = head_share

    def _offsets(self, text: str) -> list[tuple[int, int]]:
        return self._tok.encode(text, add_special_tokens=False).offsets

    def _cut(self, text: str, keep: int, cut: str) -> str:
        offsets = self._offsets(text)
        if len(offsets) <= keep:
            return text
        keep = max(keep - 1, 2)  # one token for the ellipsis
        if cut == "start":
            return text[: offsets[keep - 1][1]].rstrip() + " " + ELLIPSIS
        if cut == "end":
            return ELLIPSIS + " " + text[offsets[len(offsets) - keep][0]:].lstrip()
        head = max(1, int(round(keep * self.head_share)))
        tail = keep - head
        return (text[: offsets[head - 1][1]].rstrip() + " " + ELLIPSIS + " "
                + text[offsets[len(offsets) - tail][0]:].lstrip())

    def fit(self, request: str, need: str | None) -> tuple[str, str | None]:
        """The (request, need) to put in the record: unchanged when the query side fits."""
        request, need = _clean(request), _clean(need) or None
        need_tokens = 0
        if need:
            need = self._cut(need, self.budget // 3, "start")
            need_tokens = len(self._offsets(need)) + 8   # "The assistant is looking for:"
        return self._cut(request, self.budget - 3 - need_tokens, self.cut), need


def _parameter_names(schema: Any) -> list[str]:
    """Top-level property names of an input schema, required ones first (schema order kept)."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return []
    names = [_clean(k) for k in schema["properties"] if _clean(k)]
    required = set(schema.get("required") or []) if isinstance(schema.get("required"), list) else set()
    return [n for n in names if n in required] + [n for n in names if n not in required]


def record_text(
    request: str,
    need: str | None,
    tool: "Tool",
    *,
    max_description_chars: int = 300,
    examples: int = 0,
) -> str:
    """The whole record as one text (query side, newline, tool side), for an LLM judge.

    Same arguments and errors as :func:`format_record`.
    """
    query_text, tool_text = format_record(
        request, need, tool, max_description_chars=max_description_chars, examples=examples
    )
    return f"{query_text}\n{tool_text}"
