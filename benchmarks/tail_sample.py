"""Ranks 11-100 read against a blind judge, every rank at once (issue 34's fourth target).

    python benchmarks/tail_sample.py draw --set report --budget 3000 \
        --out benchmarks/results/judged_flow/tail_sample/report --batches runs/tail_report --n-batches 8
    # blind judges answer each batch with benchmarks/results/judged_flow/brief.md (one JSON line per request)
    python benchmarks/tail_sample.py read --set report --dir benchmarks/results/judged_flow/tail_sample/report \
        --judged runs/tail_report/judged_*.jsonl [--tail models/toolrank-reranker/tail_calibration.json] \
        --out benchmarks/results/tail_sample_report.json

0.14.0 judged ranks 11-20 of every request (7,000 held-out candidates): 0-5 fits a kind, where no ratio of
predicted to observed can be read, and nothing past rank 20. Fits past the head are rare and not spread
evenly: the cross-encoder (the student, which a search does not run there) knows where they are likely. So
``draw`` re-runs the first search of each answerable request of the agent flow (need mode, the flow's own
cases re-drawn with its seed; the ranks 11-20 it finds are checked against the flow's), scores all 90
candidates past the head with the student, and draws a Poisson sample: candidate *i* is judged with
probability ``pi_i = min(1, max(floor, s_i / tau))`` (``s_i`` the student's probability, ``tau`` set so the
sample's expected size is ``--budget``), by a hash of the request and the tool (the same draw every time).
Every candidate keeps a chance, so the estimate is unbiased whatever the student gets wrong; the student
only decides where the sample is dense.

``read`` estimates the number of fits among all candidates of a band of ranks (Horvitz-Thompson: each judged
fit counts ``1 / pi``) against the sum of the probabilities the pipeline gives them (its tail calibration, or
``--tail``'s re-read on the same evidence), with a 90% interval of the ratio by resampling requests. The
design file keeps each request's evidence (the retrieval-only probability, the head's probabilities, the
catalog's size) so ``training/tail.py --sampled`` can fit on the same draw.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, environment_stamp, stamp_line, write_result  # noqa: E402

from retrieval.evaluation.judged import FITS  # noqa: E402

BANDS = {"11-20": (11, 20), "21-50": (21, 50), "51-100": (51, 100), "11-100": (11, 100)}


def uniform(*key: str) -> float:
    """A stable uniform number in [0, 1) for a key (the sample's draw)."""
    h = hashlib.sha256("\x1f".join(key).encode()).hexdigest()
    return int(h[:13], 16) / float(1 << 52)


def inclusion(s, tau: float, floor: float):
    """Each candidate's chance of being judged: proportional to the student's probability, at least ``floor``."""
    import numpy as np

    return np.clip(np.asarray(s, dtype=np.float64) / tau, floor, 1.0)


def tau_for(scores: list, budget: float, floor: float) -> float:
    """The ``tau`` whose inclusion probabilities sum to ``budget`` (bisection on a log scale)."""
    import numpy as np

    s = np.concatenate([np.asarray(x, dtype=np.float64) for x in scores]) if scores else np.zeros(0)
    if len(s) == 0:
        raise ValueError("no candidates to draw from")
    if budget <= floor * len(s):
        raise ValueError(f"a budget of {budget:g} is under the floor alone ({floor:g} x {len(s)} = {floor * len(s):.0f})")
    if budget >= len(s):
        return float(np.min(s[s > 0])) if np.any(s > 0) else 1.0
    lo, hi = 1e-9, 1e3
    for _ in range(200):
        mid = (lo * hi) ** 0.5
        if inclusion(s, mid, floor).sum() > budget:
            lo = mid
        else:
            hi = mid
    return hi


def _cases(set_name: str, n: int, seed: int):
    """The flow's cases of a set, drawn as ``agent_flow.flow_rows`` draws them (same order, same rng), with
    each kind's pipeline: yields (pipeline, answerable case)."""
    from retrieval.index.default import load_or_build_default
    from retrieval.index.embedded import ToolIndex
    from retrieval.index.encoder import OnnxEncoder
    from training.flow_cases import SETS, corpus_cases, load_needs, mcpzero_cases

    needs = load_needs()
    split, corpora = SETS[set_name]
    rng = random.Random(seed)
    index = load_or_build_default(with_examples=False, show_progress=True)
    yield "mcpzero-org", index, [c for c in mcpzero_cases(split, needs, n, rng, index) if c.answerable]
    encoder = OnnxEncoder()
    for name in corpora:
        cases, catalog = corpus_cases(name, needs, n, rng)
        if cases:
            yield name, ToolIndex(catalog, encoder, with_examples=False), [c for c in cases if c.answerable]


NEEDS_TAIL = ROOT / "benchmarks" / "data" / "needs_tail.jsonl"


def _pool_needs() -> dict[str, dict]:
    """The blind needs an extension draws on: the flow's, the wide draw's and the ones written for this sample."""
    from benchmarks.wide_calibration import _needs
    from training.flow_cases import load_needs

    needs = _needs()
    if NEEDS_TAIL.exists():
        needs.update(load_needs(NEEDS_TAIL))
    return needs


def _corpus_order(name: str, seed: int) -> list:
    """A corpus's requests in a seeded order of their own (an extension's pool; the flow's draw is untouched)."""
    from benchmarks.wide_calibration import _corpus_pool

    return _corpus_pool(name, f"tail:{seed}")


def _more_cases(set_name: str, per_kind: int, seed: int, skip: set[str], needs: dict | None = None):
    """More answerable requests of a set than its flow's, up to ``per_kind`` in all per kind with the ones in
    ``skip`` (an earlier design's): yields (kind, index, cases) as :func:`_cases`. The held-out set takes the
    wide draw's requests (``wide_calibration.py``: the same requests, the same needs, organisations drawn as it
    draws them); the fit set takes MCP-Zero dev organisations (drawn as the flow draws them, from a stream of
    their own) and each training corpus's requests in a seeded order, with a blind need (``NEEDS_TAIL``)."""
    from benchmarks.wide_calibration import pool_cases
    from retrieval.index.default import load_or_build_default
    from retrieval.index.embedded import ToolIndex
    from retrieval.index.encoder import OnnxEncoder
    from training.flow_cases import SETS

    needs = _pool_needs() if needs is None else needs
    split, corpora = SETS[set_name]
    index = load_or_build_default(with_examples=False, show_progress=True)
    if set_name == "report":
        from benchmarks.wide_calibration import _new_cases

        wide = _new_cases(per_kind, 0, index)   # up to per_kind with the flow's own (the earlier design's)
    else:
        wide = None
    encoder = OnnxEncoder()
    for name in ["mcpzero-org", *corpora]:
        if wide is not None:
            pool = [c for c in wide if c.catalog == name and c.id not in skip]
            room = len(pool)
        else:
            pool = pool_cases(name, split, needs, skip, index, random.Random(f"tail:{seed}:{name}"),
                              lambda: _corpus_order(name, seed))
            room = per_kind - sum(1 for i in skip if _kind_of(i, name))
        cases = pool[:max(room, 0)]
        if not cases:
            continue
        if name == "mcpzero-org":
            yield name, index, cases
        else:
            from retrieval.evaluation.corpora import load_corpus

            yield name, ToolIndex(load_corpus(name).catalog, encoder, with_examples=False), cases


def _kind_of(request_id: str, kind: str) -> bool:
    """Whether a request id belongs to a kind (a corpus's ids carry its name; MCP-Zero's do not)."""
    head = request_id.split(":", 1)[0] if ":" in request_id else "mcpzero-org"
    return head == kind


def need_batches(a: argparse.Namespace) -> int:
    """``id<TAB>voice<TAB>request`` of the fit set's pool requests (up to ``--n`` a kind with the earlier design's)
    that have no blind need yet, for blind need writers (``training/data/briefs/needs_blind.md``)."""
    from benchmarks.catalog_probes import write_need_batches
    from training.flow_cases import SETS

    try:
        earlier = json.loads((a.extend / "design.json").read_text())
        skip = {d["id"] for d in earlier["requests"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"error: --extend {a.extend}: {exc}", file=sys.stderr)
        return 2
    if earlier.get("set") != "fit":
        print(f"error: --extend {a.extend} is a {earlier.get('set')} design; need-batches lists the fit set's "
              "requests (the held-out set's come with the wide draw's needs)", file=sys.stderr)
        return 2
    needs = _pool_needs()
    todo = []
    for name in SETS["fit"][1]:
        room = a.n - sum(1 for i in skip if _kind_of(i, name))
        for q in _corpus_order(name, a.seed):
            if room <= 0:
                break
            if q.id in skip:
                continue
            room -= 1
            if not (needs.get(q.id) or {}).get("need"):
                todo.append((q.id, q.query))
    write_need_batches(todo, a.out, a.n_batches, a.seed)
    print(f"{len(todo)} requests without a blind need -> {a.n_batches} batches in {a.out}", file=sys.stderr)
    return 0


def draw(a: argparse.Namespace) -> int:
    from tqdm import tqdm

    from benchmarks.judged_flow import _Catalogs, _item, shippable_items
    from retrieval.evaluation.agent_flow import run_case
    from retrieval.evaluation.corpora import shippable_tool
    from retrieval.jsonl import write_jsonl
    from retrieval.pipeline.decision import Policy
    from retrieval.pipeline.flow import Pipeline
    from scorer import Scorer

    flow = json.loads(a.flow.read_text()) if a.flow else None
    n = a.n or (flow["n"] if flow else 100)
    flow_tail = {r["id"]: r["tail_ids"] for r in (flow["rows"] if flow else [])
                 if r["mode"] == "need" and r["answerable"] and r.get("tail_ids")}
    earlier = None
    if a.extend:   # more requests, drawn with the earlier design's tau and floor: one Poisson sample with it
        try:
            earlier = json.loads((a.extend / "design.json").read_text())
            old_items = (a.extend / "items.jsonl").read_text(encoding="utf-8")
            if not isinstance(earlier.get("requests"), list) or "tau" not in earlier or "floor" not in earlier:
                raise ValueError("not a design file (no requests, tau or floor)")
        except (OSError, ValueError) as exc:
            print(f"error: --extend {a.extend}: {exc}", file=sys.stderr)
            return 2
        if earlier.get("set") != a.set:
            print(f"error: --extend {a.extend} is a {earlier.get('set')} design, not {a.set}", file=sys.stderr)
            return 2
        if a.out.resolve() == a.extend.resolve():
            print("error: --out must be another folder than --extend (the earlier sample is kept as it is)",
                  file=sys.stderr)
            return 2
        n = a.n or 400
        if n <= int(earlier.get("n") or 0):
            print(f"error: --n {n} adds nothing to a design of {earlier.get('n')} requests a kind", file=sys.stderr)
            return 2
        flow_tail = {}
    scorer = Scorer.load(a.model, threads=a.threads)
    policy = Policy()
    top = policy.score_top
    design, mismatched = [], 0
    groups = _more_cases(a.set, n, a.seed, {d["id"] for d in earlier["requests"]}) if earlier \
        else _cases(a.set, n, a.seed)
    for kind, index, cases in groups:
        pipe = Pipeline(index, scorer, policy=policy)
        for case in tqdm(cases, desc=kind, unit="request", disable=None):
            row = run_case(pipe, case, "need", first_only=True)
            hits = pipe.index.retrieve(case.request, case.need, case.eligible, k=policy.candidates)[top:]
            ids = [[h.tool_id.server, h.tool_id.tool] for h in hits]
            shown = [list(shippable_tool(kind, t)) for t in ids]
            if case.id in flow_tail and shown[:10] != [list(t) for t in flow_tail[case.id]]:
                mismatched += 1
            s = scorer.score(case.request, case.need, [index.catalog[h.tool_id] for h in hits]) if hits else []
            design.append({"id": case.id, "catalog": kind, "n_eligible": row["n_eligible"], "head_p": row["head_p"],
                           "tail_p": row["tail_p"], "tail_r": row.get("tail_r"), "s": [round(float(x), 6) for x in s],
                           "ids": ids, "shown": shown,
                           "fit_labelled": [h.tool_id in case.targets for h in hits]})
    if flow_tail:
        print(f"{len(flow_tail)} flow rows; {mismatched} re-drawn requests whose ranks 11-20 differ from the flow's",
              file=sys.stderr)
    try:
        tau = earlier["tau"] if earlier else tau_for([d["s"] for d in design], a.budget, a.floor)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if earlier:
        a.floor = earlier["floor"]
    items, catalogs = [], _Catalogs()
    for d in design:
        pi = inclusion(d["s"], tau, a.floor)
        d["pi"] = [round(float(x), 6) for x in pi]
        d["judged_at"] = [i for i, (p, t) in enumerate(zip(pi, d["shown"]))
                          if uniform(str(a.seed), d["id"], *t) < p]
        if d["judged_at"]:
            items.append(_item(d["id"], d["catalog"], [d["ids"][i] for i in d["judged_at"]], "tail-sample:" + d["id"]))
    a.out.mkdir(parents=True, exist_ok=True)
    added = [slim(d) for d in design]
    write_result(a.out / "design.json", {"environment": environment_stamp(), "set": a.set, "n": n, "seed": a.seed,
                                         "tau": tau, "floor": a.floor, "budget": a.budget, "mismatched": mismatched,
                                         "extends": str(a.extend) if earlier else None,
                                         "earlier": {k: earlier.get(k) for k in ("n", "seed", "budget", "mismatched")}
                                         if earlier else None,
                                         "requests": (earlier["requests"] if earlier else []) + added}, indent=None)
    from benchmarks.judged_flow import _queries
    queries = _queries(a.flow or ROOT / "benchmarks" / "results" / f"agent_flow_{a.set}.json",
                       {it["id"] for it in items})
    for it in items:
        it["query"] = queries[it["id"]]
    write_jsonl(a.out / "items.jsonl", shippable_items(items))
    if earlier:   # one items file for the whole sample: the earlier design's, then the added requests'
        with open(a.out / "items.jsonl", "r+", encoding="utf-8") as f:
            new_text = f.read()
            f.seek(0)
            f.write(old_items.rstrip("\n") + "\n" + new_text)
    total = sum(len(d["s"]) for d in design)
    judged = sum(len(it["candidates"]) for it in items)
    print(f"{len(design)} requests, {total} candidates past the head; tau {tau:.4g}, floor {a.floor:g}: "
          f"{judged} candidates of {len(items)} requests to judge -> {a.out}", file=sys.stderr)
    if a.batches:
        write_batches(items, a.batches, a.n_batches, a.seed + 37, catalogs)
        print(f"{a.n_batches} judge batches -> {a.batches}", file=sys.stderr)
    return 0


def write_batches(items: list[dict], folder: Path, n_batches: int, seed: int, catalogs) -> None:
    """The judges' batches of ``items`` (real texts: keep them out of the repository), shuffled, dealt in turn."""
    from training.refresh_lists import batch_text

    folder.mkdir(parents=True, exist_ok=True)
    order = list(items)
    random.Random(seed).shuffle(order)
    for b in range(n_batches):
        part = order[b::n_batches]
        (folder / f"batch_{b + 1:02d}.txt").write_text(
            "\n\n".join(batch_text([o], catalogs.catalog(o["catalog"])).rstrip("\n") for o in part) + "\n",
            encoding="utf-8")


def slim(d: dict) -> dict:
    """A drawn request as the design file keeps it: the evidence of every candidate past the head (the tail's
    and the retrieval-only probability, the chance of being judged: index 0 is rank 11) and the names (as
    the result files name them) of the judged ones and of the labelled ones."""
    return {"id": d["id"], "catalog": d["catalog"], "n_eligible": d["n_eligible"], "head_p": d["head_p"],
            "tail_p": d["tail_p"], "tail_r": d["tail_r"], "pi": d["pi"], "judged_at": d["judged_at"],
            "judged_ids": [d["shown"][i] for i in d["judged_at"]],
            "labelled_at": [i for i, f in enumerate(d["fit_labelled"]) if f]}


def estimate(requests: list[dict], judged: dict, lo: int, hi: int, tail_p_of=None, census: dict | None = None) -> dict:
    """One band of ranks over some requests: the predicted fits (the sum of the tail's probabilities), the judged
    fits found, the Horvitz-Thompson estimate of all fits and its standard error (Poisson sampling), and the
    per-request sums (for resampling). Candidates at rank ``r`` sit at index ``r - 11``. ``census``: a judge of
    every candidate at ranks 11-20 (request id -> {candidate: probability}, 0.14.0's ``judged_flow mine-tail``),
    counted as it is in place of the sample there."""
    import numpy as np

    a, b = lo - 11, hi - 10
    pred, obs, found, sampled, var = [], [], 0, 0, 0.0
    for d in requests:
        tp = np.asarray(tail_p_of(d) if tail_p_of else d["tail_p"], dtype=np.float64)[a:b]
        pred.append(float(tp.sum()))
        j = judged.get(d["id"], {})
        o = 0.0
        whole = census is not None and d["id"] in census
        if whole and a < 10:   # the census holds ranks 11-20 (all of them, in the judge's order)
            if (a, b) != (0, 10) and b < 10:
                raise ValueError("a census of ranks 11-20 reads whole bands that hold all of them")
            fits = sum(1 for v in census[d["id"]].values() if v >= FITS)
            found += fits
            sampled += len(census[d["id"]])
            o += fits
        for i, t in zip(d["judged_at"], d["judged_ids"]):
            if whole and i < 10:
                continue
            if a <= i < b:
                sampled += 1
                if j.get(tuple(t), 0.0) >= FITS:
                    found += 1
                    o += 1.0 / d["pi"][i]
                    var += (1.0 - d["pi"][i]) / d["pi"][i] ** 2
        obs.append(o)
    return {"requests": len(requests), "candidates": sum(len(d["pi"][a:b]) for d in requests), "sampled": sampled,
            "found": found, "predicted": float(np.sum(pred)), "observed": float(np.sum(obs)), "se": float(var ** 0.5),
            "_pred": pred, "_obs": obs}


def ratio_interval(pred: list[float], obs: list[float], reps: int = 2000, seed: int = 0) -> tuple[float, float]:
    """A 90% interval of sum(pred) / sum(obs) by resampling requests (inf where a resample observes none)."""
    import numpy as np

    p, o = np.asarray(pred), np.asarray(obs)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(p), size=(reps, len(p)))
    num, den = p[idx].sum(axis=1), o[idx].sum(axis=1)
    r = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.inf)
    return float(np.quantile(r, 0.05, method="inverted_cdf")), float(np.quantile(r, 0.95, method="inverted_cdf"))


