"""The content rules every loader (and the service's ``PUT /v1/servers``) applies, so whatever
is accepted can be stored and read back unchanged:

* server and tool names: NFC-normalised; 1 to 200 characters; printable only (no control,
  format, bidi-override, zero-width, private-use or unassigned characters, no U+FFFD, no
  space but U+0020 and none at either end); letters of one of the look-alike scripts only
  (Latin, Greek, Cyrillic, Armenian, Cherokee, Coptic are never mixed in one name); no
  compatibility forms of letters or digits (full-width, mathematical, ligatures);
* every text: no lone surrogates;
* ``inputSchema``: a JSON object nested at most :data:`MAX_SCHEMA_DEPTH` levels, at most
  :data:`MAX_SCHEMA_BYTES` bytes as compact JSON, finite numbers, integers within 64 bits.

Each check raises :class:`~retrieval.catalog.model.CatalogError` naming the problem.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from typing import Any, Iterable

from .model import CatalogError

__all__ = ["MAX_NAME_CHARS", "MAX_SCHEMA_DEPTH", "MAX_SCHEMA_BYTES", "check_name", "check_text", "check_json",
           "check_schema", "confusable_with"]

MAX_NAME_CHARS = 200
MAX_SCHEMA_DEPTH = 64              # nesting levels of an inputSchema (the object itself is level 1); real Smithery schemas reach 33
MAX_SCHEMA_BYTES = 256 * 1024      # an inputSchema as compact UTF-8 JSON; the largest real Smithery one is 137 KB
_MAX_JSON_INT = 2 ** 63            # integers must fit 64 bits (what other JSON readers keep exact)

# Characters that are never part of a name: controls, format characters (bidi overrides and
# isolates, zero-width joiners, the BOM, soft hyphens), surrogates, private use, unassigned,
# line and paragraph separators. Spaces other than U+0020 are refused separately.
_NEVER_IN_NAMES = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}
# Scripts whose letters pass for each other; a name may use letters of one of them only.
_LOOKALIKE_SCRIPTS = {"LATIN", "GREEK", "CYRILLIC", "ARMENIAN", "CHEROKEE", "COPTIC"}
# Whole-script look-alikes of Latin letters, for telling apart names that read the same.
_LOOKALIKES = str.maketrans(dict(zip(
    "аеорсухіјѕԁӏһԛԝѵъьАВЕКМНОРСТХУІЈЅԜΑΒΕΖΗΙΚΜΝΟΡΤΥΧοινκρτυχαօսզց",
    "aeopcyxijsdlhqwvbbABEKMHOPCTXYIJSWABEZHIKMNOPTYXoivkptuxaouqg")))
_SURROGATE = re.compile("[\ud800-\udfff]")


def check_name(value: Any, what: str) -> str:
    """A server or tool name, NFC-normalised; raises :class:`CatalogError` naming the problem.

    Args:
        value: the name as given.
        what: how to name it in the message, e.g. ``"server name"`` or ``"tools[2].name"``.
    """
    if not isinstance(value, str):
        raise CatalogError(f"{what} must be a string, got {type(value).__name__}")
    check_text(value, what)
    name = unicodedata.normalize("NFC", value)
    if not name or len(name) > MAX_NAME_CHARS:
        raise CatalogError(f"{what} must be 1 to {MAX_NAME_CHARS} characters, got {len(name)}")
    if not name.strip():
        raise CatalogError(f"{what} is empty (only spaces); write a name")
    if name != name.strip(" "):
        raise CatalogError(f"{what} {name!r} starts or ends with a space; remove it")
    scripts: set[str] = set()
    for i, ch in enumerate(name):
        cat = unicodedata.category(ch)
        if cat in _NEVER_IN_NAMES or (cat == "Zs" and ch != " ") or ch == "\ufffd":
            raise CatalogError(
                f"{what} {name!r} holds the unprintable or invisible character U+{ord(ch):04X} at position {i} "
                "(controls, bidi overrides, zero-width and replacement characters are not allowed in names); "
                "write the name in plain printable characters")
        if cat[0] in "LN" and unicodedata.normalize("NFKC", ch) != ch:
            raise CatalogError(
                f"{what} {name!r} writes {ch!r} (U+{ord(ch):04X}) in a compatibility form (full-width, "
                f"mathematical or ligature); write it as {unicodedata.normalize('NFKC', ch)!r}")
        if cat[0] == "L":
            script = unicodedata.name(ch, "").split(" ")[0]
            if script in _LOOKALIKE_SCRIPTS:
                scripts.add(script)
    if len(scripts) > 1:
        raise CatalogError(
            f"{what} {name!r} mixes letters of the {' and '.join(sorted(s.title() for s in scripts))} scripts, "
            "which look alike; write it in one script")
    return name


def check_text(value: str, what: str) -> str:
    """``value`` unchanged, or :class:`CatalogError` when it holds a lone surrogate (not storable as UTF-8)."""
    m = _SURROGATE.search(value)
    if m:
        raise CatalogError(f"{what} holds a lone surrogate (U+{ord(m.group()):04X}) at position {m.start()}, "
                           "which is not Unicode text; send valid UTF-8 / JSON \\u escapes in pairs")
    return value


def check_json(value: Any, what: str, *, max_depth: int) -> int:
    """Check a parsed JSON value without recursion; returns its nesting depth.

    Refuses nesting deeper than ``max_depth`` (containers count; scalars add nothing),
    non-string keys, NaN and infinities, integers beyond 64 bits, lone surrogates in keys
    and strings, and anything that is not a JSON type.

    Raises:
        CatalogError: naming the path of the first problem.
    """
    deepest = 0
    stack: list[tuple[Any, int, str]] = [(value, 1, what)]
    while stack:
        node, depth, at = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > max_depth:
                raise CatalogError(f"{at}: nested more than {max_depth} levels deep; flatten it "
                                   f"(at most {max_depth} levels of objects and arrays)")
            deepest = max(deepest, depth)
            if isinstance(node, dict):
                for k, v in node.items():
                    if not isinstance(k, str):
                        raise CatalogError(f"{at}: object keys must be strings, got {type(k).__name__}")
                    check_text(k, f"{at}: a key")
                    stack.append((v, depth + 1, f"{at}.{k[:40]}"))
            else:
                stack.extend((v, depth + 1, f"{at}[{i}]") for i, v in enumerate(node))
        elif isinstance(node, str):
            check_text(node, at)
        elif isinstance(node, bool) or node is None:
            pass
        elif isinstance(node, int):
            if not -_MAX_JSON_INT <= node < _MAX_JSON_INT:
                raise CatalogError(f"{at}: integer {str(node)[:20]}... does not fit 64 bits; use a smaller number")
        elif isinstance(node, float):
            if not math.isfinite(node):
                raise CatalogError(f"{at}: {node} is not a JSON number; use a finite number")
        else:
            raise CatalogError(f"{at}: {type(node).__name__} is not a JSON value")
    return deepest


def check_schema(schema: Any, what: str) -> dict[str, Any] | None:
    """An ``inputSchema`` (None or a JSON object) within :data:`MAX_SCHEMA_DEPTH` and :data:`MAX_SCHEMA_BYTES`."""
    if schema is None:
        return None
    if not isinstance(schema, dict):
        raise CatalogError(f"{what}: field 'inputSchema' must be an object")
    check_json(schema, f"{what}: inputSchema", max_depth=MAX_SCHEMA_DEPTH)
    size = len(json.dumps(schema, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    if size > MAX_SCHEMA_BYTES:
        raise CatalogError(f"{what}: inputSchema is {size} bytes as compact JSON; the limit is "
                           f"{MAX_SCHEMA_BYTES}: shorten its descriptions or drop unused parts")
    return schema


def _lookalike_key(name: str) -> str:
    return unicodedata.normalize("NFKC", name).translate(_LOOKALIKES)


def confusable_with(name: str, existing: Iterable[str]) -> str | None:
    """An existing name other than ``name`` that reads the same (look-alike letters of another
    script), or None. Case counts: 'FireCrawl' and 'Firecrawl' are different servers."""
    key = _lookalike_key(name)
    return next((e for e in existing if e != name and _lookalike_key(e) == key), None)
