"""``toolrank serve``: run the HTTP service with uvicorn.

Each uvicorn worker builds its own app (factory mode) from ``TOOLRANK_*`` environment variables
that this command sets from its options, so every worker sees the same settings.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["main", "build_parser"]

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


# Settings fields with no option of their own: the tenants file is --config (with neither --config nor
# TOOLRANK_CONFIG the service runs open: auth_disabled); fail_fast and failure_file are this command's.
NOT_OPTIONS = frozenset({"config", "auth_disabled", "fail_fast", "failure_file"})
# Options not named after their field. The rule: `max_queue` is --max-queue, a field in seconds drops its
# `_s` (--poll-interval), and a setting that is on by default is turned off with --no-<name> (--no-ui).
OPTION_NAMES = {"index_dir": "--index", "model_dir": "--model", "public_suggestions": "--no-suggestions"}
# What an option's help says besides the field's description.
NOTES = {"qdrant_api_key": "prefer the variable: options are visible to other users",
         "public_suggestions": "off, the shipped catalog's index is not loaded either"}
_UNITS = {"_s": "SECONDS", "_mb": "MB", "_days": "DAYS", "_bytes": "BYTES", "_url": "URL", "_key": "KEY"}


def option_fields() -> list[str]:
    """The settings fields that are options of ``toolrank serve``, the service's own first."""
    from .settings import BackendSettings, Settings

    own = [n for n in Settings.model_fields if n not in BackendSettings.model_fields]
    return [n for n in own + list(BackendSettings.model_fields) if n not in NOT_OPTIONS]


def _is_location(name: str, kind: Any) -> bool:
    """A file or folder: made absolute before the workers see it."""
    return kind is Path or name.endswith(("_dir", "_path"))


def _add_option(group: Any, name: str) -> None:
    """One option made from a settings field: its name, type, choices and help (the field's description,
    its default and its variable); argparse's default is None, so an option not given leaves the variable,
    and then the field's default, in force."""
    from .settings import Settings, variable

    info = Settings.model_fields[name]
    kind = next((a for a in getattr(info.annotation, "__args__", ()) if a is not type(None)), info.annotation)
    env = variable(Settings, name)
    notes = [NOTES[name]] if name in NOTES else []
    if kind is bool:
        flag = "--no-" + name.replace("_", "-") if info.default else "--" + name.replace("_", "-")
        notes.insert(0, f"on by default; this option turns it off: ${env}=0" if info.default else f"${env}=1")
        kwargs: dict[str, Any] = {"action": "store_const", "const": not info.default}
    else:
        flag = "--" + (name[:-2] if name.endswith("_s") else name).replace("_", "-")
        choices = (info.json_schema_extra or {}).get("enum") if isinstance(info.json_schema_extra, dict) else None
        unit = next((u for suffix, u in _UNITS.items() if name.endswith(suffix)), None)
        metavar = ("DIR" if name.endswith(("_dir", "_path")) else "FILE") if _is_location(name, kind) else unit
        kwargs = {"type": Path if kind is Path else kind if kind in (int, float) else str,
                  "choices": choices, "metavar": None if choices else metavar}
        if info.default is not None:
            notes.append(f"default {info.default:g}" if isinstance(info.default, float) else f"default {info.default}")
        notes.append(f"${env}")
    help_text = f"{info.description} ({'; '.join(notes)})".replace("%", "%%")
    group.add_argument(OPTION_NAMES.get(name, flag), dest=name, default=None, help=help_text, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    from .settings import BackendSettings

    p = argparse.ArgumentParser(
        prog="toolrank serve",
        description="Serve tool search and scoring over HTTP (see /docs once running). Every service setting "
                    "is an option here and a TOOLRANK_* variable; an option wins over its variable.",
    )
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    p.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--config", type=Path, help="tenants file (TOML/JSON): API key hashes, servers, thresholds "
                                              "(default: $TOOLRANK_CONFIG). Without either the service runs open, "
                                              "on loopback only.")
    backend = p.add_argument_group("index backend")
    for name in option_fields():
        _add_option(backend if name in BackendSettings.model_fields else p, name)
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"], help="log level (default info)")
    p.add_argument("--app", default="serve.app:create_app", metavar="MODULE:FACTORY",
                   help="advanced: the app factory each worker calls (a custom pipeline, tests)")
    p.add_argument("--new-key", action="store_true",
                   help="print a new random API key and the sha256 to put in the tenants file, then exit")
    return p


