"""The ECE of the best probability on up to 400 answerable requests per held-out kind (issue 34's target, measured
where a calibrated model no longer reads 0.07-0.09 by chance alone).

    python benchmarks/wide_calibration.py need-batches --out runs/wide      # requests without a blind need
    # blind need writers (training/data/briefs/needs_blind.md) -> runs/wide/needs_*.jsonl, merged into
    #   benchmarks/data/needs_wide.jsonl (training.needs.merge(Path("runs/wide"), Path("runs/wide"), NEEDS_WIDE))
    python benchmarks/wide_calibration.py run --out runs/wide               # first searches of the new requests
    python benchmarks/wide_calibration.py mine --out runs/wide             # judge items: unlabelled first tools
    # blind judges (benchmarks/results/judged_flow/brief.md) -> judged_*.jsonl (kept in judged_flow/wide/)
    python benchmarks/wide_calibration.py run --twins --out runs/wide       # their no-fit twins -> rows_twins.json
    python benchmarks/wide_calibration.py mine-unread --proceeding --flow runs/wide/rows_twins.json --out ... \
        --judged-items ... --judged ...                                       # the twins' proceeds no judge read
    python benchmarks/wide_calibration.py check    # every table, from benchmarks/results/wide_calibration_*rows.json
    python benchmarks/wide_calibration.py check --written --rows benchmarks/results/wide_calibration_written_rows.json

The agent-flow benchmark reads 100 answerable requests per held-out kind, where a perfectly calibrated model
itself reads an ECE of 0.07-0.09 (``ece_floor``): the target (<= 0.05) cannot be told from chance there. This
keeps those 100 rows (``agent_flow_report.json``, unchanged) and adds requests drawn from the same pools, up to
``--per-kind`` in all: each corpus's requests (a seeded shuffle), MCP-Zero's test and independent questions on
organisations drawn as the flow draws them. Each is searched once per mode (the first search, day one, as the
flow's first attempt); the first tool fits when labelled or, for the first tools that are not labelled, when a
blind judge accepts it (the judge reads the request and the first five tools of both modes, shuffled; never the
label, the need, the order or the probability). ``catalog_probes.py check`` then reads the shipped
probabilities and the probes' maps (``toolrank index --calibrate``) on all of them. Only the answerable side:
the no-fit twins and the decisions are the agent flow's (``agent_flow_report.json``).

Needs written for this (``benchmarks/data/needs_wide.jsonl``) are kept apart from the flow's
(``training/data/needs_blind.jsonl``), so the flow's own draw of 100 requests does not move.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, environment_stamp, stamp_line, write_result  # noqa: E402

NEEDS_WIDE = ROOT / "benchmarks" / "data" / "needs_wide.jsonl"
RESULTS = ROOT / "benchmarks" / "results"
REPORT = RESULTS / "agent_flow_report.json"
MODES = ("need", "request_only")


def _needs() -> dict[str, dict]:
    from training.flow_cases import load_needs

    needs = load_needs()
    if NEEDS_WIDE.exists():
        needs.update(load_needs(NEEDS_WIDE))
    return needs


@functools.cache
def _report_rows() -> list[dict]:
    """The agent flow's rows (``agent_flow_report.json``, read once; callers do not change them)."""
    return json.loads(REPORT.read_text())["rows"]


@functools.cache
def _old_rows() -> list[dict]:
    """The agent flow's first searches of its answerable requests (the 100 per kind already judged)."""
    return [r for r in _report_rows() if r.get("mode") in MODES and r.get("answerable")]


def _corpus_pool(name: str, seed: int | str) -> list:
    """A corpus's requests in a seeded order (``seed`` and the corpus's name key the shuffle)."""
    from retrieval.evaluation.corpora import load_corpus

    qs = list(load_corpus(name).questions)
    random.Random(f"{seed}:{name}").shuffle(qs)
    return qs


def _kinds() -> list[str]:
    from training.flow_cases import SETS

    return SETS["report"][1]


