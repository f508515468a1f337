"""A catalog's own calibration, written at index time from requests for its tools (issue 34).

The shipped confidence models are fitted on toolrank's catalogs; on a user's catalog their probabilities
read off by a catalog-dependent amount (held out, day one: under-confident by 0.1-0.25 on catalogs of few,
distinct tools, about right where many tools look alike), and no map fitted on other catalogs transfers
(docs/results.md). ``toolrank index ... --calibrate`` asks the LLM endpoint that writes example requests
(``TOOLRANK_LLM_*``) for **probes**: one request for each of up to ``n`` tools drawn from the catalog (the
writer sees the tool, as an index-time writer does), a one-line need written from the request alone (as an
agent writes it, never seeing the tool), each searched with and without its need; where the first tool is
not the probe's own, the endpoint judges whether it does what the request asked (the teacher's question).
The map ``q = sigmoid(a * logit(p) + b)`` is fitted on every probe search's best probability and whether its
first tool fits, both modes together (one map per index: a later attempt may come with or without a need),
with the tenant recalibration's pull towards the identity (``recalibration.fit_recalibration``), and saved
with the index (``catalog_calibration`` in its manifest). Its form was chosen on the fit catalogs' probes
(one Platt map over both modes: mean ECE 0.047 with the need and 0.062 without, against 0.065 / 0.066 for
one shift, 0.150 / 0.164 shipped; ``benchmarks/catalog_probes.py``).

What it changes: the probabilities, and with them the zone thresholds (proceed, the no-fit floor, the
floor for extra tools, the exact-name confidence), all through the same monotone map. So **every decision and
every order stays as shipped** (the zones were chosen on real no-fit requests, which probes do not have:
their twins read lower than real no-fit requests do), and what the numbers say is this catalog's: on the
held-out catalogs, mean ECE of the best probability 0.136 -> 0.083 with the need and 0.130 -> 0.109 without
(MCP-Zero organisations 0.170 -> 0.035, MCPToolBench++ 0.236 -> 0.057; worse where probes are easier than the
catalog's real requests: RestBench with the need, three kinds without; docs/results.md). A catalog whose tools
change drops its calibration (re-index).
"""

from __future__ import annotations

import logging
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from retrieval.catalog.model import Catalog, Tool, ToolId
from retrieval.writing.llm import ChatClient, GenerationError
from retrieval.writing.prompting import ContentError, clip, json_object, load_prompt, tool_list, tool_text
from retrieval.writing.runner import JsonlOutput, ask, read_rows, row_key, run_jobs

from .recalibration import _logit, expit, fit_recalibration

if TYPE_CHECKING:
    from .decision import Policy
    from .flow import Pipeline

__all__ = ["CatalogCalibration", "ProbeOutcome", "DEFAULT_PROBES", "PULL", "STYLES", "fit_probes", "plan_probes",
           "write_probes", "probe_cache_beside"]

log = logging.getLogger(__name__)

DEFAULT_PROBES = 100
PULL = 0.5            # towards the identity, as the tenant recalibration's (recalibration.DEFAULT_PULL)
MIN_PROBES = 20       # fewer searches say too little about a catalog's level
STYLES = ("plain", "concrete", "goal", "question", "casual")
VOICES = ("terse", "verbose", "platform", "plain", "first_step")
FITS_AT = 0.5         # a judged probability at or over this: the first tool fits


