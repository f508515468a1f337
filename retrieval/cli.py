"""retrieval's own ``toolrank`` commands: ``index``, ``search``, ``eval`` and ``servers``.

The ``toolrank`` command itself is :mod:`serve.commands`, in the package above all others: it adds
these to the commands of ``serve/`` and ``training/``. :func:`main` runs these four alone
(``python -m retrieval.cli search ...``). Each command imports what it needs when it runs, so
``toolrank search`` never loads torch."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

__all__ = ["add_commands", "build_parser", "main", "quiet_broken_pipe", "run", "toolrank_command"]

SHIPPED_QUESTIONS = Path(__file__).resolve().parent.parent / "training" / "data" / "questions.jsonl"


def _add_index_source(p: argparse.ArgumentParser) -> None:
    p.add_argument("--index", type=Path, help="index folder (default: the shipped catalog, cached)")
    p.add_argument("--catalog", type=Path, help="build an index from this catalog instead")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--examples", type=Path, help="example requests JSONL for --catalog")
    g.add_argument("--no-examples", action="store_true", help="index without example requests")
    _add_backend(p)


def _add_backend(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("index backend (default: $TOOLRANK_BACKEND or embedded)")
    g.add_argument("--backend", choices=["embedded", "qdrant"], help="embedded (bm25s + FAISS) or qdrant")
    g.add_argument("--qdrant-url", metavar="URL", help="Qdrant server ($TOOLRANK_QDRANT_URL), e.g. http://localhost:6333")
    g.add_argument("--qdrant-api-key", metavar="KEY", help="Qdrant API key ($TOOLRANK_QDRANT_API_KEY)")
    g.add_argument("--qdrant-path", metavar="DIR", help="embedded Qdrant folder instead of a server ($TOOLRANK_QDRANT_PATH)")
    g.add_argument("--collection", metavar="NAME", help="Qdrant collection ($TOOLRANK_COLLECTION, default toolrank)")


def _backend(a: argparse.Namespace):
    from .index.backends import BackendConfig

    return BackendConfig.from_env(backend=a.backend, qdrant_url=a.qdrant_url, qdrant_api_key=a.qdrant_api_key,
                                  qdrant_path=a.qdrant_path, collection=a.collection)


def _qdrant_index(a: argparse.Namespace, backend):
    """The collection (filled from the shipped catalog when empty), or a new one from --catalog."""
    from .catalog.formats import load_catalog, load_default_catalog, load_examples
    from .index.backends import qdrant_index
    from .index.default import load_or_build_default
    from .index.qdrant.index import QdrantToolIndex

    if a.index:
        raise ValueError("--index names an embedded index folder; with --backend qdrant the index is the collection "
                         "(--collection NAME)")
    if a.catalog or a.examples:
        cat = load_catalog(a.catalog) if a.catalog else load_default_catalog(False)
        if a.examples:
            cat = cat.with_examples(load_examples(a.examples))
        return QdrantToolIndex.build(cat, config=backend.qdrant(), with_examples=not a.no_examples, show_progress=True)
    return qdrant_index(backend.qdrant(), with_examples=not a.no_examples,
                        seed=lambda: load_or_build_default(with_examples=not a.no_examples, show_progress=True))


def _index_from(a: argparse.Namespace):
    from .catalog.formats import load_catalog, load_default_catalog, load_examples
    from .index.default import load_or_build_default
    from .index.embedded import ToolIndex

    backend = _backend(a)
    if backend.backend == "qdrant":
        return _qdrant_index(a, backend)
    if a.index and a.catalog:
        raise ValueError("give --index or --catalog, not both")
    if a.index:
        return ToolIndex.load(_served_version(Path(a.index)))
    if a.catalog:
        cat = load_catalog(a.catalog)
        if a.examples:
            cat = cat.with_examples(load_examples(a.examples))
        return ToolIndex.build(cat, with_examples=not a.no_examples, show_progress=True)
    if a.no_examples:
        return load_or_build_default(with_examples=False, show_progress=True)
    if a.examples:
        return ToolIndex.build(load_default_catalog(False).with_examples(load_examples(a.examples)), show_progress=True)
    return load_or_build_default(show_progress=True)


def _served_version(path: Path) -> Path:
    """The folder to read for ``--index``: an index folder as it is, or, for a store ``toolrank serve`` keeps
    (a ``CURRENT`` file naming its ``v<N>`` folder), the version it serves now — not the older copy a store
    seeded from an index folder keeps at its top."""
    from .fsutil import pointed_version

    pointer = path / "CURRENT"
    try:
        version = pointed_version(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{pointer}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    if version is None:
        if pointer.is_symlink():
            raise ValueError(f"{pointer}: a link to nothing; point it at a version folder, or remove it")
        return path
    name = f"v{version}"
    if not (path / name).is_dir():
        raise ValueError(f"{path}: its CURRENT names {name!r}, which is not a version folder here")
    print(f"reading {path / name} (the version the store's CURRENT names)", file=sys.stderr)
    return path / name


def _pipeline(index, model: Path | None, no_model: bool, threads: int, score_top: int | None = None):
    from .pipeline.decision import Policy, score_top_flag
    from .pipeline.flow import load_pipeline

    return load_pipeline(index, False if no_model else model, policy=Policy(score_top=score_top_flag(score_top)),
                         threads=threads)


def cmd_index(a: argparse.Namespace) -> int:
    from .catalog.formats import load_catalog, load_examples
    from .index.embedded import ToolIndex

    backend = _backend(a)
    if backend.backend == "qdrant":
        return _index_qdrant(a, backend)
    if a.recreate:
        raise ValueError("--recreate rebuilds a Qdrant collection; with the embedded backend --out is replaced anyway")
    if (a.dry_run or a.examples_cache) and not a.write_examples:
        raise ValueError("--dry-run and --examples-cache go with --write-examples")
    if a.write_examples and a.no_examples:
        raise ValueError("--write-examples and --no-examples contradict each other: give one")
    if (a.probes is not None or a.model is not None) and not a.calibrate:
        raise ValueError("--probes and --model go with --calibrate")
    if a.probes is not None and a.probes < 10:
        raise ValueError(f"--probes must be at least 10 (two searches each; 20 are needed to fit), got {a.probes}")
    if a.calibrate and a.dry_run:
        raise ValueError("--dry-run is for --write-examples; --calibrate has none (it writes 2-4 short replies per probe)")
    if a.mcp_config:
        return _index_mcp(a)
    if a.out is None:
        raise ValueError("--catalog needs --out DIR (the index folder to write)")
    cat = load_catalog(a.catalog)
    if a.examples:
        cat = cat.with_examples(load_examples(a.examples))
    status = 0
    if a.write_examples:
        cat, status = _write_examples(a, cat, a.examples_cache or _cache_beside(a.out))
        if cat is None:
            return 0
    client = _llm_for_calibration() if a.calibrate else None   # a missing endpoint is said before anything is built
    index = ToolIndex.build(cat, with_examples=not a.no_examples, show_progress=True)
    out = index.save(a.out)
    print(f"indexed {len(cat)} tools from {len(cat.servers)} servers into {out}")
    if client is not None:
        status = max(status, _calibrate(a, out, client))
    return status


def _llm_for_calibration():
    from .index.examples import llm_client

    try:
        return llm_client()
    except ValueError as exc:
        raise ValueError(f"--calibrate: {exc}") from None


def _calibrate(a: argparse.Namespace, path: Path, client) -> int:
    """Probe the saved index at ``path`` through ``client`` and save its calibration with it; 1 when the endpoint
    failed or too few probes were measured (the index is usable either way)."""
    from .index.embedded import ToolIndex
    from .pipeline.flow import load_pipeline
    from .pipeline.probes import DEFAULT_PROBES, probe_cache_beside, write_probes

    index = ToolIndex.load(path)
    had = index.calibration is not None
    index.calibration = None   # probes read the shipped probabilities
    pipe = load_pipeline(index, a.model, public_suggestions=False)   # probes are first attempts: no no_fit
    with client:
        outcome = write_probes(pipe, client, probe_cache_beside(path), n=a.probes or DEFAULT_PROBES,
                               show_progress=True)
    print(outcome.format())
    if outcome.calibration is None:
        if had:
            print("the index keeps the calibration it had (measured on these tools with this model)")
        return 1
    index.calibration = outcome.calibration.to_dict()
    index.save(path)
    return 1 if outcome.error else 0


def _cache_beside(path: Path) -> Path:
    from .index.examples import cache_beside
    return cache_beside(path)


def _write_examples(a: argparse.Namespace, cat, cache: Path):
    """``(catalog with example requests, exit status)``, or ``(None, 0)`` after a dry run.
    Status 1 when the endpoint failed for some tools (they are indexed without examples)."""
    from .index.examples import format_dry_run, llm_client, plan_examples, write_examples
    from .pipeline.tokens import TokenCounter

    plan = plan_examples(cat, cache, count_tokens=TokenCounter().count_text)
    if a.dry_run:
        print(format_dry_run(plan))
        return None, 0
    print(plan.format())
    if not plan.todo:
        client = None
    else:
        try:
            client = llm_client()
        except ValueError as exc:
            raise ValueError(f"--write-examples: {exc}") from None
    if client is None:
        outcome = write_examples(cat, None, cache)
    else:
        with client:
            outcome = write_examples(cat, client, cache, show_progress=True)
    print(outcome.format() + f" (cache: {cache})")
    return outcome.catalog, 1 if outcome.missing else 0


def _index_qdrant(a: argparse.Namespace, backend) -> int:
    """`toolrank index --backend qdrant --catalog FILE [--recreate]`: build the collection."""
    if a.write_examples:
        raise ValueError("--write-examples builds embedded indexes only for now; write the examples with "
                         "--backend embedded, or with `toolrank generate examples`, then pass --examples FILE")
    if a.calibrate:
        raise ValueError("--calibrate calibrates embedded indexes only for now (--backend embedded)")
    from .catalog.formats import load_catalog, load_examples
    from .index.qdrant.index import QdrantToolIndex

    if getattr(a, "mcp_config", None) or a.out is not None or getattr(a, "index", None) is not None:
        raise ValueError("with --backend qdrant the index goes into the collection (--collection NAME): give "
                         "--catalog FILE, without --out, --index or --mcp-config")
    cat = load_catalog(a.catalog)
    if a.examples:
        cat = cat.with_examples(load_examples(a.examples))
    index = QdrantToolIndex.build(cat, config=backend.qdrant(), with_examples=not a.no_examples, show_progress=True,
                                  recreate=a.recreate)
    print(f"indexed {len(cat)} tools from {len(cat.servers)} servers into {index.collection.config.where} "
          f"(version {index.version})")
    return 0


def _index_mcp(a: argparse.Namespace) -> int:
    """`toolrank index --mcp-config FILE`: 0 when every server was indexed, 1 when some failed
    (the others are indexed), 2 when none could be."""
    from .catalog.mcp_harvest import install_log_redaction, redact
    from .index.mcp import index_mcp_config

    if a.out is not None or a.examples or a.no_examples:
        raise ValueError("with --mcp-config, give the index folder as --index DIR (--out, --examples and "
                         "--no-examples are for --catalog)")
    if a.timeout <= 0:
        raise ValueError(f"--timeout must be a positive number of seconds, got {a.timeout:g}")
    install_log_redaction()
    client = _llm_for_calibration() if a.calibrate else None   # a missing endpoint is said before any server starts
    report = index_mcp_config(a.mcp_config, a.index, timeout_s=a.timeout)
    print(redact(report.format()))
    examples_status = _mcp_examples(a, report.path) if a.write_examples else 0
    if client is not None:
        examples_status = max(examples_status, _calibrate(a, Path(report.path), client))
    # Absolute paths: the client starts toolrank from a folder of its own choosing.
    args = ["mcp", "--mcp-config", str(a.mcp_config.resolve())] + \
        (["--index", str(Path(report.path).resolve())] if a.index else [])
    command = toolrank_command()
    print("next: add toolrank to your MCP client's configuration:\n"
          + json.dumps({"mcpServers": {"toolrank": {"command": command, "args": args}}}))
    return 1 if report.failed or examples_status else 0


def toolrank_command(argv0: str | None = None) -> str:
    """The full path of the running ``toolrank``: clients (Claude Desktop, ...) start servers without this
    shell's PATH. The program that was run (``/opt/venv/bin/toolrank`` run by its path, no venv active)
    first, then the one on PATH, else the script beside this interpreter."""
    import shutil

    argv0 = argv0 if argv0 is not None else sys.argv[0]
    ran = Path(argv0)
    if ran.name.startswith("toolrank") and ran.is_file():
        return str(ran.resolve())
    beside = Path(sys.executable).with_name("toolrank")
    return shutil.which("toolrank") or (str(beside) if beside.is_file() else "toolrank")


def _mcp_examples(a: argparse.Namespace, path: Path) -> int:
    """Example requests for the harvested index's tools that have none, then the index saved again."""
    from .index.embedded import ToolIndex

    index = ToolIndex.load(path)
    cat, status = _write_examples(a, index.catalog, a.examples_cache or _cache_beside(path))
    if cat is None:
        return 0
    changed = [s for s in cat.servers
               if [t.examples for t in cat.server_tools(s)] != [t.examples for t in index.catalog.server_tools(s)]]
    for server in changed:
        index.upsert_server(server, cat.server_descriptions.get(server, ""), cat.server_tools(server))
    if changed:
        index.save(path)
    return status


