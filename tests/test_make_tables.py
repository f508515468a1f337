"""benchmarks/make_tables.py: markdown rows from the evaluation JSON reports."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def make_tables(load_benchmark):
    return load_benchmark("make_tables")


def stage(top1, top5, top20, rec, l1, l5, by_style) -> dict:
    return {"top1": top1, "top5": top5, "top20": top20, "recall100": rec, "top1_lenient": l1, "top5_lenient": l5,
            "by_style": by_style}


def report(n: int, stages: dict) -> dict:  # the shape retrieval.evaluation.harness.evaluate returns
    return {"n": n, "org_size": None, "seed": 0, "use_need": False, "examples": True, "stages": stages}


def write_reports(d: Path) -> None:
    styles = {"explicit": {"top1": 0.75, "top5": 1.0, "n": 4}, "goal": {"top1": 0.25, "top5": 0.5, "n": 4}}
    (d / "test_ex.json").write_text(json.dumps(report(8, {
        "bm25": stage(0.25, 0.5, 0.625, 0.875, 0.25, 0.5,
                      {"explicit": {"top1": 0.5, "top5": 0.75, "n": 4}, "goal": {"top1": 0.0, "top5": 0.25, "n": 4}}),
        "hybrid": stage(0.5, 0.75, 0.875, 1.0, 0.625, 0.875, styles),
    })))
    (d / "dev_ex.json").write_text(json.dumps(report(3, {
        "hybrid": stage(1 / 3, 2 / 3, 1.0, 1.0, 1 / 3, 1.0, {"goal": {"top1": 1 / 3, "top5": 2 / 3, "n": 3}}),
    })))


def test_rows_and_percentages(make_tables, tmp_path, capsys):
    write_reports(tmp_path)
    assert make_tables.main([str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| run | n | stage | top 1 |")
    rows = [line for line in lines if line.startswith("| test,") or line.startswith("| dev ")]
    assert rows == [
        "| test, request alone, examples indexed | 8 | bm25 | 25.0 | 50.0 | 62.5 | 87.5 | 25.0 | 50.0 |",
        "| test, request alone, examples indexed | 8 | hybrid | 50.0 | 75.0 | 87.5 | 100.0 | 62.5 | 87.5 |",
        "| dev (selection/calibration set), request alone | 3 | hybrid | 33.3 | 66.7 | 100.0 | 100.0 | 33.3 | 100.0 |",
    ]
    # by-style table only for the test runs present, with counts from the hybrid stage
    i = lines.index("By style, test, request alone, examples indexed (top 1 / top 5):")
    assert lines[i + 2:i + 6] == [
        "| stage | explicit (n=4) | goal (n=4) |",
        "|---|---:|---:|",
        "| bm25 | 50.0 / 75.0 | 0.0 / 25.0 |",
        "| hybrid | 75.0 / 100.0 | 25.0 / 50.0 |",
    ]
    assert sum(line.startswith("By style") for line in lines) == 1
    assert not any("Abstention" in line for line in lines)


def test_abstention_table(make_tables, tmp_path, capsys):
    (tmp_path / "test_abstain.json").write_text(json.dumps({
        "abstention": {"auroc_request": 0.8123, "auroc_final": 0.85, "proceed_first_when_fit": 0.9,
                       "proceed_first_when_none": 0.125, "no_fit_share_when_fit": 0.05,
                       "no_fit_share_when_none": 0.6, "top5_when_fit": 0.95},
        "token_reduction_mean": 0.987,
    }))
    assert make_tables.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| AUROC of the best probability, request alone | 0.812 |" in out
    assert "| proceed on the first try, a tool fits / none fits | 90.0 / 12.5 |" in out
    assert "| mean token reduction of the returned definitions | 98.7 |" in out


def test_pct(make_tables):
    assert make_tables.pct(None) == "-"
    assert make_tables.pct(0.0) == "0.0" and make_tables.pct(1.0) == "100.0" and make_tables.pct(0.12345) == "12.3"


def test_paired_table_for_the_test_runs(make_tables, tmp_path, capsys):
    cell = lambda w, l, p, n=4: {"n": n, "wins": w, "losses": l, "p": p}  # noqa: E731
    r = report(8, {"hybrid": stage(0.5, 0.75, 0.875, 1.0, 0.625, 0.875, {})})
    r["paired_top1"] = {"stage": "scorer", "against": {
        "hybrid": {**cell(3, 1, 0.625, 8), "by_style": {"explicit": cell(2, 0, 0.5), "goal": cell(1, 1, 1.0)}}}}
    (tmp_path / "test_ex.json").write_text(json.dumps(r))
    dev = dict(r)
    (tmp_path / "dev_ex.json").write_text(json.dumps(dev))  # dev is not a test run: no row
    assert make_tables.main([str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("Paired, top 1, test and independent requests: the scorer"))
    assert lines[i + 2:] == [
        "| run | against | all | explicit | goal |",
        "|---|---|---:|---:|---:|",
        "| test, request alone, examples indexed | hybrid | +3 / −1 (0.62) | +2 / −0 (0.5) | +1 / −1 (1) |",
    ]


def test_no_paired_table_without_paired_results(make_tables, tmp_path, capsys):
    write_reports(tmp_path)
    assert make_tables.main([str(tmp_path)]) == 0
    assert "Paired" not in capsys.readouterr().out


def test_independent_abstention_table(make_tables, tmp_path, capsys):
    (tmp_path / "independent_abstain.json").write_text(json.dumps({"abstention": {
        "auroc_request": 0.8884, "auroc_final": 0.8884, "proceed_first_when_fit": 0.862,
        "proceed_first_when_none": 0.249, "no_fit_share_when_fit": 0.1, "no_fit_share_when_none": 0.7,
        "top5_when_fit": 0.85}}))
    assert make_tables.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Abstention on the independent requests" in out
    assert "| AUROC of the best probability | 0.888 |" in out
    assert "| proceed, a tool fits / none fits | 86.2 / 24.9 |" in out
