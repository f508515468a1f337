"""The import layers: scorer below retrieval below training below serve (whose serve/commands.py is the
`toolrank` command), the service never reaching training, and retrieval's rooms in order (import-linter,
pyproject.toml, no ignored imports); no module reached by an import string."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("scorer", "retrieval", "serve", "training")
# The only places allowed to import a module named by a string:
ALLOWED = {
    "serve/mcp_server.py": "--components MODULE:FUNC, a user-named factory (like uvicorn's --app)",
}


def test_the_layers_hold():
    pytest.importorskip("importlinter", reason="import-linter is in the test extra; regenerate the lock (.ci/lock)")
    from importlinter.cli import lint_imports

    # lint_imports configures logging with dictConfig, which disables every logger that exists:
    # give the loggers of the code under test back to the tests that run after this one.
    enabled = [lg for lg in logging.root.manager.loggerDict.values()
               if isinstance(lg, logging.Logger) and not lg.disabled]
    try:
        assert lint_imports(config_filename=str(ROOT / "pyproject.toml")) == 0
    finally:
        for lg in enabled:
            lg.disabled = False


def _string_imports(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in ("import_module", "__import__", "spec_from_file_location"):
                lines.append(node.lineno)
    return lines


def test_the_contracts_ignore_no_import():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert "ignore_imports" not in text.split("[tool.importlinter]", 1)[1]


def test_no_hidden_arrows():
    found = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel not in ALLOWED and (lines := _string_imports(path)):
                found[rel] = lines
    assert not found, f"modules imported by a string: {found}"


def test_the_dispatch_table_names_modules_that_exist_with_a_main():
    import importlib.util

    from serve.commands import FORWARDED

    for command, (module, _) in FORWARDED.items():
        assert module.split(".")[0] in ("serve", "training"), command
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin, f"toolrank {command}: no module {module}"
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        assert any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body), f"{module} has no main()"
        # main_of imports exactly the module the table names (the table is what docs and tests read)
        source = (ROOT / "serve" / "commands.py").read_text(encoding="utf-8")
        relative = "." + module.split(".", 1)[1] if module.startswith("serve.") else module
        assert f"from {relative} import main" in source, f"toolrank {command}: main_of does not import {module}"


def test_the_toolrank_script_is_the_command_in_the_top_package():
    import sys
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts == {"toolrank": "serve.commands:main"}


def test_scorer_reads_tools_through_its_own_protocol():
    from retrieval.catalog.model import Tool as CatalogTool
    from scorer.record import Tool, format_record

    tool = CatalogTool("S", "t", "does a thing", {"type": "object", "properties": {"x": {}}}, "", ("an example",))
    for attr in Tool.__annotations__:
        assert hasattr(tool, attr), attr
    assert format_record("do it", None, tool, examples=1, parameters=1)