def read_report(requests: list[dict], judged: dict, tail_p_of=None, census: dict | None = None) -> dict:
    out: dict[str, dict] = {}
    kinds = sorted({d["catalog"] for d in requests})
    for kind in [*kinds, "all but Gorilla"]:
        rs = [d for d in requests if (d["catalog"] == kind if kind != "all but Gorilla" else not d["catalog"].startswith("gorilla"))]
        for band, (lo, hi) in BANDS.items():
            e = estimate(rs, judged, lo, hi, tail_p_of, census)
            lo90, hi90 = ratio_interval(e.pop("_pred"), e.pop("_obs"))
            e["ratio"] = e["predicted"] / e["observed"] if e["observed"] else None
            e["ratio_90"] = [lo90, hi90]
            out.setdefault(kind, {})[band] = e
    return out


def _fmt_ratio(e: dict) -> str:
    lo, hi = e["ratio_90"]
    r = "none observed" if e["ratio"] is None else f"{e['ratio']:.2f}"
    return f"{r} ({lo:.2f}-{'inf' if hi == float('inf') else f'{hi:.2f}'})"


def _census(a: argparse.Namespace, requests: list[dict]) -> dict | None:
    """``--census-items/--census-judged``'s judgments of ranks 11-20, for the drawn requests (None without)."""
    from retrieval.evaluation.judged import read_judged

    if not a.census_items:
        return None
    census = read_judged(a.census_items, a.census_judged)
    return {d["id"]: census[d["id"]] for d in requests if d["id"] in census}