def _config_from(args: argparse.Namespace) -> Path | None:
    """The tenants file: ``--config``, else ``TOOLRANK_CONFIG`` from the environment."""
    from .settings import Settings, environment_value

    if args.config is not None:
        return args.config
    from_env = environment_value(Settings, "config")
    return Path(from_env) if from_env else None


def _env_for(args: argparse.Namespace) -> dict[str, str]:
    """The ``TOOLRANK_*`` variables the options given set for the workers."""
    from .settings import Settings, variable

    env = {}
    config = _config_from(args)
    if config is not None:
        env[variable(Settings, "config")] = str(config.resolve())
    else:
        env[variable(Settings, "auth_disabled")] = "1"
    for name in option_fields():
        value = getattr(args, name)
        if value is None:
            continue
        if isinstance(value, bool):
            text = "1" if value else "0"
        elif _is_location(name, type(value)):
            text = str(Path(value).resolve())
        else:
            text = str(value)
        env[variable(Settings, name)] = text
    env[variable(Settings, "fail_fast")] = "1"  # a worker that cannot start exits (status 3) instead of idling unready
    return env


def _effective(env: dict[str, str], name: str) -> Any:
    """A setting as the workers will see it: an option, else its variable, else the field's default."""
    from .settings import Settings, environment_value, variable

    given = env.get(variable(Settings, name))
    if given is not None:
        return given
    found = environment_value(Settings, name)
    return Settings.model_fields[name].default if found is None else found


