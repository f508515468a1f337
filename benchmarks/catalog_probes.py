"""Can a catalog calibrate itself from requests written for its own tools? (issue 34, "calibration that transfers")

    python benchmarks/catalog_probes.py sample --out runs/probes            # tools to probe + the writers' batches
    # writers (an LLM each, benchmarks/data/probes/brief_write.md): one request per tool card -> requests_*.jsonl
    python benchmarks/catalog_probes.py need-batches --probes runs/probes  # the written requests, alone
    # blind need writers (training/data/briefs/needs_blind.md): one need per request, never seeing the tool
    python benchmarks/catalog_probes.py run --probes runs/probes            # first searches, tool present / removed
    python benchmarks/catalog_probes.py mine --probes runs/probes           # the judge's batches of first tools
    # blind judges (benchmarks/results/judged_flow/brief.md) -> judged_*.jsonl
    python benchmarks/catalog_probes.py check --probes runs/probes --probe-judged runs/probes/judged_*.jsonl \
        [--judged-items ... --judged ...]

0.14.0 measured that a catalog's *own* evidence (about 50 answerable requests and 50 no-fit ones with known
outcomes) can set a calibrated, safe cut where no map fitted on other catalogs does. A user's catalog has no
such evidence on day one, but an LLM endpoint (the one ``toolrank index --write-examples`` uses) can write
requests for its tools at index time: **probes**. Each probe is searched twice, day one, as the agent-flow
benchmark searches a request: with its tool eligible (answerable; it fits when the probe's tool is first) and
with it made ineligible (its no-fit twin; on MCP-Zero organisations the tool's whole server, as the flow's
twins), with the request alone and with a need written blind from the probe request.

``check`` fits, per held-out kind and mode, maps of the best probability on the probes only and reads them
on the kind's real requests of the agent flow (``agent_flow_report.json``: other writers' requests, never
seen by the maps): the ECE against labelled-or-judged fits, the share of answerable first searches that
proceed and the share of twins that proceed with a tool the judge rejects, beside the shipped probabilities.
Maps: ``platt`` (``sigmoid(a·logit(p) + b)`` on the answerable probes), ``shift`` (``sigmoid(logit(p) + b)``),
``pooled_shift`` and ``pooled_platt`` (one map fitted on both modes' probes: what one map per index is) and ``two_level``
(the answerable probes' fit rate over and under the cut that proceeds most while at most ``--safe`` of the
probe twins proceed, ``catalog_calibration._most_proceeding``). Each is read with the zone thresholds as
shipped (``proceed``, ``twins wrong``); a map that only says what the numbers mean moves the thresholds with
it and leaves every decision as shipped. Prints the tables; writes JSON.

Probes are sampled uniformly over a catalog's tools (``--per-kind``; MCP-Zero organisations: tools of the
split's servers; ``--set fit`` probes the fit catalogs, where the map's form was chosen). The runs behind the
result files are in ``benchmarks/data/probes/{report,fit}/`` (``check --probes`` on them reproduces the
tables); the tool cards, requests and needs of corpora without a licence stay out of the repository, the
flow rows and judge items keep digests. The map ``toolrank index --calibrate`` ships is ``pooled_platt``
(``retrieval.pipeline.probes.fit_probes``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, environment_stamp, stamp_line, write_result  # noqa: E402

STYLES = ("plain", "concrete", "goal", "question", "casual")
MODES = ("need", "request_only")


def _card(tool, siblings: list[str]) -> dict:
    """What a probe writer sees of a tool: its server, name, description, parameters and sibling names."""
    schema = tool.input_schema or {}
    props = schema.get("properties") or {} if isinstance(schema, dict) else {}
    params = []
    for name, spec in list(props.items())[:12]:
        desc = (spec or {}).get("description", "") if isinstance(spec, dict) else ""
        params.append(f"{name}: {str(desc)[:80]}" if desc else str(name))
    return {"server": tool.server, "tool": tool.name, "description": (tool.description or "")[:600],
            "parameters": params, "siblings": siblings[:20]}


def _kinds(which: str = "report") -> list[str]:
    from training.flow_cases import SETS

    return ["mcpzero-org", *SETS[which][1]]


def _split(which: str) -> str:
    """The MCP-Zero split whose servers a set's organisations are drawn from (test: report, dev: fit)."""
    from training.flow_cases import SETS

    return SETS[which][0]


