"""One settings object for the library's TOOLRANK_* variables; one package version."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from pathlib import Path

import pytest

from retrieval import version as version_mod
from retrieval.index.backends import BackendConfig
from retrieval.index.default import cache_dir
from retrieval.settings import RetrievalSettings


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("BACKEND", "QDRANT_URL", "QDRANT_API_KEY", "QDRANT_PATH", "COLLECTION", "CACHE"):
        monkeypatch.delenv(f"TOOLRANK_{name}", raising=False)
    return monkeypatch


def test_backend_config_reads_the_environment_through_the_settings(clean_env, tmp_path):
    clean_env.setenv("TOOLRANK_BACKEND", "qdrant")
    clean_env.setenv("TOOLRANK_QDRANT_PATH", str(tmp_path))
    clean_env.setenv("TOOLRANK_QDRANT_API_KEY", "s3cret")
    clean_env.setenv("TOOLRANK_COLLECTION", "tools")
    cfg = BackendConfig.from_env()
    assert (cfg.backend, cfg.qdrant_path, cfg.qdrant_api_key, cfg.collection) == ("qdrant", str(tmp_path), "s3cret", "tools")
    assert "s3cret" not in repr(RetrievalSettings())
    # flags win over the environment
    assert BackendConfig.from_env(collection="other").collection == "other"


def test_empty_variables_count_as_unset(clean_env):
    clean_env.setenv("TOOLRANK_BACKEND", "")
    clean_env.setenv("TOOLRANK_COLLECTION", "")
    cfg = BackendConfig.from_env()
    assert (cfg.backend, cfg.collection) == ("embedded", "toolrank")


def test_an_unknown_backend_is_refused_with_the_choices(clean_env):
    clean_env.setenv("TOOLRANK_BACKEND", "elastic")
    with pytest.raises(ValueError, match="embedded or qdrant"):
        BackendConfig.from_env()


def test_cache_dir(clean_env, tmp_path):
    assert cache_dir() == Path.home() / ".cache" / "toolrank"
    clean_env.setenv("TOOLRANK_CACHE", str(tmp_path))
    assert cache_dir() == tmp_path


def test_package_version_comes_from_metadata_or_the_checkout(monkeypatch):
    version_mod.package_version.cache_clear()
    monkeypatch.setattr(version_mod, "version", lambda name: "9.8.7")
    assert version_mod.package_version() == "9.8.7"

    def not_installed(name):
        raise PackageNotFoundError(name)

    version_mod.package_version.cache_clear()
    monkeypatch.setattr(version_mod, "version", not_installed)
    import tomllib
    declared = tomllib.loads(Path("pyproject.toml").read_text())["project"]["version"]
    assert version_mod.package_version() == f"{declared}+checkout"

    version_mod.package_version.cache_clear()
    monkeypatch.setattr(version_mod, "_PYPROJECT", Path("/nonexistent/pyproject.toml"))
    with pytest.raises(RuntimeError, match="version is unknown"):
        version_mod.package_version()
    version_mod.package_version.cache_clear()


def test_saved_index_and_qdrant_share_the_one_version():
    from retrieval.index import embedded as index
    from retrieval.index.qdrant import index as qdrant_index

    assert index.package_version is version_mod.package_version
    assert qdrant_index.package_version is version_mod.package_version
    assert not hasattr(index, "_package_version")
