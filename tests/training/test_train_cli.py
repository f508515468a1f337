"""training/train.py refuses bad options before loading anything heavy, with a message that says why."""

from __future__ import annotations

import pytest

from training.train import main


@pytest.mark.parametrize("args,message", [
    (["--record-examples", "-1"], "--record-examples must be 0 or more"),
    (["--layers", "7"], "--layers must be 1..6"),
    (["--base", "nowhere"], "--base nowhere: not a model folder"),
    (["--init", "nowhere"], "--init nowhere: not a model folder"),
])
def test_bad_options_are_refused_clearly(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as e:
        main([*args, "--out", str(tmp_path / "run")])
    assert e.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