def sample(out: Path, per_kind: int, seed: int, n_batches: int, which: str = "report") -> int:
    """Draw the tools to probe and write the writers' batches (tool cards with a style each)."""
    from benchmarks.judged_flow import _Catalogs
    from retrieval.jsonl import write_jsonl
    from training.pairs import load_split

    rng = random.Random(seed)
    catalogs = _Catalogs()
    split = load_split()
    items = []
    for kind in _kinds(which):
        cat = catalogs.catalog(kind)
        tools = [t for t in cat.tools if kind != "mcpzero-org" or split.get(t.server) == _split(which)]
        by_server: dict[str, list[str]] = {}
        for t in cat.tools:
            by_server.setdefault(t.server, []).append(t.name)
        for i, t in enumerate(rng.sample(tools, min(per_kind, len(tools)))):
            sib = [n for n in by_server[t.server] if n != t.name]
            rng.shuffle(sib)
            items.append({"id": f"probe:{kind}:{i:03d}", "catalog": kind, "set": which, "server": t.server, "tool": t.name,
                          "style": STYLES[len(items) % len(STYLES)], "card": _card(t, sib)})
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "items.jsonl", items)
    order = list(items)
    random.Random(seed + 1).shuffle(order)   # every batch a mix of catalogs
    for b in range(n_batches):
        write_jsonl(out / f"write_{b + 1:02d}.jsonl",
                    [{"id": it["id"], "style": it["style"], **it["card"]} for it in order[b::n_batches]])
    print(f"{len(items)} tools to probe over {len(_kinds(which))} kinds -> {out}/items.jsonl, {n_batches} writer batches")
    return 0


USER_SAMPLES = "user_samples.json"   # restyle: the real requests shown to the writers, left out of every reading


def judged_set(which: str) -> tuple[list[dict], Any, dict]:
    """A set's first searches the ECE is read on — the fit flow's rows, or the report flow's answerable ones with
    the wide draw (``wide_calibration.py``) — the judges' verdicts on their first tools
    (``catalog_calibration.load_fits``: the flow's twins included) and the probes' maps of each kind."""
    import tempfile

    from benchmarks.catalog_calibration import load_fits

    res = ROOT / "benchmarks" / "results"
    judged_flow = res / "judged_flow"
    if which == "fit":
        items, judged = [judged_flow / "fit" / "items.jsonl"], sorted((judged_flow / "fit").glob("judged_0*.jsonl"))
        rows = json.loads((res / "agent_flow_fit.json").read_text())["rows"]
        table = json.loads((res / "catalog_probes_fit.json").read_text())["table"]
    else:
        from benchmarks.wide_calibration import flow_file

        items = [judged_flow / "report" / "items.jsonl", judged_flow / "wide" / "items.jsonl"]
        judged = sorted((judged_flow / "report").glob("judged_0*.jsonl")) + \
            sorted((judged_flow / "wide").glob("judged_0*.jsonl"))
        with tempfile.TemporaryDirectory() as tmp:
            rows = json.loads(flow_file(res / "wide_calibration_rows.json", Path(tmp) / "f.json").read_text())["rows"]
        rows += [r for r in json.loads((res / "agent_flow_report.json").read_text())["rows"] if not r.get("answerable")]
        table = json.loads((res / "wide_calibration.json").read_text())["table"]
    return rows, load_fits(items, judged), table


def _real_rows(which: str) -> list[dict]:
    """The answerable first searches (need mode) the ECE of a set is read on."""
    return [r for r in judged_set(which)[0] if r.get("answerable") and r.get("mode") == "need"]


def _request_texts(ids: set[str], which: str) -> dict[str, str]:
    from retrieval.evaluation.corpora import load_corpus
    from retrieval.evaluation.harness import load_queries
    from training.flow_cases import INDEPENDENT, QUESTIONS

    out = {q.id: q.query for q in [*load_queries(QUESTIONS), *load_queries(INDEPENDENT, split="independent")]
           if q.id in ids}
    for name in _kinds(which)[1:]:
        out.update({q.id: q.query for q in load_corpus(name).questions if q.id in ids})
    return out


