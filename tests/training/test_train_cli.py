"""``toolrank train`` (training/train.py -> training/distill.py) refuses bad options before loading
anything heavy, with a message that says why."""

from __future__ import annotations

import pytest

from training.train import main


@pytest.mark.parametrize("args,message", [
    (["--layers", "7"], "--layers must be 1..6"),
    (["--init", "nowhere"], "--init nowhere: not a model folder"),
    (["--init-base", "nowhere"], "--init-base nowhere: not a model folder"),
    (["--start-step", "5"], "--start-step continues an earlier stage"),
    (["--need-rate", "1.5"], "--need-rate must be in [0, 1]"),
    (["--needs", "nowhere.jsonl"], "--needs nowhere.jsonl: no such file"),
    (["--resume"], "holds no saved checkpoint; start without --resume"),
    (["--request-cut", "middle"], "--request-cut must be one of"),
])
def test_bad_options_are_refused_clearly(tmp_path, capsys, args, message):
    teacher = tmp_path / "lists.jsonl"
    teacher.write_text("")
    with pytest.raises(SystemExit) as e:
        main([*args, "--teacher", str(teacher), "--out", str(tmp_path / "run")])
    assert e.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_missing_teacher_file_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--teacher", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "run")])
    assert "none.jsonl: no such file" in capsys.readouterr().err
