"""``serve``'s public names load only the module that defines them (``toolrank search`` must not load the web
stack)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import serve


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"import sys\n{code}\nprint(' '.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_settings_does_not_load_the_web_app():
    loaded = _modules_after("import serve\nserve.Settings")
    assert "serve.settings" in loaded
    assert "serve.app" not in loaded and "fastapi" not in loaded


@pytest.mark.parametrize("name", serve.__all__)
def test_every_public_name_resolves_to_its_module(name):
    value = getattr(serve, name)
    assert getattr(value, "__module__", "").startswith("serve.")


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        serve.nope  # noqa: B018