def restyle(source: Path, out: Path, n_user: int, seed: int, n_batches: int, which: str) -> int:
    """The same tools to probe as ``source`` (its items.jsonl), each card carrying ``n_user`` requests the kind's
    real users sent (drawn from the rows its ECE is read on; their ids go to ``user_samples.json`` and
    ``styled-check`` leaves them out), for writers briefed with ``data/probes/brief_write_styled.md`` (0.18.0's
    experiment: probes written like a catalog's users; not adopted, ``results/styled_probes.md``)."""
    from retrieval.jsonl import read_jsonl, write_jsonl

    items = [r for _, r in read_jsonl(source / "items.jsonl")]
    rows = _real_rows(which)
    rng = random.Random(seed)
    chosen: dict[str, list[str]] = {}
    for kind in sorted({it["catalog"] for it in items}):
        ids = sorted({r["id"] for r in rows if r["catalog"] == kind})
        chosen[kind] = rng.sample(ids, min(n_user, len(ids)))
    texts = _request_texts({i for v in chosen.values() for i in v}, which)
    samples = {kind: [texts[i] for i in ids if i in texts] for kind, ids in chosen.items()}
    out.mkdir(parents=True, exist_ok=True)
    (out / USER_SAMPLES).write_text(json.dumps({"ids": chosen, "requests": samples}, indent=1, ensure_ascii=False))
    write_jsonl(out / "items.jsonl", items)
    order = list(items)
    random.Random(seed + 1).shuffle(order)
    for b in range(n_batches):
        write_jsonl(out / f"write_{b + 1:02d}.jsonl",
                    [{"id": it["id"], **it["card"], "user_requests": samples[it["catalog"]]} for it in order[b::n_batches]])
    print(f"{len(items)} tools, {n_user} user requests a kind -> {out}, {n_batches} writer batches")
    return 0


VOICES = ("terse", "verbose", "platform", "plain", "first_step")   # training/data/briefs/needs_blind.md


def need_batches(folder: Path, n_batches: int, seed: int) -> int:
    """The blind need writers' batches: ``id<TAB>voice<TAB>request`` of every written probe (the request only:
    never the tool), voices in turn as the flow's needs were written."""
    probes = load_probes(folder)
    if not probes:
        print(f"error: {folder}: no written probe requests (requests_*.jsonl)", file=sys.stderr)
        return 2
    write_need_batches([(p["id"], p["request"]) for p in sorted(probes, key=lambda p: p["id"])], folder, n_batches,
                       seed)
    print(f"{len(probes)} probe requests -> {n_batches} blind need batches in {folder}")
    return 0


