"""`toolrank index` / `search` / `servers` through ``main(argv)``, with the real ONNX encoder
on a tiny catalog (a couple of seconds)."""

from __future__ import annotations

import sys
from pathlib import Path

import json

import pytest

from retrieval.cli import main
from retrieval.index.encoder import default_encoder_path

pytestmark = pytest.mark.skipif(not (default_encoder_path() / "model.onnx").exists(),
                                reason="the ONNX encoder is not in models/")

TOOLS = [
    {"server": "Weather", "name": "get_forecast", "description": "Weather forecast for a city",
     "server_description": "Weather data"},
    {"server": "Weather", "name": "get_alerts", "description": "Severe weather alerts for a region"},
    {"server": "Slack", "name": "post_message", "description": "Post a message to a channel",
     "server_description": "Team chat"},
    {"server": "Slack", "name": "list_channels", "description": "List the channels of a workspace"},
    {"server": "Acme, Inc.", "name": "send_invoice", "description": "Send an invoice to a customer"},
    {"server": "Acme, Inc.", "name": "list_invoices", "description": "List unpaid invoices"},
]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    catalog = root / "tools.jsonl"
    catalog.write_text("".join(json.dumps(t) + "\n" for t in TOOLS), encoding="utf-8")
    out = root / "idx"
    assert main(["index", "--catalog", str(catalog), "--out", str(out)]) == 0
    return out


def test_index_writes_a_loadable_folder(built):
    manifest = json.loads((built / "manifest.json").read_text())
    assert manifest["counts"]["tools"] == 6 and manifest["counts"]["servers"] == 3
    assert manifest["embedding_model"] == "toolrank-encoder"


def test_index_prints_a_summary(tmp_path, capsys):
    catalog = tmp_path / "t.jsonl"
    catalog.write_text(json.dumps(TOOLS[0]) + "\n", encoding="utf-8")
    assert main(["index", "--catalog", str(catalog), "--out", str(tmp_path / "i")]) == 0
    assert "indexed 1 tools from 1 servers into" in capsys.readouterr().out


def search_json(capsys, argv):
    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_search_retrieval_only_json(built, capsys):
    hits = search_json(capsys, ["search", "--index", str(built), "what's the weather forecast for Lisbon",
                                "--retrieval-only", "--json"])
    assert (hits[0]["server"], hits[0]["tool"]) == ("Weather", "get_forecast")
    assert [h["rank"] for h in hits] == list(range(1, 7))       # k defaults to 100, clamped to 6
    assert set(hits[0]) == {"server", "tool", "rank", "score", "bm25_rank", "dense_rank"}


def test_search_k(built, capsys):
    hits = search_json(capsys, ["search", "--index", str(built), "post a message in slack", "--retrieval-only",
                                "--json", "-k", "2"])
    assert len(hits) == 2 and hits[0]["tool"] == "post_message"


def test_search_server_restriction_with_a_comma(built, capsys):
    hits = search_json(capsys, ["search", "--index", str(built), "post a message to a channel", "--retrieval-only",
                                "--json", "--server", "Acme, Inc."])
    assert {h["server"] for h in hits} == {"Acme, Inc."} and len(hits) == 2
    hits = search_json(capsys, ["search", "--index", str(built), "post a message to a channel", "--retrieval-only",
                                "--json", "--server", "Acme, Inc.", "--server", "Weather"])
    assert {h["server"] for h in hits} == {"Acme, Inc.", "Weather"} and len(hits) == 4


def test_search_plain_output(built, capsys):
    capsys.readouterr()
    assert main(["search", "--index", str(built), "list invoices", "--retrieval-only", "-k", "1"]) == 0
    out = capsys.readouterr().out
    assert "Acme, Inc. / list_invoices" in out and out.count("\n") == 1


