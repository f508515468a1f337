"""Fixtures for the training tests: a tiny catalog and a small OpenAI-compatible server on loopback.

The server (:class:`FakeLLM`) is a real HTTP server on 127.0.0.1 with an ephemeral port;
it answers chat completions deterministically from the prompt, and can be told to fail
(500/429 a number of times, a fixed status, a non-JSON body, unusable text) so the tests
exercise the client's real HTTP path.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from fakes import probe_reply   # tests/ is on sys.path (tests/conftest.py)

TOOLS = [
    {"server": "Weather", "server_description": "Forecasts and alerts.", "name": "get_forecast",
     "description": "Get the weather forecast for a city",
     "inputSchema": {"type": "object", "properties": {"city": {"type": "string", "description": "City"}},
                     "required": ["city"]}},
    {"server": "Weather", "name": "get_alerts", "description": "List weather alerts for a US state"},
    {"server": "Mail", "server_description": "An email account.", "name": "send_email",
     "description": "Send an email", "inputSchema": {"type": "object", "properties": {
         "to": {"type": "string"}, "body": {"type": "string"}}}},
    {"server": "Mail", "name": "list_inbox", "description": "List messages in the inbox"},
]

QUESTIONS = [
    {"id": "q1", "split": "train", "style": "explicit", "query": "run get_forecast for Paris tomorrow",
     "need": "weather forecast for a city", "server": "Weather", "tool": "get_forecast"},
    {"id": "q2", "split": "train", "style": "function", "query": "please send_email to bob@example.com",
     "need": "send an email", "server": "Mail", "tool": "send_email"},
]


class FakeLLM:
    """Deterministic chat completions, with switchable failures.

    Attributes:
        model: the one model served (others get 404).
        api_key: when set, requests without ``Bearer {api_key}`` get 401.
        logprobs: return token log-probabilities when asked.
        reject_logprobs: answer 400 to requests asking for log-probabilities.
        fail: answer this status (default 500) to this many requests first.
        status: answer every request with this status.
        malformed: answer 200 with a body that is not JSON.
        bad_text: answer this many generation requests with unusable text first.
        delay: seconds to hold each request (to observe concurrency and timeouts).
        requests: bodies of the requests answered; ``arrivals`` counts requests received.
    """

    def __init__(self) -> None:
        self.model = "fake-model"
        self.api_key: str | None = None
        self.logprobs = True
        self.reject_logprobs = False
        self.fail = 0
        self.fail_status = 500
        self.status: int | None = None
        self.malformed = False
        self.bad_text = 0
        self.delay = 0.0
        self.judge_yes = 0.85                  # the probe judge's answer when a tool's words are in the request
        self.judged: list[tuple[str, str]] = []
        self.requests: list[dict[str, Any]] = []
        self.arrivals = 0
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # --------------------------------------------------------- answers

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                with fake._lock:
                    fake.arrivals += 1
                    fake._in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake._in_flight)
                try:
                    if fake.delay:
                        time.sleep(fake.delay)
                    status, body = fake.answer(self.path, dict(self.headers), raw)
                finally:
                    with fake._lock:
                        fake._in_flight -= 1
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
                    pass

        return Handler

    def answer(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        body = json.loads(raw)
        with self._lock:
            self.requests.append(body)
            failing = self.fail > 0
            if failing:
                self.fail -= 1
        if path != "/v1/chat/completions":
            return 404, {"error": {"message": f"no route {path}"}}
        if self.status is not None:
            return self.status, {"error": {"message": "forced status"}}
        if failing:
            return self.fail_status, {"error": {"message": "try later"}}
        if self.api_key and headers.get("Authorization") != f"Bearer {self.api_key}":
            return 401, {"error": {"message": "invalid api key"}}
        if body.get("model") != self.model:
            return 404, {"error": {"message": f"model {body.get('model')} not found"}}
        if self.malformed:
            return 200, b"<html>this is not json"
        if body.get("logprobs") and self.reject_logprobs:
            return 400, {"error": {"message": "logprobs is not supported by this model"}}
        system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
        probe = self._probe_answer(system, user)
        if probe is not None:
            return 200, self._completion(probe)
        if "Writing example requests" in system or "Writing training questions" in system:
            with self._lock:
                bad = self.bad_text > 0
                if bad:
                    self.bad_text -= 1
            if bad:
                return 200, self._completion("Sure! Here are some ideas, not in JSON.")
            tool = re.search(r"^Tool: (.*)$", user, re.MULTILINE).group(1)
            if "Writing example requests" in system:
                n = int(re.search(r"Write exactly (\d+) example requests", user).group(1))
                text = json.dumps({"examples": [f"request {i} for {tool}" for i in range(n)]})
            else:
                styles = re.search(r"in this order: (.*)$", user, re.MULTILINE).group(1).split(", ")
                text = "```json\n" + json.dumps({"questions": [
                    {"style": s, "query": f"a {s} question for {tool}", "need": f"need {tool}"}
                    for s in styles]}) + "\n```"
            return 200, self._completion(text)
        query = re.search(r"^User request: (.*)$", user, re.MULTILINE).group(1)
        tool = re.search(r"^Candidate tool: .*? / (.*?): ", user, re.MULTILINE).group(1)
        yes = tool.lower() in query.lower()
        if body.get("logprobs"):
            word, other = ("yes", "no") if yes else ("no", "yes")
            content = [{"token": word, "logprob": -0.1, "top_logprobs": [
                {"token": word, "logprob": -0.1}, {"token": other, "logprob": -2.4},
                {"token": "Maybe", "logprob": -6.0}]}]
            return 200, self._completion(word, content if self.logprobs else None)
        return 200, self._completion(json.dumps({"p_yes": 0.85 if yes else 0.05}))

    def _probe_answer(self, system: str, user: str) -> str | None:
        return probe_reply(system, user, self.judge_yes, self.judged)

    def _completion(self, text: str, logprob_content: list | None = None) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                  "finish_reason": "stop"}
        choice["logprobs"] = {"content": logprob_content} if logprob_content is not None else None
        return {"id": "cmpl-1", "object": "chat.completion", "model": self.model, "choices": [choice]}


@pytest.fixture(autouse=True)
def _no_llm_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TOOLRANK_LLM_BASE_URL", "TOOLRANK_LLM_MODEL", "TOOLRANK_LLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def llm():
    fake = FakeLLM()
    yield fake
    fake.close()


@pytest.fixture
def tiny_catalog(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in TOOLS), encoding="utf-8")
    return path


@pytest.fixture
def questions_file(tmp_path: Path) -> Path:
    path = tmp_path / "questions.jsonl"
    path.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS), encoding="utf-8")
    return path