def main(argv: list[str] | None = None) -> int:
    """Run ``toolrank serve``; returns the exit status (2 for bad options)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:
        argv = argv[1:]
    args = build_parser().parse_args(argv)

    if args.new_key:
        from .tenants import new_key

        key, digest = new_key()
        sys.stdout.write(f"api key (give to the client, store nowhere): {key}\nkey_sha256 (tenants file): {digest}\n")
        return 0
    if args.workers < 1:
        sys.stderr.write(f"--workers {args.workers}: use 1 or more\n")
        return 2
    # Paths the workers would only read in the background (a failure there leaves a service
    # that never gets ready): check them here, once, with a message.
    for flag, path, ok, fix in (
            ("--model", args.model_dir, lambda p: (p / "model.onnx").is_file(),
             "pass a scorer model folder (config.json, model.onnx, tokenizer.json)"),
            ("--catalog", args.catalog, Path.is_file, "pass a catalog file (MCP-Zero JSON, tools/list JSON or JSONL)"),
            ("--index", args.index_dir, lambda p: not p.exists() or p.is_dir(), "pass a folder (created if missing)")):
        if path is not None and not ok(path):
            sys.stderr.write(f"{flag} {path}: not usable; {fix}\n")
            return 2
    if _config_from(args) is None:
        if args.host not in LOOPBACK:
            sys.stderr.write(f"refusing to serve without API keys on {args.host}: pass --config FILE (tenants and "
                             "key hashes), or bind --host 127.0.0.1 for local development\n")
            return 2
        sys.stderr.write("WARNING: no --config: authentication is OFF and every caller is an admin. "
                         f"Serving on {args.host} only; pass --config FILE for API keys and tenants.\n")

    from .settings import Settings, unknown_variables, variable

    env = _env_for(args)
    backend = _effective(env, "backend")
    if backend == "qdrant" and args.workers > 1 and _effective(env, "qdrant_path") is not None:
        sys.stderr.write(f"--workers {args.workers}: an embedded Qdrant (--qdrant-path) serves one process; "
                         "run a Qdrant server (docker run -p 6333:6333 qdrant/qdrant) and pass --qdrant-url\n")
        return 2
    cleanup: list[Path] = []
    if args.workers > 1 and _effective(env, "index_dir") is None and backend != "qdrant":  # one shared store
        store = Path(tempfile.mkdtemp(prefix="toolrank-store-"))
        cleanup.append(store)
        env[variable(Settings, "index_dir")] = str(store)
        sys.stderr.write(f"note: no --index: catalog changes live in {store} and are lost at exit\n")
    if args.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        _remove_orphaned_metrics_dirs()
        metrics_dir = Path(tempfile.mkdtemp(prefix=f"toolrank-metrics-{os.getpid()}-"))
        cleanup.append(metrics_dir)
        env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    failure: Path | None = None
    if args.workers > 1:  # a worker process that fails to start writes why here (one process: serve.app keeps it)
        fd, failure_file = tempfile.mkstemp(prefix="toolrank-failure-")
        os.close(fd)
        failure = Path(failure_file)
        cleanup.append(failure)
        env[variable(Settings, "failure_file")] = failure_file
    previous = {name: os.environ.get(name) for name in env}
    os.environ.update(env)

    # Check settings and tenants here, so a bad file fails once with a clear message.
    from pydantic import ValidationError

    from .tenants import TenantConfigError, load_tenants

    try:
        settings = Settings()
        if settings.config is not None:
            load_tenants(settings.config)
        if settings.audit_share > 0 and not settings.read_only:   # the judge's endpoint: said now (a replica audits nothing)
            from .audits import check_endpoint

            check_endpoint(settings.audit_share)
        if settings.backend == "qdrant" and settings.qdrant_url is not None:  # unreachable: one line, now
            from retrieval.index.qdrant.collection import QdrantCollection
            from retrieval.index.qdrant.schema import QdrantConfig

            key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key is not None else None
            QdrantCollection.connect(QdrantConfig(url=settings.qdrant_url, api_key=key, collection=settings.collection))
    except (ValidationError, TenantConfigError, ValueError, OSError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        _restore(previous)
        _remove(cleanup)
        return 2
    for warning in unknown_variables(os.environ):
        sys.stderr.write(f"WARNING: {warning}\n")

    import functools

    import uvicorn

    from .logs import log_config
    from .protocol import BoundedH11Protocol

    bounds = connection_bounds(settings)
    try:
        uvicorn.run(
            args.app, factory=True, host=args.host, port=args.port, workers=args.workers,
            log_config=log_config(args.log_level), access_log=False, timeout_graceful_shutdown=30,
            proxy_headers=True, server_header=False,
            http=functools.partial(BoundedH11Protocol, bounds=bounds),  # type: ignore[arg-type]
            timeout_keep_alive=settings.keep_alive_s,  # type: ignore[arg-type]
            h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        )
        if failure is not None:
            reason = failure.read_text(encoding="utf-8", errors="replace").strip() if failure.exists() else ""
        else:
            reason = getattr(sys.modules.get("serve.app"), "startup_failure", None) or ""
    finally:
        _restore(previous)  # main() may be called as a function (tests, embedding): leave the environment as it was
        _remove(cleanup)
    if reason:  # a worker failed to start and the service stopped: one line, and the status says so
        sys.stderr.write(f"error: {reason}\n")
        return 3
    return 0


MAX_HEADER_BYTES = 16 * 1024  # request line and headers (h11 answers 400 beyond)


def connection_bounds(settings: Any) -> Any:
    """The per-worker connection bounds, with the connection cap kept below the descriptor limit."""
    import resource

    from .protocol import ConnectionBounds

    cap = settings.max_connections
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    headroom = max(128, soft // 8) if soft != resource.RLIM_INFINITY else 0  # model and index files, threads, logs
    if soft != resource.RLIM_INFINITY and cap > soft - headroom:
        cap = max(16, soft - headroom)
        sys.stderr.write(f"note: max_connections {settings.max_connections} is above the file-descriptor limit "
                         f"({soft}): capped at {cap} (raise it with `ulimit -n`)\n")
    return ConnectionBounds(header_timeout_s=settings.header_timeout_s, body_timeout_s=settings.body_timeout_s,
                            max_connections=cap)


def _restore(previous: dict[str, str | None]) -> None:
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _remove(paths: list[Path]) -> None:
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _remove_orphaned_metrics_dirs(tmp: Path | None = None) -> list[Path]:
    """Remove ``toolrank-metrics-<pid>-*`` folders of services that died without cleaning up (kill -9)."""
    removed = []
    for path in Path(tmp or tempfile.gettempdir()).glob("toolrank-metrics-*"):
        pid = path.name.split("-")[2] if path.name.count("-") >= 3 else ""
        if not pid.isdigit() or _alive(int(pid)) or not path.is_dir():
            continue  # an older layout without a pid, or a running service
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


if __name__ == "__main__":
    raise SystemExit(main())
