"""benchmarks/wide_calibration.py: the judge is asked only about first tools no judgment read yet."""

import json

import pytest

from fakes import tiny_catalog

from benchmarks import judged_flow, wide_calibration as wc


class _Catalogs:
    def real(self, kind, tool):
        return list(tool)

    def catalog(self, kind):
        return tiny_catalog()


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_only_unread_unlabelled_first_tools_go_to_the_judge(tmp_path, monkeypatch):
    monkeypatch.setattr(judged_flow, "_Catalogs", _Catalogs)
    monkeypatch.setattr(wc, "_requests", lambda ids: {i: f"request {i}" for i in ids})
    gh, sl, wx = ["GitHub", "create_issue"], ["Slack", "post_message"], ["Weather", "get_forecast"]
    rows = [
        {"id": "a", "catalog": "mcpzero-org", "mode": "need", "tools1": [gh, sl], "right1": True},      # labelled: no judge
        {"id": "b", "catalog": "mcpzero-org", "mode": "need", "tools1": [sl, gh], "right1": False},     # read before
        {"id": "c", "catalog": "mcpzero-org", "mode": "need", "tools1": [wx, sl, gh], "right1": False},  # never read
        {"id": "c", "catalog": "mcpzero-org", "mode": "request_only", "tools1": [sl], "right1": False},
    ]
    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps({"rows": rows}))
    items = _write(tmp_path / "items.jsonl", [{"id": "b", "catalog": "mcpzero-org", "candidates": [{"server": "Slack", "tool": "post_message"}]},
                                              {"id": "c", "catalog": "mcpzero-org", "candidates": [{"server": "Slack", "tool": "post_message"}]}])
    judged = _write(tmp_path / "judged.jsonl", [{"id": "b", "n": 1, "p": {"1": 0.9}}, {"id": "c", "n": 1, "p": {}}])
    out = tmp_path / "out"
    assert wc.mine_unread(flow, out, [items], [judged], None, 0, 1) == 0
    got = [json.loads(line) for line in (out / "judge_items.jsonl").read_text().splitlines()]
    assert [g["id"] for g in got] == ["c#later"]   # only the request whose first tool was never read, its own id
    assert sorted((c["server"], c["tool"]) for c in got[0]["candidates"]) == [tuple(gh), tuple(wx)]   # not Slack again
    assert "request c" in (out / "judge_batch_01.txt").read_text()

    from benchmarks.catalog_calibration import load_fits    # read back with the first judgment: their union

    later = _write(tmp_path / "later.jsonl", [{"id": "c#later", "n": 2, "p": {"1": 0.8, "2": 0.8}}])
    fits = load_fits([items, out / "judge_items.jsonl"], [judged, later])
    assert fits({"id": "c", "tools1": [wx]}) is True and fits({"id": "c:none", "tools1": [gh]}) is True
    assert fits({"id": "c", "tools1": [sl]}) is False and fits({"id": "b", "tools1": [sl]}) is True


def test_late_need_empties_count_right_first_answers_under_the_floor_both_times():
    def row(rid, mode, best, right=True, kind="k"):
        return {"id": rid, "catalog": kind, "mode": mode, "answerable": True, "best1": best, "right1": right}

    rows = [row("a", "request_only", 0.2), row("a", "need", 0.24),        # both under 0.25: empty
            row("b", "request_only", 0.2), row("b", "need", 0.3),         # the need lifts it: choose
            row("c", "request_only", 0.3), row("c", "need", 0.1),         # the first answer is kept
            row("d", "request_only", 0.1, right=False), row("d", "need", 0.1),   # not a right first answer
            row("e", "request_only", 0.1)]                                # no search with the need: left out
    assert wc.late_need_empties(rows) == {"k": (3, 1)}


def test_the_pooled_reading_adds_only_the_other_draws_requests_each_read_by_its_own_judge(tmp_path, monkeypatch):
    res = tmp_path / "judged_flow" / "calibration"
    res.mkdir(parents=True)
    older = [{"id": i, "catalog": "k", "mode": "need", "answerable": True, "best1": 0.9, "right1": False,
              "tools1": [["S", "x"]]} for i in ("a", "z")]
    (tmp_path / "calibration_report.json").write_text(json.dumps({"rows": older}))
    _write(res / "items.jsonl", [{"id": i, "catalog": "k", "candidates": [{"server": "S", "tool": "x"}]}
                                 for i in ("a", "z")])
    _write(res / "judged_01.jsonl", [{"id": "a", "n": 1, "p": {}}, {"id": "z", "n": 1, "p": {"1": 0.9}}])
    monkeypatch.setattr(wc, "RESULTS", tmp_path)
    mine = [{"id": "a", "catalog": "k", "mode": "need", "answerable": True, "best1": 0.9, "right1": True,
             "tools1": [["S", "y"]]},
            {"id": "b", "catalog": "k", "mode": "need", "answerable": True, "best1": 0.9, "right1": False,
             "tools1": [["S", "x"]]}]
    items = _write(tmp_path / "items.jsonl", [{"id": "b", "catalog": "k", "candidates": [{"server": "S", "tool": "x"}]}])
    judged = _write(tmp_path / "judged.jsonl", [{"id": "b", "n": 1, "p": {"1": 0.95}}])
    table = {"k": {"need": {"params": {"pooled_platt": [1.0, 0.0]}}}}
    got = wc.pooled_with_0130(mine, [items], [judged], table)["k"]["need"]
    assert got["n"] == 3 and got["from_0130"] == 1          # "a" and "b" are this draw's; only "z" is the other's
    assert got["shipped"]["ece"] == pytest.approx(0.1)        # all fit at 0.9: a labelled, b and z each by its judge
    assert got["probes"]["ece"] == pytest.approx(0.1)         # the identity map


def test_twin_proceeds_count_wrong_ones_by_the_judge_and_say_what_it_did_not_read(tmp_path):
    items = _write(tmp_path / "items.jsonl", [{"id": i, "catalog": "k", "candidates": [{"server": "S", "tool": "x"}]}
                                              for i in ("a", "b")])
    judged = _write(tmp_path / "judged.jsonl", [{"id": "a", "n": 1, "p": {"1": 0.9}}, {"id": "b", "n": 1, "p": {}}])

    def twin(rid, best, tool="x"):
        return {"id": rid + ":none", "catalog": "k", "mode": "need", "answerable": False, "best1": best,
                "tools1": [["S", tool]]}

    rows = [twin("a", 0.9), twin("b", 0.95), twin("c", 0.9, "w"), twin("d", 0.5)]
    got = wc.twin_proceeds(rows, [items], [judged])["k"]["need"]
    assert got["twins"] == 4 and got["proceed"] == 0.75            # a, b, c proceed; d does not
    assert got["wrong"] == 0.25 and got["unread"] == 1             # b's tool does not fit; c's was never read