def reread(tail):
    """A drawn request's tail probabilities as ``tail`` (a TailCalibration) gives them on the same evidence."""
    import numpy as np

    def tail_p_of(d: dict):
        ranks = np.arange(11, 11 + len(d["tail_r"]))
        return tail.probabilities(np.asarray(d["tail_r"]), ranks, int(d["n_eligible"]), np.asarray(d["head_p"]))
    return tail_p_of


def read(a: argparse.Namespace) -> int:
    from retrieval.evaluation.judged import read_judged

    design = json.loads((a.dir / "design.json").read_text())
    judged = read_judged(a.dir / "items.jsonl", a.judged)
    requests = design["requests"]
    if a.kinds:   # e.g. an extension whose added requests of one kind were left unjudged
        unknown = sorted(set(a.kinds) - {d["catalog"] for d in requests})
        if unknown:
            print(f"error: no drawn request of {', '.join(unknown)} in {a.dir}", file=sys.stderr)
            return 2
        requests = [d for d in requests if d["catalog"] in set(a.kinds)]
    asked = {d["id"] for d in requests if d["judged_at"]}
    missing = sorted(asked - set(judged))
    if missing:
        print(f"error: {len(missing)} drawn requests have no judgment (e.g. {missing[0]}): judge them first",
              file=sys.stderr)
        return 2
    tail_p_of = None
    if a.tail:
        from retrieval.pipeline.confidence import TailCalibration

        try:
            tail_p_of = reread(TailCalibration.load(a.tail))
        except (OSError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    census = _census(a, requests)
    rep = read_report(requests, judged, tail_p_of, census)
    write_result(a.out, {"environment": environment_stamp(), "set": design["set"], "design": str(a.dir),
                         "tail": str(a.tail) if a.tail else "as searched", "tau": design["tau"],
                         "floor": design["floor"], "census": str(a.census_items) if census else None,
                         "census_requests": len(census or {}), "kinds": sorted(a.kinds) if a.kinds else None,
                         "report": rep}, indent=1)
    print(f"ranks past the head of the first search (need), {design['set']} set: the tail's predicted fits against "
          f"a judged sample (tau {design['tau']:.3g}, floor {design['floor']:g})"
          + (f"; ranks 11-20 from a census of {len(census)} requests ({a.census_items})" if census else "")
          + (f"; tail re-read with {a.tail}" if a.tail else "") + "\n")
    print("| catalog | ranks | candidates | judged | fits found | fits, estimated (s.e.) | predicted | "
          "predicted / observed (90%) |\n|---|---|---:|---:|---:|---:|---:|---|")
    for kind, bands in rep.items():
        for band, e in bands.items():
            print(f"| {kind} | {band} | {e['candidates']} | {e['sampled']} | {e['found']} | {e['observed']:.1f} "
                  f"({e['se']:.1f}) | {e['predicted']:.1f} | {_fmt_ratio(e)} |")
    print("(the interval resamples requests; at under about ten fits found it covers less than 90%: read the "
          "fits found)")
    if a.kinds:
        print(f"(read: {', '.join(sorted(a.kinds))} only; the pooled row covers those)")
    print(stamp_line(environment_stamp()))
    return 0


def _first_tools(rows: list[dict]) -> dict[str, list[str]]:
    """Each answerable request's first tool of its first search with the need (as the result files name it)."""
    return {r["id"]: r["tools1"][0] for r in rows
            if r.get("mode") == "need" and r.get("answerable") and r.get("tools1")}


def similarity(a: argparse.Namespace) -> int:
    """Are the fits past the head near-twins of the request's first tool? The encoder's cosine between each judged
    candidate and the first tool of its search (the flow's and the wide draw's rows say which), against the
    judges' verdicts: its AUROC among the judged candidates and the fits per band of similarity (estimated: each
    judged candidate counts one over its chance). Gorilla is left out (its tail is read already)."""
    import numpy as np

    from benchmarks.judged_flow import _Catalogs
    from retrieval.catalog.model import ToolId
    from retrieval.evaluation.judged import read_judged
    from retrieval.index.encoder import OnnxEncoder
    from retrieval.index.text import tool_document

    design = json.loads((a.dir / "design.json").read_text())
    judged = read_judged(a.dir / "items.jsonl", a.judged)
    try:
        firsts = _first_tools([r for path in a.flow for r in json.loads(path.read_text())["rows"]])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"error: --flow: {exc}", file=sys.stderr)
        return 2
    catalogs = _Catalogs()

    def tool(kind: str, tid) -> object | None:   # the catalog's tool behind a result file's name (or digest)
        real = catalogs.real(kind, tid)
        return catalogs.catalog(kind).get(ToolId(*real)) if real else None

    pairs = []
    for d in design["requests"]:
        kind = d["catalog"]
        if kind.startswith("gorilla") or d["id"] not in firsts or d["id"] not in judged:
            continue
        first = tool(kind, firsts[d["id"]])
        for i, tid in zip(d["judged_at"], d["judged_ids"]):
            cand = tool(kind, tid)
            if first is not None and cand is not None:
                pairs.append((kind, first, cand, judged[d["id"]].get(tuple(tid), 0.0) >= FITS, 1.0 / d["pi"][i]))
    if not pairs:
        print("error: no judged candidate whose request's first tool the rows name", file=sys.stderr)
        return 2
    texts = sorted({tool_document(t, with_examples=False) for _, f, c, _, _ in pairs for t in (f, c)})
    emb = dict(zip(texts, OnnxEncoder().encode(texts)))
    sims = np.array([float(np.dot(emb[tool_document(f, with_examples=False)], emb[tool_document(c, with_examples=False)]))
                     for _, f, c, _, _ in pairs])
    y = np.array([p[3] for p in pairs], dtype=bool)
    w = np.array([p[4] for p in pairs])
    from sklearn.metrics import roc_auc_score

    auroc = float(roc_auc_score(y, sims)) if 0 < y.sum() < len(y) else None
    bands = []
    for lo, hi in ((0.8, 1.01), (0.7, 0.8), (0.5, 0.7), (-1.0, 0.5)):
        m = (sims >= lo) & (sims < hi)
        bands.append({"from": lo, "to": hi, "judged": int(m.sum()), "fits": int(y[m].sum()),
                      "fits_estimated": float(np.sum(w[m] * y[m])), "candidates_estimated": float(np.sum(w[m]))})
    write_result(a.out, {"environment": environment_stamp(), "design": str(a.dir), "pairs": len(pairs),
                         "fits": int(y.sum()), "auroc": auroc, "fit_similarities": sorted(sims[y].round(3).tolist()),
                         "bands": bands}, indent=1)
    print(f"{design['set']} set, {len(pairs)} judged candidates past the head ({int(y.sum())} fits): AUROC of the "
          f"cosine to the first tool {auroc if auroc is None else round(auroc, 3)}\n")
    print("| cosine to the first tool | judged | fits found | fits, estimated | candidates, estimated |\n"
          "|---|---:|---:|---:|---:|")
    for b in bands:
        print(f"| {b['from']:.1f}–{min(b['to'], 1):.1f} | {b['judged']} | {b['fits']} | {b['fits_estimated']:.1f} | "
              f"{b['candidates_estimated']:.0f} |")
    print(stamp_line(environment_stamp()))
    return 0


