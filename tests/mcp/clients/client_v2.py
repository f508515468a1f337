"""An agent's side on **mcp 2.x** (``mcp.Client``, its default ``mode="auto"``: it probes
``server/discover`` first, then falls back to the initialize handshake): runs ``toolrank mcp`` over
stdio and makes the calls given as JSON, printing one JSON line per answer. Runs only in the mcp 2.x
test environment (tests/mcp/mcp2_env.py).

    python client_v2.py SPEC.json      SPEC: {"command", "args", "env", "cwd", "calls": [[tool, arguments], ...]}
"""

from __future__ import annotations

import json
import sys

import anyio

from mcp import Client, StdioServerParameters


async def main(spec: dict) -> None:
    params = StdioServerParameters(command=spec["command"], args=spec["args"], env=spec["env"], cwd=spec["cwd"])
    with anyio.fail_after(spec.get("timeout_s", 300)):
        async with Client(params) as client:
            print(json.dumps({"protocol_version": client.protocol_version,
                              "tools": [t.name for t in (await client.list_tools()).tools]}), flush=True)
            for tool, arguments in spec["calls"]:
                result = await client.call_tool(tool, arguments)
                print(json.dumps(result.model_dump(mode="json", by_alias=True, exclude_none=True)), flush=True)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        anyio.run(main, json.load(f))