def need_batches(out: Path, per_kind: int, seed: int, n_batches: int) -> int:
    """``id<TAB>voice<TAB>request`` of every drawn corpus request that has no blind need yet."""
    from benchmarks.catalog_probes import write_need_batches

    needs, old = _needs(), {r["id"] for r in _old_rows()}
    todo = []
    for name in _kinds():
        have = sum(1 for r in _old_rows() if r["catalog"] == name and r["mode"] == "need")
        for q in _corpus_pool(name, seed):
            if have >= per_kind:
                break
            if q.id in old:
                continue
            have += 1
            if q.id not in needs:
                todo.append(q)
    write_need_batches([(q.id, q.query) for q in todo], out, n_batches, seed)
    print(f"{len(todo)} requests without a blind need -> {n_batches} batches in {out}")
    return 0


def _new_cases(per_kind: int, seed: int, index) -> list:
    """The requests added to each kind's flow rows (answerable, first search only), up to ``per_kind`` in all."""
    needs, old_rows = _needs(), _old_rows()
    old = {r["id"] for r in old_rows}
    cases = []
    for name in ["mcpzero-org", *_kinds()]:
        have = sum(1 for r in old_rows if r["catalog"] == name and r["mode"] == "need")
        pool = pool_cases(name, "test", needs, old, index, random.Random(f"{seed}:{name}"),
                          lambda: _corpus_pool(name, seed))
        cases += pool[:max(per_kind - have, 0)]
    return cases


def pool_cases(name: str, split: str, needs: dict, skip: set[str], index, rng: random.Random, order) -> list:
    """A kind's answerable requests with a blind need, less ``skip``: MCP-Zero organisations drawn as the flow
    draws them (on ``split``'s servers, from ``rng``'s stream), or a corpus's requests in ``order()``'s order."""
    from retrieval.catalog.eligibility import Eligibility
    from retrieval.evaluation.agent_flow import Case
    from training.flow_cases import mcpzero_cases

    if name == "mcpzero-org":
        return [c for c in mcpzero_cases(split, needs, 10 ** 6, rng, index) if c.answerable and c.id not in skip]
    pool = []
    for q in order():
        n = needs.get(q.id)
        if q.id in skip or not n or not n.get("need"):
            continue
        pool.append(Case(q.id, q.query, name, Eligibility(), frozenset(q.lenient_targets), n["need"], None))
    return pool


def _twin_cases(cases: list, index) -> list:
    """Each added request's no-fit twin, built as the flow builds its own: a corpus request with its labelled tools
    made ineligible; an MCP-Zero request on its organisation without the labelled tools' servers (the twin
    ``mcpzero_cases`` drew with it)."""
    from retrieval.catalog.eligibility import Eligibility
    from retrieval.evaluation.agent_flow import Case
    from retrieval.evaluation.corpora import load_corpus
    from training.flow_cases import mcpzero_cases

    wanted = {c.id for c in cases}
    twins = [c for c in mcpzero_cases("test", _needs(), 10 ** 6, random.Random("0:mcpzero-org"), index)
             if not c.answerable and c.id.removesuffix(":none") in wanted]
    catalogs: dict[str, list] = {}
    for c in cases:
        if c.catalog == "mcpzero-org":
            continue
        every = catalogs.setdefault(c.catalog, [t.id for t in load_corpus(c.catalog).catalog.tools])
        twins.append(Case(c.id + ":none", c.request, c.catalog, Eligibility.of(tools=[t for t in every if t not in c.targets]),
                          frozenset(), c.need, None))
    return twins


def _flow_cases(index) -> list:
    """The agent flow's own MCP-Zero organisation cases, drawn again as ``agent_flow.flow_rows`` draws them (answerable
    only; the same seed and needs give the same organisations)."""
    from training.flow_cases import load_needs, mcpzero_cases

    cases = [c for c in mcpzero_cases("test", load_needs(), 100, random.Random(0), index) if c.answerable]
    if sorted(c.id for c in cases) != sorted({r["id"] for r in _old_rows() if r["catalog"] == "mcpzero-org"}):
        raise SystemExit("the agent flow's MCP-Zero cases could not be drawn again (its needs or seed changed)")
    return cases