def probe_tails(a: argparse.Namespace) -> int:
    """The probes' own tail candidates, as ``toolrank index --calibrate`` draws them (``probes.tail_candidates``:
    one candidate past the head per probe search, drawn uniformly), on the probe searches of
    ``catalog_probes.py run`` (the same cases: MCP-Zero organisations re-drawn with its seed), and the judges'
    batches of them."""
    from benchmarks.catalog_probes import MODES, load_probes, probe_cases
    from benchmarks.judged_flow import _Catalogs, _item, shippable_items
    from retrieval.evaluation.corpora import shippable_tool
    from retrieval.jsonl import write_jsonl
    from retrieval.pipeline.decision import Policy
    from retrieval.pipeline.flow import Pipeline
    from retrieval.pipeline.probes import tail_candidates
    from scorer import Scorer

    probes = load_probes(a.probes)
    if not probes:
        print(f"error: {a.probes}: no written probe requests (requests_*.jsonl)", file=sys.stderr)
        return 2
    catalogs, rng = _Catalogs(), random.Random(a.seed)
    scorer, policy = Scorer.load(a.model, threads=a.threads), Policy()
    rows, items = [], {}
    for kind in sorted({p["catalog"] for p in probes}):
        ps = [p for p in probes if p["catalog"] == kind]
        cases = [c for c in probe_cases(ps, catalogs, rng) if c.answerable]
        pipe = Pipeline(catalogs.index(kind), scorer, policy=policy)
        modes = [m for m in MODES if m == "request_only" or all(p.get("need") for p in ps)]
        for case in cases:
            for mode in modes:
                need = case.need if mode == "need" else None
                for request, tid, prob, weight in tail_candidates(pipe, case.request, need, eligible=case.eligible):
                    shown = list(shippable_tool(kind, (tid.server, tid.tool)))
                    rows.append({"id": case.id, "catalog": kind, "mode": mode, "tool": shown, "p": prob,
                                 "weight": weight})
                    got = items.setdefault(case.id, (kind, case.request, []))[2]
                    if [tid.server, tid.tool] not in got:
                        got.append([tid.server, tid.tool])
        print(f"{kind}: {sum(r['catalog'] == kind for r in rows)} tail candidates of {len(cases)} probes", file=sys.stderr)
    out = [dict(_item(pid, kind, cands, "probe-tail:" + pid), query=request) for pid, (kind, request, cands) in items.items()]
    a.probes.mkdir(parents=True, exist_ok=True)
    write_result(a.probes / "probe_tails.json", {"environment": environment_stamp(), "seed": a.seed, "rows": rows},
                 indent=None)
    write_jsonl(a.probes / "tail_items.jsonl", shippable_items(out))
    if a.batches:
        write_batches(out, a.batches, a.n_batches, a.seed + 41, catalogs)
    print(f"{len(rows)} tail candidates of {len(out)} probes -> {a.probes / 'probe_tails.json'}, tail_items.jsonl"
          + (f"; {a.n_batches} judge batches -> {a.batches}" if a.batches else ""), file=sys.stderr)
    return 0


