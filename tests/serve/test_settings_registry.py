"""Issue 37, item 3: one settings class per concern, every TOOLRANK_* variable known from their fields,
``toolrank serve``'s options made from the service's settings."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from serve import cli
from serve.settings import SETTINGS, Settings, known_variables, unknown_variables, variable

ROOT = Path(__file__).resolve().parents[2]
# The project's code; tests/ and .ci/ also name variables of the test harness (TOOLRANK_REQUIRE_MCP2, ...).
CODE = ("scorer", "retrieval", "serve", "training", "benchmarks")
NAME = re.compile(r"(?<![A-Za-z0-9_])TOOLRANK_[A-Z0-9_]+")


def _names_in_code() -> dict[str, str]:
    found: dict[str, str] = {}
    for package in CODE:
        for path in sorted((ROOT / package).rglob("*.py")):
            for name in NAME.findall(path.read_text(encoding="utf-8")):
                found.setdefault(name, path.relative_to(ROOT).as_posix())
    return found


def test_every_variable_the_code_names_is_known():
    """A variable read anywhere (or named in a message) that no settings class declares would be called
    'not a toolrank setting' by `toolrank serve` while it is in use."""
    known = known_variables()
    found = _names_in_code()
    assert "TOOLRANK_MODELS" in found and "TOOLRANK_MCP_TOKEN" in found   # the scan sees the code
    unknown = {name: where for name, where in found.items()
               if name not in known and not (name.endswith("_") and any(k.startswith(name) for k in known))}
    assert not unknown, f"TOOLRANK_* names no settings class declares: {unknown}"


def test_the_variables_in_use_are_not_called_unknown():
    assert unknown_variables({"TOOLRANK_LEARN_FROM_USE": "0", "TOOLRANK_MCP_TOKEN": "t" * 16,
                              "TOOLRANK_MCP_PARENTS": "/a.json", "TOOLRANK_MODELS": "/m", "TOOLRANK_CACHE": "/c",
                              "TOOLRANK_LLM_BASE_URL": "http://127.0.0.1:8000/v1", "TOOLRANK_LLM_MODEL": "m",
                              "TOOLRANK_LLM_API_KEY": "k", "TOOLRANK_PUBLIC_CORPORA": "/d",
                              "TOOLRANK_QDRANT_API_KEY": "k"}) == []
    assert unknown_variables({"TOOLRANK_LEARN_FROM_USES": "0"}) == [
        "TOOLRANK_LEARN_FROM_USES is not a toolrank setting and is ignored; did you mean TOOLRANK_LEARN_FROM_USE?"]


def test_every_settings_class_reads_toolrank_variables_and_counts_empty_as_unset():
    for cls in SETTINGS:
        assert cls.model_config["env_prefix"].startswith("TOOLRANK_"), cls
        assert cls.model_config.get("env_ignore_empty") is True, f"{cls.__name__}: an empty variable must be unset"
        assert cls.model_config.get("frozen") is True, cls
    assert variable(Settings, "max_queue_wait_s") == "TOOLRANK_MAX_QUEUE_WAIT_S"
    with pytest.raises(ValueError, match="no field 'max_queue_wait'"):
        variable(Settings, "max_queue_wait")


def test_empty_variables_are_unset_for_every_reader(monkeypatch, tmp_path):
    from retrieval.settings import HarvestSettings
    from scorer.locations import ModelSettings, models_root
    from serve.mcp_server import _token, build_parser
    from serve.usage import GatewayUsage

    monkeypatch.setenv("TOOLRANK_CACHE", str(tmp_path / "cache"))
    for name in ("TOOLRANK_LEARN_FROM_USE", "TOOLRANK_MCP_TOKEN", "TOOLRANK_MCP_PARENTS", "TOOLRANK_UI"):
        monkeypatch.setenv(name, "")
    monkeypatch.setenv("TOOLRANK_MODELS", "  ")
    assert GatewayUsage.for_index(tmp_path / "idx") is not None     # learning stays on (it was a bool error)
    token, given = _token(build_parser().parse_args(["--http", "127.0.0.1:1"]))
    assert len(token) >= 16 and not given                               # the kept token, not the user's
    monkeypatch.setenv("TOOLRANK_MCP_TOKEN", "a-token-of-the-users-own")
    assert _token(build_parser().parse_args(["--http", "127.0.0.1:1"])) == ("a-token-of-the-users-own", True)
    monkeypatch.setenv("TOOLRANK_MCP_TOKEN", "")
    assert HarvestSettings().parents() == []
    assert ModelSettings().models is None and models_root().is_dir()    # blank: the installed copy
    assert Settings(auth_disabled=True).ui is True


def test_serve_options_come_from_the_settings():
    parser = cli.build_parser()
    by_dest = {a.dest: a for a in parser._actions if a.option_strings}
    for name in cli.option_fields():
        action = by_dest[name]
        info = Settings.model_fields[name]
        assert info.description and info.description in action.help, name
        assert variable(Settings, name) in action.help, name
        assert action.default is None, name   # an option not given leaves the variable (then the default) in force
    # every settings field is an option, or one of the few this command sets itself
    assert set(Settings.model_fields) == set(cli.option_fields()) | cli.NOT_OPTIONS
    # the options users already had keep their names
    for flag in ("--config", "--index", "--catalog", "--model", "--backend", "--qdrant-url", "--qdrant-api-key",
                 "--qdrant-path", "--collection", "--no-suggestions", "--poll-interval", "--read-only"):
        assert flag in parser._option_string_actions, flag
    assert by_dest["backend"].choices == ["embedded", "qdrant"]
    assert "default 2;" in by_dest["poll_interval_s"].help and "default 5;" in by_dest["keep_versions"].help


def test_serve_options_become_the_workers_variables(monkeypatch, tmp_path):
    for name in [k for k in os.environ if k.startswith("TOOLRANK_")]:
        monkeypatch.delenv(name)
    args = cli.build_parser().parse_args([
        "--index", "rel/store", "--no-suggestions", "--no-ui", "--poll-interval", "0.5", "--max-concurrency", "3",
        "--request-timeout", "12", "--read-only", "--backend", "qdrant", "--qdrant-path", "q", "--collection", "c"])
    env = cli._env_for(args)
    assert env == {
        "TOOLRANK_AUTH_DISABLED": "1", "TOOLRANK_FAIL_FAST": "1",
        "TOOLRANK_INDEX_DIR": str(Path("rel/store").resolve()), "TOOLRANK_PUBLIC_SUGGESTIONS": "0",
        "TOOLRANK_UI": "0", "TOOLRANK_POLL_INTERVAL_S": "0.5", "TOOLRANK_MAX_CONCURRENCY": "3",
        "TOOLRANK_REQUEST_TIMEOUT_S": "12.0", "TOOLRANK_READ_ONLY": "1", "TOOLRANK_BACKEND": "qdrant",
        "TOOLRANK_QDRANT_PATH": str(Path("q").resolve()), "TOOLRANK_COLLECTION": "c"}
    monkeypatch.setenv("TOOLRANK_CONFIG", str(tmp_path / "t.toml"))
    assert cli._env_for(cli.build_parser().parse_args([]))["TOOLRANK_CONFIG"] == str(tmp_path / "t.toml")
    monkeypatch.setenv("TOOLRANK_CONFIG", "")          # empty: unset, an open service
    assert "TOOLRANK_AUTH_DISABLED" in cli._env_for(cli.build_parser().parse_args([]))


def test_an_option_reaches_the_settings_and_a_bad_value_is_one_line(monkeypatch, capsys, tenants_file):
    import uvicorn

    seen = {}
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: seen.update(
        {k: v for k, v in os.environ.items() if k.startswith("TOOLRANK_")}))
    for name in [k for k in os.environ if k.startswith("TOOLRANK_")]:
        monkeypatch.delenv(name)
    assert cli.main(["--config", str(tenants_file), "--max-queue", "3", "--metrics-public"]) == 0
    assert seen["TOOLRANK_MAX_QUEUE"] == "3" and seen["TOOLRANK_METRICS_PUBLIC"] == "1"
    assert cli.main(["--config", str(tenants_file), "--max-concurrency", "0"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "max_concurrency" in err and "Traceback" not in err


def test_workers_share_the_store_named_in_the_environment(monkeypatch, tmp_path, tenants_file, capsys):
    """TOOLRANK_INDEX_DIR without --index: the workers use it (they used to get a temporary store instead)."""
    import uvicorn

    seen = {}
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: seen.update(dict(os.environ)))
    for name in [k for k in os.environ if k.startswith("TOOLRANK_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("TOOLRANK_INDEX_DIR", str(tmp_path / "store"))
    assert cli.main(["--config", str(tenants_file), "--workers", "2"]) == 0
    assert seen["TOOLRANK_INDEX_DIR"] == str(tmp_path / "store")
    assert "no --index" not in capsys.readouterr().err


def test_an_unknown_backend_names_the_choices(monkeypatch):
    monkeypatch.setenv("TOOLRANK_BACKEND", "elastic")
    with pytest.raises(ValueError, match="unknown backend 'elastic'.*embedded or qdrant"):
        Settings(auth_disabled=True)
