"""The teacher-list plumbing of the distillation: what it must do, on hand-made lists (the loss: test_list_loss.py)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from training.distill import TeacherList, check_train_only, plan_steps, read_teacher, trains_with_examples  # noqa: E402
from training.teacher_data import join  # noqa: E402


def test_dev_and_test_servers_are_refused():
    split = {"A": "train", "B": "test"}
    ok = TeacherList("1", "q", "mcp-zero", (("A", "t", 1.0),))
    bad = TeacherList("2", "q", "mcp-zero", (("A", "t", 1.0), ("B", "u", 0.0)))
    check_train_only([ok, TeacherList("3", "q", "smithery", (("B", "x", 0.0),))], split)   # other catalog: fine
    with pytest.raises(ValueError, match="teacher list 2 has candidates on dev/test servers"):
        check_train_only([ok, bad], split)


def test_read_teacher_names_the_bad_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"id": "a", "query": "q", "candidates": [{"server": "S", "tool": "t", "p_yes": 1}]})
                    + "\n" + '{"id": "b"}\n')
    with pytest.raises(ValueError, match=r"t.jsonl:2: not a teacher list"):
        read_teacher([path])


def test_join_maps_numbers_and_refuses_other_lists():
    lists = [{"id": "r1", "query": "q1", "candidates": [{"server": "S", "tool": "a"}, {"server": "S", "tool": "b"}]},
             {"id": "r2", "query": "q2", "candidates": [{"server": "S", "tool": "a"}]},
             {"id": "r3", "query": "q3", "candidates": [{"server": "S", "tool": "a"}]}]
    judged = [{"id": "r1", "n": 2, "p": {"2": 0.9}}, {"id": "r2", "n": 5, "p": {}}]
    rows, stats = join(lists, judged, "mcp-zero")
    assert [c["p_yes"] for c in rows[0]["candidates"]] == [0.0, 0.9]
    assert stats == {"lists": 3, "judged": 1, "missing": 1, "length_mismatch": 1}


def test_day_one_lists_never_train_with_examples(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = [{"id": "a", "query": "q", "candidates": [{"server": "S", "tool": "t", "p_yes": 1}]},
            {"id": "b", "query": "an example request of S / t", "day_one": True,
             "candidates": [{"server": "S", "tool": "t", "p_yes": 1}]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    plain, day_one = read_teacher([path])
    assert (plain.day_one, day_one.day_one) == (False, True)
    assert trains_with_examples(plain, 0.1, 0.5) and not trains_with_examples(plain, 0.9, 0.5)
    assert not trains_with_examples(day_one, 0.0, 1.0)      # its request is one of the tool's examples
    smithery = TeacherList("c", "q", "smithery", (("S", "t", 1.0),))
    assert not trains_with_examples(smithery, 0.0, 1.0)     # Smithery tools have no examples


def test_corpus_lists_refuse_held_out_corpora():
    from training.distill import corpus_lists

    with pytest.raises(ValueError, match="held out"):
        corpus_lists(["api_bank"])
    with pytest.raises(ValueError, match="unknown corpus"):
        corpus_lists(["no_such_corpus"])


def test_corpus_lists_label_the_corpus_tools_and_look_alikes():
    from retrieval.evaluation.corpora import corpora_root
    from training.distill import corpus_lists

    if not (corpora_root() / "tooltalk").is_dir():
        pytest.skip("public corpora not present")
    lists, catalogs = corpus_lists(["tooltalk"], per_corpus=20, negatives=5)
    assert 0 < len(lists) <= 20 and set(catalogs) == {"corpus:tooltalk"}
    cat = catalogs["corpus:tooltalk"]
    for tl in lists:
        assert tl.catalog == "corpus:tooltalk" and tl.day_one and tl.has_fit
        positives = [c for c in tl.candidates if c[2] == 1.0]
        negatives = [c for c in tl.candidates if c[2] == 0.0]
        assert positives and len(negatives) <= 5
        assert not {c[:2] for c in positives} & {c[:2] for c in negatives}
        from retrieval.catalog.model import ToolId

        assert all(ToolId(s, t) in cat for s, t, _ in tl.candidates)


def test_the_step_plan_reads_every_list_once_an_epoch_in_similar_lengths():
    lists = [TeacherList(str(i), "q" * (1 + i * 7 % 50), "mcp-zero", (("A", "t", 1.0),)) for i in range(130)]
    plan = plan_steps(lists, 4, 2.0, seed=3)
    per_epoch = len(plan) // 2
    assert per_epoch == 33 and all(1 <= len(s) <= 4 for s in plan)    # 64 + 64 + 2 lists: 16 + 16 + 1 steps
    for epoch in (plan[:per_epoch], plan[per_epoch:]):
        assert sorted(i for s in epoch for i in s) == list(range(130))
    assert plan[:per_epoch] != plan[per_epoch:]                        # each epoch its own order
    assert plan == plan_steps(lists, 4, 2.0, seed=3)                   # and the same on a resumed run
    half = plan_steps(lists, 4, 0.5, seed=3)
    assert half == plan[:len(half)] and len(half) == 16


def test_a_saved_checkpoint_has_its_progress_before_the_older_one_goes(tmp_path):
    """The callback writes progress.json beside the checkpoint the trainer just saved, then removes the older
    ones: at any moment one checkpoint with its progress is on disk (the trainer's save_total_limit removed
    the older one before the new one had its progress.json, so a kill in between left nothing to resume)."""
    from types import SimpleNamespace

    from training.budget import BudgetCallback
    from training.distill import last_state

    state = tmp_path / "state"
    (state / "checkpoint-2").mkdir(parents=True)
    (state / "checkpoint-2" / "progress.json").write_text('{"step": 2}')
    (state / "checkpoint-5").mkdir()                  # just saved by the trainer, no progress yet
    assert last_state(tmp_path) == state / "checkpoint-2"
    run = SimpleNamespace(progress={"step": 5, "pairs": 40})
    BudgetCallback(run).on_save(SimpleNamespace(output_dir=str(state)), SimpleNamespace(global_step=5), None)
    assert sorted(p.name for p in state.iterdir()) == ["checkpoint-5"]
    assert json.loads((state / "checkpoint-5" / "progress.json").read_text()) == {"step": 5, "pairs": 40}
    assert last_state(tmp_path) == state / "checkpoint-5"


def test_resuming_a_state_of_the_loop_before_the_library_trainer_says_how_to_go_on(tmp_path, capsys):
    from training.distill import main

    teacher = tmp_path / "t.jsonl"
    teacher.write_text(json.dumps({"id": "a", "query": "q", "candidates": [{"server": "S", "tool": "t", "p_yes": 1}]}))
    (tmp_path / "run" / "state").mkdir(parents=True)
    (tmp_path / "run" / "state" / "progress.json").write_text('{"step": 120}')   # the hand loop's layout
    with pytest.raises(SystemExit):
        main(["--teacher", str(teacher), "--out", str(tmp_path / "run"), "--resume"])
    err = capsys.readouterr().err
    assert "cannot be resumed" in err and "--init" in err and "--start-step" in err