def _server_named(name: str, servers) -> str:
    """The catalog's server a ``--server`` names: as written, else the one server equal to it in any case; an
    unknown name raises ``ValueError`` with the closest names."""
    import difflib

    known = list(servers)
    if name in known:
        return name
    folded = [s for s in known if s.casefold() == name.casefold()]
    if len(folded) == 1:
        return folded[0]
    if folded:
        raise ValueError(f"--server {name!r} matches {' and '.join(map(repr, sorted(folded)))}: give the exact name")
    by_fold: dict[str, list[str]] = {}
    for s in known:
        by_fold.setdefault(s.casefold(), []).append(s)
    close = difflib.get_close_matches(name.casefold(), list(by_fold), n=3, cutoff=0.6)
    names = [n for c in close for n in sorted(by_fold[c])][:3]
    hint = f" (did you mean {', '.join(map(repr, names))}?)" if names else ""
    raise ValueError(f"unknown server {name!r}{hint}; `toolrank servers` lists them")


def _read_previous(path: str):
    """The first search's answer, saved with ``--json`` (``-``: standard input), for a second search."""
    from .pipeline.serialize import previous_from_dict

    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"--previous: cannot read {path} ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ValueError(f"--previous: {path} is not UTF-8 text (an answer saved with --json is)") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--previous: {path} is not JSON (line {exc.lineno}: {exc.msg}); save the first answer "
                         "with `toolrank search ... --json > FILE`") from None
    except RecursionError:
        raise ValueError(f"--previous: {path} is nested too deeply to be an answer") from None
    return previous_from_dict(data, where=f"--previous {path}")


