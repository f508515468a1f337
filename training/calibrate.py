"""Fit the confidence model (scorer logit + retrieval evidence -> probability) on dev.

    python -m training.calibrate --model models/toolrank-ce-l3      # writes <model>/combiner.json
    python -m training.calibrate --retrieval-only                   # writes retrieval/data/retrieval_confidence.json
    python -m training.calibrate --model ... --no-examples          # for indexes without example requests
    python -m training.calibrate --model ... --catalogs fit         # + catalogs shaped like users' (day one)
    python -m training.calibrate ... --catalogs fit --load-lists L --cv   # leave one catalog kind out (no model written)

Dev questions are scored three ways: the request alone, the request with its need, and
the request alone with the labelled server and every acceptable alternative's server made
ineligible (mode ``abstain``: nothing fits, every candidate is a negative). Labels: the
labelled tool or an acceptable alternative is 1, everything else 0.

Two stages (retrieval/pipeline/confidence.py):

1. a logistic model over every candidate's features, fitted on all three kinds of list,
   so its scores also learn what a list without a fitting tool looks like (abstention
   AUROC on dev, per fold: 0.83 against 0.80 when fitted without the ``abstain`` lists);
2. a list calibration of that score, fitted on the top-10 of the lists where a tool fits
   (``--calibrate-on``). Fitted on the 1:2 mix, the best candidate's probability was shaded
   down by the mix's prior (best-candidate ECE 0.19 on test); which share of real requests
   has no fitting tool belongs to each deployment, not to the model. The second stage is
   monotone, so it moves no list's order and no abstention AUROC: it only decides what
   the numbers mean, "this tool does what was asked", for requests like the questions.
   The proceed threshold (training/thresholds.py) is where the no-fit cases are weighed.

``--catalogs fit`` (0.10.0, an experiment, not the shipped fit) also fits on **catalogs shaped like
users'** (``training/flow_cases.py``: MCP-Zero dev organisations of 10-30 servers and the five training
corpora, each answerable request with its no-fit twin, without a need, with its blind need and with the
sharper second one), and can read the catalog's size (``log_eligible``). Left one training corpus out at a
time (``--cv``) it looked better (mean ECE of the best probability 0.103 -> 0.041); on the held-out corpora
it was worse (ECE up on six of seven, no-fit twins proceeding more) and ranked worse (dev rank 1 with the
need 81.2 -> 79.7), so the shipped day-one model is fitted on the dev questions as before
(docs/results.md, "Release 0.10.0"). The lists can be saved (``--save-lists``) and refitted without
scoring (``--load-lists``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from retrieval.catalog.model import ToolId
from retrieval.pipeline.confidence import (EXPERIMENTAL_FEATURES, FEATURES, RETRIEVAL_FEATURES, ConfidenceModel,
                                           ListCalibration,
                                           candidate_features, combiner_file, default_confidence_path)
from retrieval.catalog.eligibility import Eligibility
from retrieval.evaluation.harness import Query, load_queries
from retrieval.index.embedded import ToolIndex
from retrieval.pipeline.confidence import first_logits
from retrieval.pipeline.decision import score_top_flag
from retrieval.shortcuts.server_mentions import ServerMentionMatcher

log = logging.getLogger("toolrank.calibrate")
DATA = Path(__file__).resolve().parent / "data"


@dataclass
class Collected:
    """Candidate lists with features, labels and which list (group) each row came from."""

    feats: dict[str, list[np.ndarray]] = field(default_factory=dict)
    labels: list[np.ndarray] = field(default_factory=list)
    groups: list[np.ndarray] = field(default_factory=list)
    modes: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)   # the catalog kind of each list ("questions": the full catalog)

    def add(self, f: dict[str, np.ndarray], y: np.ndarray, mode: str, kind: str = "questions") -> None:
        g = len(self.labels)
        for k, v in f.items():
            self.feats.setdefault(k, []).append(v)
        self.labels.append(y)
        self.groups.append(np.full(len(y), g))
        self.modes.append(mode)
        self.kinds.append(kind)

    def subset(self, modes: tuple[str, ...] | None = None, *, keep=None) -> "Collected":
        """Only the lists of these modes (and, with ``keep``, whose kind it accepts)."""
        out = Collected()
        for g, (mode, kind) in enumerate(zip(self.modes, self.kinds)):
            if (modes is None or mode in modes) and (keep is None or keep(kind)):
                out.add({k: v[g] for k, v in self.feats.items()}, self.labels[g], mode, kind)
        return out

    def save(self, path: Path, meta: dict | None = None) -> None:
        """Every list, to fit again without scoring (``--load-lists``): one ``.npz`` of plain arrays (no
        pickle), with ``meta`` (what the lists were scored with) as JSON."""
        import json

        uneven = [k for k, v in self.feats.items() if len(v) != len(self.labels)]
        if uneven:
            raise ValueError(f"features {uneven} are missing from some lists; cannot save them")
        sizes = np.array([len(y) for y in self.labels], dtype=np.int64)
        arrays = {f"feat:{k}": np.concatenate(v) if v else np.zeros(0) for k, v in self.feats.items()}
        with path.open("wb") as f:   # exactly this path (np.savez would add .npz to another name)
            np.savez_compressed(f, sizes=sizes, labels=np.concatenate(self.labels) if self.labels else np.zeros(0),
                                modes=np.array(self.modes, dtype=str), kinds=np.array(self.kinds, dtype=str),
                                meta=np.array(json.dumps(meta or {})), **arrays)

    @classmethod
    def load(cls, path: Path) -> tuple["Collected", dict]:
        """The lists and the ``meta`` saved with them.

        Raises:
            ValueError: the file is missing or is not a lists file.
        """
        import json
        import zipfile

        try:
            with np.load(path, allow_pickle=False) as d:
                sizes, labels = d["sizes"], d["labels"]
                modes, kinds, meta = d["modes"].tolist(), d["kinds"].tolist(), json.loads(str(d["meta"]))
                feats = {k.removeprefix("feat:"): d[k] for k in d.files if k.startswith("feat:")}
        except FileNotFoundError:
            raise ValueError(f"{path}: no such file (write it with --save-lists)") from None
        except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
            raise ValueError(f"{path}: not a lists file of --save-lists ({exc})") from None
        out, start = cls(), 0
        for n, mode, kind in zip(sizes.tolist(), modes, kinds):
            out.add({k: v[start:start + n] for k, v in feats.items()}, labels[start:start + n], mode, kind)
            start += n
        return out, meta

    def arrays(self) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        return ({k: np.concatenate(v) for k, v in self.feats.items()}, np.concatenate(self.labels),
                np.concatenate(self.groups))


def abstain_eligibility(index: ToolIndex, q: Query) -> Eligibility:
    """Every server but the labelled one and those of its acceptable alternatives."""
    drop = {t.server for t in q.lenient_targets}
    return Eligibility.of(servers=[s for s in index.catalog.servers if s not in drop])


QUESTION_MODES = ("request", "need", "abstain")   # lists built from the labelled questions
CATALOG_MODES = ("catalog", "catalog_nofit")      # lists on catalogs shaped like users' (training/flow_cases.py)
MODES = QUESTION_MODES + ("nofit",) + CATALOG_MODES   # + lists of requests written to have no tool


def _logits(scorer, request: str, need: str | None, index: ToolIndex, hits, score_top: int | None) -> np.ndarray:
    """The logits the pipeline would use (:func:`retrieval.pipeline.confidence.first_logits`)."""
    return first_logits(scorer, request, need, [index.catalog[h.tool_id] for h in hits], score_top)


def collect(index: ToolIndex, queries: list[Query], scorer=None, *, k: int = 100,
            modes: tuple[str, ...] = QUESTION_MODES, show_progress: bool = True,
            score_top: int | None = None, needs: dict[str, str] | None = None) -> Collected:
    """Candidate lists of ``queries`` in each mode. ``needs``: blind needs by question id, used by the
    ``need`` mode (and by ``abstain``, so lists without a fitting tool are seen with a need too) instead
    of the questions' author-written ones."""
    out = Collected()
    # The shipped catalog is the public registry here, as in the pipeline's default set-up.
    registry = ServerMentionMatcher(index.catalog.servers)
    it = queries
    if show_progress:
        from tqdm import tqdm
        it = tqdm(queries, desc="scoring dev", unit="q")
    for q in it:
        named, mentioned = registry.find(q.query), registry.find(q.query, loose=True)  # same in every mode
        everything = len(index.catalog.tools)
        blind = (needs or {}).get(q.id)
        for mode in modes:
            runs = [None]
            if mode == "need":
                runs = [blind] if needs is not None else [q.need]
            elif mode == "abstain" and blind:
                runs = [None, blind]
            for need in runs:
                if mode == "need" and not need:
                    continue
                eligible = abstain_eligibility(index, q) if mode == "abstain" else None
                hits = index.retrieve(q.query, need, eligible, k=k)
                if not hits:
                    continue
                logits = None
                if scorer is not None:
                    logits = _logits(scorer, q.query, need, index, hits, score_top)
                y = np.array([h.tool_id in q.lenient_targets for h in hits], dtype=np.float64)
                # the catalog's size, also for the abstain lists: the few tools they leave out would
                # otherwise tell the fit which lists have no fitting tool (a count no user's catalog shows)
                out.add(candidate_features(hits, logits, named, mentioned, everything), y, mode)
    return out


