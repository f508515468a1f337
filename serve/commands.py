"""``toolrank``: the one command, in the package above all others.

retrieval's commands (``index``, ``search``, ``eval``, ``servers``) come from :mod:`retrieval.cli`;
the others are forwarded to the ``main(argv)`` of the module that holds them (:data:`FORWARDED`),
imported only when that command runs, so ``toolrank search`` never loads torch or the service.
``pyproject.toml`` points the ``toolrank`` script here; ``python -m serve.commands`` is the same.

Before anything runs, :func:`retrieval.names.check` makes sure that the four packages Python finds are
toolrank's own (docs/design.md, "Installed names").
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Callable

from retrieval import cli as retrieval_cli
from retrieval.names import TOP_LEVEL, NameCollisionError, check, is_ours

__all__ = ["FORWARDED", "build_parser", "main"]

#: ``toolrank COMMAND`` -> (the module whose ``main(argv)`` runs it, its one-line help).
FORWARDED = {
    "train": ("training.train", "fine-tune the cross-encoder (needs the [train] extra)"),
    "calibrate": ("training.calibrate", "fit the confidence model on dev"),
    "export": ("training.export", "export a trained cross-encoder to ONNX"),
    "generate": ("training.generate", "generate examples, questions and judgments through an LLM"),
    "data": ("training.dataset", "validate or summarise the shipped data set"),
    "serve": ("serve.cli", "run the HTTP service"),
    "examples": ("serve.usage", "list or remove example requests learned from use (toolrank examples list|remove)"),
    "mcp": ("serve.mcp_server", "run toolrank as an MCP server (find_tools; call_tool as a gateway with --mcp-config)"),
}


def main_of(command: str) -> Callable[[list[str]], int]:
    """The ``main`` of a forwarded command, imported now (real imports, so the import contracts see them).

    Raises:
        KeyError: not a forwarded command.
        ModuleNotFoundError: its module, or something it needs, is not installed.
    """
    if command == "train":
        from training.train import main
    elif command == "calibrate":
        from training.calibrate import main
    elif command == "export":
        from training.export import main
    elif command == "generate":
        from training.generate import main
    elif command == "data":
        from training.dataset import main
    elif command == "serve":
        from .cli import main
    elif command == "examples":
        from .usage import main
    elif command == "mcp":
        from .mcp_server import main
    else:
        raise KeyError(command)
    return main


def build_parser() -> argparse.ArgumentParser:
    """``toolrank``'s parser: retrieval's commands in full, the forwarded ones by name (each parses its own
    arguments)."""
    p = argparse.ArgumentParser(prog="toolrank", description="Find the MCP tools that fit a request, with calibrated confidence.")
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="cmd", required=True)
    retrieval_cli.add_commands(sub)
    for name, (_, help_text) in FORWARDED.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    """``toolrank``; a reader that closes the pipe early (``toolrank examples list | head``) ends it quietly."""
    try:
        return _main(argv)
    except BrokenPipeError:
        return retrieval_cli.quiet_broken_pipe()


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        check()
    except NameCollisionError as exc:
        print(f"toolrank: {exc}", file=sys.stderr)
        return 2
    head = 1 if argv[:1] in (["-v"], ["--verbose"]) else 0   # `toolrank -v serve ...`
    if len(argv) > head and argv[head] in FORWARDED:
        command = argv[head]
        if head:
            logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        try:
            return int(main_of(command)(argv[head + 1:]) or 0)
        except ModuleNotFoundError as exc:
            if not (exc.name and is_ours(exc.name)):
                print(f"toolrank {command}: missing dependency {exc.name!r}; install with: "
                      "pip install 'toolrank[train]'", file=sys.stderr)
                return 2
            try:   # one of toolrank's own modules is missing: another package's files in its place?
                check(TOP_LEVEL, owners=True)
            except NameCollisionError as collision:
                print(f"toolrank {command}: {collision}", file=sys.stderr)
                return 2
            raise
    return retrieval_cli.run(retrieval_cli.parse(build_parser(), argv))


if __name__ == "__main__":
    sys.exit(main())