def _explanation_line(e: dict) -> str:
    """One line of a tool's explanation for the terminal: its retrieval ranks, the words it matched, its reason."""
    rank = lambda r: f"#{r}" if r is not None else "-"   # noqa: E731 - a list it was not in
    parts = [f"bm25 {rank(e.get('bm25_rank'))}", f"dense {rank(e.get('dense_rank'))}"]
    if e.get("matched_terms"):
        parts.append("stems: " + ", ".join(e["matched_terms"][:8]))
    reason = str(e.get("reason") or "")
    if reason.startswith("ranked by"):   # the usual reason is the decision's: show only what moved this tool
        reason = "; ".join(r for r in reason.split("; ") if r.startswith(("lowered", "raised")))
    if reason:
        parts.append(reason)
    return "  ".join(parts)


def cmd_search(a: argparse.Namespace) -> int:
    from .catalog.eligibility import Eligibility

    if a.previous and a.retrieval_only:
        raise ValueError("--previous reads a first answer's decision: it has no use with --retrieval-only")
    previous = _read_previous(a.previous) if a.previous else None
    index = _index_from(a)
    eligible = None
    if a.server:
        eligible = Eligibility.of(servers=[_server_named(s, index.catalog.servers) for s in a.server])
    if a.retrieval_only:
        hits = index.retrieve(a.request, a.need, eligible, k=a.k)
        if a.json:
            print(json.dumps([{"server": h.tool_id.server, "tool": h.tool_id.tool, "rank": h.rank, "score": h.score,
                               "bm25_rank": h.bm25_rank, "dense_rank": h.dense_rank} for h in hits], indent=1))
        else:
            for h in hits:
                print(f"{h.rank:>3}  {h.score:.4f}  {h.tool_id.server} / {h.tool_id.tool}  (bm25 #{h.bm25_rank}, dense #{h.dense_rank})")
        return 0
    pipe = _pipeline(index, a.model, a.no_model, a.threads, a.score_top)
    res = pipe.search(a.request, a.need, eligible=eligible, previous=previous, k=a.k, explain=a.explain, fmt=a.format)
    if a.json:
        from .pipeline.serialize import result_to_dict
        print(json.dumps(result_to_dict(res), indent=1, ensure_ascii=False))
        return 0
    print(f"decision: {res.decision}   best probability: {res.best_probability:.3f}   attempt {res.attempt}")
    print(res.message)
    for t in res.tools:
        tag = "" if t.source == "ranked" else f"  [{t.source}]"
        print(f"{t.rank:>3}  p={t.probability:.3f}  {t.tool_id.server} / {t.tool_id.tool}{tag}")
        if t.explanation:
            print("       " + _explanation_line(t.explanation))
    if res.decision == "search_again":
        print("(from the command line: save this answer with --json, then search again with a sharper --need "
              "and --previous FILE)")
    if res.suggestions:
        print("connect one of:", ", ".join(res.suggestions))
    if res.tokens:
        print(f"tokens: {res.tokens.selected:,} selected of {res.tokens.catalog:,} eligible "
              f"({res.tokens.reduction:.1%} fewer, {res.tokens.encoding})")
    return 0