def collect_nofit(index: ToolIndex, requests: list, scorer=None, *, k: int = 100, out: Collected | None = None,
                  show_progress: bool = True, score_top: int | None = None,
                  needs: dict[str, str] | None = None) -> Collected:
    """Lists of requests written to have no fitting tool (every server eligible): all negatives.

    The simulation (``abstain``) removes a labelled server from a request written *for* it;
    a real no-fit request is written for a need, and its near misses echo it strongly. The
    first stage sees both kinds of list where nothing fits.
    """
    out = out if out is not None else Collected()
    registry = ServerMentionMatcher(index.catalog.servers)
    it = requests
    if show_progress:
        from tqdm import tqdm
        it = tqdm(requests, desc="scoring no-fit", unit="q")
    for r in it:
        for need in dict.fromkeys([None, (needs or {}).get(r.id)]):   # without a need, and with its blind one
            hits = index.retrieve(r.query, need, None, k=k)
            if not hits:
                continue
            logits = _logits(scorer, r.query, need, index, hits, score_top) if scorer is not None else None
            out.add(candidate_features(hits, logits, registry.find(r.query), registry.find(r.query, loose=True),
                                       len(index.catalog.tools)),
                    np.zeros(len(hits)), "nofit")
    return out


def collect_catalogs(pipes_and_cases: list, *, k: int = 100, out: Collected | None = None,
                     show_progress: bool = True, score_top: int | None = None) -> Collected:
    """Lists on catalogs shaped like users' (``training/flow_cases.py``: MCP-Zero organisations and
    other writers' corpora, day one), each request without a need, with its blind need and with the
    sharper second one: ``catalog`` lists where a labelled tool is eligible, ``catalog_nofit`` lists of
    its twin where none is. Features as the pipeline computes them (its name matchers over the
    eligible servers, the tenant's eligible count), each list marked with its catalog kind."""
    out = out if out is not None else Collected()
    for pipe, cases in pipes_and_cases:
        it = cases
        if show_progress:
            from tqdm import tqdm
            it = tqdm(cases, desc=f"scoring {cases[0].catalog if cases else ''}", unit="case")
        sizes: dict[str, int] = {}
        for case in it:
            names = pipe._matchers(case.eligible)[2]
            named, mentioned = names.find(case.request), names.find(case.request, loose=True)
            # a no-fit twin counts its answerable case's catalog: the labelled tools it leaves out would
            # otherwise mark every twin by a count a few tools short
            n_eligible = sizes.get(case.id.removesuffix(":none")) or \
                pipe._eligible_count(pipe.index.catalog, case.eligible)
            sizes[case.id] = n_eligible
            for need in dict.fromkeys([None, case.need, case.need2]):
                hits = pipe.index.retrieve(case.request, need, case.eligible, k=k)
                if not hits:
                    continue
                logits = _logits(pipe.scorer, case.request, need, pipe.index, hits, score_top) \
                    if pipe.scorer is not None else None
                y = np.array([h.tool_id in case.targets for h in hits], dtype=np.float64)
                out.add(candidate_features(hits, logits, named, mentioned, n_eligible), y,
                        "catalog" if case.answerable else "catalog_nofit", case.catalog)
    return out