def run(out: Path, per_kind: int, seed: int, threads: int, model: Path, written: Path | None = None,
        twins: bool = False) -> int:
    """First searches of the added requests; with ``written`` (an index folder, built once) only MCP-Zero
    organisations, every request (the flow's too) searched on the test servers' tools with written examples."""
    from benchmarks.ablation import CachedScorer
    from benchmarks.judged_flow import _Catalogs
    from retrieval.evaluation.agent_flow import run_flow, shippable_rows
    from retrieval.pipeline.decision import Policy
    from retrieval.pipeline.flow import Pipeline
    from scorer import Scorer

    catalogs = _Catalogs()
    cases = _new_cases(per_kind, seed, catalogs.index("mcpzero-org"))
    old = _old_rows()
    kinds = ["mcpzero-org", *_kinds()]
    if twins:
        if seed != 0:
            raise SystemExit("--twins follows the organisations drawn with --seed 0")
        cases = _twin_cases(cases, catalogs.index("mcpzero-org"))
    if written is not None:
        from benchmarks.generated_examples import written_examples_index

        flow = _flow_cases(catalogs.index("mcpzero-org"))
        catalogs.use("mcpzero-org", written_examples_index(written))
        kinds, old = ["mcpzero-org"], []
        cases = flow + [c for c in cases if c.catalog == "mcpzero-org"]
    scorer, policy = CachedScorer(Scorer.load(model, threads=threads)), Policy()
    rows = []
    for kind in kinds:
        cs = [c for c in cases if c.catalog == kind]
        if cs:
            rows += run_flow(Pipeline(catalogs.index(kind), scorer, policy=policy), cs, MODES, show_progress=True,
                             desc=kind, tail=False, first_only=True)
    out.mkdir(parents=True, exist_ok=True)
    name = "rows_written.json" if written is not None else "rows_twins.json" if twins else "rows.json"
    environment = environment_stamp()
    write_result(out / name, {"environment": environment, "per_kind": per_kind, "seed": seed,
                              "written_examples": written is not None, "rows": _slim(shippable_rows(rows))}, indent=0)
    counts = {k: sum(1 for r in old + rows if r["catalog"] == k and r["mode"] == "need") for k in kinds}
    print(f"{len(rows)} first searches -> {out / name} (with the flow's {len(old)}: requests per kind "
          + ", ".join(f"{k} {v}" for k, v in counts.items()) + ")")
    print(stamp_line(environment))
    return 0


_KEEP = ("id", "catalog", "mode", "answerable", "best1", "right1", "n_eligible")


def _slim(rows: list[dict]) -> list[dict]:
    """What the check reads of a first search: its first five tools, best probability and label."""
    return [{**{k: r[k] for k in _KEEP if k in r}, "tools1": r.get("tools1", [])[:5]} for r in rows]


def flow_file(rows: Path, dest: Path, with_report: bool = True) -> Path:
    """``rows`` (``run``'s) with the agent flow's own answerable first searches, as one flow file at ``dest``."""
    new = json.loads(rows.read_text())["rows"]
    dest.write_text(json.dumps({"rows": (_old_rows() if with_report else []) + new}), encoding="utf-8")
    return dest


