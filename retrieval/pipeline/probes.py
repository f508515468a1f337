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

What it changes: the scored candidates' probabilities, and with them the zone thresholds (proceed, the no-fit
floor, the floor for extra tools, the exact-name confidence), all through the same monotone map. So **every
decision and every order stays as shipped**; a tenant with its own recalibration from feedback keeps that instead (it reads
the shipped scale) (the zones were chosen on real no-fit requests, which probes do not have:
their twins read lower than real no-fit requests do), and what the numbers say is this catalog's: on the
held-out catalogs, mean ECE of the best probability 0.136 -> 0.084 with the need and 0.130 -> 0.109 without
(MCP-Zero organisations 0.170 -> 0.046, MCPToolBench++ 0.236 -> 0.057; worse where probes are easier than the
catalog's real requests: RestBench with the need, three kinds without; docs/results.md). A catalog whose tools
change drops its calibration (re-index).

The candidates past the scored head (0.17.0) are not mapped: the map is fitted on best probabilities and says
nothing about candidates at 0.0002. One candidate past the head of each probe search (the search's own,
:meth:`Pipeline.candidates`), drawn uniformly, is judged too, and the tail's logit moves by ``tail_shift`` only
where the shipped level cannot explain the judged fits (:func:`tail_evidence` under ``TAIL_EVIDENCE``;
:func:`fit_tail_shift`). Which tail tools join an answer reads that level through the map, as the floor for
extra tools does, so at the shipped level an answer's tools are the shipped ones.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import asdict, dataclass, replace
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
TAIL_PER_SEARCH = 1   # candidates past the scored head judged per probe search (drawn uniformly)
MIN_TAIL = 20         # judged tail candidates under which the tail keeps the shipped level
TAIL_PRIOR_SD = 3.0   # the tail shift's prior (logits): a factor of about 20 either way is plausible
TAIL_EVIDENCE = 0.001  # the tail's level moves only where the shipped level explains its judged fits worse
TAIL_SHIFT_MAX = 12.0
STOPPED = "stopped on request"


@dataclass(frozen=True)
class CatalogCalibration:
    """``q = sigmoid(a * logit(p) + b)`` (``a > 0``: no order changes), measured on ``searches`` probe searches
    of one catalog with one scorer (``model``); and the level of the candidates the cross-encoder does not read
    (past ``score_top``): their shipped probability's logit moves by ``tail_shift`` and no map applies to them
    (:meth:`tail`), measured on ``tail_judged`` judged candidates of the probes' answers of which ``tail_fits``
    fit; ``tail_waiting`` still await a judgment (0.17.0 on; 0 before)."""

    a: float
    b: float
    searches: int
    fits: int
    mean_best: float
    model: str = ""
    tail_shift: float = 0.0
    tail_judged: int = 0
    tail_fits: int = 0
    tail_waiting: int = 0   # candidates past the head the endpoint has not judged yet: calibrated again later

    def __post_init__(self) -> None:
        if not (np.isfinite(self.a) and np.isfinite(self.b) and 0 < self.a <= 20 and abs(self.b) <= 20):
            raise ValueError(f"a catalog calibration needs 0 < a <= 20 and |b| <= 20, got a={self.a}, b={self.b}")
        if not (np.isfinite(self.tail_shift) and abs(self.tail_shift) <= TAIL_SHIFT_MAX):
            raise ValueError(f"a catalog calibration needs |tail_shift| <= {TAIL_SHIFT_MAX:g}, got {self.tail_shift}")

    def apply(self, p: np.ndarray | Sequence[float] | float) -> np.ndarray:
        return platt(p, self.a, self.b)

    @property
    def complete(self) -> bool:
        """Whether every probe judgment it asked for came back (else the gateway and the service's automatic
        calibration run it again; the cache answers all but what is missing)."""
        return not self.tail_waiting

    def tail(self, p: np.ndarray) -> np.ndarray:
        """The probabilities of candidates past the scored head (shipped scale in) at this catalog's level: their
        shipped logit moved by ``tail_shift``, not through :meth:`apply` (fitted on best probabilities, 0.3-0.95,
        the map says nothing about candidates at 0.0002: a slope under 1 raised the tail of a held-out kind
        two hundredfold in 0.16.0)."""
        return platt(p, 1.0, self.tail_shift)

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
                       float(data["mean_best"]), str(data.get("model", "")), float(data.get("tail_shift", 0.0)),
                       int(data.get("tail_judged", 0)), int(data.get("tail_fits", 0)), int(data.get("tail_waiting", 0)))
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
    tail_waiting: int = 0          # candidates past the head still awaiting a judgment (the tail keeps its level)

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
        text += (f"; {c.searches} searches, first tool fits {c.fits / max(c.searches, 1):.0%} where they read "
                 f"{c.mean_best:.2f}: probabilities mapped by sigmoid({c.a:.2f} * logit(p) {c.b:+.2f}) "
                 "(decisions unchanged)")
        if c.tail_judged:
            text += (f"; past the head {c.tail_fits} of {c.tail_judged} judged candidates fit: " +
                     (f"their level moves by {c.tail_shift:+.2f} logits" if c.tail_shift else "the shipped level"))
        elif self.tail_waiting:
            text += (f"; past the head {self.tail_waiting} candidates still await a judgment: the shipped level "
                     "until a rerun judges them (the gateway and --calibrate-after-change run it again at the next "
                     "start or change)")
        return text


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
                 stop: Callable[[], bool] | None = None, tail_per_search: int = TAIL_PER_SEARCH) -> ProbeOutcome:
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

    # the searches, on the index as it is now: the first tool of the answer and its probability; and, drawn
    # uniformly, a candidate past the head the cross-encoder read, with its shipped probability
    found: list[tuple[Tool, str, float, ToolId]] = []
    tail_found: list[tuple[str, ToolId, float, float]] = []   # request, tool, probability, weight
    searched = [(t, r) for t, r in probes if "skipped" not in r]
    if progress is not None:
        progress("searching", 0, len(searched))
    for i, (tool, row) in enumerate(tqdm(searched, desc="probe searches", unit="probe", disable=not show_progress)):
        if error == STOPPED or (stop is not None and stop()):
            error = STOPPED
            break
        for with_need in (row["need"], None):
            if tail_per_search:
                tail_found += tail_candidates(pipeline, row["request"], with_need, tail_per_search)
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
    asks.update({judgment_key(r, tid): (r, tid) for r, tid, _, _ in tail_found})
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
    tail, pending = [], set()
    for request, tid, p, weight in tail_found:
        key = judgment_key(request, tid)
        verdict = have.get(key)
        if verdict is None:
            if catalog.get(tid) is not None:
                pending.add(key)
        elif "skipped" in verdict:
            unusable.add(key)
        else:
            tail.append((p, weight, float(verdict["p_yes"]) >= FITS_AT))
    # a run stopped before every judgment: what is known is the probes' own first tools (all fits), so a fit
    # on it would lean up; none until the rest are judged
    stopped = error == STOPPED
    cal = fit_probes(searches, pipeline.model_key, min_searches) if not (waiting or stopped) else None
    tail_waiting = len(pending)
    if cal is not None and tail_waiting:   # a tail half judged keeps the shipped level, and is asked for again
        cal = replace(cal, tail_waiting=tail_waiting)
    elif cal is not None and tail:
        cal = replace(cal, tail_shift=fit_tail_shift(tail), tail_judged=len(tail),
                      tail_fits=sum(1 for t in tail if t[2]))
    return ProbeOutcome(cal, written, len(jobs) - len(todo), len(searches), skipped + len(unusable),
                        None if stopped else error, max(int(min_searches), 1), waiting, stopped, tail_waiting)


