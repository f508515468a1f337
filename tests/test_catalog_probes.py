"""The catalog-probe experiment (benchmarks/catalog_probes.py): what its writers see, how a probe becomes an
answerable case and its twin, and what the check reads on the real requests."""

import json
import random

import numpy as np
import pytest
from fakes import tiny_catalog

from benchmarks import catalog_probes as cp
from retrieval.catalog.model import ToolId


class _Catalogs:
    def catalog(self, kind):
        return tiny_catalog()


def _write(folder, name, rows):
    (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_writer_sees_the_card_and_a_need_writer_only_the_request(tmp_path):
    tool = tiny_catalog().get(ToolId("GitHub", "create_issue"))
    card = cp._card(tool, ["list_pull_requests"])
    assert card == {"server": "GitHub", "tool": "create_issue", "description": "Create a new issue in a repository",
                    "parameters": [], "siblings": ["list_pull_requests"]}
    _write(tmp_path, "items.jsonl", [{"id": f"p{i}", "catalog": "k", "server": "GitHub", "tool": "create_issue"}
                                     for i in range(6)])
    _write(tmp_path, "requests_01.jsonl", [{"id": f"p{i}", "request": f"open a bug  report {i}"} for i in range(5)]
           + [{"id": "p5", "request": "  "}])
    assert cp.need_batches(tmp_path, 2, 0) == 0
    lines = [line.split("\t") for b in (1, 2) for line in (tmp_path / f"need_0{b}.tsv").read_text().splitlines()]
    assert sorted(i for i, _, _ in lines) == [f"p{i}" for i in range(5)]          # the blank request is no probe
    assert {v for _, v, _ in lines} <= set(cp.VOICES) and all("create_issue" not in r for _, _, r in lines)
    assert all("  " not in r for _, _, r in lines)                                  # one line, single spaces


def test_probes_join_their_request_and_blind_need(tmp_path):
    _write(tmp_path, "items.jsonl", [{"id": "a", "catalog": "k"}, {"id": "b", "catalog": "k"}])
    _write(tmp_path, "requests_01.jsonl", [{"id": "a", "request": " post to slack "}, {"id": "zz", "request": "x"}])
    _write(tmp_path, "needs_01.jsonl", [{"id": "a", "need": "post a message"}, {"id": "b", "need": "y"}])
    assert cp.load_probes(tmp_path) == [{"id": "a", "catalog": "k", "request": "post to slack", "need": "post a message"}]


def test_a_probe_is_an_answerable_case_and_a_twin_without_its_tool():
    probes = [{"id": "p", "catalog": "tiny", "server": "Slack", "tool": "post_message", "request": "tell the team",
               "need": "post a message"}]
    ans, twin = cp.probe_cases(probes, _Catalogs(), random.Random(0))
    assert ans.targets == {ToolId("Slack", "post_message")} and ans.need == "post a message"
    assert ans.eligible.allows(ToolId("Slack", "post_message"))
    assert twin.id == "p:none" and not twin.targets and not twin.eligible.allows(ToolId("Slack", "post_message"))
    assert twin.eligible.allows(ToolId("Slack", "list_channels"))                  # its neighbours stay


def _flow_row(kind, mode, answerable, best, right, i):
    return {"id": f"{kind}{i}{'' if answerable else ':none'}", "catalog": kind, "mode": mode,
            "answerable": answerable, "best1": best, "right1": right, "tools1": [["S", "t"]]}


def test_the_check_reads_probe_maps_on_the_real_requests(tmp_path, capsys):
    rng = np.random.default_rng(0)
    probe_rows, real = [], []
    for i in range(200):   # probes read 0.4 and fit 90%; their twins read 0.2
        probe_rows.append(_flow_row("k", "need", True, 0.4 + 0.2 * (i % 2), bool(rng.random() < 0.9), i))
        probe_rows.append(_flow_row("k", "need", False, 0.2, False, i))
        real.append(_flow_row("k", "need", True, 0.4 + 0.2 * (i % 2), bool(rng.random() < 0.9), i))
        real.append(_flow_row("k", "need", False, 0.2, False, i))
    (tmp_path / "probe_flow.json").write_text(json.dumps({"rows": probe_rows}))
    (tmp_path / "report.json").write_text(json.dumps({"rows": real}))
    out = tmp_path / "out.json"
    assert cp.check(tmp_path, tmp_path / "report.json", None, [], 0.10, 0.83, out) == 0
    cell = json.loads(out.read_text())["table"]["k"]["need"]
    assert cell["shipped"]["proceed"] == 0.0 and cell["shipped"]["ece"] > 0.3      # under-confident as shipped
    assert cell["two_level"]["proceed"] == 1.0 and cell["two_level"]["twins_wrong"] == 0.0
    assert cell["two_level"]["ece"] < 0.05 and cell["platt"]["ece"] < cell["shipped"]["ece"]
    assert "| k | need |" in capsys.readouterr().out


def test_the_check_says_what_is_missing(tmp_path, capsys):
    assert cp.main(["check", "--probes", str(tmp_path)]) == 2
    assert "probe_flow.json" in capsys.readouterr().err
    assert cp.main(["run", "--probes", str(tmp_path)]) == 2
    assert "no written probe requests" in capsys.readouterr().err


@pytest.mark.parametrize("kinds", [["mcpzero-org"]])
def test_the_probed_kinds_are_the_report_sets(kinds):
    from training.flow_cases import SETS

    assert cp._kinds() == [*kinds, *SETS["report"][1]]


class _Resolving(_Catalogs):
    def real(self, kind, tool):
        return list(tool)


def test_the_judge_sees_each_probe_once_with_the_tools_of_its_four_searches(tmp_path, monkeypatch):
    import benchmarks.judged_flow as jf

    monkeypatch.setattr(jf, "_Catalogs", _Resolving)
    _write(tmp_path, "items.jsonl", [{"id": "p1", "catalog": "mcpzero-org"}])
    _write(tmp_path, "requests_01.jsonl", [{"id": "p1", "request": "post to the team channel"}])
    rows = [{"id": "p1", "catalog": "mcpzero-org", "tools1": [["Slack", "post_message"], ["Slack", "list_channels"]]},
            {"id": "p1:none", "catalog": "mcpzero-org", "tools1": [["Slack", "list_channels"], ["GitHub", "create_issue"]]}]
    (tmp_path / "probe_flow.json").write_text(json.dumps({"rows": rows}))
    assert cp.mine(tmp_path, 2, 0) == 0
    (item,) = [json.loads(line) for line in (tmp_path / "judge_items.jsonl").read_text().splitlines()]
    assert item["query"] == "post to the team channel"
    assert sorted((c["server"], c["tool"]) for c in item["candidates"]) == [
        ("GitHub", "create_issue"), ("Slack", "list_channels"), ("Slack", "post_message")]
    batch = (tmp_path / "judge_batch_01.txt").read_text() + (tmp_path / "judge_batch_02.txt").read_text()
    assert batch.count("Request p1:") == 1 and "Post a message to a channel" in batch
    monkeypatch.setattr(jf, "_Catalogs", _Resolving)   # a corpus without a licence: the items keep digests only
    _write(tmp_path, "items.jsonl", [{"id": "p1", "catalog": "ultratool"}])
    (tmp_path / "probe_flow.json").write_text(json.dumps({"rows": [dict(r, catalog="ultratool") for r in rows]}))
    assert cp.mine(tmp_path, 1, 0) == 0
    (item,) = [json.loads(line) for line in (tmp_path / "judge_items.jsonl").read_text().splitlines()]
    assert item["query"] is None and ["Slack", "post_message"] not in [[c["server"], c["tool"]] for c in item["candidates"]]
    assert "post to the team channel" in (tmp_path / "judge_batch_01.txt").read_text()   # the judge reads the text


def test_a_probe_twin_judged_to_fit_does_not_count_as_wrong(tmp_path):
    probe_rows, real = [], []
    for i in range(100):   # the twins read as high as the answerable probes: only a judge lets the map proceed
        probe_rows.append(_flow_row("k", "need", True, 0.7, True, i) | {"tools1": [["S", "t"]]})
        probe_rows.append(_flow_row("k", "need", False, 0.7, False, i) | {"tools1": [["S", "u"]]})
        real.append(_flow_row("k", "need", True, 0.7, True, i))
    (tmp_path / "probe_flow.json").write_text(json.dumps({"rows": probe_rows}))
    (tmp_path / "report.json").write_text(json.dumps({"rows": real}))
    _write(tmp_path, "judge_items.jsonl", [{"id": f"k{i}", "candidates": [{"server": "S", "tool": "u"}]}
                                           for i in range(100)])
    _write(tmp_path, "judged_01.jsonl", [{"id": f"k{i}", "n": 1, "p": {"1": 0.9}} for i in range(100)])
    out = tmp_path / "out.json"
    assert cp.check(tmp_path, tmp_path / "report.json", None, [], 0.10, 0.83, out) == 0
    assert json.loads(out.read_text())["table"]["k"]["need"]["two_level"]["proceed"] == 0.0   # twins would pass
    assert cp.check(tmp_path, tmp_path / "report.json", None, [], 0.10, 0.83, out,
                    [tmp_path / "judged_01.jsonl"]) == 0
    cell = json.loads(out.read_text())["table"]["k"]["need"]
    assert cell["two_level"]["proceed"] == 1.0 and cell["two_level"]["ece"] == 0.0