def answers_moved(rows: list[dict], a: float, b: float, shift: float) -> dict:
    """The first answers of a kind's agent-flow rows (shipped-scale ``head_p`` and ``tail_p``) as shipped and on an
    index calibrated with the map ``(a, b)`` and the tail level ``shift``, as ``Pipeline._mapped`` reads them (the
    decision reads the head mapped and the tail's level through the same map, against the moved thresholds):
    tools per answer, answers holding a tool past rank 10, answers that lost a scored tool, decisions changed."""
    import numpy as np

    from retrieval.catalog.model import ToolId
    from retrieval.index.hits import Hit
    from retrieval.pipeline.decision import Policy, decide_search
    from retrieval.pipeline.probes import CatalogCalibration

    cal = CatalogCalibration(a, b, 0, 0, 0.0, tail_shift=shift)   # the map and the level as an index carries them
    shipped_policy = Policy()
    moved = cal.policy(shipped_policy)

    def answer(p, policy):
        hits = [Hit(ToolId("s", str(i)), i + 1, 1.0) for i in range(len(p))]
        d = decide_search(hits, np.asarray(p, dtype=np.float64), always=[], exact=[], mentioned=[], attempt=1,
                          policy=policy, max_results=policy.max_results, n_scored=len(head))
        return d.decision, [int(c[0].tool) for c in d.chosen]

    n = sizes0 = sizes1 = past = lost = decisions = 0
    for r in rows:
        if not r.get("tail_p") or not r.get("head_p"):
            continue
        head, tail = np.asarray(r["head_p"], dtype=np.float64), np.asarray(r["tail_p"], dtype=np.float64)
        d0, t0 = answer(np.concatenate([head, tail]), shipped_policy)
        d1, t1 = answer(cal.apply(np.concatenate([head, cal.tail(tail)])), moved)
        n += 1
        sizes0 += len(t0)
        sizes1 += len(t1)
        past += any(t >= len(head) for t in t1)
        lost += any(t < len(head) and t not in t1 for t in t0)
        decisions += d0 != d1
    return {"answers": n, "tools_shipped": sizes0 / max(n, 1), "tools_calibrated": sizes1 / max(n, 1),
            "with_a_tool_past_10": past, "lost_a_scored_tool": lost, "decisions_changed": decisions}


