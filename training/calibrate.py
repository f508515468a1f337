"""Fit the confidence model (scorer logit + retrieval evidence -> probability) on dev.

    python -m training.calibrate --model models/toolrank-ce-l3      # writes <model>/combiner.json
    python -m training.calibrate --retrieval-only                   # writes retrieval/data/retrieval_confidence.json
    python -m training.calibrate --model ... --no-examples          # for indexes without example requests

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
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from retrieval.catalog.model import ToolId
from retrieval.pipeline.confidence import (FEATURES, RETRIEVAL_FEATURES, ConfidenceModel, ListCalibration,
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

    def add(self, f: dict[str, np.ndarray], y: np.ndarray, mode: str) -> None:
        g = len(self.labels)
        for k, v in f.items():
            self.feats.setdefault(k, []).append(v)
        self.labels.append(y)
        self.groups.append(np.full(len(y), g))
        self.modes.append(mode)

    def subset(self, modes: tuple[str, ...]) -> "Collected":
        """Only the lists of these modes."""
        out = Collected()
        for g, mode in enumerate(self.modes):
            if mode in modes:
                out.add({k: v[g] for k, v in self.feats.items()}, self.labels[g], mode)
        return out

    def arrays(self) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        return ({k: np.concatenate(v) for k, v in self.feats.items()}, np.concatenate(self.labels),
                np.concatenate(self.groups))


def abstain_eligibility(index: ToolIndex, q: Query) -> Eligibility:
    """Every server but the labelled one and those of its acceptable alternatives."""
    drop = {t.server for t in q.lenient_targets}
    return Eligibility.of(servers=[s for s in index.catalog.servers if s not in drop])


QUESTION_MODES = ("request", "need", "abstain")   # lists built from the labelled questions
MODES = QUESTION_MODES + ("nofit",)               # + lists of requests written to have no tool


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
                out.add(candidate_features(hits, logits, named, mentioned), y, mode)
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
            out.add(candidate_features(hits, logits, registry.find(r.query), registry.find(r.query, loose=True)),
                    np.zeros(len(hits)), "nofit")
    return out


def fit_confidence(feats: dict[str, np.ndarray], y: np.ndarray, features: tuple[str, ...], *, c: float = 1.0,
                   fitted_on: str = "") -> ConfidenceModel:
    from sklearn.linear_model import LogisticRegression

    x = np.stack([feats[f] for f in features], axis=1)
    mean, scale = x.mean(0), x.std(0) + 1e-9
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
    a = p.parse_args(argv)
    a.score_top = score_top_flag(a.score_top)
    modes, cal_modes = _modes(p, "--modes", a.modes), _modes(p, "--calibrate-on", a.calibrate_on, allow_none=True)
    if not set(cal_modes) <= set(modes):
        p.error(f"--calibrate-on {','.join(cal_modes)} must be among --modes {','.join(modes)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from retrieval.index.default import load_or_build_default

    index = load_or_build_default(with_examples=not a.no_examples, show_progress=True)
    queries = load_queries(a.queries, split=a.split)[: a.limit or None]
    scorer = None
    if a.model:
        from scorer import Scorer
        scorer = Scorer.load(a.model, threads=a.threads)
    needs = None
    if a.needs:
        from .needs import read_needs
        needs = {rid: r["need"] for rid, r in read_needs(a.needs).items()}
    col = collect(index, queries, scorer, modes=tuple(m for m in modes if m in QUESTION_MODES), score_top=a.score_top,
                  needs=needs)
    if "nofit" in modes and not a.nofit:
        p.error("--modes nofit needs --nofit FILE")
    if a.nofit:
        from retrieval.evaluation.abstention import load_nofit
        collect_nofit(index, load_nofit(a.nofit, a.nofit_split), scorer, out=col, score_top=a.score_top, needs=needs)
    feats, y, _ = col.arrays()
    features = FEATURES if scorer is not None else RETRIEVAL_FEATURES
    if a.features:
        chosen = tuple(f.strip() for f in a.features.split(",") if f.strip())
        bad = sorted(set(chosen) - set(features))
        if bad or not chosen:
            p.error(f"--features: unknown {bad or 'empty'}; choose from {', '.join(features)}")
        if scorer is not None and "logit" not in chosen:
            p.error("--features must keep 'logit' when a --model is scored")
        features = tuple(f for f in features if f in chosen)
    kind = "without" if a.no_examples else "with"
    model = fit_confidence(feats, y, features, fitted_on=f"{a.split} questions ({len(queries)}), modes "
                                                         f"{sorted(set(col.modes))}, index {kind} example requests"
                                                         + (", blind needs" if needs else "")
                                                         + (f", logits of the first {a.score_top} candidates"
                                                            if scorer is not None and a.score_top else ""))
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
