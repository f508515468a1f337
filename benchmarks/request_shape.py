"""Does the shape of a request tell a catalog's probe map where its real requests are harder? (issue 34)

    python benchmarks/request_shape.py --probe-texts runs/s15/probes --out benchmarks/results/request_shape.json

A catalog's calibration (``toolrank index --calibrate``) fits its map on probes written from one tool's card;
where real requests are multi-step plans (UltraTool, RestBench) the map over-states the fit rate. Real
requests are longer than probes on most kinds, so the map could read the request's length: ``logit q =
a*logit p + b + c*(log words - the probes' mean log words)``, with the catalog's own ``a, b`` (its probes,
both modes, as shipped) and one ``c`` for every catalog, chosen on the fit catalogs' real first searches
(each kind left out in turn, then all of them) and read once on the held-out kinds. At the probes' length
the map is the catalog's own.

Rows: the first searches ``catalog_probes.py`` reads (labelled or judged fits; the held-out kinds with the
wide draw), and each kind's judged probes. The probe requests of the corpora without a licence are not in
the repository (``benchmarks/data/probes/*/requests_*.jsonl`` hold the others): ``--probe-texts`` names a
folder of the writers' ``requests_*.jsonl`` for them; a kind without its probes' texts is left out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, environment_stamp, stamp_line, write_result  # noqa: E402

PROBES = ROOT / "benchmarks" / "data" / "probes"
MODES = ("need", "request_only")


def log_words(text: str) -> float:
    """The request's length feature: the log of its word count (at least one word)."""
    return float(np.log(max(len(text.split()), 1)))


def _texts(folders: list[Path]) -> dict[str, str]:
    """Each probe's request, the first folder that has it winning (``catalog_probes.load_probes`` reads them)."""
    from benchmarks.catalog_probes import load_probes

    out: dict[str, str] = {}
    for folder in folders:
        for probe in load_probes(folder):
            out.setdefault(probe["id"], probe["request"])
    return out


def rows_of(which: str, extra_texts: list[Path]) -> list[dict]:
    """Every probe search and real first search of a set, with its map's ``a, b``, its fit and its text."""
    from benchmarks.catalog_calibration import first_fits, load_fits
    from benchmarks.catalog_probes import _request_texts, judged_set
    from retrieval.pipeline.probes import fit_probes

    rows, fits, _ = judged_set(which)
    folder = PROBES / which
    probe_rows = json.loads((folder / "probe_flow.json").read_text())["rows"]
    probe_fits = load_fits([folder / "judge_items.jsonl"], sorted(folder.glob("judged_0*.jsonl")))
    ptext = _texts([folder, *extra_texts])
    real = [r for r in rows if r.get("answerable") and r.get("mode") in MODES and (r.get("right1") or fits(r) is not None)]
    rtext = _request_texts({r["id"] for r in real}, which)
    out = []
    for kind in sorted({r["catalog"] for r in probe_rows}):
        probes = [r for r in probe_rows if r["catalog"] == kind and r["answerable"] and r["mode"] in MODES]
        if any(r["id"] not in ptext for r in probes):
            print(f"[{which} / {kind}: its probes' texts are not here (--probe-texts): left out]", file=sys.stderr)
            continue
        py = [first_fits(r, probe_fits) for r in probes]
        m = fit_probes([(r["best1"], bool(v)) for r, v in zip(probes, py)], "benchmark", min_searches=1)
        for src, group, ys, texts in (("probe", probes, py, ptext),
                                      ("real", [r for r in real if r["catalog"] == kind],
                                       [first_fits(r, fits) for r in real if r["catalog"] == kind], rtext)):
            for r, y in zip(group, ys):
                out.append({"set": which, "kind": kind, "mode": r["mode"], "src": src, "p": float(r["best1"]),
                            "y": float(y), "f": log_words(texts[r["id"]]), "a": m.a, "b": m.b})
    return out


def _cells(rows: list[dict]) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per kind and mode: the catalog map's logit, the length against its probes' mean, the fits."""
    from retrieval.pipeline.recalibration import _logit

    out = {}
    for kind in sorted({r["kind"] for r in rows}):
        mean_f = np.mean([r["f"] for r in rows if r["kind"] == kind and r["src"] == "probe"])
        for mode in MODES:
            real = [r for r in rows if r["kind"] == kind and r["src"] == "real" and r["mode"] == mode]
            if real:
                z = np.array([r["a"] * _logit(np.array(r["p"])) + r["b"] for r in real], dtype=np.float64)
                out[(kind, mode)] = (z, np.array([r["f"] for r in real]) - mean_f, np.array([r["y"] for r in real]))
    return out


def fit_c(cells) -> float:
    """The one length weight that maximises the likelihood of the cells' fits (bounded to [-3, 3])."""
    from scipy.optimize import minimize_scalar

    def nll(c: float) -> float:
        total = 0.0
        for z, f, y in cells:
            q = np.clip(1.0 / (1.0 + np.exp(-(z + c * f))), 1e-9, 1 - 1e-9)
            total -= float(np.sum(y * np.log(q) + (1 - y) * np.log(1 - q)))
        return total
    return float(minimize_scalar(nll, bounds=(-3.0, 3.0), method="bounded").x)