def probe_maps(path: Path) -> dict[str, tuple[float, float]]:
    """Each kind's map as ``toolrank index --calibrate`` fits it on the kind's probes (``catalog_probes.py check``:
    ``pooled_platt``, one per index)."""
    table = json.loads(path.read_text())["table"]
    out = {}
    for kind, modes in table.items():
        ab = next((m["params"]["pooled_platt"] for m in modes.values() if m.get("params", {}).get("pooled_platt")), None)
        if ab:
            out[kind] = (float(ab[0]), float(ab[1]))
    return out


def probe_read(a: argparse.Namespace) -> int:
    """Each kind's tail as shipped, through its probes' map (0.16.0's calibrated index) and at the level its
    probes' judged tail candidates set (``probes.fit_tail_shift``, not through the map: 0.17.0), read against
    the real requests' judged sample."""
    import numpy as np

    from retrieval.evaluation.judged import read_judged
    from retrieval.pipeline.probes import fit_tail_shift, tail_evidence
    from retrieval.pipeline.recalibration import platt

    design = json.loads((a.dir / "design.json").read_text())
    judged = read_judged(a.dir / "items.jsonl", a.judged)
    tails = json.loads((a.probes / "probe_tails.json").read_text())["rows"]
    tail_judged = read_judged(a.probes / "tail_items.jsonl", a.probe_judged)
    maps = probe_maps(a.maps)
    requests = design["requests"]
    census = _census(a, requests)
    out, kinds = {}, sorted({d["catalog"] for d in requests})
    level: dict[str, dict] = {}
    for kind in kinds:
        rows = [r for r in tails if r["catalog"] == kind and r["id"] in tail_judged]
        ab = maps.get(kind, (1.0, 0.0))
        cands = [(r["p"], r["weight"], tail_judged[r["id"]].get(tuple(r["tool"]), 0.0) >= FITS) for r in rows]
        level[kind] = {"map": list(ab), "probe_tail": len(cands), "probe_tail_fits": sum(c[2] for c in cands),
                       "evidence": tail_evidence(cands) if cands else 1.0, "shift": fit_tail_shift(cands)}
    ways = {"shipped": lambda d: np.asarray(d["tail_p"], dtype=np.float64),
            "probes_map": lambda d: platt(d["tail_p"], *level[d["catalog"]]["map"]),
            "probes_level": lambda d: platt(d["tail_p"], 1.0, level[d["catalog"]]["shift"])}
    for kind in [*kinds, "all but Gorilla", "all"]:
        rs = [d for d in requests if d["catalog"] == kind or kind == "all"
              or (kind == "all but Gorilla" and not d["catalog"].startswith("gorilla"))]
        cell = dict(level.get(kind, {}))
        for name, f in ways.items():
            e = estimate(rs, judged, 11, 100, f, census)
            lo90, hi90 = ratio_interval(e.pop("_pred"), e.pop("_obs"))
            e["ratio"] = e["predicted"] / e["observed"] if e["observed"] else None
            e["ratio_90"] = [lo90, hi90]
            cell[name] = e
        out[kind] = cell
    answers = {}
    if a.flow:   # what the answers hold once calibrated: the flow's first searches (need and request only)
        flow_rows = json.loads(a.flow.read_text())["rows"]
        for kind in kinds:
            answers[kind] = answers_moved([r for r in flow_rows if r["catalog"] == kind and r["mode"] != "late_need"],
                                          *level[kind]["map"], level[kind]["shift"])
    write_result(a.out, {"environment": environment_stamp(), "design": str(a.dir), "probes": str(a.probes),
                         "maps": str(a.maps), "census": str(a.census_items) if census else None, "report": out,
                         "answers": answers}, indent=1)
    print("ranks 11-100 of the real requests' first searches (need), predicted against the judged sample: the tail "
          "as shipped, through the catalog's probe map (0.16.0), and at the level the probes' own judged tail "
          "candidates set (0.17.0)" + (f"; ranks 11-20 from a census of {len(census)} requests" if census else "")
          + "\n")
    print("| catalog | probes' tail: judged (fit; p of the shipped level) | shift | fits, estimated (found) | shipped: predicted, ratio (90%) | "
          "probe map: predicted, ratio | the probes' tail level: predicted, ratio |\n|---|---:|---:|---:|---|---|---|")
    for kind, c in out.items():
        s0 = c["shipped"]
        probe = f"{c['probe_tail']} ({c['probe_tail_fits']}; p {c['evidence']:.2g}) | {c['shift']:+.2f}" \
            if "shift" in c else "- | -"
        print(f"| {kind} | {probe} | {s0['observed']:.1f} "
              f"({s0['found']}) | " + " | ".join(f"{c[m]['predicted']:.1f}, {_fmt_ratio(c[m])}"
                                                  for m in ("shipped", "probes_map", "probes_level")) + " |")
    if answers:
        print(f"\nfirst answers of the flow ({a.flow.name}, need and request only) on each kind's calibrated index: "
              "the map and the tail level above\n")
        print("| catalog | answers | tools per answer, shipped -> calibrated | with a tool past rank 10 | lost a scored "
              "tool | decisions changed |\n|---|---:|---|---:|---:|---:|")
        for kind, e in answers.items():
            print(f"| {kind} | {e['answers']} | {e['tools_shipped']:.2f} -> {e['tools_calibrated']:.2f} | "
                  f"{e['with_a_tool_past_10']} | {e['lost_a_scored_tool']} | {e['decisions_changed']} |")
    print(stamp_line(environment_stamp()))
    return 0