def cmd_eval(a: argparse.Namespace) -> int:
    from .evaluation.harness import evaluate, format_report, load_queries, pipeline_rerankers

    index = _index_from(a)
    queries = load_queries(a.queries, split=a.split)
    if a.sample and a.sample < len(queries):
        import random
        queries = random.Random(a.seed).sample(queries, a.sample)
    if a.limit:
        queries = queries[: a.limit]
    stages = [s.strip() for s in a.stages.split(",") if s.strip()]
    pipe = None
    if {"scorer", "logit"} & set(stages) or a.abstain or a.tokens:
        pipe = _pipeline(index, a.model, a.no_model, a.threads, a.score_top)
    # the same confidence model without the logit, fitted on dev
    retrieval_only = _pipeline(index, None, True, a.threads) if "retrieval-confidence" in stages else None
    rerankers = pipeline_rerankers(stages, pipe, retrieval_only, pipe.policy.score_top if pipe else None)
    report = evaluate(index, queries, stages=stages, use_need=a.use_need, org_size=a.org_size, seed=a.seed,
                      rerankers=rerankers, show_progress=not a.json)
    if a.nofit and not a.abstain:
        raise ValueError("--nofit needs --abstain")
    nofit_rep = None
    if a.abstain and a.nofit:
        from .evaluation.abstention import load_nofit, nofit_report
        nofit_rep = nofit_report(pipe, queries, load_nofit(a.nofit, a.split), show_progress=not a.json)
        report["abstention_real"] = {k: v for k, v in nofit_rep.items() if k not in ("coverage", "risk")}
    if a.abstain:
        from .evaluation.abstention import abstention_report, format_abstention, plot_coverage_risk
        rep = abstention_report(pipe, queries, show_progress=not a.json)
        png = plot_coverage_risk(rep, a.plot) if a.plot else None
        report["abstention"] = {k: v for k, v in rep.items() if k not in ("coverage", "risk")}
        if png:
            report["abstention"]["plot"] = str(png)
    if a.tokens:
        import numpy as np
        red = [pipe.search(q.query, None).tokens.reduction for q in queries]
        report["token_reduction_mean"] = float(np.mean(red))
    if a.json:
        print(json.dumps(report, indent=1))
    else:
        print(format_report(report))
        if nofit_rep is not None:
            from .evaluation.abstention import format_nofit
            print()
            print(format_nofit(nofit_rep))
        if a.abstain:
            print()
            print(("simulated (labelled servers removed): " if nofit_rep else "") + format_abstention(rep))
            if report["abstention"].get("plot"):
                print(f"  coverage-risk curve: {report['abstention']['plot']}")
        if a.tokens:
            print(f"\nmean token reduction of the selected definitions vs the eligible catalog: {report['token_reduction_mean']:.1%}")
    return 0