def write_need_batches(requests: list[tuple[str, str]], out: Path, n_batches: int, seed: int) -> None:
    """``out/need_NN.tsv``: ``id<TAB>voice<TAB>request`` lines (one line each, voices in turn), the requests shuffled
    so every batch mixes catalogs; what a blind need writer reads."""
    order = list(requests)
    random.Random(seed + 2).shuffle(order)
    out.mkdir(parents=True, exist_ok=True)
    for b in range(n_batches):
        lines = [f"{rid}\t{VOICES[i % len(VOICES)]}\t{' '.join(text.split())}"
                 for i, (rid, text) in enumerate(order[b::n_batches])]
        (out / f"need_{b + 1:02d}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def load_probes(folder: Path) -> list[dict]:
    """The items with their written request and blind need (``requests_*.jsonl``, ``needs_*.jsonl``)."""
    from retrieval.jsonl import read_jsonl

    if not (folder / "items.jsonl").is_file():
        return []
    items = {r["id"]: r for _, r in read_jsonl(folder / "items.jsonl")}
    for pattern, key in (("requests_*.jsonl", "request"), ("needs_*.jsonl", "need")):
        for path in sorted(folder.glob(pattern)):
            for _, r in read_jsonl(path):
                if r.get("id") in items and str(r.get(key) or "").strip():
                    items[r["id"]][key] = str(r[key]).strip()
    return [it for it in items.values() if it.get("request")]


def probe_cases(probes: list[dict], catalogs, rng: random.Random) -> list:
    """Each probe as an answerable case and its no-fit twin, built as ``training.flow_cases`` builds the flow's."""
    from retrieval.catalog.eligibility import Eligibility
    from retrieval.catalog.model import ToolId
    from retrieval.evaluation.agent_flow import Case
    from training.pairs import load_split

    split = load_split()
    cases = []
    for p in probes:
        kind, target = p["catalog"], ToolId(p["server"], p["tool"])
        need = p.get("need")
        if kind == "mcpzero-org":   # an organisation of 10-30 of the set's servers holding the probe's; the twin drops it
            part = _split(p.get("set", "report"))
            servers = sorted(s for s in catalogs.catalog(kind).servers if split.get(s) == part and s != p["server"])
            org = sorted({p["server"], *rng.sample(servers, rng.randint(10, 30) - 1)})
            ans, none = Eligibility.of(servers=org), Eligibility.of(servers=[s for s in org if s != p["server"]])
        else:
            ans = Eligibility()
            none = Eligibility.of(tools=[t.id for t in catalogs.catalog(kind).tools if t.id != target])
        cases.append(Case(p["id"], p["request"], kind, ans, frozenset([target]), need, None))
        cases.append(Case(p["id"] + ":none", p["request"], kind, none, frozenset(), need, None))
    return cases


def run(folder: Path, seed: int, threads: int, model: Path, written: Path | None = None) -> int:
    """First searches of every probe, its tool eligible and not; with ``written`` (an index folder, built once) the
    MCP-Zero organisations' probes only, on the test servers' tools with written example requests."""
    from benchmarks.ablation import CachedScorer
    from benchmarks.judged_flow import _Catalogs
    from retrieval.evaluation.agent_flow import run_flow, shippable_rows
    from retrieval.pipeline.decision import Policy
    from retrieval.pipeline.flow import Pipeline
    from scorer import Scorer

    probes = load_probes(folder)
    if not probes:
        print(f"error: {folder}: no written probe requests (requests_*.jsonl)", file=sys.stderr)
        return 2
    catalogs, rng = _Catalogs(), random.Random(seed)
    if written is not None:   # only MCP-Zero organisations draw from rng: the same organisations
        from benchmarks.generated_examples import written_examples_index

        catalogs.use("mcpzero-org", written_examples_index(written))
        probes = [p for p in probes if p["catalog"] == "mcpzero-org"]
    scorer, policy = CachedScorer(Scorer.load(model, threads=threads)), Policy()
    rows = []
    for kind in sorted({p["catalog"] for p in probes}):
        ps = [p for p in probes if p["catalog"] == kind]
        cases = probe_cases(ps, catalogs, rng)
        index = catalogs.index(kind)
        modes = [m for m in MODES if m == "request_only" or all(p.get("need") for p in ps)]
        rows += run_flow(Pipeline(index, scorer, policy=policy), cases, modes, show_progress=True, desc=kind,
                         tail=False, first_only=True)
    environment = environment_stamp()
    name = "probe_flow_written.json" if written is not None else "probe_flow.json"
    write_result(folder / name, {"environment": environment, "written_examples": written is not None,
                                 "rows": shippable_rows(rows)}, indent=0)
    print(f"{len(rows)} first searches -> {folder / name}")
    return 0


def fit_shift(p: np.ndarray, y: np.ndarray, pull: float = 0.5) -> float:
    """``b`` of ``sigmoid(logit(p) + b)``: the log loss on (``p``, ``y``) plus ``pull * b^2`` (the same pull
    towards the identity as the tenant recalibration's: its fit with the slope held at 1)."""
    from retrieval.pipeline.recalibration import fit_recalibration

    return fit_recalibration(p, y, pull, bounds=((1.0, 1.0), (-8.0, 8.0)))[1]


def mine(folder: Path, n_batches: int, seed: int) -> int:
    """The judge's items and batches: each probe with the first five tools of its four first searches (tool
    present and removed, with and without the need), shuffled; the judge sees the probe request alone."""
    from benchmarks.judged_flow import write_judge_batches

    try:
        rows = json.loads((folder / "probe_flow.json").read_text())["rows"]
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc} (run `catalog_probes.py run` first)", file=sys.stderr)
        return 2
    items = write_judge_batches(rows, {p["id"]: p["request"] for p in load_probes(folder)}, folder, n_batches, seed)
    print(f"{len(items)} probes, {sum(len(o['candidates']) for o in items)} candidates -> {folder}/judge_items.jsonl, "
          f"{n_batches} judge batches")
    return 0