def fit_confidence(feats: dict[str, np.ndarray], y: np.ndarray, features: tuple[str, ...], *, c: float = 1.0,
                   fitted_on: str = "") -> ConfidenceModel:
    from sklearn.linear_model import LogisticRegression

    x = np.stack([feats[f] for f in features], axis=1)
    mean, scale = x.mean(0), x.std(0) + 1e-9
    constant = [f for f, sd in zip(features, scale) if sd < 1e-6]
    if constant:   # standardised by ~1e-9, any other value at query time would swamp every other feature
        raise ValueError(f"features {constant} do not vary in the fitting lists; leave them out (--features)")
    lr = LogisticRegression(C=c, max_iter=2000)
    lr.fit((x - mean) / scale, y)
    return ConfidenceModel(tuple(features), tuple(float(w) for w in lr.coef_[0]), float(lr.intercept_[0]),
                           tuple(float(m) for m in mean), tuple(float(s) for s in scale), fitted_on)


def _modes(p: argparse.ArgumentParser, flag: str, value: str, *, allow_none: bool = False) -> tuple[str, ...]:
    if allow_none and value.strip() == "none":
        return ()
    modes = tuple(m.strip() for m in value.split(",") if m.strip())
    bad = sorted(set(modes) - set(MODES))
    if bad or not modes:
        p.error(f"{flag}: unknown {bad or 'empty'}; choose from {', '.join(MODES)}")
    return modes