def cmd_servers(a: argparse.Namespace) -> int:
    index = _index_from(a)
    for s in index.catalog.servers:
        print(f"{s}\t{len(index.catalog.server_tools(s))} tools")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """A parser of these four commands alone (``toolrank``'s whole parser is :mod:`serve.commands`'s)."""
    p = argparse.ArgumentParser(prog="toolrank", description="Find the MCP tools that fit a request, with calibrated confidence.")
    p.add_argument("-v", "--verbose", action="store_true")
    add_commands(p.add_subparsers(dest="cmd", required=True))
    return p


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Add ``index``, ``search``, ``eval`` and ``servers`` to a ``toolrank`` parser's subcommands;
    :func:`run` runs what they parse."""
    s = sub.add_parser("index", help="build an index from a catalog file, or from an MCP client configuration")
    src = s.add_mutually_exclusive_group(required=True)
    src.add_argument("--catalog", type=Path, help="a catalog file to index: JSONL, one tool a line ({\"server\", \"name\", "
                     "\"description\", \"inputSchema\"?}), an MCP tools/list answer wrapped with its server, or MCP-Zero JSON")
    src.add_argument("--mcp-config", type=Path, metavar="FILE",
                     help="an MCP client configuration ({\"mcpServers\": ...}): start every server, list its tools, "
                          "and build or update their index (only changed tools are embedded again)")
    s.add_argument("--examples", type=Path, help="example requests JSONL ({server, tool, examples}) to index with the tools")
    s.add_argument("--no-examples", action="store_true", help="index without example requests (day one)")
    s.add_argument("--out", type=Path, help="index folder to write (embedded backend; required with --catalog)")
    s.add_argument("--index", type=Path, metavar="DIR",
                   help="with --mcp-config: the index folder (default: one per configuration file, in the cache)")
    s.add_argument("--timeout", type=float, default=30.0,
                   help="with --mcp-config: seconds for each server to start and list its tools (default 30)")
    s.add_argument("--recreate", action="store_true", help="with --backend qdrant: replace an existing collection")
    g = s.add_argument_group("example requests written at index time (docs/day-one.md)")
    g.add_argument("--write-examples", action="store_true",
                   help="write 5 example requests for each tool that has none, through the LLM endpoint of "
                        "$TOOLRANK_LLM_BASE_URL / $TOOLRANK_LLM_MODEL (cached by the tool's content hash; resumable)")
    g.add_argument("--dry-run", action="store_true",
                   help="with --write-examples: print how many tools need examples and an estimate of tokens")
    g.add_argument("--examples-cache", type=Path, metavar="FILE",
                   help="with --write-examples: the cache JSONL (default: <index folder>.examples.jsonl)")
    g = s.add_argument_group("the catalog's own calibration, written at index time (docs/day-one.md)")
    g.add_argument("--calibrate", action="store_true",
                   help="measure what the probabilities mean on this catalog: the LLM endpoint writes a request for "
                        "each of up to --probes tools and a blind need for it, each is searched, and the endpoint "
                        "judges first tools that are not the probe's own; the probabilities and the zone thresholds "
                        "then move together (no decision changes). Saved with the index; resumable "
                        "(<index folder>.probes.jsonl)")
    g.add_argument("--probes", type=int, default=None, metavar="N",
                   help="with --calibrate: how many tools to probe (default 100)")
    g.add_argument("--model", type=Path, help="with --calibrate: the scorer model folder (default: the shipped one)")
    _add_backend(s)
    s.set_defaults(func=cmd_index)

    s = sub.add_parser("search", help="find the tools for one request")
    s.add_argument("request")
    s.add_argument("--need", help="the best answer comes with it: one line, as the calling agent would write it "
                                   "before seeing any tool, of the action the tool must perform and its object "
                                   "(e.g. 'list open pull requests in a repository')")
    _add_index_source(s)
    s.add_argument("--server", action="append", help="restrict to this server (repeat; names may contain commas)")
    s.add_argument("-k", type=int, default=None, help="at most this many tools (default: the policy's 10; tools under the "
                   "list floor, 0.05, are left out once 5 are in; 100 with --retrieval-only)")
    s.add_argument("--previous", metavar="FILE", help="second search: the first answer, saved with --json ('-': stdin)")
    s.add_argument("--model", type=Path, help="scorer model folder (default: the shipped one)")
    s.add_argument("--no-model", action="store_true", help="retrieval-only confidence")
    s.add_argument("--retrieval-only", action="store_true", help="print the fused top-k without scoring")
    s.add_argument("--explain", action="store_true", help="attach each tool's explanation (BM25 and dense ranks, matched stems, why it is there; "
                   "--json adds the scores)")
    s.add_argument("--format", choices=["mcp", "openai", "anthropic"], default="mcp", help="definition format of the tools (default mcp)")
    s.add_argument("--score-top", type=int, help="cross-encoder scores only the first N fused candidates "
                                                 "(default: the shipped policy's, 10; 0 = all)")
    s.add_argument("--threads", type=int, default=2, help="CPU threads of the scorer (default 2)")
    s.add_argument("--json", action="store_true", help="print the whole answer as JSON")
    s.set_defaults(func=cmd_search)

    s = sub.add_parser("eval", help="measure retrieval and scoring on labelled queries")
    s.add_argument("--queries", type=Path, default=SHIPPED_QUESTIONS, help="queries JSONL (default: the shipped questions)")
    _add_index_source(s)
    s.add_argument("--split", help="keep only this split's queries (train, dev, test)")
    s.add_argument("--use-need", action="store_true", help="add the need line to the request")
    s.add_argument("--org-size", type=int, help="search inside a random organisation of N servers per query")
    s.add_argument("--seed", type=int, default=0, help="random seed of the organisation sampling (--org-size)")
    s.add_argument("--stages", default="bm25,dense,hybrid,scorer",
                   help="comma-separated, in order: bm25, dense, hybrid, logit (cross-encoder logit alone over the "
                        "hybrid 100), retrieval-confidence (the confidence model without the logit), scorer; "
                        "the last is compared with each earlier one, question by question")
    s.add_argument("--model", type=Path, help="a cross-encoder model folder to score with (default: the shipped one)")
    s.add_argument("--no-model", action="store_true", help="retrieval stages only, no scorer")
    s.add_argument("--abstain", action="store_true", help="also measure abstention (AUROC, no_fit shares)")
    s.add_argument("--plot", type=Path, help="with --abstain: write the coverage-risk curve PNG here")
    s.add_argument("--nofit", type=Path, help="with --abstain: requests written to have no tool (JSONL; the same "
                   "--split is kept); reported first, beside the simulation")
    s.add_argument("--tokens", action="store_true", help="also report the mean token reduction")
    s.add_argument("--limit", type=int, help="only the first N queries")
    s.add_argument("--sample", type=int, help="a seeded random sample of N queries (e.g. 500 train questions)")
    s.add_argument("--threads", type=int, default=2, help="CPU threads of the scorer (default 2)")
    s.add_argument("--score-top", type=int, help="cross-encoder scores only the first N fused candidates "
                                                 "(default: the shipped policy's, 10; 0 = all)")
    s.add_argument("--json", action="store_true", help="print the figures as JSON")
    s.set_defaults(func=cmd_eval)

    s = sub.add_parser("servers", help="list the servers of an index")
    _add_index_source(s)
    s.set_defaults(func=cmd_servers)


def quiet_broken_pipe() -> int:
    """After a reader closed the pipe early (``toolrank examples list | head``): stdout pointed at
    /dev/null (Python's documented way, so the interpreter's final flush is quiet), and 141, as a
    shell reports a command that a closed pipe ended (128 + SIGPIPE)."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 141


