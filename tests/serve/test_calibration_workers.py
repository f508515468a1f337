"""POST /v1/calibration on a real `toolrank serve --workers 2` (the shipped model, a tiny catalog) with a loopback
LLM endpoint: one run for the store, every worker answers GET with it, and every worker serves the saved map."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from fakes import probe_reply, tiny_catalog
from testkit import service_process

pytestmark = pytest.mark.slow


class _Endpoint:
    """A chat-completions endpoint on loopback answering the probes' prompts by rule (tests/fakes.py)."""

    def __init__(self):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                msgs = body["messages"]
                text = probe_reply(msgs[0]["content"], msgs[-1]["content"]) or "{}"
                out = json.dumps({"id": "c", "object": "chat.completion", "model": body["model"], "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_two_workers_share_one_calibration_run_and_its_map(tmp_path):
    catalog = tmp_path / "tools.jsonl"
    catalog.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in tiny_catalog().tools))
    llm = _Endpoint()
    try:
        args = ["--catalog", str(catalog), "--index", str(tmp_path / "store"), "--workers", "2"]
        env = {"TOOLRANK_LLM_BASE_URL": llm.url, "TOOLRANK_LLM_MODEL": "fake", "TOOLRANK_POLL_INTERVAL_S": "0.5"}
        with service_process(args, tmp_path / "serve.log", env=env) as service:
            ask = {"request": "list the pull requests of a repository", "need": "list pull requests"}
            before = httpx.post(f"{service.base}/v1/search", json=ask, timeout=30).json()
            r = httpx.post(f"{service.base}/v1/calibration", json={"probes": 10}, timeout=30)
            assert r.status_code == 202, r.text
            assert httpx.post(f"{service.base}/v1/calibration", timeout=30).status_code == 409   # either worker
            end = time.monotonic() + 120
            while True:
                body = httpx.get(f"{service.base}/v1/calibration", timeout=30).json()
                if body["state"] != "running":
                    break
                assert time.monotonic() < end, body
                time.sleep(0.2)
            assert body["state"] == "done", body
            time.sleep(2)                                                       # the other worker's poll
            seen = {json.dumps(httpx.get(f"{service.base}/readyz", timeout=30).json()["catalog_calibration"])
                    for _ in range(12)}
            assert seen == {json.dumps(body["calibration"])}                    # every worker serves the map
            after = httpx.post(f"{service.base}/v1/search", json=ask, timeout=30).json()
            assert after["decision"] == before["decision"]
            assert [t["tool"] for t in after["tools"]] == [t["tool"] for t in before["tools"]]
    finally:
        llm.close()
