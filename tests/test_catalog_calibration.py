"""The catalog-calibration experiment's arithmetic (benchmarks/catalog_calibration.py): fitted with a pull towards
the identity, chosen by leaving one catalog kind out, checked against labels and against judged fits."""

import numpy as np
import pytest

from benchmarks import catalog_calibration as cc


def _rows(kind, n, shift, seed, mode="need"):
    """First searches whose best probability reads ``shift`` (in logits) under the truth."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.5, 1.5, n)
    y = rng.random(n) < 1 / (1 + np.exp(-z))
    best = 1 / (1 + np.exp(-(z - shift)))
    return [{"id": f"{kind}{i}", "catalog": kind, "mode": mode, "answerable": True, "best1": float(b),
             "right1": bool(t), "n_eligible": 50, "tools1": [["S", "x"]]} for i, (b, t) in enumerate(zip(best, y))]


def test_an_under_confident_catalog_is_carried_and_a_calibrated_one_left_alone():
    under = [r for i, k in enumerate("abcd") for r in _rows(k, 400, 1.0, i)]
    table = cc.leave_one_kind_out(under)
    assert table["platt"]["mean"] < table["identity"]["mean"] - 0.03
    w = cc.fit(under, "platt")
    assert cc.apply([{"best1": 0.5}], "platt", w)[0] > 0.6        # raised where it read under
    fine = [r for i, k in enumerate("abcd") for r in _rows(k, 400, 0.0, 10 + i)]
    assert np.allclose(cc.fit(fine, "platt"), [1.0, 0.0], atol=0.15)   # near the identity where it already matches
    assert np.allclose(cc.fit(fine, "identity"), [1.0, 0.0])


def test_the_check_reads_labels_and_judged_fits():
    rows = _rows("r", 200, 1.0, 3)
    w = cc.fit(rows, "platt")
    plain = cc.check(rows, "platt", w)["r"]["need"]
    assert plain["n"] == 200 and plain["ece_after"] < plain["ece_before"]
    judged = cc.check(rows, "platt", w, fits=lambda r: True)["r"]["need"]   # every first tool fits
    assert judged["fits"] == 1.0 and judged["ece_fits_after"] < judged["ece_fits_before"]


def test_the_check_reads_what_a_map_costs_on_the_no_fit_twins():
    rows = _rows("r", 200, 1.0, 4)
    twins = [dict(r, id=r["id"] + ":none", answerable=False, right1=False) for r in _rows("r", 200, 1.0, 5)]
    w = cc.fit(rows, "platt")                        # raises every probability: more twins over the threshold
    cell = cc.check(rows + twins, "platt", w, proceed=0.83)["r"]["need"]
    assert cell["n"] == 200 and cell["twins"] == 200   # the ECE still reads the answerable requests alone
    assert cell["twins_proceed_after"] > cell["twins_proceed_before"]
    judged = cc.check(rows + twins, "platt", w, fits=lambda r: r["answerable"], proceed=0.83)["r"]["need"]
    assert judged["twins_wrong_after"] == judged["twins_proceed_after"]   # no twin's first tool fits
    mixed = cc.first_searches(rows + twins, twins=True)
    assert len(mixed) == 400 and len(cc.first_searches(rows + twins)) == 200
    loko = cc.leave_one_kind_out(mixed + [dict(r, catalog="s") for r in mixed])
    assert set(loko["platt"]) >= {"r", "s", "mean"}


def test_maps_fitted_on_the_kind_itself_show_what_the_score_allows():
    """Where twins read like answerable requests, the finest map calibrated on the answerable ones lets them
    proceed and a map fitted on both leaves the answerable requests under it; a coarser calibrated map can still
    proceed safely only as far as the score separates them."""
    rng = np.random.default_rng(7)

    def rows(gap):
        ans = [{"id": f"a{i}", "catalog": "k", "mode": "need", "answerable": True, "right1": bool(rng.random() < 0.9),
                "best1": float(rng.uniform(0.6, 0.95))} for i in range(300)]
        twins = [{"id": f"a{i}:none", "catalog": "k", "mode": "need", "answerable": False, "right1": False,
                  "best1": float(rng.uniform(0.6, 0.95) - gap)} for i in range(300)]
        return ans + twins
    same = cc.oracle_bound(rows(0.0))["k"]["need"]
    assert same["ece_answerable_map"] < 0.02 and same["twins_wrong_answerable_map"] > 0.5
    assert same["ece_both_map"] > 0.3
    assert same["answerable_proceed_calibrated_safe"] < 0.2         # only the top tenth can go: twins there too
    apart = cc.oracle_bound(rows(0.6))["k"]["need"]
    assert apart["twins_wrong_answerable_map"] == 0.0 and apart["ece_both_map"] < 0.05
    assert apart["answerable_proceed_calibrated_safe"] == 1.0      # one level for all of them: 0.9 >= 0.83
    assert same["auroc_answerable_vs_twin"] < 0.6 < 0.99 < apart["auroc_answerable_vs_twin"]
    judged = cc.oracle_bound(rows(0.0), fits=lambda r: True)["k"]["need"]   # every twin's first tool fits
    assert judged["twins_wrong_answerable_map"] == 0.0 and judged["answerable_proceed_calibrated_safe"] == 1.0


def test_the_most_proceeding_calibrated_map_keeps_the_rate_over_its_cut():
    pa = np.array([0.2, 0.4, 0.6, 0.8, 0.9])
    ya = np.array([0, 1, 1, 1, 1], dtype=float)
    pt = np.array([0.5, 0.7])
    yt = np.zeros(2)
    share, cut = cc._most_proceeding(pa, ya, pt, yt, proceed=0.83, safe=0.0)
    assert (share, cut) == (0.4, 0.8)          # a cut at 0.4 or 0.6 would let a twin through
    share, cut = cc._most_proceeding(pa, ya, pt, yt, proceed=0.83, safe=0.5)
    assert (share, cut) == (0.6, 0.6)          # one twin allowed: 0.6 up is 3 of 3 right
    assert cc._most_proceeding(pa, np.zeros(5), pt, yt, 0.83, 1.0) == (0.0, None)


def test_twin_separation_reads_each_signal_per_kind():
    from benchmarks.twin_separation import separation

    pts = [{"catalog": "k", "answerable": a, "best_probability": 0.9 if a else 0.1, "logit": 0.0,
            "logit_gap": 1.0 if a else 2.0} for a in (True, False) * 5]
    pts.append({"catalog": "only_answerable", "answerable": True, "best_probability": 1, "logit": 1, "logit_gap": 1})
    table = separation(pts, ("best_probability", "logit", "logit_gap"))
    assert set(table) == {"k"}                                 # a kind without twins has nothing to separate
    assert table["k"] == {"answerable": 5, "twins": 5, "best_probability": 1.0, "logit": 0.5, "logit_gap": 0.0}


def test_twin_separation_leaves_a_missing_signal_out_of_its_own_auroc():
    from benchmarks.twin_separation import separation

    pts = [{"catalog": "k", "answerable": a, "best_probability": 0.9 if a else 0.1, "crowd": 0.2 if a else 0.8}
           for a in (True, False) * 3]
    pts += [{"catalog": "k", "answerable": False, "best_probability": 0.95, "crowd": float("nan")}]
    cell = separation(pts, ("best_probability", "crowd"))["k"]
    assert cell["twins"] == 4 and cell["crowd"] == 0.0         # the NaN twin is not read by the crowd's AUROC
    assert cell["best_probability"] == pytest.approx(9 / 12)  # but it is by the probability's
    only_answerable = [{"catalog": "k", "answerable": True, "crowd": 0.1}, {"catalog": "k", "answerable": False}]
    assert np.isnan(separation(only_answerable, ("crowd",))["k"]["crowd"])


def test_crowd_is_the_first_tools_nearest_look_alike():
    from benchmarks.twin_separation import crowd

    e = np.eye(3)
    assert crowd([e[0], e[1], (e[0] + e[2]) / np.sqrt(2)]) == pytest.approx(1 / np.sqrt(2))
    assert crowd([e[0], e[0]]) == pytest.approx(1.0)
    assert crowd([e[0], e[1], e[1]]) == 0.0            # the first tool's nearest, not the closest pair
    assert np.isnan(crowd([e[0]]))


class _Names:
    """A ``_Catalogs`` stand-in: result-file tools resolve to themselves unless retired."""

    def __init__(self, retired=()):
        self.retired = {tuple(t) for t in retired}

    def real(self, kind, tool):
        return None if tuple(tool) in self.retired else list(tool)


def test_answer_tools_keeps_the_first_tool_first():
    from benchmarks.twin_separation import answer_tools

    answer = [["S", "a"], ["S", "b"], ["S", "c"], ["S", "d"]]
    assert [t.tool for t in answer_tools(_Names(), "k", answer)] == ["a", "b", "c", "d"]
    assert [t.tool for t in answer_tools(_Names([["S", "c"]]), "k", answer)] == ["a", "b", "d"]
    assert answer_tools(_Names([["S", "a"]]), "k", answer) is None     # never "b" standing in for the first
    assert answer_tools(_Names([["S", "b"]]), "k", answer) is None
    assert answer_tools(_Names(), "k", answer[:1]) is None
    assert len(answer_tools(_Names(), "k", answer * 2)) == 5


def test_add_crowd_reads_each_rows_answer_and_counts_what_it_leaves_out():
    e = np.eye(3)
    vecs = {"a": e[0], "b": e[1], "c": (e[0] + e[1]) / np.sqrt(2)}
    rows = [{"catalog": "k", "tools1": [["S", "a"], ["S", "b"], ["S", "c"]]},
            {"catalog": "k", "tools1": [["S", "a"], ["S", "b"]]},
            {"catalog": "k", "tools1": [["S", "a"]]},                     # one tool: nothing to read
            {"catalog": "k", "tools1": [["S", "x"], ["S", "a"]]}]         # its first tool retired
    out, left = cc.add_crowd(rows, _Names([["S", "x"]]), lambda kind, t: vecs[t.tool])
    assert left == 2 and [r["crowd"] for r in out] == [pytest.approx(1 / np.sqrt(2)), 0.0]
    assert "crowd" not in rows[0]                                         # the input rows are left as they were


def test_a_tool_vector_is_the_one_the_index_searches():
    from fakes import HashEncoder, tiny_catalog

    from retrieval.catalog.model import ToolId
    from retrieval.index.embedded import ToolIndex

    index = ToolIndex(tiny_catalog(), HashEncoder(), with_examples=False)
    v = index.tool_vector(ToolId("GitHub", "create_issue"))
    hits = index.retrieve("Create a new issue in a repository", k=3)
    assert v.shape == (64,) and np.linalg.norm(v) == pytest.approx(1.0)
    assert hits[0].tool_id == ToolId("GitHub", "create_issue")
    q = index.embed_query("Create a new issue in a repository").reshape(-1)
    assert float(v @ q) == pytest.approx(hits[0].dense_score, abs=1e-5)    # the cosine the dense list read
    v[:] = 0
    assert np.linalg.norm(index.tool_vector(ToolId("GitHub", "create_issue"))) == pytest.approx(1.0)   # a copy
    assert index.tool_vector(ToolId("GitHub", "nope")) is None


def test_the_crowd_variant_reads_the_crowd_and_the_halves_split_at_the_median():
    rows = _rows("k", 8, 0.0, 1)
    for i, r in enumerate(rows):
        r["crowd"], r["best1"], r["right1"] = i / 10, 0.5, i < 4   # the least crowded half fits, the rest not
    x = cc._x(rows, "crowd")
    assert x.shape == (8, 3) and np.allclose(x[:, 1], [i / 10 for i in range(8)]) and np.allclose(x[:, 2], 1.0)
    cell = cc.crowd_halves(rows)["k"]["need"]
    assert cell["labels_error_low"] == pytest.approx(0.5) and cell["labels_error_high"] == pytest.approx(-0.5)
    judged = cc.crowd_halves(rows, fits=lambda r: True)["k"]["need"]   # every first tool judged to fit
    assert judged["fits_error_low"] == judged["fits_error_high"] == pytest.approx(0.5)
    assert cc.crowd_halves(rows[:3]) == {}                              # too few to halve
    read = cc.crowd_halves(rows, fits=lambda r: None if r["crowd"] < 0.2 else True)["k"]["need"]
    assert read["n"] == 6                                               # rows the judge did not read are left out
    # read 0.3 everywhere, fitting half the time, all of it in the least crowded half: the crowd map finds it
    skewed = [dict(r, catalog=k, best1=0.3, crowd=float(i % 8 >= 4), right1=i % 8 < 4)
              for k in "ab" for i, r in enumerate(rows * 10)]
    table = cc.leave_one_kind_out(skewed, ("identity", "crowd"))
    assert set(table) == {"identity", "crowd"} and table["crowd"]["mean"] < table["identity"]["mean"] - 0.05


def test_missing_or_broken_inputs_are_named_not_a_traceback(tmp_path, capsys):
    import json

    fit, report = tmp_path / "fit.json", tmp_path / "report.json"
    fit.write_text(json.dumps({"set": "fit", "rows": _rows("a", 20, 1.0, 1) + _rows("b", 20, 1.0, 2)}))
    report.write_text(json.dumps({"set": "report", "rows": _rows("c", 20, 1.0, 3)}))
    ok = ["--fit", str(fit), "--report", str(report), "--out", str(tmp_path / "out.json")]

    def refused(*extra):
        code = cc.main([*ok, *extra])
        return code, capsys.readouterr().err

    assert refused("--report", str(tmp_path / "nope.json")) == (2, f"error: no such file: {tmp_path / 'nope.json'}\n")
    code, err = refused("--judged-items", str(tmp_path / "items.jsonl"), "--judged", str(fit))
    assert code == 2 and "items.jsonl" in err
    code, err = refused("--judged-items", str(fit))
    assert code == 2 and "go together" in err
    for text in ("not json", "[]", "{}", '{"rows": [1]}'):
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        code, err = refused("--fit", str(bad))
        assert code == 2 and str(bad) in err and "not an agent-flow result file" in err
    (tmp_path / "empty.json").write_text(json.dumps({"set": "report", "rows": []}))
    code, err = refused("--report", str(tmp_path / "empty.json"))
    assert code == 2 and "no first searches" in err
    items, judged = tmp_path / "items.jsonl", tmp_path / "judged.jsonl"
    items.write_text("{broken\n")
    judged.write_text("")
    code, err = refused("--judged-items", str(items), "--judged", str(judged))
    assert code == 2 and "judge" in err
    assert cc.main(ok) == 0
    written = json.loads((tmp_path / "out.json").read_text())
    assert "crowd_halves" not in written and written["chosen"] in cc.VARIANTS   # without --crowd: as before


def test_a_cut_whose_lower_level_would_proceed_too_is_no_cut():
    pa = np.array([0.2, 0.4, 0.6, 0.8])
    ya = np.ones(4)                                  # every first tool fits: any calibrated level reads 1.0
    pt = np.array([0.3, 0.5])
    # a cut at 0.8 leaves 0.2-0.6 at a calibrated 1.0 under it: they would proceed too, twins among them
    assert cc._most_proceeding(pa, ya, pt, np.zeros(2), proceed=0.83, safe=0.0) == (0.0, None)
    assert cc._most_proceeding(pa, ya, np.array([0.1]), np.zeros(1), proceed=0.83, safe=0.0) == (1.0, 0.2)


def test_cross_fitting_reads_each_half_on_its_own():
    rng = np.random.default_rng(3)
    ids = [f"q{i}" for i in range(400)]
    pa = rng.uniform(0.3, 0.95, 400)
    ya = (rng.random(400) < pa).astype(float)        # calibrated already
    pt = rng.uniform(0.0, 0.5, 400)                   # twins read low: a cut between them is safe
    out = cc.cross_fitted(ids, pa, ya, [i + ":none" for i in ids], pt, np.zeros(400), proceed=0.83, safe=0.10)
    assert len(out["ece_halves"]) == 2 and out["twins_wrong"] <= 0.10
    assert out["ece"] == pytest.approx(np.average(out["ece_halves"], weights=[
        sum(1 for i in ids if cc_half(i) == h) for h in (0, 1)]))


def cc_half(i):
    import hashlib

    return hashlib.sha1(i.encode()).digest()[0] % 2


def test_judgments_from_several_item_files_are_read_together_and_unread_tools_are_known(tmp_path):
    import json

    from benchmarks.catalog_calibration import load_fits

    def write(name, rows):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
        return tmp_path / name

    first = write("a.jsonl", [{"id": "q1", "catalog": "k", "candidates": [{"server": "S", "tool": "x"}]}])
    later = write("b.jsonl", [{"id": "q1#later", "catalog": "k", "candidates": [{"server": "S", "tool": "y"},
                                                                          {"server": "S", "tool": "x"}]},
                              {"id": "q2", "catalog": "k", "candidates": [{"server": "S", "tool": "z"}]}])
    answers = [write("ja.jsonl", [{"id": "q1", "n": 1, "p": {"1": 0.9}}]),
               write("jb.jsonl", [{"id": "q2", "n": 1, "p": {"1": 0.1}}])]
    fits = load_fits([first, later], answers)
    row = lambda rid, tool: {"id": rid, "tools1": [["S", tool]]}   # noqa: E731
    assert fits(row("q1", "x")) is True                   # read in the first file's judgment
    assert fits(row("q2", "z")) is False and fits(row("q3", "z")) is None
    assert fits.read(row("q1", "x")) and not fits.read(row("q1", "w")) and not fits.read(row("q3", "z"))
    assert fits(row("q1", "w")) is False                  # judged request, tool never read: not a fit, and known
    # q1's later judgment has no answer line of its own: the first file's judgment stands alone
    assert not fits.read(row("q1", "y"))
    fits = load_fits([first, later], [*answers, write("jc.jsonl", [{"id": "q1#later", "n": 2, "p": {"1": 0.7}}])])
    assert fits(row("q1", "y")) is True and fits(row("q1", "x")) is True     # the union, the first judgment kept
