"""The top-level names toolrank installs, and the check that the ones Python finds are toolrank's own.

A toolrank wheel installs exactly :data:`TOP_LEVEL`: the four folders of the checkout (``retrieval``,
``scorer``, ``serve``, ``training``) and ``toolrank_models`` (the ``models/`` folder).
``tests/release/test_wheel.py`` holds the wheel to that list. The four are generic words, so two
things can go wrong, and :func:`check` says which, with the fix, instead of a puzzling ImportError:

* **shadowed**: a folder or module of the same name comes first on ``sys.path`` (a project's own
  ``training/`` beside the script that imports toolrank): Python finds it, not toolrank's;
* **shared** (``owners=True``, it reads every installed distribution's metadata, ~0.2 s): another
  installed distribution claims the same name, so the two overwrite each other's files.

``toolrank`` runs the first check before every command, and the second when one of toolrank's own
modules turns out missing. docs/design.md ("Installed names") says why the names stay as they are.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

__all__ = ["DISTRIBUTION", "PACKAGES", "TOP_LEVEL", "NameCollisionError", "check", "is_ours", "other_owners",
           "shadowed"]

DISTRIBUTION = "toolrank"
#: The folders of the checkout that install as top-level packages, side by side.
PACKAGES = ("retrieval", "scorer", "serve", "training")
#: Every top-level name the wheel installs.
TOP_LEVEL = (*PACKAGES, "toolrank_models")

_HOME = Path(__file__).resolve().parent.parent      # the folder that holds this retrieval/ and its siblings
_FIX = ("Install toolrank in an environment of its own (pipx install toolrank, or a fresh virtual environment), "
        "or rename the other package's folder")


class NameCollisionError(ImportError):
    """A top-level name of toolrank's resolves to something else; the message says what and the fix."""


def is_ours(module: str) -> bool:
    """Whether a dotted module name lies under one of :data:`TOP_LEVEL`."""
    return module.split(".", 1)[0] in TOP_LEVEL


def shadowed(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """``name -> where Python finds it`` for each of ``names`` found elsewhere than beside this ``retrieval``.

    A name that is not installed at all is not reported (toolrank's packaging would be broken, not shadowed);
    one already imported is judged by the module that was loaded. Finds, never imports.
    """
    out = {}
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):       # a module in sys.modules without a spec (a test's stand-in)
            continue
        if spec is None:
            continue
        origin = spec.origin if spec.has_location else None
        where = Path(origin).resolve() if origin else None
        if where is None or where.name != "__init__.py" or where.parent.parent != _HOME:
            locations = list(spec.submodule_search_locations or [])
            out[name] = str(where or (locations[0] if locations else spec.name))
    return out


def _normalised(dist: str) -> str:
    return re.sub(r"[-_.]+", "-", dist).lower()


def other_owners(names: tuple[str, ...] = TOP_LEVEL) -> dict[str, list[str]]:
    """``name -> other installed distributions that also install it`` (slow: reads all installed metadata)."""
    from importlib.metadata import packages_distributions

    owners = packages_distributions()
    out = {}
    for name in names:
        others = sorted({d for d in owners.get(name, ()) if _normalised(d) != DISTRIBUTION})
        if others:
            out[name] = others
    return out


def check(names: tuple[str, ...] = PACKAGES, *, owners: bool = False) -> None:
    """Raise :class:`NameCollisionError` when one of ``names`` is not toolrank's own.

    Args:
        names: the top-level names to check (default: the four packages).
        owners: also ask the installed metadata whether another distribution installs one of them.

    Raises:
        NameCollisionError: shadowed or shared names; the message names each, where it comes from, and the fix.
    """
    problems = [f"`import {name}` finds {where}, not toolrank's {name} in {_HOME}: a folder or module of that "
                "name comes first on sys.path (run from another folder, or rename yours)"
                for name, where in shadowed(tuple(n for n in names if n in PACKAGES)).items()]
    if owners:
        problems += [f"{name!r} is installed by {', '.join(others)} as well as toolrank; they overwrite each "
                     "other's files" for name, others in other_owners(names).items()]
    if problems:
        raise NameCollisionError("; ".join(problems) + f". toolrank installs the top-level packages "
                                 f"{', '.join(TOP_LEVEL)}. {_FIX}.")