def mine_first(folder: Path, n_batches: int, seed: int) -> int:
    """The judge's items for the map alone: each answerable probe search whose first tool is not the probe's own,
    with that tool only (what ``toolrank index --calibrate`` judges)."""
    from benchmarks.judged_flow import write_judge_batches

    rows = json.loads((folder / "probe_flow.json").read_text())["rows"]
    keep = [dict(r, tools1=r["tools1"][:1]) for r in rows if r["answerable"] and not r.get("right1") and r.get("tools1")]
    items = write_judge_batches(keep, {p["id"]: p["request"] for p in load_probes(folder)}, folder, n_batches, seed)
    print(f"{len(keep)} searches, {len(items)} probes, {sum(len(o['candidates']) for o in items)} first tools -> "
          f"{folder}/judge_items.jsonl, {n_batches} judge batches")
    return 0


def styled_check(folder: Path, which: str, out: Path) -> int:
    """The map ``toolrank index --calibrate`` fits on the restyled probes (judged: ``judged_0*.jsonl`` of
    ``mine --first-only``) against the fixed styles' map, both read on the kind's real requests less the ones
    shown to the writers (``user_samples.json``)."""
    from benchmarks.catalog_calibration import first_fits, load_fits
    from retrieval.evaluation.stats import ece
    from retrieval.pipeline.probes import fit_probes
    from retrieval.pipeline.recalibration import platt

    rows, fits, old = judged_set(which)
    shown = {i for v in json.loads((folder / USER_SAMPLES).read_text())["ids"].values() for i in v}
    probe_rows = json.loads((folder / "probe_flow.json").read_text())["rows"]
    probe_judged = sorted(folder.glob("judged_0*.jsonl"))
    probe_fits = load_fits([folder / "judge_items.jsonl"], probe_judged) if probe_judged else None
    table, lines = {}, ["| catalog | mode | n | first tool fits | shipped | fixed styles: probes fit / ECE | "
                        "users' style: probes fit / ECE |", "|---|---|---:|---:|---:|---|---|"]
    for kind in sorted({r["catalog"] for r in probe_rows}):
        probes = [r for r in probe_rows if r["catalog"] == kind and r["answerable"] and r["mode"] in MODES]
        py = [first_fits(r, probe_fits) for r in probes]
        styled = fit_probes([(r["best1"], bool(v)) for r, v in zip(probes, py)], "benchmark", min_searches=1)
        a0, b0 = old[kind]["need"]["params"]["pooled_platt"]
        for mode in MODES:
            real = [r for r in rows if r["catalog"] == kind and r.get("mode") == mode and r.get("answerable")
                    and r["id"] not in shown and (r.get("right1") or fits(r) is not None)]
            p = np.array([r["best1"] for r in real])
            y = np.array([first_fits(r, fits) for r in real], dtype=float)
            mine = [v for r, v in zip(probes, py) if r["mode"] == mode]
            cell = {"n": len(p), "fits": float(y.mean()), "shipped": float(ece(p, y)),
                    "fixed_probe_fits": old[kind][mode]["probe_fit_rate"], "fixed": float(ece(platt(p, a0, b0), y)),
                    "styled_probe_fits": float(np.mean(mine)), "styled": float(ece(styled.apply(p), y)),
                    "styled_map": [styled.a, styled.b]}
            table[f"{kind}/{mode}"] = cell
            lines.append(f"| {kind} | {mode} | {cell['n']} | {cell['fits']:.0%} | {cell['shipped']:.3f} | "
                         f"{cell['fixed_probe_fits']:.0%} / {cell['fixed']:.3f} | "
                         f"{cell['styled_probe_fits']:.0%} / {cell['styled']:.3f} |")
    for mode in MODES:
        for name in ("shipped", "fixed", "styled"):
            v = [c[name] for k, c in table.items() if k.endswith("/" + mode)]
            lines.append(f"\n{mode}, {name}: mean ECE {np.mean(v):.3f}, {sum(x <= 0.05 for x in v)} of {len(v)} cells "
                         "at or under 0.05")
    text = "\n".join(lines)
    print(text)
    write_result(out, {"set": which, "table": table}, indent=1)
    out.with_suffix(".md").write_text(text + "\n\n" + stamp_line() + "\n", encoding="utf-8")
    return 0


