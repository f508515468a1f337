"""benchmarks/ as a package: every script stamps what it writes and prints, and benchmarks.common's helpers
(percentiles, tables, the stamp, scenarios in subprocesses) behave."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import common

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if p.stem not in ("__init__", "common"))


def source(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_there_are_scripts():
    assert len(SCRIPTS) >= 20


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_every_script_prints_the_stamp(path):
    text = source(path)
    assert "benchmarks.common import" in text, f"{path.name}: import benchmarks.common"
    assert re.search(r"\b(stamp_line|input_stamps)\(", text), f"{path.name}: print the stamp with its tables"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_every_result_file_is_stamped(path):
    text = source(path)
    if re.search(r"add_argument\(\"--(out|json)\"", text):
        assert "write_result(" in text, f"{path.name} writes results: through common.write_result (stamped)"
    if "savefig(" in text:
        assert "stamp_figure(" in text, f"{path.name} saves a plot: stamp_figure in its footer"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_no_script_loads_a_sibling_by_path(path):
    text = source(path)
    assert "spec_from_file_location" not in text and "from service_process" not in text
    assert "sys.path.insert(0, str(Path(__file__).resolve().parent))" not in text


def test_scripts_run_as_files_and_as_modules():
    for argv in ([sys.executable, "benchmarks/compare_runs.py", "--help"],
                 [sys.executable, "-m", "benchmarks.compare_runs", "--help"]):
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "usage:" in done.stdout


def test_percentile_on_known_data():
    assert common.percentile([1, 2, 3, 4], 50) == 2.5
    assert common.percentile([4, 1, 3, 2], 0) == 1.0
    assert common.percentile(range(1, 101), 90) == pytest.approx(90.1)
    assert common.median([5.0, 1.0, 3.0]) == 3.0
    assert math.isnan(common.percentile([], 50))


def test_markdown_table_pads_formats_and_aligns():
    table = common.markdown_table(["scenario", "tools", "p50 ms"], [["a", 2797, 3.14159], ["bb", None, 1234.5]])
    assert table.split("\n") == [
        "| scenario | tools | p50 ms |",
        "|----------|------:|-------:|",
        "| a        | 2,797 |   3.14 |",
        "| bb       |     - |  1,234 |",
    ]
    assert common.markdown_table(["x", "y"], [[1.0, 2.0]], align="rr", digits=1).split("\n")[2] == "| 1.0 | 2.0 |"
    with pytest.raises(ValueError, match="one per column"):
        common.markdown_table(["x", "y"], [], align="l")


def test_format_cell():
    assert [common.format_cell(v) for v in (None, float("nan"), True, 12345, 0.5, 250.4, "x")] == \
        ["-", "-", "True", "12,345", "0.50", "250", "x"]
    assert common.format_cell(2.0, digits=3) == "2.000"


def test_environment_stamp_names_commit_versions_and_cpu():
    stamp = common.environment_stamp(run="x")
    assert {"commit", "dirty", "toolrank", "python", "libraries", "cpu", "cores", "cpu_flags"} <= set(stamp)
    assert stamp["run"] == "x" and isinstance(stamp["dirty"], bool) and stamp["cores"] >= 1
    assert "numpy" in stamp["libraries"]
    stamp["libraries"]["numpy"] = "changed"   # each call its own copy
    assert common.environment_stamp()["libraries"]["numpy"] != "changed"
    line = common.stamp_line(stamp)
    assert line.startswith("environment: commit ") and f"{stamp['cores']} cores" in line


def test_write_result_adds_the_stamp_and_keeps_the_keys(tmp_path):
    path = common.write_result(tmp_path / "sub" / "r.json", {"rows": [1, 2], "n": 2})
    got = json.loads(path.read_text())
    assert list(got) == ["environment", "rows", "n"] and got["rows"] == [1, 2]
    assert got["environment"]["commit"] == common.environment_stamp()["commit"]
    kept = json.loads(common.write_result(tmp_path / "k.json", {"environment": {"commit": "old"}, "a": 1}).read_text())
    assert kept == {"environment": {"commit": "old"}, "a": 1}
    with pytest.raises(TypeError, match="rows"):
        common.write_result(tmp_path / "l.json", [1, 2])


def test_input_stamps_group_files_by_stamp():
    a = {"environment": {"commit": "abc", "cores": 2}}
    lines = common.input_stamps({"x.json": a, "y.json": dict(a), "z.json": {"n": 1}})
    assert len(lines) == 2
    assert lines[0].startswith("x.json, y.json: environment: commit abc")
    assert lines[1] == "z.json: environment: not recorded (written before the stamp)"


def test_run_scenarios_collects_each_child_last_line(capsys):
    child = "import json, sys; print('noise'); print(json.dumps({'scenario': sys.argv[1]}))"
    seen = []
    got = common.run_scenarios(["a", "b"], lambda s: [sys.executable, "-c", child, s], wall_key="wall_s",
                               after_each=lambda done: seen.append(len(done)))
    assert [r["scenario"] for r in got] == ["a", "b"] and all(r["wall_s"] >= 0 for r in got)
    assert seen == [1, 2]
    failing = common.run_scenarios(["a"], lambda s: [sys.executable, "-c", "import sys; sys.exit('broken')"])
    assert failing is None and "scenario a failed" in capsys.readouterr().err