def check(rows: Path, out: Path, written: bool) -> int:
    """``catalog_probes.check`` on the flow's rows and these, against every judgment of them (the flow's report
    judges, this run's, and for the written-examples variant the judgments of first tools only it found)."""
    import tempfile

    from benchmarks.catalog_probes import check as probe_check

    res = ROOT / "benchmarks" / "results" / "judged_flow"
    probes = ROOT / "benchmarks" / "data" / "probes" / "report"
    items = [res / "report" / "items.jsonl", res / "wide" / "items.jsonl"]
    judged = sorted((res / "report").glob("judged_0*.jsonl")) + sorted((res / "wide").glob("judged_0*.jsonl"))
    probe_items, probe_judged = [probes / "judge_items.jsonl"], sorted(probes.glob("judged_0*.jsonl"))
    if written:
        items.append(res / "written" / "items.jsonl")
        judged += sorted((res / "written").glob("judged_0*.jsonl"))
        probe_items.append(probes / "written_judge_items.jsonl")
        probe_judged += sorted(probes.glob("written_judged_0*.jsonl"))
    missing = [p for p in [rows, *items, *probe_items] if not p.is_file()]
    if missing:
        print(f"error: {missing[0]} is missing", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        flow = flow_file(rows, Path(tmp) / "flow.json", with_report=not written)
        status = probe_check(probes, flow, items, judged, 0.10, 0.83, out, probe_judged,
                             probes / ("probe_flow_written.json" if written else "probe_flow.json"), probe_items,
                             detail=True)
        all_rows = json.loads(flow.read_text())["rows"]
    if status:
        return status
    empties = late_need_empties(all_rows)
    print("\nwhen the need comes only on the second search (late_need), read from the same first searches: right "
          "first answers (request alone) that end empty, both searches under the no-fit floor\n")
    print("| catalog | right first answers | end empty | share |\n|---|---:|---:|---:|")
    for kind, (right, empty) in empties.items():
        print(f"| {kind} | {right} | {empty} | {empty / max(right, 1):.1%} |")
    result = json.loads(out.read_text())
    result["late_need_empties"] = {k: {"right_first": a, "end_empty": b} for k, (a, b) in empties.items()}
    if not written:
        result["pooled_with_0130"] = pooled_with_0130(all_rows, items, judged, result["table"])
        twins_rows = RESULTS / "wide_calibration_twins_rows.json"
        if twins_rows.is_file():
            twin_items = RESULTS / "judged_flow" / "wide_twins"
            result["twins"] = twin_proceeds(
                [r for r in _report_rows() if not r["answerable"] and r["mode"] in MODES]
                + json.loads(twins_rows.read_text())["rows"],
                [*items, *sorted(twin_items.glob("items.jsonl"))], [*judged, *sorted(twin_items.glob("judged_0*.jsonl"))])
    write_result(out, result, indent=1)
    return 0


def twin_proceeds(rows: list[dict], items: list[Path], judged: list[Path]) -> dict:
    """The no-fit twins' first searches (the flow's 100 per kind and the added requests'): the share that proceed
    (best probability at or over the shipped threshold), and of all twins the share that proceed with a first tool
    the judge says does not fit (a wrong proceed; a look-alike that fits is a right one). First searches only: in
    the flow, a second search adds about a sixth more proceeds with the need, none without it. Prints the table."""
    from benchmarks.catalog_calibration import load_fits
    from retrieval.pipeline.decision import Policy

    proceed = Policy().proceed_threshold
    fits = load_fits(items, judged)
    out: dict = {}
    print(f"\nno-fit twins, first search (proceeding at {proceed}); a proceed is wrong when the judge says its first "
          "tool does not fit\n")
    print("| catalog | mode | twins | proceed | wrong proceeds | first tools no judge read |\n|---|---|---:|---:|---:|---:|")
    for kind in sorted({r["catalog"] for r in rows}):
        for mode in MODES:
            rs = [r for r in rows if r["catalog"] == kind and r["mode"] == mode and not r["answerable"]]
            if not rs:
                continue
            went = [r for r in rs if r["best1"] >= proceed and r.get("tools1")]
            unread = sum(1 for r in went if not fits.read(r))
            wrong = sum(1 for r in went if fits.read(r) and not fits(r))
            cell = {"twins": len(rs), "proceed": len(went) / len(rs), "wrong": wrong / len(rs), "unread": unread}
            out.setdefault(kind, {})[mode] = cell
            print(f"| {kind} | {mode} | {len(rs)} | {cell['proceed']:.1%} | {cell['wrong']:.1%} | {unread} |")
    return out


def pooled_with_0130(rows: list[dict], items: list[Path], judged: list[Path], table: dict) -> dict:
    """The reading on every request either draw searched: these rows, and 0.13.0's (``calibration_report.json``:
    up to 400 answerable requests per kind drawn apart, searched with the same shipped model, their first tools
    judged by 0.13.0's judges, ``judged_flow/calibration/``) for the requests these do not hold. Each draw's rows
    are read against its own judges (on the requests both drew, the two agree on 94-100% of first tools). Prints
    the table; returns it."""
    from benchmarks.catalog_calibration import first_fits, load_fits
    from retrieval.evaluation.stats import ece, ece_floor
    from retrieval.pipeline.recalibration import platt

    res = RESULTS / "judged_flow" / "calibration"
    older = [r for r in json.loads((RESULTS / "calibration_report.json").read_text())["rows"]
             if r.get("answerable") and r.get("mode") in MODES]
    fits_new = load_fits(items, judged)
    fits_old = load_fits([res / "items.jsonl"], sorted(res.glob("judged_0*.jsonl")))
    have = {(r["catalog"], r["id"], r["mode"]) for r in rows if r.get("answerable")}
    out: dict = {}
    print("\npooled with 0.13.0's draw of up to 400 requests per kind (calibration_report.json; each draw read "
          "against its own judges): n, then ECE (a calibrated model with those probabilities reads; p)\n")
    print("| catalog | mode | n (of them 0.13.0's) | shipped | probes |\n|---|---|---|---|---|")
    for kind, modes in table.items():
        for mode, cell in modes.items():
            mine = [r for r in rows if r.get("answerable") and r["catalog"] == kind and r["mode"] == mode]
            theirs = [r for r in older if r["catalog"] == kind and r["mode"] == mode
                      and (kind, r["id"], mode) not in have]
            p = np.array([r["best1"] for r in mine + theirs])
            y = np.array([first_fits(r, fits_new) for r in mine] + [first_fits(r, fits_old) for r in theirs],
                         dtype=float)
            a, b = cell["params"]["pooled_platt"]
            got = {"n": len(p), "from_0130": len(theirs)}
            for name, q in (("shipped", p), ("probes", platt(p, a, b))):
                e = float(ece(q, y))
                floor = ece_floor(q, observed=e)
                got[name] = {"ece": e, "floor": floor["median"], "p_value": floor["p_value"]}
            out.setdefault(kind, {})[mode] = got
            print(f"| {kind} | {mode} | {got['n']} ({got['from_0130']}) | "
                  + " | ".join(f"{got[m]['ece']:.3f} ({got[m]['floor']:.3f}; p {got[m]['p_value']:.3f})"
                               for m in ("shipped", "probes")) + " |")
    return out


def late_need_empties(rows: list[dict]) -> dict[str, tuple[int, int]]:
    """Per kind: the answerable requests whose first search with the request alone has the right tool first, and
    how many of them would end empty in the late_need flow (the need only on the second search): both that
    first search and the search with the need read under the no-fit floor (a first answer at or over it is
    kept: ``decision.keep_first_answer``). Exact for the flow's decisions: the second attempt's best
    probability is the search with the need's."""
    from retrieval.pipeline.decision import Policy

    floor = Policy().no_fit_below
    by: dict[tuple[str, str], dict[str, dict]] = {}
    for r in rows:
        if r.get("answerable") and r.get("mode") in MODES:
            by.setdefault((r["catalog"], r["id"]), {})[r["mode"]] = r
    out: dict[str, list[int]] = {}
    for (kind, _), m in sorted(by.items()):
        if len(m) < 2 or not m["request_only"].get("right1"):
            continue
        got = out.setdefault(kind, [0, 0])
        got[0] += 1
        got[1] += m["request_only"]["best1"] < floor and m["need"]["best1"] < floor
    return {k: (a, b) for k, (a, b) in out.items()}


def mine_unread(flow: Path, out: Path, items: list[Path], judged: list[Path], probes: Path | None, seed: int,
                n_batches: int, proceeding: bool = False) -> int:
    """Judge items for first searches whose first tool no judgment read yet (labelled ones aside): each
    request with the tools of its first five (both modes) that were never judged for it, shuffled."""
    from benchmarks.catalog_calibration import LATER, load_fits
    from benchmarks.catalog_probes import load_probes
    from benchmarks.judged_flow import write_judge_batches
    from retrieval.evaluation.judged import base_id

    rows = json.loads(flow.read_text())["rows"]
    fits = load_fits(items, judged)
    seen = {rid: set(p) for rid, p in fits.judged.items()}
    if proceeding:   # only first searches that proceed (the no-fit twins' wrong proceeds)
        from retrieval.pipeline.decision import Policy

        rows = [r for r in rows if r["best1"] >= Policy().proceed_threshold]
    needing = {base_id(r["id"]) for r in rows if r.get("tools1") and not r.get("right1") and not fits.read(r)}
    text = {p["id"]: p["request"] for p in load_probes(probes)} if probes is not None else _requests(needing)
    todo = write_judge_batches(rows, text, out, n_batches, seed, asked=needing, seen=seen, later=LATER)
    print(f"{len(todo)} requests with an unread first tool, {sum(len(o['candidates']) for o in todo)} candidates -> "
          f"{out}/judge_items.jsonl, {n_batches} judge batches")
    return 0


def mine(out: Path, n_batches: int, seed: int) -> int:
    """Judge items for the new requests whose first tool is not labelled in some mode: the first five tools of
    both modes' first searches, shuffled; the judge sees the request alone."""
    from benchmarks.judged_flow import write_judge_batches
    from retrieval.evaluation.judged import base_id

    try:
        rows = json.loads((out / "rows.json").read_text())["rows"]
    except (OSError, ValueError) as exc:
        print(f"error: {exc} (run `wide_calibration.py run` first)", file=sys.stderr)
        return 2
    needing = {base_id(r["id"]) for r in rows if r.get("tools1") and not r.get("right1")}
    items = write_judge_batches(rows, _requests(needing), out, n_batches, seed, asked=needing)
    print(f"{len(items)} requests, {sum(len(o['candidates']) for o in items)} candidates -> {out}/judge_items.jsonl, "
          f"{n_batches} judge batches")
    return 0


def _requests(ids: set[str]) -> dict[str, str]:
    """The request text of each id, from the same sources the cases read."""
    from retrieval.evaluation.corpora import load_corpus
    from retrieval.evaluation.harness import load_queries
    from training.flow_cases import INDEPENDENT, QUESTIONS

    out = {q.id: q.query for q in [*load_queries(QUESTIONS), *load_queries(INDEPENDENT, split="independent")]
           if q.id in ids}
    for name in _kinds():
        out.update({q.id: q.query for q in load_corpus(name).questions if q.id in ids})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, text in (("need-batches", "the blind need writers' batches (requests without a need)"),
                       ("run", "first searches of the added requests"),
                       ("mine", "the judge's items and batches (unlabelled first tools)")):
        s = sub.add_parser(name, help=text)
        s.add_argument("--out", type=Path, required=True)
        s.add_argument("--per-kind", type=int, default=400, help="answerable requests per kind in all (default 400)")
        s.add_argument("--seed", type=int, default=0)
        s.add_argument("--batches", type=int, default=6)
        s.add_argument("--threads", type=int, default=2)
        s.add_argument("--model", type=Path, default=ROOT / "models" / "toolrank-reranker")
        if name == "run":
            s.add_argument("--twins", action="store_true",
                           help="the added requests' no-fit twins instead (writes rows_twins.json)")
            s.add_argument("--written-examples", type=Path, metavar="INDEX_DIR",
                           help="MCP-Zero organisations only, their tools with written example requests (the index "
                                "is built into INDEX_DIR once; benchmarks/generated_examples.py)")
    u = sub.add_parser("mine-unread", help="judge items for first tools no judgment read yet")
    u.add_argument("--flow", type=Path, required=True,
                   help="first searches (run's rows_written.json, or catalog_probes' probe_flow_written.json)")
    u.add_argument("--out", type=Path, required=True)
    u.add_argument("--judged-items", type=Path, nargs="+", required=True)
    u.add_argument("--judged", type=Path, nargs="+", required=True)
    u.add_argument("--probes", type=Path, help="the probes' folder, when --flow holds probe searches")
    u.add_argument("--seed", type=int, default=0)
    u.add_argument("--batches", type=int, default=4)
    u.add_argument("--proceeding", action="store_true", help="only first searches that proceed (no-fit twins)")
    c = sub.add_parser("check", help="the probes' maps and the shipped probabilities read on every request")
    c.add_argument("--rows", type=Path, default=RESULTS / "wide_calibration_rows.json")
    c.add_argument("--written", action="store_true", help="the written-examples variant (its rows: --rows)")
    c.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    if a.cmd == "check":
        out = a.out or RESULTS / ("wide_calibration_written.json" if a.written else "wide_calibration.json")
        return check(a.rows, out, a.written)
    if a.cmd == "mine-unread":
        return mine_unread(a.flow, a.out, a.judged_items, a.judged, a.probes, a.seed, a.batches, a.proceeding)
    if a.per_kind < 1:
        p.error("--per-kind must be at least 1")
    if a.cmd == "need-batches":
        return need_batches(a.out, a.per_kind, a.seed, a.batches)
    if a.cmd == "run":
        return run(a.out, a.per_kind, a.seed, a.threads, a.model, a.written_examples, a.twins)
    return mine(a.out, a.batches, a.seed)


if __name__ == "__main__":
    sys.exit(main())