def check(folder: Path, report: Path, items: list[Path] | Path | None, judged: list[Path], safe: float, proceed: float,
          out: Path, probe_judged: list[Path] = (), probe_flow: Path | None = None,
          probe_items: list[Path] = (), detail: bool = False) -> int:
    from benchmarks.catalog_calibration import _most_proceeding, _two_level, apply, first_fits, fit, load_fits
    from retrieval.evaluation.stats import ece, ece_floor
    from retrieval.pipeline.probes import fit_probes
    from retrieval.pipeline.recalibration import platt

    try:
        probe_rows = json.loads((probe_flow or folder / "probe_flow.json").read_text())["rows"]
        real = [r for r in json.loads(report.read_text())["rows"] if r.get("mode") in MODES]
        fits = load_fits(items, judged) if items else None
        probe_fits = load_fits(list(probe_items) or [folder / "judge_items.jsonl"], list(probe_judged)) \
            if probe_judged else None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"error: {exc} (run `catalog_probes.py run` first; --report takes an agent-flow result file)",
              file=sys.stderr)
        return 2
    table: dict[str, dict[str, dict]] = {}
    for kind in sorted({r["catalog"] for r in probe_rows}):
        for mode in MODES:
            pa_rows = [r for r in probe_rows if r["catalog"] == kind and r["mode"] == mode and r["answerable"]]
            pt_rows = [r for r in probe_rows if r["catalog"] == kind and r["mode"] == mode and not r["answerable"]]
            ra = [r for r in real if r["catalog"] == kind and r["mode"] == mode and r["answerable"]]
            rt = [r for r in real if r["catalog"] == kind and r["mode"] == mode and not r["answerable"]]
            if fits is not None:   # what the judge read, and labelled first tools (fits whatever it says)
                ra = [r for r in ra if r.get("right1") or fits(r) is not None]
                unread = sum(1 for r in ra if not r.get("right1") and r.get("tools1") and not fits.read(r))
                if unread:
                    print(f"[{kind} / {mode}: {unread} first tools the judge never read count as not fitting]",
                          file=sys.stderr)
            if not pa_rows or not ra:
                continue
            # a probe's first tool fits when it is the probe's tool or (with the probes' judge) judged to fit; a
            # twin's only when judged (without a judge none does)
            if probe_fits is not None:
                unread = sum(1 for r in pa_rows + pt_rows if not r.get("right1") and r.get("tools1")
                             and not probe_fits.read(r))
                if unread:
                    print(f"[{kind} / {mode}: {unread} probes' first tools the judge never read count as not "
                          "fitting]", file=sys.stderr)
            pa = np.array([r["best1"] for r in pa_rows])
            ya = np.array([first_fits(r, probe_fits) for r in pa_rows], dtype=float)
            pt = np.array([r["best1"] for r in pt_rows])
            yt = np.array([first_fits(r, probe_fits) for r in pt_rows], dtype=float)
            w = fit([dict(r, right1=bool(v)) for r, v in zip(pa_rows, ya)], "platt")
            shift = fit_shift(pa, ya)
            # one shift for both modes (an index's map cannot know which mode a later attempt comes in)
            pooled_rows = [r for r in probe_rows if r["catalog"] == kind and r["answerable"] and r["mode"] in MODES]
            pooled_y = [first_fits(r, probe_fits) for r in pooled_rows]
            pooled = fit_shift(np.array([r["best1"] for r in pooled_rows]), np.array(pooled_y, dtype=float))
            # the map `toolrank index --calibrate` ships: one Platt map over both modes (retrieval.pipeline.probes)
            shipped_map = fit_probes([(r["best1"], bool(v)) for r, v in zip(pooled_rows, pooled_y)], "benchmark",
                                     min_searches=1)
            _, cut = _most_proceeding(pa, ya, pt, yt, proceed, safe)
            two = _two_level(pa, ya, cut)
            qa, qt = np.array([r["best1"] for r in ra]), np.array([r["best1"] for r in rt])
            y = np.array([first_fits(r, fits) for r in ra], dtype=float)
            wrong = np.array([not (fits(r) if fits is not None else r["right1"]) for r in rt], dtype=bool)
            cell = {"probes": len(pa_rows), "probe_fit_rate": float(ya.mean()), "probe_mean_best": float(pa.mean()),
                    "probe_twins": len(pt_rows), "n": len(ra), "fits": float(y.mean()),
                    "ece_floor": ece_floor(qa, draws=200)["median"], "cut": cut,
                    "params": {"platt": w.tolist(), "shift": shift, "pooled_shift": pooled,
                               "pooled_platt": [shipped_map.a, shipped_map.b] if shipped_map else None}}
            for name, m in (("shipped", lambda p: np.asarray(p, dtype=float)),
                            ("platt", lambda p: apply([{"best1": float(v)} for v in p], "platt", w)),
                            ("shift", lambda p: platt(p, 1.0, shift)),
                            ("pooled_shift", lambda p: platt(p, 1.0, pooled)),
                            ("pooled_platt", lambda p: shipped_map.apply(p) if shipped_map else np.asarray(p, float)),
                            ("two_level", two)):
                a_, t_ = m(qa), m(qt) if len(qt) else np.zeros(0)
                cell[name] = {"ece": float(ece(a_, y)), "mean": float(np.mean(a_)),
                              "proceed": float(np.mean(a_ >= proceed)),
                              "twins_wrong": float(np.mean((t_ >= proceed) & wrong)) if len(t_) else float("nan")}
                if detail and name in ("shipped", "pooled_platt"):   # the reading's own noise, for these numbers
                    cell[name].update(_noise(np.asarray(a_, dtype=float), y, cell[name]["ece"]))
            table.setdefault(kind, {})[mode] = cell
    print(f"maps fitted on each kind's probes only (a probe's first tool fits when it is its tool"
          f"{' or judged to fit' if probe_fits else ''}), read on its real requests (ECE against "
          f"{'labelled or judged' if fits else 'labelled'} fits; proceeding at {proceed}; twins proceeding with a tool "
          f"{'the judge rejects' if fits else 'not labelled'})\n")
    maps = ("shipped", "platt", "shift", "pooled_shift", "pooled_platt", "two_level")
    print("| catalog | mode | probes: fit rate / mean best | real: n / fits | calibrated at n | "
          + " | ".join(f"{m}: ECE / proceed / twins wrong" for m in maps) + " |\n|---|---|---|---|---:|"
          + "---|" * len(maps))
    for kind, modes in table.items():
        for mode, c in modes.items():
            cols = " | ".join(f"{c[m]['ece']:.3f} / {c[m]['proceed']:.0%} / {c[m]['twins_wrong']:.0%}" for m in maps)
            print(f"| {kind} | {mode} | {c['probe_fit_rate']:.0%} / {c['probe_mean_best']:.2f} ({c['probes']}) | "
                  f"{c['n']} / {c['fits']:.0%} | {c['ece_floor']:.3f} | {cols} |")
    if detail:
        print("\nthe ECE of the shipped probabilities and of the probes' map, each beside what a perfectly calibrated "
              "model with the same probabilities reads at that count (median of 1,000 draws; p: the share of those "
              "draws reading at least the ECE) and the ECE's 90% bootstrap interval\n")
        print("| catalog | mode | n | shipped: ECE [90%] | calibrated reads, p | probes: ECE [90%] | calibrated reads, p |"
              "\n|---|---|---:|---|---|---|---|")
        for kind, modes in table.items():
            for mode, c in modes.items():
                cols = " | ".join(f"{c[m]['ece']:.3f} [{c[m]['ci90'][0]:.3f}, {c[m]['ci90'][1]:.3f}] | "
                                  f"{c[m]['floor']:.3f}, {c[m]['p_value']:.3f}" for m in ("shipped", "pooled_platt"))
                print(f"| {kind} | {mode} | {c['n']} | {cols} |")
    present = [mode for mode in MODES if any(mode in c for c in table.values())]
    print("\nmean ECE over the kinds: " + ", ".join(
        f"{mode}: " + " / ".join(f"{m} {np.mean([c[mode][m]['ece'] for c in table.values() if mode in c]):.3f}"
                                 for m in maps) for mode in present))
    environment = environment_stamp()
    print(stamp_line(environment))
    write_result(out, {"environment": environment, "report": report.name, "safe": safe, "proceed": proceed,
                       "judged": bool(fits), "probes_judged": bool(probe_fits), "table": table}, indent=1)
    return 0


