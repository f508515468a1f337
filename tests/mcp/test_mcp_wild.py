"""`toolrank mcp` with servers as they are in the wild, each a real subprocess: an mcp 1.x server
that writes to stdout, a wrapper script that runs toolrank itself, listings that fail, a server
that never answers while a saved index is there, a burst of list_changed, and secrets in URLs."""

from __future__ import annotations

import os
import re
import stat

import anyio
import pytest

from fakes import HashEncoder
from retrieval.catalog.mcp_harvest import load_mcp_config
from serve.commands import main as toolrank
from retrieval.index.mcp import index_mcp_config
from retrieval.version import package_version

from mcp_helpers import (FAKES, HERE, PY, ROOT, check_chatty_server, payload, run, server, stdio_gateway, text, wait_for,
                         write_config)


@run
async def test_a_server_that_writes_to_stdout_works_and_keeps_its_state(tmp_path):
    """A banner at start-up, a debug line in a tool, text glued in front of an answer: logged and
    skipped as the SDK's own client does; the server is never restarted. A cut-off answer fails its
    call at once, saying so, instead of reading as a timeout."""
    cfg = write_config(tmp_path / "mcp.json", {"chatty": server("chatty"), "weather": server("weather")})
    async with stdio_gateway(tmp_path, "--mcp-config", str(cfg), "--call-timeout", "60") as gw:
        assert gw.init_result.serverInfo.version == package_version()       # toolrank's, not the SDK's
        await check_chatty_server(gw, garbled_within_s=50)                  # the call timeout is 60 s
    log = (tmp_path / "gateway.log").read_text()
    assert "server 'chatty' wrote a line that is not MCP to stdout (ignored): chatty MCP server v1.0" in log
    assert "debug: looking up happy" in log
    assert "Traceback" not in log and "Failed to parse JSONRPC" not in log


def test_toolrank_index_skips_stray_stdout_lines(tmp_path, capsys):
    cfg = write_config(tmp_path / "mcp.json", {"chatty": server("chatty")})
    assert toolrank(["index", "--mcp-config", str(cfg), "--index", str(tmp_path / "index")]) == 0
    out, err = capsys.readouterr()
    assert re.search(r"^chatty\s+added\s+4\b", out, re.M), out


def _wrapper(tmp_path, cfg_path, clear_env: bool = False) -> dict:
    """A shell script that runs `toolrank mcp` on the same configuration: nothing in the entry says toolrank.
    ``clear_env``: through `env -i` (as sudo, a container entry point or ssh do), so the environment that
    marks the parent gateway is gone; only what the nested one needs to import is passed on."""
    script = tmp_path / "start-tools.sh"
    keep = (f'env -i PATH=/usr/bin:/bin HOME="{tmp_path}" '
            f'PYTHONPATH="{os.pathsep.join([str(ROOT), str(HERE), str(ROOT / "tests")])}" '
            f'TOOLRANK_CACHE="{tmp_path / "cache"}" ') if clear_env else ""
    script.write_text(f'#!/bin/sh\nexec {keep}"{PY}" -m serve.commands mcp --mcp-config "{cfg_path}" --components {FAKES}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {"command": str(script), "cwd": str(ROOT),
            "env": {"PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE), str(ROOT / "tests")]),
                    "TOOLRANK_CACHE": str(tmp_path / "cache")}}


@pytest.mark.parametrize("clear_env", [False, True], ids=["same-environment", "env-i"])
@run
async def test_a_wrapper_that_starts_toolrank_itself_is_refused_at_once(tmp_path, clear_env):
    cfg = tmp_path / "mcp.json"
    write_config(cfg, {"weather": server("weather"), "everything": _wrapper(tmp_path, cfg, clear_env)})
    async with stdio_gateway(tmp_path, "--mcp-config", str(cfg)) as gw:
        found = payload(await gw.call_tool("find_tools", {"request": "get the weather forecast for Oslo"}))
        assert found["tools"][0]["name"] == "get_forecast"
        [down] = found["unavailable"]
        assert down["server"] == "everything"
        assert "runs toolrank mcp on the configuration that started it" in down["reason"]
        assert not down["reason"].startswith("malformed")           # a refusal, not a bad tools list
        r = await gw.call_tool("call_tool", {"server": "everything", "tool": "find_tools", "arguments": {}})
        assert r.isError and "not available" in text(r)
    log = (tmp_path / "gateway.log").read_text()
    assert "started by toolrank on the same configuration" in log       # the nested one started nothing
    assert log.count("not starting its servers again") >= 1


@pytest.mark.parametrize("command, args", [
    ("uvx", ["toolrank", "mcp", "--mcp-config", "SAME"]),
    ("uvx", ["--from", "toolrank==0.2.0", "toolrank", "mcp"]),
    ("pipx", ["run", "toolrank", "mcp", "--mcp-config", "SAME"]),
    ("npx", ["-y", "@someone/toolrank", "mcp"]),
    ("bash", ["-c", "source ~/.venv/bin/activate && toolrank mcp --mcp-config SAME"]),
    ("/opt/other-venv/bin/toolrank", ["mcp"]),
    ("/opt/other-venv/bin/python", ["-m", "serve.commands", "mcp"]),
    ("/opt/other-venv/bin/python", ["-m", "retrieval.cli", "mcp"]),     # where the command lived before serve/commands.py
])
def test_toolrank_through_a_wrapper_is_recognised_in_the_file(tmp_path, command, args):
    path = write_config(tmp_path / "mcp.json", {"weather": server("weather"), "me": {"command": command, "args": args}})
    cfg = load_mcp_config(path)
    assert list(cfg.servers) == ["weather"] and "toolrank itself" in cfg.skipped["me"]