def test_search_unknown_server(built, capsys):
    capsys.readouterr()
    assert main(["search", "--index", str(built), "hi", "--retrieval-only", "--server", "Nope"]) == 2
    captured = capsys.readouterr()
    assert "unknown server 'Nope'" in captured.err and "toolrank servers" in captured.err
    assert "Traceback" not in captured.err and captured.out == ""
    assert main(["search", "--index", str(built), "hi", "--retrieval-only", "--server", "Slak"]) == 2
    assert "did you mean 'Slack'" in capsys.readouterr().err


def test_a_server_named_in_another_case_is_found(built, capsys):
    hits = search_json(capsys, ["search", "--index", str(built), "post a message", "--retrieval-only", "--json",
                                "--server", "slack"])
    assert {h["server"] for h in hits} == {"Slack"}


def test_a_second_search_reads_the_first_answer_saved_as_json(built, tmp_path, capsys):
    first = search_json(capsys, ["search", "--index", str(built), "tell me something about the invoices", "--json"])
    saved = tmp_path / "first.json"
    saved.write_text(json.dumps(first))
    second = search_json(capsys, ["search", "--index", str(built), "tell me something about the invoices",
                                  "--need", "list the unpaid invoices", "--previous", str(saved), "--json"])
    assert second["attempt"] == first["attempt"] + 1
    saved.write_text(json.dumps({**first, "decision": "maybe"}))
    assert main(["search", "--index", str(built), "x", "--previous", str(saved)]) == 2
    err = capsys.readouterr().err
    assert "'decision' must be one of" in err and "Traceback" not in err
    saved.write_text("not json")
    assert main(["search", "--index", str(built), "x", "--previous", str(saved)]) == 2
    assert "is not JSON" in capsys.readouterr().err
    assert main(["search", "--index", str(built), "x", "--previous", str(tmp_path / "none.json")]) == 2
    assert "--previous: cannot read" in capsys.readouterr().err


def test_a_served_store_is_read_at_the_version_its_current_names(built, tmp_path, capsys):
    import shutil

    store = tmp_path / "store"
    shutil.copytree(built, store)                      # a store seeded from an index folder keeps it at its top
    catalog = tmp_path / "more.jsonl"
    catalog.write_text("".join(json.dumps(t) + "\n" for t in TOOLS[:2]), encoding="utf-8")
    assert main(["index", "--catalog", str(catalog), "--out", str(store / "v2")]) == 0
    (store / "CURRENT").write_text("v2\n")
    capsys.readouterr()
    assert main(["servers", "--index", str(store)]) == 0
    out = capsys.readouterr()
    assert "Weather" in out.out and "Slack" not in out.out and "v2" in out.err
    (store / "CURRENT").write_text("v9\n")
    assert main(["servers", "--index", str(store)]) == 2
    assert "not a version folder" in capsys.readouterr().err


def test_servers(built, capsys):
    capsys.readouterr()
    assert main(["servers", "--index", str(built)]) == 0
    assert capsys.readouterr().out.splitlines() == ["Weather\t2 tools", "Slack\t2 tools", "Acme, Inc.\t2 tools"]