def _noise(p: np.ndarray, y: np.ndarray, observed: float, draws: int = 1000, seed: int = 0) -> dict:
    """What an ECE of ``observed`` on (``p``, ``y``) means at its count: a calibrated model's median reading and the
    share of its readings at least as high (``retrieval.evaluation.stats.ece_floor``), and a 90% bootstrap
    interval of the ECE over the requests."""
    from retrieval.evaluation.stats import ece, ece_floor

    floor = ece_floor(p, observed=observed, draws=draws, seed=seed)
    rng = np.random.default_rng(seed)
    boot = [ece(p[i], y[i]) for i in (rng.integers(0, len(p), len(p)) for _ in range(draws))]
    return {"floor": floor["median"], "p_value": floor["p_value"],
            "ci90": [float(np.percentile(boot, 5)), float(np.percentile(boot, 95))]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample", help="draw the tools to probe and write the writers' batches")
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--per-kind", type=int, default=100)
    s.add_argument("--batches", type=int, default=4)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--set", choices=("report", "fit"), default="report",
                   help="the agent flow's catalogs to probe (fit: MCP-Zero dev organisations and the training corpora)")
    rs = sub.add_parser("restyle", help="the same tools, each card with requests the kind's real users sent")
    rs.add_argument("--source", type=Path, required=True, help="a sample's folder (its items.jsonl)")
    rs.add_argument("--out", type=Path, required=True)
    rs.add_argument("--user-requests", type=int, default=5)
    rs.add_argument("--batches", type=int, default=8)
    rs.add_argument("--seed", type=int, default=0)
    rs.add_argument("--set", choices=("report", "fit"), default="report")
    nb = sub.add_parser("need-batches", help="the blind need writers' batches (the written requests only)")
    nb.add_argument("--probes", type=Path, required=True)
    nb.add_argument("--batches", type=int, default=4)
    nb.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("run", help="first searches of every probe, its tool eligible and not")
    r.add_argument("--probes", type=Path, required=True)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--model", type=Path, default=ROOT / "models" / "toolrank-reranker")
    r.add_argument("--written-examples", type=Path, metavar="INDEX_DIR",
                   help="MCP-Zero organisations only, their tools with written example requests (the index is built "
                        "into INDEX_DIR once; benchmarks/generated_examples.py); writes probe_flow_written.json")
    m = sub.add_parser("mine", help="the judge's items and batches for the probes' first tools")
    m.add_argument("--probes", type=Path, required=True)
    m.add_argument("--first-only", action="store_true",
                   help="only the answerable searches' first tools that are not the probe's own (what the map reads)")
    m.add_argument("--batches", type=int, default=6)
    m.add_argument("--seed", type=int, default=0)
    sc = sub.add_parser("styled-check", help="the restyled probes' map against the fixed styles', on real requests")
    sc.add_argument("--probes", type=Path, required=True)
    sc.add_argument("--set", choices=("report", "fit"), default="report")
    sc.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("check", help="maps fitted on the probes, read on the real requests")
    c.add_argument("--probe-judged", type=Path, nargs="*", default=[],
                   help="the judge's answers on the probes (judge_items.jsonl of `mine`)")
    c.add_argument("--probes", type=Path, required=True)
    c.add_argument("--probe-flow", type=Path, help="the probes' first searches (default: PROBES/probe_flow.json)")
    c.add_argument("--probe-judged-items", type=Path, nargs="*", default=[],
                   help="the probes' judge items (default: PROBES/judge_items.jsonl; several are read together)")
    c.add_argument("--report", type=Path, default=ROOT / "benchmarks" / "results" / "agent_flow_report.json")
    c.add_argument("--judged-items", type=Path, nargs="*", default=[],
                   help="the judge's items of the real requests (several: their answers are read together)")
    c.add_argument("--judged", type=Path, nargs="*", default=[])
    c.add_argument("--safe", type=float, default=0.10)
    c.add_argument("--proceed", type=float, default=0.83)
    c.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "catalog_probes.json")
    a = p.parse_args(argv)
    if a.cmd == "sample":
        return sample(a.out, a.per_kind, a.seed, a.batches, a.set)
    if a.cmd == "restyle":
        return restyle(a.source, a.out, a.user_requests, a.seed, a.batches, a.set)
    if a.cmd == "need-batches":
        return need_batches(a.probes, a.batches, a.seed)
    if a.cmd == "run":
        return run(a.probes, a.seed, a.threads, a.model, a.written_examples)
    if a.cmd == "mine":
        return mine_first(a.probes, a.batches, a.seed) if a.first_only else mine(a.probes, a.batches, a.seed)
    if a.cmd == "styled-check":
        return styled_check(a.probes, a.set, a.out)
    return check(a.probes, a.report, a.judged_items, a.judged, a.safe, a.proceed, a.out, a.probe_judged,
                 a.probe_flow, a.probe_judged_items)


if __name__ == "__main__":
    sys.exit(main())
