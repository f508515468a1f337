"""The installed toolrank's version, in one place."""

from __future__ import annotations

import functools
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

__all__ = ["package_version"]

_PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


@functools.lru_cache(maxsize=1)
def package_version() -> str:
    """toolrank's version from its installed metadata; from a checkout that was never installed,
    the ``version`` of its ``pyproject.toml`` with ``+checkout``.

    Raises:
        RuntimeError: neither installed nor in a checkout (nothing says which version this is).
    """
    try:
        return version("toolrank")
    except PackageNotFoundError:
        pass
    if _PYPROJECT.is_file():
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover
            import tomli as tomllib
        project = tomllib.loads(_PYPROJECT.read_text(encoding="utf-8")).get("project", {})
        if project.get("name") == "toolrank" and isinstance(project.get("version"), str):
            return f"{project['version']}+checkout"
    raise RuntimeError("toolrank is not installed and not run from its checkout: its version is unknown; "
                       "install it (pip install -e .)")
