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
    from retrieval.index import ToolIndex
    return ToolIndex.build(catalog, encoder=encoder)