def tail_candidates(pipeline: "Pipeline", request: str, need: str | None, m: int = TAIL_PER_SEARCH,
                    eligible: Any = None) -> list[tuple[str, ToolId, float, float]]:
    """``m`` candidates past the head of one probe search (the search's own: :meth:`Pipeline.candidates`; drawn
    by :func:`tail_draw`), each with its shipped probability and the number of candidates past the head it
    stands for (the benchmark passes ``eligible``)."""
    if pipeline.tail_calibration is None:   # no tail with a level of its own
        return []
    from .flow import tail_rows

    rows = tail_rows(*pipeline.candidates(request, need, eligible=eligible))
    return [(request, rows[j][0], rows[j][1], len(rows) / min(m, len(rows)))
            for j in tail_draw(f"{request}\x1f{need or ''}", len(rows), m)]


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


def tail_draw(key: str, n_tail: int, m: int = TAIL_PER_SEARCH) -> list[int]:
    """Which of a search's ``n_tail`` candidates past the head are judged: ``m`` offsets drawn uniformly by a
    hash of ``key`` (the same every run, so the cache answers a re-run)."""
    import random

    if n_tail <= 0 or m <= 0:
        return []
    rng = random.Random(int(hashlib.sha1(key.encode()).hexdigest()[:12], 16))
    return sorted(rng.sample(range(n_tail), min(m, n_tail)))


