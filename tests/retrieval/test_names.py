"""The installed names: toolrank's own packages are the ones found, and a collision says so with the fix
(retrieval/names.py; docs/design.md, "Installed names")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from retrieval.names import PACKAGES, TOP_LEVEL, NameCollisionError, check, other_owners, shadowed

ROOT = Path(__file__).resolve().parents[2]


def test_the_packages_found_here_are_toolranks_own():
    assert shadowed() == {}
    check()
    assert set(PACKAGES) < set(TOP_LEVEL) and "toolrank_models" in TOP_LEVEL


def test_another_distribution_installing_a_name_is_named(monkeypatch):
    import importlib.metadata

    owners = {"training": ["toolrank", "some-trainer"], "retrieval": ["toolrank", "Toolrank"], "numpy": ["numpy"]}
    monkeypatch.setattr(importlib.metadata, "packages_distributions", lambda: owners)
    assert other_owners() == {"training": ["some-trainer"]}
    with pytest.raises(NameCollisionError, match=r"'training' is installed by some-trainer as well as toolrank.*"
                                                 r"environment of its own"):
        check(TOP_LEVEL, owners=True)


def _shadowing_folder(tmp_path: Path) -> Path:
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "__init__.py").write_text("")
    return tmp_path


def test_a_folder_that_shadows_a_package_is_named(tmp_path):
    folder = _shadowing_folder(tmp_path)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from retrieval.names import check\n"
            "try:\n    check()\nexcept ImportError as e:\n    print(e)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code, str(folder)], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120).stdout
    assert f"`import training` finds {folder / 'training' / '__init__.py'}, not toolrank's" in out
    assert "`import retrieval`" not in out and "`import scorer`" not in out


def test_the_toolrank_command_stops_on_a_shadowed_package(tmp_path):
    """Run from a folder holding a `training/` of its own, `toolrank` says so instead of importing the wrong one."""
    folder = _shadowing_folder(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT)])}
    done = subprocess.run([sys.executable, "-m", "serve.commands", "servers"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("toolrank: `import training` finds ")
    assert "Install toolrank in an environment of its own" in done.stderr
