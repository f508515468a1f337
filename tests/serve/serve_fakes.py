"""A small deterministic stand-in for ToolIndex + Pipeline, with the same methods.

Probabilities are word overlap, so tests can predict them; ``leak=True`` makes the pipeline
ignore eligibility and suggest every server, to check that the service itself never lets another
tenant's servers through.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # tests/: testkit.py (also in a uvicorn child)

from retrieval.catalog.model import Catalog, Tool  # noqa: E402
from retrieval.index.hits import Hit  # noqa: E402
from retrieval.pipeline.results import ScoredTool, SearchResult, TokenReport  # noqa: E402
from testkit import WAIT_S, tenants_toml, wait_until  # noqa: E402

WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> set[str]:
    return set(WORD.findall(text.lower().replace("_", " ")))


def tool_words(t: Tool) -> set[str]:
    return words(f"{t.server} {t.name} {t.description} {' '.join(t.examples)}")


def overlap(request: str, need: str | None, t: Tool) -> float:
    q = words(f"{request} {need or ''}")
    return round(len(q & tool_words(t)) / max(len(q), 1), 6)


class FakeIndex:
    """Catalog + word-overlap retrieval, with the ToolIndex update and persistence methods."""

    save_delay_s = 0.0  # tests set this to widen the window of a half-written save

    def __init__(self, catalog: Catalog, version: int = 1):
        self.catalog = catalog
        self.version = version

    @classmethod
    def build(cls, catalog: Catalog) -> "FakeIndex":
        return cls(catalog)

    def retrieve(self, request: str, need: str | None = None, eligible: Any = None, k: int = 100) -> list[Hit]:
        tools = [t for t in self.catalog.tools if eligible is None or eligible.allows(t.id)]
        ranked = sorted(tools, key=lambda t: (-overlap(request, need, t), t.server, t.name))[:k]
        return [Hit(t.id, i + 1, overlap(request, need, t)) for i, t in enumerate(ranked)]

    def upsert_server(self, name: str, description: str, tools: list[Tool]) -> int:
        old = {t.name: t.content_hash() for t in self.catalog.server_tools(name)}
        new = [Tool(name, t.name, t.description, t.input_schema, description, t.examples) for t in tools]
        descs = {k: v for k, v in self.catalog.server_descriptions.items() if k != name}
        descs[name] = description
        self.catalog = Catalog([t for t in self.catalog.tools if t.server != name] + new, descs)
        self.version += 1
        return sum(old.get(t.name) != t.content_hash() for t in new)

    def remove_server(self, name: str) -> int:
        keep = [t for t in self.catalog.tools if t.server != name]
        removed = len(self.catalog.tools) - len(keep)
        if removed:
            descs = {k: v for k, v in self.catalog.server_descriptions.items() if k != name}
            self.catalog = Catalog(keep, descs)
            self.version += 1
        return removed

    def save(self, directory: str | Path) -> Path:
        directory = Path(directory)
        tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
        (tmp / "tools.jsonl").write_text("".join(json.dumps(t.to_dict()) + "\n" for t in self.catalog.tools))
        time.sleep(self.save_delay_s)
        (tmp / "manifest.json").write_text(json.dumps({"version": self.version,
                                                       "servers": self.catalog.server_descriptions}))
        if directory.exists():
            shutil.rmtree(directory)
        os.rename(tmp, directory)
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> "FakeIndex":
        directory = Path(directory)
        if not (directory / "manifest.json").exists():
            raise ValueError(f"{directory}: incomplete fake index (no manifest.json)")
        manifest = json.loads((directory / "manifest.json").read_text())
        tools = [Tool.from_dict(json.loads(line)) for line in (directory / "tools.jsonl").read_text().splitlines() if line]
        return cls(Catalog(tools, manifest["servers"]), manifest["version"])


@dataclass(frozen=True)
class FakePolicy:
    proceed_threshold: float = 0.5
    floor: float = 0.05
    min_results: int = 1
    max_results: int = 5
    candidates: int = 100


class FakePipeline:
    """The Pipeline surface the service uses; records every search call in ``calls``."""

    def __init__(self, index: FakeIndex, *, policy: FakePolicy = FakePolicy(),
                 public_servers: tuple[str, ...] = ("Public Weather",), leak: bool = False,
                 scorer: Any = "fake", calls: list | None = None):
        self.index = index
        self.policy = policy
        self.public_servers = public_servers
        self.leak = leak
        self.scorer = scorer
        self.calls = calls if calls is not None else []
        self.model_info = {"name": "fake-scorer", "version": "1"}

    def with_index(self, index: FakeIndex) -> "FakePipeline":
        return FakePipeline(index, policy=self.policy, public_servers=self.public_servers, leak=self.leak,
                            scorer=self.scorer, calls=self.calls)

    def score(self, request: str, need: str | None, tools: list[Tool]) -> list[float]:
        return [overlap(request, need, t) for t in tools]

    def search(self, request: str, need: str | None = None, *, eligible: Any = None, previous: Any = None,
               k: int | None = None, explain: bool = False, fmt: str = "mcp", policy: Any = None) -> SearchResult:
        self.calls.append({"request": request, "need": need, "eligible": eligible, "previous": previous,
                           "k": k, "explain": explain, "fmt": fmt, "policy": policy})
        policy = policy or self.policy
        hits = self.index.retrieve(request, need, None if self.leak else eligible, k=policy.candidates)
        catalog = self.index.catalog
        scored = [(h, overlap(request, need, catalog[h.tool_id])) for h in hits]
        scored = [(h, p) for h, p in scored if p >= policy.floor][: (k or policy.max_results)]
        best = max((p for _, p in scored), default=0.0)
        attempt = previous.attempt + 1 if previous is not None else 1
        decision = "proceed" if best >= policy.proceed_threshold else "search_again" if attempt == 1 else "no_fit"
        tools = []
        for rank, (h, p) in enumerate(scored, 1):
            t = catalog[h.tool_id]
            definition = {"name": t.name, "description": t.description, "inputSchema": t.input_schema or {}}
            if fmt == "openai":
                definition = {"type": "function", "function": {"name": t.name, "description": t.description,
                                                               "parameters": t.input_schema or {}}}
            tools.append(ScoredTool(h.tool_id, p, rank, "ranked", definition,
                                    {"retrieval_rank": h.rank, "overlap": p} if explain else None))
        servers = catalog.servers if self.leak else [s for s in catalog.servers
                                                     if eligible is None or eligible.allows_server(s)]
        suggestions = (list(self.public_servers) + (catalog.servers if self.leak else [])) if decision == "no_fit" else []
        restricted = [s for s in servers if s.lower() in request.lower()]
        selected = sum(len(json.dumps(t.definition)) // 4 for t in tools)
        return SearchResult(decision, tools, best, attempt, TokenReport(selected, 10_000), f"fake {decision}",
                            suggestions, restricted)


def demo_catalog() -> Catalog:
    """Four servers; 'Gamma Secret' belongs to one tenant only."""
    tools = [
        Tool("Alpha Mail", "send_email", "Send an email message to a recipient", {"type": "object"}, "Email"),
        Tool("Alpha Mail", "read_inbox", "Read the latest email messages in the inbox", None, "Email"),
        Tool("Beta Calendar", "create_event", "Create a calendar event meeting at a time", None, "Calendar"),
        Tool("Beta Calendar", "list_events", "List upcoming calendar events", None, "Calendar"),
        Tool("Gamma Secret", "launch_rocket", "Launch the rocket to orbit with a payload", None, "Secret space ops"),
        Tool("Delta Files", "upload_file", "Upload a file to cloud storage", None, "Files"),
    ]
    return Catalog(tools)


def app_from_env():
    """A uvicorn factory (``serve_fakes:app_from_env``) serving the fake pipeline; settings from TOOLRANK_*."""
    from serve.app import create_app

    return create_app(pipeline=FakePipeline(FakeIndex(demo_catalog())))


# ------------------------------------------------------------------ tenants and clients

KEYS = {"ops": "key-ops", "acme": "key-acme", "globex": "key-globex", "narrow": "key-narrow"}

TENANTS_TOML = tenants_toml(
    {"name": "ops", "admin": True, "key": KEYS["ops"], "servers": "*"},
    {"name": "acme", "key": KEYS["acme"], "servers": ["Alpha Mail", "Beta Calendar", "Delta Files"],
     "policy": {"proceed_threshold": 0.6}},
    {"name": "globex", "key": KEYS["globex"], "servers": ["Alpha Mail", "Gamma Secret"]},
    {"name": "narrow", "key": KEYS["narrow"], "servers": ["Alpha Mail"], "tools": [["Alpha Mail", "send_email"]]},
)


def auth(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[tenant]}"}


def wait_ready(client: Any, timeout: float = WAIT_S) -> None:
    """Wait until the app answers /readyz 200 (a bound, not a measurement)."""
    wait_until(lambda: client.get("/readyz").status_code == 200, "the service's /readyz", timeout)


# ------------------------------------------------------------------ slow work, for overload tests


class SlowPipeline(FakePipeline):
    """Requests that start with "slow" spin until ``gate`` is set (or ``spin_s`` passes),
    checking the work token as the real scorer does between batches; ``log`` records
    ("start" | "done" | "stopped", request[, reason])."""

    def __init__(self, index: FakeIndex, gate: Any = None, log: list | None = None, spin_s: float = 30.0, **kw: Any):
        import threading

        super().__init__(index, **kw)
        self.gate = gate if gate is not None else threading.Event()
        self.log = log if log is not None else []
        self.spin_s = spin_s

    def with_index(self, index: FakeIndex) -> "SlowPipeline":
        return SlowPipeline(index, self.gate, self.log, self.spin_s, policy=self.policy, calls=self.calls)

    def _spin(self, request: str) -> None:
        from serve.work import WorkCancelled, checkpoint

        self.log.append(("start", request))
        until = time.monotonic() + self.spin_s
        try:
            while not self.gate.wait(0.01) and time.monotonic() < until:
                checkpoint()
        except WorkCancelled as exc:
            self.log.append(("stopped", request, exc.reason))
            raise
        self.log.append(("done", request))

    def search(self, request: str, *args: Any, **kwargs: Any) -> SearchResult:
        if request.startswith("slow"):
            self._spin(request)
        elif request.startswith("stubborn"):  # work that never checks its token
            self.log.append(("start", request))
            self.gate.wait(1.5)
        return super().search(request, *args, **kwargs)

    def score(self, request: str, need: str | None, tools: list[Tool]) -> list[float]:
        if request.startswith("slow"):
            self._spin(request)
        return super().score(request, need, tools)


class FileLog(list):
    """A SlowPipeline log that also appends each entry to ``path`` as a JSON line (read by the test
    that runs the pipeline in a uvicorn child process)."""

    def __init__(self, path: str | Path):
        super().__init__()
        self.path = Path(path)

    def append(self, entry: Any) -> None:
        super().append(entry)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(list(entry)) + "\n")


def read_file_log(path: Path) -> list[tuple]:
    return [tuple(json.loads(line)) for line in path.read_text().splitlines()] if path.exists() else []


def slow_app_from_env():
    """A uvicorn factory (``serve_fakes:slow_app_from_env``): "slow ..." requests spin for 10 s;
    the pipeline's log goes to the file named by ``SLOW_PIPELINE_LOG`` when it is set."""
    from serve.app import create_app

    path = os.environ.get("SLOW_PIPELINE_LOG")
    return create_app(pipeline=SlowPipeline(FakeIndex(demo_catalog()), spin_s=10.0,
                                            log=FileLog(path) if path else None))