COMMANDS = ("index", "search", "eval", "servers")


def _hand_over(argv: list[str], replace: bool) -> int:
    """Run ``python -m serve.commands ARGV``: in place of this process when ``replace`` (the program's own
    command line, on POSIX), else as a child whose exit status is returned (``main(argv)`` called from
    Python must come back to its caller)."""
    cmd = [sys.executable, "-m", "serve.commands", *argv]
    sys.stdout.flush()
    sys.stderr.flush()
    if replace and os.name == "posix":
        os.execv(sys.executable, cmd)
    import subprocess

    return subprocess.call(cmd)


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parser.parse_args``, except that an option the command does not know is refused with that command's
    usage (``toolrank search: error: unrecognized arguments: --top``), not the top-level one."""
    ns, extras = parser.parse_known_args(argv)
    if extras:
        subs = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        cmd = getattr(ns, "cmd", None)
        sub = subs.choices.get(cmd) if subs is not None else None
        after = cmd in argv and all(i > argv.index(cmd) for i, a in enumerate(argv) if a in extras)
        (sub if sub is not None and sub.add_help and after else parser).error(
            f"unrecognized arguments: {' '.join(extras)}")
    return ns


def main(argv: list[str] | None = None) -> int:
    """These four commands here, every other one handed to ``serve.commands``; a reader that closes the pipe early ends them quietly."""
    own = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    other = next((a for a in argv if not a.startswith("-")), None)
    if other is not None and other not in COMMANDS:
        # Older configurations start `python -m retrieval.cli mcp ...`: hand the whole command line to the
        # top-level CLI in a fresh interpreter (a process, not an import, so retrieval stays below serve).
        return _hand_over(argv, replace=own)
    try:
        return run(parse(build_parser(), argv))
    except BrokenPipeError:
        return quiet_broken_pipe()


def run(a: argparse.Namespace) -> int:
    """Run a command that :func:`add_commands` parsed: 2 and one line on stderr for a domain error
    (no traceback), 130 on Ctrl-C; BrokenPipeError is left to the caller."""
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("retrieval.index.default").setLevel(logging.INFO)  # "building the default index … (once)"
    if getattr(a, "k", None) is None and a.cmd == "search":
        a.k = 100 if a.retrieval_only else None
    try:
        return a.func(a)
    except BrokenPipeError:
        raise
    except (ValueError, OSError) as exc:  # domain errors: one line, no traceback
        print(f"toolrank {a.cmd}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