def fit_list_calibration(model: ConfidenceModel, col: Collected, *, top: int = 10) -> ListCalibration | None:
    """Second stage on each list's top-``top`` first-stage scores; None if the fit would reorder a list."""
    from sklearn.linear_model import LogisticRegression

    xs, ys = [], []
    for g, y in enumerate(col.labels):
        s = model.first_stage({k: v[g] for k, v in col.feats.items()})
        order = np.argsort(-s, kind="stable")[:top]
        xs.append(ListCalibration.terms(s)[order])  # relative to the whole list's best
        ys.append(y[order])
    lr = LogisticRegression(C=100.0, max_iter=2000).fit(np.concatenate(xs), np.concatenate(ys))
    (a, b, c), d = (float(w) for w in lr.coef_[0]), float(lr.intercept_[0])
    try:
        return ListCalibration(a, b, c, d)
    except ValueError as exc:
        log.warning("no list calibration: %s", exc)
        return None


def catalog_cases(which: str, index: ToolIndex, scorer, n: int, seed: int) -> list:
    """(pipeline, cases) per catalog kind of ``training/flow_cases.SETS[which]``, drawn as the agent-flow
    benchmark draws them (same seed, same order: the same cases)."""
    import random

    from retrieval.evaluation.corpora import load_corpus
    from retrieval.index.encoder import OnnxEncoder
    from retrieval.pipeline.flow import Pipeline

    from .flow_cases import SETS, corpus_cases, load_needs, mcpzero_cases

    split, corpora = SETS[which]
    flow_needs, rng = load_needs(), random.Random(seed)
    out = [(Pipeline(index, scorer), mcpzero_cases(split, flow_needs, n, rng, index))]
    encoder = None
    for name in corpora:
        cases, catalog = corpus_cases(name, flow_needs, n, rng)
        if cases:
            encoder = encoder or OnnxEncoder()
            out.append((Pipeline(ToolIndex(catalog, encoder, with_examples=False), scorer), cases))
    return out