def fits_agree(a: argparse.Namespace) -> int:
    """A second judge on the requests whose candidates past the head a first judge accepted (and as many others,
    shuffled in, so the batch does not say which): per source, how many of the first judge's fits the second
    accepts, and how many the second accepts that the first did not."""
    from collections import Counter

    from retrieval.evaluation.judged import read_answers, read_judged
    from retrieval.jsonl import read_jsonl

    sources = {}
    for spec in a.source:
        name, _, rest = spec.partition("=")
        items, _, pattern = rest.partition(":")
        files = sorted(Path().glob(pattern)) if pattern else []
        if not name or not items or not files:
            print(f"error: --source {spec!r}: give NAME=ITEMS:JUDGED_GLOB (a glob that matches)", file=sys.stderr)
            return 2
        sources[name] = ({r["id"]: r for _, r in read_jsonl(Path(items))}, read_judged(Path(items), files))
    second = read_answers(a.second)
    table: Counter = Counter()
    for e in json.loads(a.mapping.read_text()):
        items, first = sources[e["source"]]
        item, answer = items[e["id"]], second.get(e["check_id"])
        if answer is None or answer.get("n") != len(item["candidates"]):
            print(f"error: {e['check_id']}: no answer, or another number of candidates", file=sys.stderr)
            return 2
        for k, c in enumerate(item["candidates"], 1):
            f = first[e["id"]].get((c["server"], c["tool"]), 0.0) >= FITS
            g = float(answer["p"].get(str(k), 0.0)) >= FITS
            table[(e["source"], f, g)] += 1
    rows = {name: [table[(name, True, True)], table[(name, True, False)], table[(name, False, True)],
                   table[(name, False, False)]] for name in sources}
    write_result(a.out, {"environment": environment_stamp(), "rows": rows}, indent=1)
    print("| source | first judge's fits the second accepts | ... it rejects | second's fits the first did not "
          "accept | neither |\n|---|---:|---:|---:|---:|")
    for name, (tt, tf, ft, ff) in rows.items():
        print(f"| {name} | {tt} | {tf} | {ft} | {ff} |")
    print(stamp_line(environment_stamp()))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("draw", help="re-run the first searches, score the tail with the student, draw the sample")
    d.add_argument("--set", choices=["report", "fit"], required=True)
    d.add_argument("--flow", type=Path, help="the flow's JSON (checks the re-drawn ranks 11-20; default its set's)")
    d.add_argument("--n", type=int, help="answerable requests per kind (default the flow's)")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--budget", type=float, default=3000, help="expected number of candidates to judge")
    d.add_argument("--floor", type=float, default=0.01, help="every candidate's least chance of being judged")
    d.add_argument("--model", type=Path, default=ROOT / "models" / "toolrank-reranker")
    d.add_argument("--threads", type=int, default=2)
    d.add_argument("--out", type=Path, required=True, help="folder for design.json and items.jsonl")
    d.add_argument("--batches", type=Path, help="folder for the judges' batches (real texts: keep out of the repository)")
    d.add_argument("--n-batches", type=int, default=8)
    d.add_argument("--extend", type=Path, help="an earlier design's folder: add requests (up to --n a kind with its "
                   "own) drawn with its tau and floor, and write the whole sample to --out")
    nb = sub.add_parser("need-batches", help="the fit set's added requests that have no blind need yet")
    nb.add_argument("--extend", type=Path, required=True, help="the earlier fit design's folder")
    nb.add_argument("--n", type=int, default=400, help="requests per training corpus with the earlier design's")
    nb.add_argument("--seed", type=int, default=0)
    nb.add_argument("--out", type=Path, required=True)
    nb.add_argument("--n-batches", type=int, default=6)
    r = sub.add_parser("read", help="the tail's predicted fits against the judged sample")
    r.add_argument("--dir", type=Path, required=True)
    r.add_argument("--judged", type=Path, nargs="+", required=True)
    r.add_argument("--tail", type=Path, help="re-read the tail's probabilities with this calibration")
    r.add_argument("--kinds", nargs="+", help="read only these catalog kinds")
    r.add_argument("--census-items", type=Path, help="a judge of every candidate at ranks 11-20 (judged_flow "
                   "mine-tail's items), read in place of the sample there")
    r.add_argument("--census-judged", type=Path, nargs="*")
    r.add_argument("--out", type=Path, required=True)
    t = sub.add_parser("probe-tails", help="the probes' own tail candidates (what --calibrate judges) and batches")
    t.add_argument("--probes", type=Path, required=True, help="a catalog_probes.py folder (requests and needs)")
    t.add_argument("--seed", type=int, default=0, help="catalog_probes.py run's seed (the same organisations)")
    t.add_argument("--model", type=Path, default=ROOT / "models" / "toolrank-reranker")
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--batches", type=Path)
    t.add_argument("--n-batches", type=int, default=2)
    q = sub.add_parser("probe-read", help="the tail at the level the probes set, read on the real requests' sample")
    q.add_argument("--dir", type=Path, required=True, help="the real requests' tail sample (draw --set report)")
    q.add_argument("--judged", type=Path, nargs="+", required=True)
    q.add_argument("--probes", type=Path, required=True, help="the folder probe-tails wrote into")
    q.add_argument("--probe-judged", type=Path, nargs="+", required=True)
    q.add_argument("--maps", type=Path, default=ROOT / "benchmarks" / "results" / "catalog_probes.json",
                   help="catalog_probes.py check's JSON (each kind's probe map)")
    q.add_argument("--flow", type=Path, help="also replay this agent-flow JSON's first answers on each kind's "
                   "calibrated index (what the answers hold)")
    q.add_argument("--census-items", type=Path, help="as read's")
    q.add_argument("--census-judged", type=Path, nargs="*")
    q.add_argument("--out", type=Path, required=True)
    sim = sub.add_parser("similarity", help="the judged candidates past the head against their cosine to the "
                         "request's first tool")
    sim.add_argument("--dir", type=Path, required=True)
    sim.add_argument("--judged", type=Path, nargs="+", required=True)
    sim.add_argument("--flow", type=Path, nargs="+", required=True,
                     help="rows naming each request's first tool (agent-flow JSON; the wide draw's rows file)")
    sim.add_argument("--out", type=Path, required=True)
    f = sub.add_parser("fits-agree", help="a second judge on the requests with judged fits past the head")
    f.add_argument("--mapping", type=Path, required=True, help="JSON list of {check_id, source, id}")
    f.add_argument("--second", type=Path, nargs="+", required=True)
    f.add_argument("--source", nargs="+", required=True, help="NAME=ITEMS:JUDGED_GLOB for each source")
    f.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    if a.cmd == "draw" and a.flow is None and not a.extend:
        default = ROOT / "benchmarks" / "results" / f"agent_flow_{a.set}.json"
        a.flow = default if default.exists() else None
    if a.cmd in ("read", "probe-read") and bool(a.census_items) != bool(a.census_judged):
        print("error: --census-items and --census-judged go together", file=sys.stderr)
        return 2
    return {"draw": draw, "need-batches": need_batches, "read": read, "similarity": similarity, "probe-tails": probe_tails, "probe-read": probe_read,
            "fits-agree": fits_agree}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
