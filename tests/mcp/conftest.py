import os

import pytest

from mcp2_env import REQUIRE, Mcp2Unavailable, build_or_find


@pytest.fixture(scope="session")
def mcp2_python() -> str:
    """The Python of a virtual environment with mcp 2.x (built once under the cache; see mcp2_env.py).

    Skipped with the reason when it cannot be built (offline), unless TOOLRANK_REQUIRE_MCP2=1
    (.ci/run sets it): then the tests that need it fail."""
    try:
        return str(build_or_find())
    except Mcp2Unavailable as exc:
        why = str(exc)
    if os.environ.get(REQUIRE, "") not in ("", "0"):
        pytest.fail(f"the mcp 2.x test environment is required ({REQUIRE}=1) but could not be built: {why}",
                    pytrace=False)
    pytest.skip(f"no mcp 2.x test environment (offline?; set {REQUIRE}=1 to fail instead): {why}")