@run
async def test_listing_failures_are_unavailable_and_valid_tools_are_kept(tmp_path):
    cfg = write_config(tmp_path / "mcp.json", {
        "weather": server("weather"),
        "hangs": server("slow", "--delay", "300", timeout=8),
        "twice": server("malformed", "--mode", "duplicate"),
        "mixed": server("malformed", "--mode", "mixed"),
        "hosted": {"url": "http://127.0.0.1:9/v1/sk-PATHSECRET0123456789/mcp;token=MATRIXSECRET?api_key=sk_live_SECRET"},
        "dies": server("crashy", "--fail-at-start", env={"CRASHY_DB_PASSWORD": "ENVSECRET-hunter2"})})
    async with stdio_gateway(tmp_path, "--mcp-config", str(cfg)) as gw:
        found = payload(await gw.call_tool("find_tools", {"request": "get the weather forecast for Oslo"}))
        # the first answer does not wait for the hanging server: it is still starting, then unavailable
        assert "hangs" in found.get("starting", []) or "hangs" in {u["server"] for u in found["unavailable"]}
        for _ in range(40):
            if "hangs" in {u["server"] for u in found.get("unavailable", [])}:
                break
            await anyio.sleep(0.5)
            found = payload(await gw.call_tool("find_tools", {"request": "get the weather forecast for Oslo"}))
        down = {u["server"]: u["reason"] for u in found["unavailable"]}
        assert set(down) == {"hangs", "twice", "hosted", "dies"}
        assert down["hangs"].startswith("listing its tools failed: timed out after 8 s")
        assert "listed 2 times" in down["twice"]
        assert down["hosted"].startswith("cannot reach http://127.0.0.1:9/v1/***/mcp;token=***?api_key=***")
        assert "SECRET" not in str(found)      # query, path segment, path parameter and env canaries
        r = await gw.call_tool("call_tool", {"server": "hangs", "tool": "wait", "arguments": {}})
        assert r.isError and "server 'hangs' is not available (listing its tools failed" in text(r)
        found = payload(await gw.call_tool("find_tools", {"request": "good one", "need": "good one"}))
        assert (found["tools"][0]["server"], found["tools"][0]["name"]) == ("mixed", "good_one")
    log = (tmp_path / "gateway.log").read_text()
    assert "server 'mixed': left out tool 'same': listed 2 times" in log
    assert "SECRET" not in log


@run
async def test_the_first_answer_comes_from_the_saved_index_while_a_server_starts(tmp_path):
    """A server that never answers tools/list (timeout 120 s) does not hold up find_tools: it
    answers from the saved index at once and says which servers are still starting."""
    fast = write_config(tmp_path / "fast.json", {"weather": server("weather"), "slow": server("slow")})
    await anyio.to_thread.run_sync(lambda: index_mcp_config(fast, tmp_path / "index", encoder=HashEncoder()))
    mark = tmp_path / "slow.mark"
    cfg = write_config(tmp_path / "mcp.json", {"weather": server("weather"),
                                               "slow": server("slow", "--delay", "600", "--mark", str(mark))})
    async with stdio_gateway(tmp_path, "--mcp-config", str(cfg), "--index", str(tmp_path / "index"),
                             "--timeout", "120") as gw:
        with anyio.fail_after(110):         # a bound under the 120 s listing timeout, not a measurement
            found = payload(await gw.call_tool("find_tools", {"request": "get the weather forecast for Oslo"}))
        assert not mark.exists()            # answered before the slow server listed its tools
        assert found["decision"] == "proceed" and found["tools"][0]["name"] == "get_forecast"
        assert "slow" in found["starting"] and set(found["starting"]) <= {"weather", "slow"}
        assert "Still starting: " in found["message"] and "unavailable" not in found
        r = await gw.call_tool("call_tool", {"server": "weather", "tool": "get_forecast", "arguments": {"city": "Oslo"}})
        assert text(r).startswith("Oslo: sunny")

        async def only_slow():
            found = payload(await gw.call_tool("find_tools", {"request": "get the weather forecast for Oslo"}))
            return found.get("starting") == ["slow"]
        assert await wait_for(only_slow)                 # weather listed; slow still starting


@run
async def test_a_burst_of_list_changed_is_one_harvest(tmp_path):
    cfg = write_config(tmp_path / "mcp.json", {"changing": server("changing")})
    async with stdio_gateway(tmp_path, "--mcp-config", str(cfg), "-v") as gw:
        r = await gw.call_tool("call_tool", {"server": "changing", "tool": "burst", "arguments": {"n": 100}})
        assert text(r) == "sent 100"

        async def harvested():
            return "harvested again" in (tmp_path / "gateway.log").read_text()
        assert await wait_for(harvested)
        r = await gw.call_tool("call_tool", {"server": "changing", "tool": "ping", "arguments": {}})
        assert text(r) == "pong"
    lines = [l for l in (tmp_path / "gateway.log").read_text().splitlines() if "harvested again" in l]
    assert 1 <= len(lines) <= 2, lines


def test_server_and_tenant_with_nothing_in_common_stop_at_once(tmp_path, capsys):
    from serve.tenants import hash_key

    (tmp_path / "t.toml").write_text(f'[[tenants]]\nname = "acme"\nkey_sha256 = ["{hash_key("k")}"]\n'
                                     'servers = ["notes"]\n')
    cfg = write_config(tmp_path / "mcp.json", {"weather": server("weather"), "notes": server("notes")})
    assert toolrank(["mcp", "--mcp-config", str(cfg), "--server", "weather", "--tenants", str(tmp_path / "t.toml"),
                     "--tenant", "acme", "--components", FAKES]) == 2
    err = capsys.readouterr().err
    assert "no server is left to use: --server weather and tenant 'acme''s servers have none in common" in err