def test_bad_catalog_exits_2_without_a_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"server": "A", "name": "t"}\n{"server": "A"}\n', encoding="utf-8")
    assert main(["index", "--catalog", str(bad), "--out", str(tmp_path / "i")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("toolrank index: ")
    assert "bad.jsonl, line 2, server 'A': missing required field 'name'" in err
    assert "Traceback" not in err
    assert not (tmp_path / "i").exists()


def test_missing_catalog_exits_2(tmp_path, capsys):
    assert main(["index", "--catalog", str(tmp_path / "none.json"), "--out", str(tmp_path / "i")]) == 2
    assert "none.json: file not found" in capsys.readouterr().err


def test_missing_index_exits_2(tmp_path, capsys):
    assert main(["search", "--index", str(tmp_path / "nope"), "hi", "--retrieval-only"]) == 2
    err = capsys.readouterr().err
    assert "is not a toolrank index" in err and "Traceback" not in err


def test_index_and_catalog_are_exclusive(built, tmp_path, capsys):
    assert main(["search", "--index", str(built), "--catalog", str(tmp_path / "x.json"), "hi", "--retrieval-only"]) == 2
    assert "give --index or --catalog, not both" in capsys.readouterr().err


def test_index_never_replaces_a_folder_that_is_not_an_index(tmp_path, capsys):
    catalog = tmp_path / "t.jsonl"
    catalog.write_text(json.dumps(TOOLS[0]) + "\n", encoding="utf-8")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert main(["index", "--catalog", str(catalog), "--out", str(mine)]) == 2
    assert "is not a toolrank index" in capsys.readouterr().err
    assert (mine / "notes.txt").read_text() == "keep me"


def test_verbose_flag_before_a_forwarded_command(capsys):
    from serve.commands import main as toolrank

    assert toolrank(["-v", "serve", "--new-key"]) == 0
    assert "key_sha256" in capsys.readouterr().out


def test_a_closed_pipe_ends_quietly(monkeypatch, capsys):
    """`toolrank examples list | head`: the reader closes the pipe; no traceback, the shell's SIGPIPE status."""
    import os

    import serve.commands as commands

    def closed(command):
        def main(argv):
            raise BrokenPipeError(32, "Broken pipe")
        return main

    monkeypatch.setattr(commands, "main_of", closed)
    monkeypatch.setattr(os, "dup2", lambda *a: None)
    assert commands.main(["examples", "list"]) == 141
    assert "Traceback" not in capsys.readouterr().err


def test_the_next_snippet_names_the_toolrank_that_ran(tmp_path, monkeypatch):
    """Run by its full path with no venv on PATH, the snippet must not print a bare `toolrank`."""
    from retrieval.cli import toolrank_command

    exe = tmp_path / "venv" / "bin" / "toolrank"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert toolrank_command(str(exe)) == str(exe.resolve())
    assert toolrank_command("python") != ""   # run as a module: PATH or beside the interpreter, else the name


def test_retrieval_cli_hands_other_commands_to_the_top_level_cli():
    """`python -m retrieval.cli` runs retrieval's four commands itself and hands the rest (an older MCP client
    configuration's `python -m retrieval.cli mcp ...`) to serve/commands.py in a fresh interpreter."""
    import subprocess

    out = subprocess.run([sys.executable, "-m", "retrieval.cli", "serve", "--help"], capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    assert "--max-concurrency" in out.stdout   # toolrank serve's own help, from serve.commands


def test_retrieval_cli_main_called_from_python_returns_to_its_caller(monkeypatch):
    """``main(argv)`` called from Python hands another command to a child process and returns its status; only
    the program's own command line (``python -m retrieval.cli ...``) is replaced in place (os.execv)."""
    import os
    import subprocess

    def no_exec(*_a):
        raise AssertionError("main(argv) replaced the calling process")

    seen = []
    monkeypatch.setattr(os, "execv", no_exec)
    monkeypatch.setattr(subprocess, "call", lambda cmd: seen.append(cmd) or 3)
    assert main(["-v", "mcp", "--index", "x"]) == 3
    assert seen == [[sys.executable, "-m", "serve.commands", "-v", "mcp", "--index", "x"]]


def test_two_servers_differing_in_case_are_not_guessed_between():
    from retrieval.cli import _server_named

    assert _server_named("github", ["GitHub", "Slack"]) == "GitHub"
    with pytest.raises(ValueError, match="matches 'GitHub' and 'github': give the exact name"):
        _server_named("GITHUB", ["GitHub", "github", "Slack"])
    with pytest.raises(ValueError, match=r"did you mean 'GitHub', 'github'\?"):
        _server_named("githb", ["GitHub", "github", "Slack"])


def test_an_explanation_line_says_what_moved_a_tool_not_the_usual_reason():
    from retrieval.cli import _explanation_line

    e = {"bm25_rank": None, "dense_rank": 3, "matched_terms": [],
         "reason": "ranked by calibrated probability; decision proceed (proceed at >= 0.83, list floor 0.05)"}
    assert _explanation_line(e) == "bm25 -  dense #3"
    e["reason"] += "; lowered: the request names GitHub, not this tool's server"
    e["matched_terms"] = ["shard"]
    assert _explanation_line(e) == "bm25 -  dense #3  stems: shard  lowered: the request names GitHub, not this tool's server"
    assert _explanation_line({"bm25_rank": 1, "dense_rank": 1, "reason": "named exactly"}).endswith("named exactly")


def test_a_malformed_previous_answer_is_named_in_one_line(built, tmp_path, capsys, monkeypatch):
    import io

    first = {"decision": "search_again", "attempt": 1,
             "tools": [{"server": "Acme, Inc.", "tool": "list_invoices", "probability": 0.6}]}
    bad = [({**first, "tools": [{**first["tools"][0], "source": "bogus"}]}, "source must be one of"),
           ({**first, "tools": [{**first["tools"][0], "probability": 10 ** 400}]}, "numeric 'probability'"),
           ({**first, "attempt": True}, "'attempt' must be a whole number"),
           ({**first, "tools": [{**first["tools"][0], "probability": True}]}, "numeric 'probability'"),
           ({**first, "tools": [{"server": "Acme, Inc.", "tool": "list_invoices"}]}, "numeric 'probability'")]
    path = tmp_path / "prev.json"
    for data, words in bad:
        path.write_text(json.dumps(data))
        assert main(["search", "--index", str(built), "x", "--previous", str(path), "--explain"]) == 2
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err
    path.write_bytes(b"\xff\xfe not text")
    assert main(["search", "--index", str(built), "x", "--previous", str(path)]) == 2
    assert "is not UTF-8 text" in capsys.readouterr().err
    path.write_text("[" * 100000)
    assert main(["search", "--index", str(built), "x", "--previous", str(path)]) == 2
    assert "nested too deeply" in capsys.readouterr().err
    assert main(["search", "--index", str(built), "x", "--previous", str(path), "--retrieval-only"]) == 2
    assert "no use with --retrieval-only" in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(first)))   # '-': the first answer on stdin
    out = search_json(capsys, ["search", "--index", str(built), "list the unpaid invoices", "--previous", "-",
                               "--json"])
    assert out["attempt"] == 2


def test_a_second_search_that_finds_less_keeps_the_first_answers_tools(built, tmp_path, capsys):
    first = {"decision": "search_again", "attempt": 1,
             "tools": [{"server": "Acme, Inc.", "tool": "list_invoices", "probability": 0.6},
                       {"server": "Weather", "tool": "get_alerts", "probability": 0.3}]}
    path = tmp_path / "prev.json"
    path.write_text(json.dumps(first))
    out = search_json(capsys, ["search", "--index", str(built), "qqq zzz", "--need", "xyzzy plugh", "--previous",
                               str(path), "--json", "--no-model"])
    # nothing fits the gibberish (retrieval-only confidence reads it under the floor): without the first answer
    # the second search would end no_fit; with it, the first answer's tools come back with their probabilities
    assert out["decision"] == "choose" and out["attempt"] == 2
    assert [(t["server"], t["tool"], t["probability"]) for t in out["tools"]][:2] == \
        [("Acme, Inc.", "list_invoices", 0.6), ("Weather", "get_alerts", 0.3)]
    path.write_text(json.dumps({**first, "tools": []}))
    alone = search_json(capsys, ["search", "--index", str(built), "qqq zzz", "--need", "xyzzy plugh", "--previous",
                                 str(path), "--json", "--no-model"])
    assert alone["decision"] == "no_fit"


def test_an_unknown_option_is_refused_with_its_commands_usage(built, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["search", "--index", str(built), "x", "--top", "3"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "search: error: unrecognized arguments: --top 3" in err and "[--previous FILE]" in err
    with pytest.raises(SystemExit):
        main(["--bogus", "search", "--index", str(built), "x"])          # before the command: the top level's
    assert "search: error" not in capsys.readouterr().err
