"""The built wheel carries the models and data a search needs; installed outside the checkout it searches."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("build")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: the locked setuptools of this environment, no download
    done = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (found,) = out.glob("toolrank-*.whl")
    return found


def test_wheel_holds_models_and_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for model in ("toolrank-reranker", "toolrank-encoder"):
        for f in ("model.onnx", "tokenizer.json", "config.json", "MODEL_CARD.md"):
            assert f"toolrank_models/{model}/{f}" in names
    assert "toolrank_models/toolrank-reranker/combiner.json" in names
    for f in ("retrieval/data/mcp_zero/mcp_tools_cleaned.json", "retrieval/data/mcp_zero/examples.jsonl",
              "retrieval/data/retrieval_confidence.json", "training/data/questions.jsonl",
              "retrieval/writing/prompts/examples.md"):
        assert f in names
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "runs/"))]


def test_wheel_installs_exactly_the_expected_top_level_names(wheel):
    """The names a user's environment gets (docs/design.md, "Installed names"): no more, no fewer."""
    from retrieval.names import TOP_LEVEL

    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert top == set(TOP_LEVEL)
    scripts = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/entry_points.txt")))
    assert "toolrank = serve.commands:main" in scripts.decode()


def test_wheel_holds_every_package(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for pkg in ("retrieval", "scorer", "serve", "training"):
        for init in sorted((ROOT / pkg).rglob("__init__.py")):
            rel = init.relative_to(ROOT).as_posix()
            assert rel in names, f"{rel} is not in the wheel: list its package in pyproject.toml [tool.setuptools]"


@pytest.mark.slow
def test_wheel_install_searches_outside_the_checkout(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # dependencies from this (locked) environment; toolrank itself only from the wheel
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)]
    subprocess.run(pip, check=True, cwd=tmp_path, timeout=300)
    env = {**os.environ, "TOOLRANK_CACHE": str(tmp_path / "cache"), "PYTHONPATH": ""}
    env.pop("TOOLRANK_MODELS", None)
    done = subprocess.run([str(venv / "bin" / "toolrank"), "search", "list shard allocation for an index"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Elasticsearch / get_shards" in done.stdout
    assert "DEBUG" not in done.stderr and "embedding:" not in done.stderr   # quiet when not a terminal
    assert "building the default index" in done.stderr
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import scorer, toolrank_models; "
                            "print(scorer.__file__, toolrank_models.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout
    assert str(ROOT) not in where    # the package and its models came from the wheel