@dataclass(frozen=True)
class CatalogCalibration:
    """``q = sigmoid(a * logit(p) + b)`` (``a > 0``: no order changes), measured on ``searches`` probe searches
    of one catalog with one scorer (``model``)."""

    a: float
    b: float
    searches: int
    fits: int
    mean_best: float
    model: str = ""

    def __post_init__(self) -> None:
        if not (np.isfinite(self.a) and np.isfinite(self.b) and 0 < self.a <= 20 and abs(self.b) <= 20):
            raise ValueError(f"a catalog calibration needs 0 < a <= 20 and |b| <= 20, got a={self.a}, b={self.b}")

    def apply(self, p: np.ndarray | Sequence[float] | float) -> np.ndarray:
        return expit(self.a * _logit(np.asarray(p, dtype=np.float64)) + self.b)

    def policy(self, policy: "Policy") -> "Policy":
        """``policy`` with every probability threshold moved through the same map: the same decisions."""
        moved = {name: float(self.apply(getattr(policy, name)))
                 for name in ("proceed_threshold", "no_fit_below", "floor", "exact_name_confidence")}
        return policy.with_overrides(**moved)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "probe_platt", **asdict(self)}

    @classmethod
    def from_dict(cls, data: Any) -> "CatalogCalibration":
        """Raises: ValueError: not a calibration written by :meth:`to_dict`."""
        if not isinstance(data, dict) or data.get("kind") != "probe_platt":
            raise ValueError(f"not a catalog calibration: {str(data)[:120]!r}")
        try:
            return cls(float(data["a"]), float(data["b"]), int(data["searches"]), int(data["fits"]),
                       float(data["mean_best"]), str(data.get("model", "")))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"a catalog calibration lacks {exc}") from None

    @classmethod
    def of_index(cls, index: Any, model: str) -> "CatalogCalibration | None":
        """The index's calibration when it was measured with this model; None (said in the log) otherwise."""
        data = getattr(index, "calibration", None)
        if data is None:
            return None
        try:
            cal = cls.from_dict(data)
        except ValueError as exc:
            log.warning("the index's calibration is not used: %s", exc)
            return None
        if cal.model != model:
            log.warning("the index's calibration was measured with %r, not %r: not used (re-index with --calibrate)",
                        cal.model, model)
            return None
        return cal


def plan_probes(catalog: Catalog, n: int = DEFAULT_PROBES, seed: int = 0) -> list[Tool]:
    """Up to ``n`` tools of ``catalog``, drawn uniformly (the same draw for the same catalog and seed)."""
    tools = sorted(catalog.tools, key=lambda t: (t.server, t.name))
    return random.Random(seed).sample(tools, min(max(int(n), 0), len(tools)))


def probe_cache_beside(path: str | Path) -> Path:
    """The probes of an index folder: ``<folder>.probes.jsonl`` beside it (the folder is replaced on save)."""
    path = Path(path)
    return path.with_name(path.name + ".probes.jsonl")


def _messages(name: str, **values: str) -> list[dict[str, str]]:
    prompt = load_prompt(name)
    return [{"role": "system", "content": prompt.system}, {"role": "user", "content": prompt.render("user", **values)}]


def _field(key: str):
    def parse(text: str) -> str:
        data = json_object(text)
        value = data.get(key) if isinstance(data, dict) else None
        if not isinstance(value, str) or not value.strip():
            raise ContentError(f"the reply has no {key!r} string: {text[:160]!r}")
        return clip(value, 600)
    return parse