def _best(model: ConfidenceModel, col: Collected) -> tuple[np.ndarray, np.ndarray]:
    """Per list: the best probability and whether its candidate fits."""
    best, right = [], []
    for g, y in enumerate(col.labels):
        p = model.probabilities_from_features({k: v[g] for k, v in col.feats.items()})
        i = int(np.argmax(p))
        best.append(p[i])
        right.append(y[i])
    return np.array(best), np.array(right)


def cross_validate(col: Collected, features: tuple[str, ...], cal_modes: tuple[str, ...],
                   proceed: float | None = None) -> list[dict]:
    """Leave one catalog kind out: fit on every other list, then on the held-out kind's answerable lists the
    ECE of the best probability (10 bins) and its mean against how often it is right, and on its no-fit twins
    the mean best probability and the share at or above ``proceed`` (default: the policy's threshold)."""
    from retrieval.evaluation.stats import ece
    from retrieval.pipeline.decision import Policy

    proceed = Policy().proceed_threshold if proceed is None else proceed

    rows = []
    for kind in sorted(set(col.kinds) - {"questions"}):
        train = col.subset(keep=lambda k, held=kind: k != held)
        feats, y, _ = train.arrays()
        model = fit_confidence(feats, y, features)
        if cal_modes:
            model = replace(model, list_calibration=fit_list_calibration(model, train.subset(cal_modes)))
        held = col.subset(keep=lambda k, held=kind: k == held)
        pb, right = _best(model, held.subset(("catalog",)))
        nb, _ = _best(model, held.subset(("catalog_nofit",)))
        if not len(pb):
            continue   # a kind with no answerable lists has nothing to calibrate
        rows.append({"kind": kind, "lists": len(pb), "rank1": float(right.mean()), "mean_best": float(pb.mean()),
                     "ece": float(ece(pb, right)), "nofit_lists": len(nb),
                     "nofit_mean_best": float(nb.mean()) if len(nb) else float("nan"),
                     "proceed": proceed, "nofit_proceed": float((nb >= proceed).mean()) if len(nb) else float("nan")})
    return rows


