"""A catalog's own calibration, written at index time from requests for its tools (issue 34).

The shipped confidence models are fitted on toolrank's catalogs; on a user's catalog their probabilities
read off by a catalog-dependent amount (held out, day one: under-confident by 0.1-0.25 on catalogs of few,
distinct tools, about right where many tools look alike), and no map fitted on other catalogs transfers
(docs/results.md). ``toolrank index ... --calibrate`` asks the LLM endpoint that writes example requests
(``TOOLRANK_LLM_*``) for **probes**: one request for each of up to ``n`` tools drawn from the catalog (the
writer sees the tool, as an index-time writer does; a catalog of fewer than 10 tools is probed more than once
per tool), a one-line need written from the request alone (as an agent writes it, never seeing the tool),
each searched with and without its need; where the answer's first tool is not the probe's own, the endpoint
judges whether it does what the request asked (the teacher's question). A first tool that came from a
shortcut (named exactly, always available) carries a policy floor, not a probability, and is left out.
The map ``q = sigmoid(a * logit(p) + b)`` is fitted on every probe search's best probability and whether its
first tool fits, both modes together (one map per index: a later attempt may come with or without a need),
with the tenant recalibration's pull towards the identity (``recalibration.fit_recalibration``; slope kept in
[0.5, 2]), and saved with the index (``catalog_calibration`` in its manifest). Only what the endpoint wrote is
cached (``<index folder>.probes.jsonl``); the searches run again each time, on the index as it is. Its form was chosen on the fit catalogs' probes
(one Platt map over both modes: mean ECE 0.048 with the need and 0.062 without, against 0.065 / 0.066 for
one shift, 0.150 / 0.164 shipped; ``benchmarks/catalog_probes.py``).

What it changes: the probabilities, and with them the zone thresholds (proceed, the no-fit floor, the
floor for extra tools, the exact-name confidence), all through the same monotone map. So **every decision and
every order stays as shipped**; a tenant with its own recalibration from feedback keeps that instead (it reads
the shipped scale) (the zones were chosen on real no-fit requests, which probes do not have:
their twins read lower than real no-fit requests do), and what the numbers say is this catalog's: on the
held-out catalogs, mean ECE of the best probability 0.136 -> 0.084 with the need and 0.130 -> 0.109 without
(MCP-Zero organisations 0.170 -> 0.046, MCPToolBench++ 0.236 -> 0.057; worse where probes are easier than the
catalog's real requests: RestBench with the need, three kinds without; docs/results.md). A catalog whose tools
change drops its calibration (re-index).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from retrieval.catalog.model import Catalog, Tool, ToolId
from retrieval.writing.llm import ChatClient, GenerationError
from retrieval.writing.prompting import ContentError, clip, json_object, messages, tool_list, tool_text
from retrieval.writing.runner import JsonlOutput, ask, read_rows, run_jobs

from .recalibration import DEFAULT_PULL as PULL, fit_recalibration, moved_policy, platt

if TYPE_CHECKING:
    from .decision import Policy
    from .flow import Pipeline

__all__ = ["CatalogCalibration", "ProbeOutcome", "DEFAULT_PROBES", "PULL", "STYLES", "fit_probes", "plan_probes",
           "write_probes", "probe_cache_beside"]

log = logging.getLogger(__name__)

DEFAULT_PROBES = 100
MIN_PROBES = 20       # fewer searches say too little about a catalog's level
STYLES = ("plain", "concrete", "goal", "question", "casual")
VOICES = ("terse", "verbose", "platform", "plain", "first_step")
FITS_AT = 0.5         # a judged probability at or over this: the first tool fits
STOPPED = "stopped on request"


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
        return platt(p, self.a, self.b)

    def policy(self, policy: "Policy") -> "Policy":
        """``policy`` with every probability threshold moved through the same map: the same decisions."""
        return moved_policy(policy, self.apply)

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


def least_probes(min_searches: int = MIN_PROBES) -> int:
    """The probes planned so that ``min_searches`` searches (two per probe) are reached with a margin for the few
    left out: 13 for the 20 a fit needs."""
    return (max(int(min_searches), 1) * 13 + 19) // 20


def plan_probes(catalog: Catalog, n: int = DEFAULT_PROBES, seed: int = 0,
                min_probes: int = least_probes()) -> list[tuple[Tool, int]]:
    """``(tool, k)`` for ``max(n, min_probes)`` tools drawn uniformly from ``catalog``; a catalog of fewer than
    ``min_probes`` tools is probed more than once per tool (``k`` = 0, 1, ...) until ``min_probes`` probes.
    ``min_probes`` leaves a margin over the searches a fit needs (two per probe): a few probes left out (an
    unusable reply, a shortcut's first tool) do not stop a small catalog from being calibrated.

    The draw is the ``n`` tools whose (seed, server, name) hashes rank lowest: uniform, and stable as the catalog
    changes (a tool stays drawn until tools ranking lower arrive), so a re-calibration after a change asks the
    endpoint again only for the tools that entered the draw or changed."""
    least = max(int(min_probes), 0)
    ranked = sorted(catalog.tools, key=lambda t: hashlib.sha1(f"{seed}\x00{t.server}\x00{t.name}".encode()).digest())
    drawn = ranked[:min(max(int(n), least), len(ranked))]
    jobs = [(t, 0) for t in drawn]
    k = 1
    while drawn and len(jobs) < least:
        jobs += [(t, k) for t in drawn][: least - len(jobs)]
        k += 1
    return jobs


def probe_cache_beside(path: str | Path) -> Path:
    """The probes of an index folder: ``<folder>.probes.jsonl`` beside it (the folder is replaced on save)."""
    from retrieval.index.examples import cache_beside

    return cache_beside(path, "probes")


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
    searches: int = 0              # probe searches with a known outcome (what the map is fitted on)
    skipped: int = 0               # probes or judgments the endpoint's replies could not give (not asked again)
    error: str | None = None       # why the run stopped early, when it did
    needed: int = MIN_PROBES
    waiting: int = 0               # searches whose first tool still awaits a judgment (the run stopped)
    stopped: bool = False          # stopped on request (``stop``): nothing fitted

    def format(self) -> str:
        text = f"calibration probes: {self.written} written, {self.cached} from the cache"
        if self.skipped:
            text += f", {self.skipped} without a usable reply (left out)"
        if self.error:
            text += f"; stopped early: {self.error}"
        if self.calibration is None:
            if self.stopped:
                return text + "; stopped on request: no calibration fitted"
            if self.waiting:
                why = f"{self.waiting} probe searches still await a judgment; rerun to judge them"
            else:
                why = (f"{self.searches} probe searches with a known outcome, {self.needed} needed"
                       + ("; rerun to write the rest" if self.error else ""))
            return text + f"; no calibration saved ({why})"
        c = self.calibration
        return (text + f"; {c.searches} searches, first tool fits {c.fits / max(c.searches, 1):.0%} where they read "
                f"{c.mean_best:.2f}: probabilities mapped by sigmoid({c.a:.2f} * logit(p) {c.b:+.2f}) "
                "(decisions unchanged)")


def _cache_key(row: dict) -> tuple:
    """A cache row's key: a written probe ``("probe", server, tool, tool hash, k)`` or a judgment
    ``("judgment", request, server, tool, tool hash)``; KeyError/TypeError/ValueError for anything else."""
    kind = row["kind"]
    if kind == "probe":
        if "skipped" not in row and not (isinstance(row["request"], str) and isinstance(row["need"], str)):
            raise TypeError("request")
        return "probe", row["server"], row["tool"], row["hash"], int(row["k"])
    if kind == "judgment":
        if "skipped" not in row:
            float(row["p_yes"])
        return "judgment", row["request"], row["server"], row["tool"], row["hash"]
    raise ValueError(kind)


def _read_cache(path: str | Path) -> dict[tuple, dict]:
    """The probe cache's rows by key (empty when there is none).

    Raises:
        ValueError: a line that is not a probe or judgment row (names the file and line).
    """
    return read_rows(path, _cache_key, what="a probe or judgment row of `toolrank index --calibrate`")


def write_probes(pipeline: "Pipeline", client: ChatClient | None, cache: str | Path, *, n: int = DEFAULT_PROBES,
                 seed: int = 0, concurrency: int = 4, attempts: int = 3, show_progress: bool = False,
                 temperature: float = 0.7, min_searches: int = MIN_PROBES,
                 progress: Callable[[str, int, int], None] | None = None,
                 stop: Callable[[], bool] | None = None) -> ProbeOutcome:
    """Write, search and judge probes for ``pipeline``'s catalog, and fit its calibration.

    The cache (``cache``, appended as each reply comes) holds only what the endpoint wrote: each probe's request
    and need (keyed by the tool's content, so a changed tool is written again) and each judgment (keyed by the
    request and the judged tool's content). The searches are run again every time (they read the whole index,
    which may have changed), so only the endpoint's work is saved. A reply that does not give what was asked is
    recorded as skipped (not asked again, left out of the fit); the endpoint failing stops the run, and what
    finished is used. ``progress(phase, done, total)`` is told as each phase starts and as its work finishes
    (phases "writing", "searching", "judging"; the service's calibration job reports it). ``stop()`` is asked
    before each call to the endpoint and each search: once true, no new work starts, what finished is cached, and
    nothing is fitted (``stopped``).
    """
    from retrieval.index.examples import bare_hash
    from tqdm import tqdm

    if pipeline.catalog_calibration is not None:
        raise ValueError("the pipeline already applies a catalog calibration: probe the index without it "
                         "(clear index.calibration before building the pipeline)")
    catalog = pipeline.index.catalog
    jobs = plan_probes(catalog, n, seed, least_probes(min_searches))
    try:   # repairs a line an interrupted run left half-written
        out = JsonlOutput(cache, _cache_key)
    except GenerationError:
        _read_cache(cache)   # names the broken line (a ValueError)
        raise
    have = _read_cache(cache)

    def probe_key(job: tuple[int, Tool, int]) -> tuple:
        _, tool, k = job
        return "probe", tool.server, tool.name, bare_hash(tool), k

    todo = [(i, t, k) for i, (t, k) in enumerate(jobs) if probe_key((i, t, k)) not in have]

    def stopping() -> None:
        if stop is not None and stop():
            raise GenerationError(STOPPED)

    def write(job: tuple[int, Tool, int]) -> list[dict]:
        stopping()
        i, tool, k = job
        row = {"kind": "probe", "server": tool.server, "tool": tool.name, "hash": bare_hash(tool), "k": k}
        siblings = [s for s in catalog.server_tools(tool.server) if s.id != tool.id][:20]
        try:
            request = ask(client, messages("probes", tool=tool_text(tool), siblings=tool_list(siblings),
                                            style=STYLES[(i + k) % len(STYLES)]), _field("request"),
                          temperature=temperature, attempts=attempts)
            need = ask(client, messages("needs", request=request, voice=VOICES[(i // len(STYLES)) % len(VOICES)]),
                       _field("need"), temperature=temperature, attempts=attempts)
        except ContentError as exc:   # this tool's replies are unusable: recorded, not asked again
            return [{**row, "skipped": str(exc)[:300]}]
        return [{**row, "request": request, "need": need}]

    error = _run(todo, write, out, client, concurrency, show_progress, "calibration probes", "writing", progress)
    have = _read_cache(cache)
    probes = [(tool, have[probe_key((0, tool, k))]) for tool, k in jobs if probe_key((0, tool, k)) in have]
    written = sum(1 for job in todo if probe_key(job) in have)
    skipped = sum(1 for _, row in probes if "skipped" in row)

    # the searches, on the index as it is now: the first tool of the answer and its probability
    found: list[tuple[Tool, str, float, ToolId]] = []
    searched = [(t, r) for t, r in probes if "skipped" not in r]
    if progress is not None:
        progress("searching", 0, len(searched))
    for i, (tool, row) in enumerate(tqdm(searched, desc="probe searches", unit="probe", disable=not show_progress)):
        if error == STOPPED or (stop is not None and stop()):
            error = STOPPED
            break
        for with_need in (row["need"], None):
            result = pipeline.search(row["request"], with_need)
            if not result.tools or result.tools[0].source in ("exact_name", "always_available"):
                continue   # a shortcut's probability is a policy floor, not a calibrated number
            first = result.tools[0]
            found.append((tool, row["request"], float(first.probability), first.tool_id))
        if progress is not None:
            progress("searching", i + 1, len(searched))

    def judgment_key(request: str, tid: ToolId) -> tuple:   # the judge reads the card, not the examples
        judged = catalog.get(tid)
        return "judgment", request, tid.server, tid.tool, bare_hash(judged) if judged is not None else ""

    asks = {judgment_key(r, tid): (r, tid) for tool, r, _, tid in found if tid != tool.id}
    judge_todo = [v for key, v in asks.items() if key not in have and catalog.get(v[1]) is not None]

    def judge(job: tuple[str, ToolId]) -> list[dict]:
        stopping()
        request, tid = job
        tool = catalog.get(tid)
        row = {"kind": "judgment", "request": request, "server": tid.server, "tool": tid.tool,
               "hash": bare_hash(tool)}
        try:   # a little temperature: a retried reply is not the same reply again
            return [{**row, "p_yes": ask(client, messages("probe_judge", request=request, tool=tool_text(tool)),
                                         _probability, temperature=0.2, attempts=attempts)}]
        except ContentError as exc:
            return [{**row, "skipped": str(exc)[:300]}]

    if error is None:
        error = _run(judge_todo, judge, out, client, concurrency, show_progress, "probe judgments", "judging",
                     progress)
    have = _read_cache(cache)
    searches, waiting, unusable = [], 0, set()
    for tool, request, best, tid in found:
        if tid == tool.id:
            searches.append((best, True))
            continue
        key = judgment_key(request, tid)
        verdict = have.get(key)
        if verdict is None:
            waiting += catalog.get(tid) is not None
            continue
        if "skipped" in verdict:
            unusable.add(key)
            continue   # no known outcome: left out of the fit
        searches.append((best, float(verdict["p_yes"]) >= FITS_AT))
    # a run stopped before every judgment: what is known is the probes' own first tools (all fits), so a fit
    # on it would lean up; none until the rest are judged
    stopped = error == STOPPED
    cal = fit_probes(searches, pipeline.model_key, min_searches) if not (waiting or stopped) else None
    return ProbeOutcome(cal, written, len(jobs) - len(todo), len(searches), skipped + len(unusable),
                        None if stopped else error, max(int(min_searches), 1), waiting, stopped)


def _run(jobs: list, work, out: JsonlOutput, client: ChatClient | None, concurrency: int, show_progress: bool,
         desc: str, phase: str = "", progress: Callable[[str, int, int], None] | None = None) -> str | None:
    """Run ``work`` over ``jobs`` through the endpoint; why it stopped early, or None."""
    if progress is not None:
        progress(phase, 0, len(jobs))
    if not jobs:
        return None
    if client is None:
        return "no LLM endpoint configured"
    if progress is not None:
        work = _counted(work, phase, len(jobs), progress)
    try:
        run_jobs(jobs, work, out, total=len(jobs), skipped=0, concurrency=concurrency, show_progress=show_progress,
                 desc=desc)
    except GenerationError as exc:   # the endpoint failed (its replies' content is handled per probe)
        return str(exc)
    except OSError as exc:           # a broken connection or a cache that cannot be written
        return f"{type(exc).__name__}: {exc}"
    return None


def _counted(work, phase: str, total: int, progress: Callable[[str, int, int], None]):
    """``work`` telling ``progress`` how many jobs have finished (jobs run side by side)."""
    finished, lock = [0], threading.Lock()

    def counted(job):
        rows = work(job)
        with lock:
            finished[0] += 1
            progress(phase, finished[0], total)
        return rows

    return counted


def fit_probes(searches: Sequence[tuple[float, bool]], model: str,
               min_searches: int = MIN_PROBES) -> CatalogCalibration | None:
    """The calibration of probe searches (``(best probability, whether its first tool fits)``); None under
    ``min_searches`` of them. The slope is kept in [0.5, 2] and the intercept in [-5, 5]: a handful of
    probes that all read alike must not squash every number to one."""
    if len(searches) < max(int(min_searches), 1):
        return None
    p = np.array([b for b, _ in searches], dtype=np.float64)
    y = np.array([bool(f) for _, f in searches], dtype=np.float64)
    a, b = fit_recalibration(p, y, PULL, bounds=((0.5, 2.0), (-5.0, 5.0)))
    return CatalogCalibration(a, b, len(searches), int(y.sum()), float(p.mean()), model)