def _probability(text: str) -> float:
    data = json_object(text)
    value = data.get("p_yes") if isinstance(data, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise ContentError(f"the reply has no p_yes in [0, 1]: {text[:160]!r}")
    return float(value)


@dataclass
class ProbeOutcome:
    """What a probe run measured and fitted."""

    calibration: CatalogCalibration | None
    written: int                   # probes written by the endpoint this run
    cached: int                    # probes read back from the cache
    error: str | None = None       # why the endpoint stopped, when it did
    rows: list[dict] = field(default_factory=list)

    def format(self) -> str:
        text = f"calibration probes: {self.written} written, {self.cached} from the cache"
        if self.error:
            text += f"; the endpoint failed: {self.error}"
        if self.calibration is None:
            return text + "; no calibration saved (too few probe searches: rerun to write the rest)"
        c = self.calibration
        return (text + f"; {c.searches} searches, first tool fits {c.fits / max(c.searches, 1):.0%} where they read "
                f"{c.mean_best:.2f}: probabilities mapped by sigmoid({c.a:.2f} * logit(p) {c.b:+.2f}) "
                "(decisions unchanged)")


def write_probes(pipeline: "Pipeline", client: ChatClient | None, cache: str | Path, *, n: int = DEFAULT_PROBES,
                 seed: int = 0, concurrency: int = 4, attempts: int = 3, show_progress: bool = False,
                 temperature: float = 0.7, min_searches: int = MIN_PROBES) -> ProbeOutcome:
    """Write, search and judge probes for ``pipeline``'s catalog, and fit its calibration.

    Each finished probe is appended to ``cache`` at once (``{"server", "tool", "hash", "model", "request",
    "need", "searches"}``), so an interrupted run resumes and an unchanged catalog is not written again.
    Never raises for the endpoint: a failure is said in the outcome, and the probes finished so far count.
    """
    from retrieval.index.examples import bare_hash

    if pipeline.catalog_calibration is not None:
        raise ValueError("the pipeline already applies a catalog calibration: probe the index without it "
                         "(clear index.calibration before building the pipeline)")
    catalog = pipeline.index.catalog
    model = pipeline.model_key
    tools = plan_probes(catalog, n, seed)
    out = JsonlOutput(cache, row_key("server", "tool", "hash", "model", needs=("searches",)))
    have = _read_cache(cache)
    todo = [t for t in tools if (t.server, t.name, bare_hash(t), model) not in have]

    def work(job: tuple[int, Tool]) -> list[dict]:
        i, tool = job
        siblings = [s for s in catalog.server_tools(tool.server) if s.id != tool.id][:20]
        request = ask(client, _messages("probes", tool=tool_text(tool), siblings=tool_list(siblings),
                                        style=STYLES[i % len(STYLES)]), _field("request"),
                      temperature=temperature, attempts=attempts)
        need = ask(client, _messages("needs", request=request, voice=VOICES[i % len(VOICES)]), _field("need"),
                   temperature=temperature, attempts=attempts)
        searches = []
        for with_need in (need, None):
            result = pipeline.search(request, with_need)
            ranked = [t for t in result.tools if t.source == "ranked"]
            if not ranked:
                continue
            first = ranked[0]
            fits = first.tool_id == tool.id
            if not fits:
                judged = catalog.get(first.tool_id)
                p_yes = ask(client, _messages("probe_judge", request=request, tool=tool_text(judged)), _probability,
                            temperature=0.0, attempts=attempts)
                fits = p_yes >= FITS_AT
            searches.append({"need": with_need is not None, "best": float(first.probability),
                             "first": [first.tool_id.server, first.tool_id.tool], "fits": bool(fits)})
        return [{"server": tool.server, "tool": tool.name, "hash": bare_hash(tool), "model": model,
                 "request": request, "need": need, "searches": searches}]

    error, written = None, 0
    if todo and client is not None:
        try:
            stats = run_jobs([(tools.index(t), t) for t in todo], work, out, total=len(todo), skipped=0,
                             concurrency=concurrency, show_progress=show_progress, desc="calibration probes")
            written = stats.done
        except GenerationError as exc:
            error = str(exc)
        except Exception as exc:   # noqa: BLE001 - a broken connection or an odd reply: the index stays usable
            error = f"{type(exc).__name__}: {exc}"
    elif todo:
        error = "no LLM endpoint configured"
    have = _read_cache(cache)
    rows = [have[k] for k in ((t.server, t.name, bare_hash(t), model) for t in tools) if k in have]
    if error is not None:
        written = max(len(rows) - (len(tools) - len(todo)), 0)
    return ProbeOutcome(fit_probes(rows, model, min_searches), written, len(tools) - len(todo), error, rows)


def fit_probes(rows: Sequence[dict], model: str, min_searches: int = MIN_PROBES) -> CatalogCalibration | None:
    """The calibration of the probe searches in ``rows``; None under ``min_searches`` searches."""
    searches = [s for r in rows for s in r.get("searches", ())]
    if len(searches) < max(int(min_searches), 1):
        return None
    p = np.array([s["best"] for s in searches], dtype=np.float64)
    y = np.array([bool(s["fits"]) for s in searches], dtype=np.float64)
    a, b = fit_recalibration(p, y, PULL)
    return CatalogCalibration(a, b, len(searches), int(y.sum()), float(p.mean()), model)


def _read_cache(path: str | Path) -> dict[tuple[str, str, str, str], dict]:
    """``(server, tool, hash, model) -> row`` of a probe cache (empty when there is none).

    Raises:
        ValueError: a line that is not a probe row (names the file and line).
    """
    def key(row: dict) -> tuple[str, str, str, str]:
        if not isinstance(row["searches"], list):
            raise TypeError("searches")
        for s in row["searches"]:
            float(s["best"]), bool(s["fits"])
        return row["server"], row["tool"], row["hash"], row["model"]

    return read_rows(path, key, what="a probe row ({server, tool, hash, model, request, need, searches})")
