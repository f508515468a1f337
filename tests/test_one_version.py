"""One package version: retrieval.version.package_version, used by the service's OpenAPI document,
the MCP server and client, the index manifests and the model export; no module keeps its own copy
(with its own stale fallback) of reading the installed version."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _reads_the_installed_version(path: Path) -> list[int]:
    """Lines that call importlib.metadata's ``version("toolrank")`` or define a ``*package_version``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef) and node.name.endswith("package_version"):
            found.append(node.lineno)
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and node.args[0].value == "toolrank" and getattr(node.func, "id", getattr(node.func, "attr", "")) == "version":
            found.append(node.lineno)
    return found


def test_only_retrieval_version_reads_the_installed_version():
    copies = {str(p.relative_to(ROOT)): lines for package in ("retrieval", "scorer", "serve", "training")
              for p in sorted((ROOT / package).rglob("*.py")) if (lines := _reads_the_installed_version(p))}
    assert set(copies) == {"retrieval/version.py"}, copies


def test_the_service_and_the_mcp_server_say_that_version():
    from retrieval.catalog import mcp_harvest
    from retrieval.version import package_version
    from serve.app import create_app
    from serve.settings import Settings

    assert create_app(Settings(auth_disabled=True)).version == package_version()
    assert mcp_harvest.package_version is package_version     # the client's implementation info