def main(argv: list[str] | None = None) -> int:
    from retrieval.evaluation.stats import ece

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--probe-texts", type=Path, nargs="*", default=[],
                   help="folders of probe writers' requests_*.jsonl for the kinds whose texts are not shipped")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    sig = lambda z: 1.0 / (1.0 + np.exp(-z))   # noqa: E731
    lines, table = [], {}
    shape = {}
    for which in ("fit", "report"):
        rows = rows_of(which, a.probe_texts)
        for kind in sorted({r["kind"] for r in rows}):
            for src in ("probe", "real"):
                g = [r for r in rows if r["kind"] == kind and r["src"] == src]
                shape[f"{which}/{kind}/{src}"] = {"n": len(g), "median_words": float(np.median([np.exp(r["f"]) for r in g])),
                                                  "fits": float(np.mean([r["y"] for r in g]))}
        table[which] = _cells(rows)
    fit_cells = table["fit"]
    lines.append("real requests against their catalog's probes: median words, share whose first tool fits\n")
    lines.append("| set | kind | probes: n, words, fit | real: n, words, fit |\n|---|---|---|---|")
    for key in sorted({k.rsplit("/", 1)[0] for k in shape}):
        pr, re_ = shape[key + "/probe"], shape[key + "/real"]
        which, kind = key.split("/")
        lines.append(f"| {which} | {kind} | {pr['n']}, {pr['median_words']:.0f}, {pr['fits']:.0%} | "
                     f"{re_['n']}, {re_['median_words']:.0f}, {re_['fits']:.0%} |")
    lines.append("\nfit catalogs, each kind left out of c's fit: ECE of the best probability, the catalog's map -> with length\n")
    lines.append("| kind | mode | c | map | with length |\n|---|---|---:|---:|---:|")
    loko = {}
    for kind in sorted({k for k, _ in fit_cells}):
        c = fit_c([v for (k, _), v in fit_cells.items() if k != kind])
        for (k, mode), (z, f, y) in fit_cells.items():
            if k == kind:
                loko[f"{k}/{mode}"] = {"c": c, "map": float(ece(sig(z), y)), "length": float(ece(sig(z + c * f), y))}
                lines.append(f"| {k} | {mode} | {c:+.2f} | {loko[f'{k}/{mode}']['map']:.3f} | "
                             f"{loko[f'{k}/{mode}']['length']:.3f} |")
    c_all = fit_c(list(fit_cells.values()))
    fit_mean = (np.mean([v["map"] for v in loko.values()]), np.mean([v["length"] for v in loko.values()]))
    lines.append(f"\nmean {fit_mean[0]:.3f} -> {fit_mean[1]:.3f}; c on every fit kind: {c_all:+.3f}")
    lines.append("\nheld-out kinds, read once with that c: ECE of the best probability, the catalog's map -> with length\n")
    lines.append("| kind | mode | n | map | with length |\n|---|---|---:|---:|---:|")
    held = {}
    for (kind, mode), (z, f, y) in table["report"].items():
        held[f"{kind}/{mode}"] = {"n": len(y), "map": float(ece(sig(z), y)), "length": float(ece(sig(z + c_all * f), y))}
        lines.append(f"| {kind} | {mode} | {len(y)} | {held[f'{kind}/{mode}']['map']:.3f} | "
                     f"{held[f'{kind}/{mode}']['length']:.3f} |")
    for name in ("map", "length"):
        v = [h[name] for h in held.values()]
        lines.append(f"\nheld out, {name}: mean ECE {np.mean(v):.3f}, {sum(x <= 0.05 for x in v)} of {len(v)} cells "
                     "at or under 0.05")
    text = "\n".join(lines)
    print(text)
    stamp = environment_stamp()
    print(stamp_line(stamp))
    write_result(a.out, {"environment": stamp, "shape": shape, "fit_loko": loko, "c": c_all, "held_out": held},
                 indent=1)
    a.out.with_suffix(".md").write_text(text + "\n\n" + stamp_line(stamp) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