def format_cv(rows: list[dict]) -> str:
    at = f" >= {rows[0]['proceed']:.2f}" if rows else ""
    lines = ["| held-out kind | lists | right first | mean best | ECE best | no-fit lists | no-fit mean best | "
             f"no-fit{at} |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['kind']} | {r['lists']} | {r['rank1']:.3f} | {r['mean_best']:.3f} | {r['ece']:.3f} | "
                     f"{r['nofit_lists']} | {r['nofit_mean_best']:.3f} | {r['nofit_proceed']:.3f} |")
    if rows:
        lines.append(f"| mean | | | | {np.mean([r['ece'] for r in rows]):.3f} | | "
                     f"{np.mean([r['nofit_mean_best'] for r in rows]):.3f} | "
                     f"{np.mean([r['nofit_proceed'] for r in rows]):.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--model", type=Path, help="scorer model folder (ONNX); writes combiner.json into it")
    g.add_argument("--retrieval-only", action="store_true", help="fit the no-model confidence")
    p.add_argument("--queries", type=Path, default=DATA / "questions.jsonl", help="labelled questions JSONL (default: the shipped questions)")
    p.add_argument("--split", default="dev", help="the split fitted on (default dev; never test)")
    p.add_argument("--threads", type=int, default=2, help="CPU threads of the scorer (default 2)")
    p.add_argument("--limit", type=int, help="only the first N questions (a smoke run)")
    p.add_argument("--modes", default="request,need,abstain",
                   help="lists the first stage is fitted on: request, need, abstain (comma-separated)")
    p.add_argument("--no-examples", action="store_true",
                   help="fit for an index without example requests (writes combiner-noex.json / "
                        "retrieval_confidence-noex.json)")
    p.add_argument("--nofit", type=Path, help="requests written to have no tool (training/data/nofit.jsonl): "
                   "their lists join the first stage's fit as mode 'nofit'")
    p.add_argument("--nofit-split", default="train", help="which split of --nofit to fit on (default: train)")
    p.add_argument("--score-top", type=int, help="score only the first N candidates, as the pipeline's policy does "
                   "(default: the shipped policy's; 0 = all)")
    p.add_argument("--features", help="comma-separated subset of the confidence features to fit on "
                   "(default: all of them; e.g. leave out the dense encoder's for a model that leans on the logit)")
    p.add_argument("--needs", type=Path, help="blind needs (training/data/needs_blind.jsonl): the 'need' lists use them "
                   "instead of the author-written needs, and abstain / no-fit lists are also scored with them")
    p.add_argument("--calibrate-on", default="request,need",
                   help="lists the second stage (list calibration) is fitted on; 'none' to skip it")
    p.add_argument("--catalogs", choices=["fit"], help="also fit on catalogs shaped like users' (training/flow_cases.py: "
                   "MCP-Zero dev organisations and the training corpora, day one, with their no-fit twins) as modes "
                   "catalog / catalog_nofit; implies --no-examples")
    p.add_argument("--catalog-n", type=int, default=100, help="answerable requests per catalog kind (default 100)")
    p.add_argument("--seed", type=int, default=0, help="the catalogs' draw (default 0: the agent-flow fit set's)")
    p.add_argument("--save-lists", type=Path, help="also write every scored list here (to refit with --load-lists)")
    p.add_argument("--load-lists", type=Path, help="fit on lists saved by --save-lists instead of scoring")
    p.add_argument("--cv", action="store_true", help="leave one catalog kind out: print each held-out kind's ECE of "
                   "the best probability and its no-fit twins' best, then exit without writing a model")
    a = p.parse_args(argv)
    if a.catalogs:
        a.no_examples = True
    a.score_top = score_top_flag(a.score_top)
    modes, cal_modes = _modes(p, "--modes", a.modes), _modes(p, "--calibrate-on", a.calibrate_on, allow_none=True)
    if not set(cal_modes) <= set(modes):
        p.error(f"--calibrate-on {','.join(cal_modes)} must be among --modes {','.join(modes)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from retrieval.index.default import load_or_build_default

    if "nofit" in modes and not a.nofit and not a.load_lists:
        p.error("--modes nofit needs --nofit FILE")
    if set(modes) & set(CATALOG_MODES) and not a.catalogs:
        p.error(f"--modes {','.join(CATALOG_MODES)} are the lists of --catalogs fit")
    if a.cv and not a.catalogs:
        p.error("--cv leaves one catalog kind out at a time: add --catalogs fit")
    if a.save_lists and a.load_lists:
        p.error("--save-lists writes what this run scores; with --load-lists nothing is scored")
    if a.save_lists and not a.save_lists.parent.is_dir():
        p.error(f"--save-lists {a.save_lists}: no folder {a.save_lists.parent}")
    scorer = None
    if a.model:
        from scorer import Scorer
        scorer = Scorer.load(a.model, threads=a.threads)
    needs = None
    if a.needs:
        from .needs import read_needs
        needs = {rid: r["need"] for rid, r in read_needs(a.needs).items()}
    meta = {"examples": not a.no_examples, "score_top": a.score_top, "logits": scorer is not None}
    if a.load_lists:
        try:
            col, saved = Collected.load(a.load_lists)
        except ValueError as exc:
            p.error(f"--load-lists: {exc}")
        for key, value in meta.items():
            if key in ("logits", "score_top") and not meta["logits"]:
                continue   # lists scored with logits serve a retrieval-only fit too, whatever their head
            if key in saved and saved[key] != value:
                p.error(f"--load-lists {a.load_lists}: scored with {key}={saved[key]!r}, this fit asks for {value!r}")
    else:
        queries = load_queries(a.queries, split=a.split)[: a.limit or None]
        index = load_or_build_default(with_examples=not a.no_examples, show_progress=True)
        col = collect(index, queries, scorer, modes=tuple(m for m in modes if m in QUESTION_MODES),
                      score_top=a.score_top, needs=needs)
        if a.nofit:
            from retrieval.evaluation.abstention import load_nofit
            collect_nofit(index, load_nofit(a.nofit, a.nofit_split), scorer, out=col, score_top=a.score_top,
                          needs=needs)
        if a.catalogs:
            collect_catalogs(catalog_cases(a.catalogs, index, scorer, a.catalog_n, a.seed), out=col,
                             score_top=a.score_top)
        if a.save_lists:
            col.save(a.save_lists, {**meta, "source": f"{a.split} questions ({len(queries)})"})
    if a.catalogs:
        modes = tuple(dict.fromkeys(modes + CATALOG_MODES))
        cal_modes = tuple(dict.fromkeys(cal_modes + ("catalog",))) if cal_modes else cal_modes
    col = col.subset(modes)
    if not col.labels:
        p.error(f"no lists of modes {','.join(modes)} to fit on")
    feats, y, _ = col.arrays()
    # the need's view and the catalog size are not in the default sets (tried in 0.10.0, not shipped; the
    # catalog size does not vary over the dev questions' lists)
    features = tuple(f for f in (FEATURES if scorer is not None else RETRIEVAL_FEATURES)
                     if a.features or f not in EXPERIMENTAL_FEATURES)
    if a.features:
        chosen = tuple(f.strip() for f in a.features.split(",") if f.strip())
        bad = sorted(set(chosen) - set(features))
        if bad or not chosen:
            p.error(f"--features: unknown {bad or 'empty'}; choose from {', '.join(features)}")
        if scorer is not None and "logit" not in chosen:
            p.error("--features must keep 'logit' when a --model is scored")
        features = tuple(f for f in features if f in chosen)
    if a.cv:
        if not any(m == "catalog" for m in col.modes):
            p.error(f"--cv: {a.load_lists or 'the scored lists'} hold no catalog lists (scored without --catalogs)")
        print(format_cv(cross_validate(col, features, cal_modes)))
        return 0
    kind = "without" if a.no_examples else "with"
    source = (saved.get("source") or f"lists of {a.load_lists.name}") if a.load_lists \
        else f"{a.split} questions ({len(queries)})"
    fitted_on = (f"{source}, modes {sorted(set(col.modes))}, index {kind} example requests"
                 + (", blind needs" if needs else "")
                 + (f", catalogs shaped like users' ({a.catalogs} set: "
                    f"{', '.join(sorted(set(col.kinds) - {'questions'}))})" if a.catalogs else "")
                 + (f", logits of the first {a.score_top} candidates" if scorer is not None and a.score_top else ""))
    try:
        model = fit_confidence(feats, y, features, fitted_on=fitted_on)
    except ValueError as exc:
        p.error(str(exc))
    if cal_modes:
        model = replace(model, list_calibration=fit_list_calibration(model, col.subset(cal_modes)))
    out = (a.model / combiner_file(not a.no_examples)) if a.model else default_confidence_path(not a.no_examples)
    model.save(out)
    if scorer is not None and not a.no_examples:
        # The scorer's own calibration, for pairs scored without retrieval evidence (/v1/score).
        from scorer.calibration import fit_platt

        from .export import update_calibration
        cal = fit_platt(feats["logit"], y)
        update_calibration(a.model, cal)
        log.info("scorer-alone Platt calibration: a=%.3f b=%.3f", cal.a, cal.b)
    log.info("wrote %s: %s; list calibration %s", out, dict(zip(model.features, np.round(model.weights, 3))),
             model.list_calibration)
    return 0


if __name__ == "__main__":
    sys.exit(main())
