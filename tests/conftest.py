import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fakes import HashEncoder, tiny_catalog  # noqa: E402


@pytest.fixture
def encoder():
    return HashEncoder()


@pytest.fixture
def catalog():
    return tiny_catalog()


@pytest.fixture
def index(catalog, encoder):
    from retrieval.index.embedded import ToolIndex
    return ToolIndex.build(catalog, encoder=encoder)


@pytest.fixture(scope="session")
def load_benchmark():
    """Loads a script of benchmarks/ as a module (they are scripts, not a package)."""
    import importlib.util

    def load(name: str):
        path = Path(__file__).resolve().parent.parent / "benchmarks" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return load
