"""The shipped teacher data and no-fit set keep dev and test apart, and say what their card says."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "training" / "data"
TEACHER = DATA / "teacher"


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


@pytest.fixture(scope="module")
def split() -> dict[str, str]:
    return json.loads((DATA / "splits.json").read_text())["servers"]


def test_mcp_zero_teacher_lists_touch_train_servers_only(split):
    lists = _rows(TEACHER / "lists_mcpzero.jsonl") + _rows(TEACHER / "lists_nofit_train.jsonl")
    assert lists
    held = [(r["id"], c["server"]) for r in lists for c in r["candidates"] if split[c["server"]] != "train"]
    assert not held, f"dev/test servers in teacher lists: {held[:3]}"
    requests = {r["id"]: r for r in _rows(TEACHER / "requests.jsonl")}
    targets = [requests[r["id"]]["server"] for r in _rows(TEACHER / "lists_mcpzero.jsonl")]
    assert all(split[s] == "train" for s in targets)


def test_smithery_lists_hold_no_heldout_mcp_zero_server(split):
    norm = lambda name: re.sub(r"[^a-z0-9]", "", name.split(" - ")[0].split(" (")[0].lower())
    heldout = {norm(s) for s, sp in split.items() if sp != "train"}
    servers = {c["server"] for r in _rows(TEACHER / "lists_smithery.jsonl") for c in r["candidates"]}
    clash = sorted(s for s in servers if norm(s) in heldout)
    assert not clash, f"Smithery servers named like a dev/test server: {clash[:5]}"


def test_teacher_lists_are_well_formed():
    for path in TEACHER.glob("lists_*.jsonl"):
        ids = set()
        for r in _rows(path):
            assert r["id"] not in ids
            ids.add(r["id"])
            assert r["query"].strip() and r["candidates"]
            assert all(0.0 <= c["p_yes"] <= 1.0 for c in r["candidates"])
            assert len({(c["server"], c["tool"]) for c in r["candidates"]}) == len(r["candidates"])


def test_requests_do_not_copy_evaluation_questions():
    evaluation = {q["query"].strip().lower() for q in _rows(DATA / "questions.jsonl") if q["split"] != "train"}
    copied = [r["id"] for r in _rows(TEACHER / "requests.jsonl") if r["query"].strip().lower() in evaluation]
    assert not copied


def test_nofit_set_is_split_by_server_and_confirmed_by_the_judge(split):
    rows = _rows(DATA / "nofit.jsonl")
    assert len(rows) >= 600 and len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        assert r["kind"] in ("near_miss", "absent") and r["split"] in ("train", "dev", "test")
        if r["kind"] == "near_miss":
            assert split[r["near_server"]] == r["split"], r["id"]   # a near miss follows its server
        assert r["judge_best_p"] < 0.5, r["id"]
    # the judged lists behind every dev/test request: no candidate of its top 20 fits
    lists = {r["id"]: r for r in _rows(DATA / "nofit_lists_heldout.jsonl")}
    for r in rows:
        if r["split"] != "train":
            assert r["id"] in lists
            assert max(c["p_yes"] for c in lists[r["id"]]["candidates"]) < 0.5, r["id"]