def tail_evidence(tail: Sequence[tuple[float, float, bool]]) -> float:
    """How well the shipped level explains the judged candidates past the head: the two-sided Poisson p-value
    of their number of fits where each judged candidate fits with its shipped probability."""
    from scipy.stats import poisson

    expected = float(sum(t[0] for t in tail))
    fits = sum(1 for t in tail if t[2])
    return float(min(1.0, 2 * min(poisson.sf(fits - 1, expected), poisson.cdf(fits, expected))))


def fit_tail_shift(tail: Sequence[tuple[float, float, bool]], prior_sd: float = TAIL_PRIOR_SD,
                   min_judged: int = MIN_TAIL, evidence: float = TAIL_EVIDENCE) -> float:
    """The tail's level for a catalog: the shift ``d`` of the shipped tail's logit that best explains the judged
    candidates past the head (``(shipped probability, weight, fits)``: a candidate drawn uniformly from a
    search's ``T`` candidates past the head, ``m`` of them judged, stands for ``T / m``; the weights are used
    relative to their mean), under a normal prior on ``d`` (mean 0, sd ``prior_sd``). The level moves only
    where the judged fits could not come from the shipped level (:func:`tail_evidence` under ``evidence``):
    fits past the head are rare (about one in 5,000 held-out candidates outside catalogs of interchangeable
    tools), so one or two fits among 200 are noise (a single one moved a fit catalog's level thirteenfold, six
    times what its own requests' tail holds), while a catalog of interchangeable tools (a model hub: 15 of 200)
    moves up. 0 under ``min_judged`` candidates."""
    if len(tail) < max(int(min_judged), 1) or tail_evidence(tail) >= evidence:
        return 0.0
    weight = np.array([t[1] for t in tail], dtype=np.float64)
    return fit_recalibration(np.array([t[0] for t in tail]), np.array([float(t[2]) for t in tail]),
                             1 / (2 * prior_sd ** 2), bounds=((1.0, 1.0), (-TAIL_SHIFT_MAX, TAIL_SHIFT_MAX)),
                             weight=weight / weight.mean())[1]


def audit_tail_shift(tail: Sequence[tuple[float, float, bool]], base: float = 0.0) -> float:
    """A tenant's tail level from its audits (0.18.0): the candidates past the head its audited searches drew
    (``(shipped probability, weight, fits)``, as a calibration's probes give them), read against the level it
    has now (``base``: the catalog's ``tail_shift``, 0 without one). That level stays where it explains the
    audits' fits (:func:`tail_evidence` at it, under ``TAIL_EVIDENCE``); else it moves by :func:`fit_tail_shift`
    from there. Under ``MIN_TAIL`` audits: ``base``. Fits past rank 20 are about one in 5,000 outside catalogs of
    interchangeable tools, so a level set too high by probes takes about a thousand audits to come down, one too
    low on a model hub fifty (``benchmarks/audit_tail.py``)."""
    if len(tail) < MIN_TAIL:
        return float(base)
    moved = [(float(platt(t[0], 1.0, base)), t[1], t[2]) for t in tail]
    if tail_evidence(moved) >= TAIL_EVIDENCE:
        return float(base)
    return float(np.clip(base + fit_tail_shift(moved), -TAIL_SHIFT_MAX, TAIL_SHIFT_MAX))


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
