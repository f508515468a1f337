"""Deterministic stand-ins shared by tests: no model files, no network."""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from typing import Sequence

import numpy as np

from retrieval.catalog.model import Catalog, Tool, ToolId


class HashEncoder:
    """Bag-of-words hashed into 64 dims: texts sharing words get similar vectors."""

    name = "hash-encoder-test"
    dim = 64

    def __init__(self) -> None:
        self.calls = 0          # how many texts were embedded (to check incremental updates)

    def encode(self, texts: Sequence[str], *, batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
        self.calls += len(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"[a-z0-9]+", t.lower()):
                h = int(hashlib.md5(w.encode()).hexdigest(), 16)
                out[i, h % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.clip(norms, 1e-9, None)


def tiny_catalog() -> Catalog:
    """Four servers, eight tools, hand-checked."""
    tools = [
        Tool("Elasticsearch", "get_shards", "Get shard allocation and status for an index", None, "Search engine"),
        Tool("Elasticsearch", "list_indices", "List all indices in the cluster", None, "Search engine"),
        Tool("GitHub", "create_issue", "Create a new issue in a repository", None, "Code hosting"),
        Tool("GitHub", "list_pull_requests", "List pull requests of a repository", None, "Code hosting"),
        Tool("Slack", "post_message", "Post a message to a channel", None, "Team chat"),
        Tool("Slack", "list_channels", "List the channels of a workspace", None, "Team chat"),
        Tool("Weather", "get_forecast", "Weather forecast for a city", None, "Weather data"),
        Tool("Weather", "get_alerts", "Severe weather alerts for a region", None, "Weather data"),
    ]
    return Catalog(tools)


def logit(p: float) -> float:
    return math.log(p / (1.0 - p))


class FakeScorer:
    """Fixed probability per tool name (as a logit), whatever the request.

    ``path``: where a real scorer's model folder would be (its combiner files), or None."""

    info = {"name": "fake-scorer", "version": 3}

    def __init__(self, probs: dict[str, float] | None = None, default: float = 0.01, path=None):
        self.probs = dict(probs or {})
        self.default = default
        self.path = path
        self.calls: list[tuple[str, str | None, list[ToolId]]] = []

    def logits(self, request, need, tools) -> np.ndarray:
        self.calls.append((request, need, [t.id for t in tools]))
        return np.array([logit(self.probs.get(t.name, self.default)) for t in tools])

    def score(self, request, need, tools) -> list[float]:
        return [self.probs.get(t.name, self.default) for t in tools]


def probe_reply(system: str, user: str, judge_yes: float = 0.85, judged: list | None = None) -> str | None:
    """The calibration probes' three prompts (retrieval.pipeline.probes) answered by rule, or None for another
    prompt: a request naming the tool's words, a need repeating it, and a judge that says ``judge_yes`` when the
    tool's words are in the request (0.05 otherwise; ``judged`` collects what it read)."""
    if system.startswith("# Writing a probe request"):
        tool = re.search(r"^Tool: (.*)$", user, re.MULTILINE).group(1)
        return json.dumps({"request": f"please {tool.replace('_', ' ')} for me"})
    if system.startswith("# Writing an agent's one-line need"):
        request = user.split("The user's request:\n", 1)[1].split("\n", 1)[0]
        return json.dumps({"need": request.removeprefix("please ").removesuffix(" for me")})
    if system.startswith(("# Does this tool do what the user asked?", "# Is this tool a right one to call")):
        request = user.split("The user's request:\n", 1)[1].split("\n", 1)[0]
        tool = re.search(r"^Tool: (.*)$", user, re.MULTILINE).group(1)
        if judged is not None:
            judged.append((request, tool))
        return json.dumps({"p_yes": judge_yes if tool.replace("_", " ") in request else 0.05})
    return None


class ProbeClient:
    """A chat client answering the probes' prompts by rule (:func:`probe_reply`); ``gate``: hold every reply until set;
    ``fail``: answer every call with an endpoint error."""

    def __init__(self, gate: threading.Event | None = None, fail: bool = False, judge_yes: float = 0.85):
        self.gate, self.fail, self.judge_yes = gate, fail, judge_yes
        self.calls, self.closed = 0, False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.closed = True
        return False

    def close(self):
        self.closed = True

    def chat(self, messages, temperature=0.0):
        self.calls += 1
        if self.gate is not None:
            assert self.gate.wait(30)
        if self.fail:
            from retrieval.writing.llm import EndpointError

            raise EndpointError("endpoint said 503", status=503)
        text = probe_reply(messages[0]["content"], messages[-1]["content"], self.judge_yes)
        assert text is not None, messages[0]["content"][:80]
        return type("Reply", (), {"text": text})()
