"""Index-time writing is bounded as a whole and never echoes a key (issue 36.5)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from retrieval.catalog.formats import load_catalog
from retrieval.index.examples import MAX_EXAMPLE_CHARS, clean_example, load_cache, write_examples
from retrieval.writing.llm import ChatClient, EndpointError, LLMConfig

KEY = "sk-test-0123456789abcdefXYZ"


class _Server:
    def __init__(self, handler):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _handler(kind):
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if kind == "echo":
                body = json.dumps({"error": "bad gateway", "saw": dict(self.headers)}).encode()
                self.send_response(502)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            try:
                for _ in range(100):       # a byte every 0.1 s: each read is quick, the reply never ends
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.1)
            except (BrokenPipeError, ConnectionResetError):
                pass
    return H


def test_an_endpoint_that_trickles_is_cut_at_the_timeout():
    server = _Server(_handler("trickle"))
    try:
        client = ChatClient(LLMConfig(base_url=server.url, model="m", timeout=1.0, max_retries=0, backoff=0))
        t0 = time.monotonic()
        with client, pytest.raises(EndpointError):
            client.chat([{"role": "user", "content": "hi"}])
        assert time.monotonic() - t0 < 4
    finally:
        server.close()


def test_an_endpoint_echoing_the_key_never_puts_it_in_the_error():
    server = _Server(_handler("echo"))
    try:
        client = ChatClient(LLMConfig(base_url=server.url, model="m", api_key=KEY, max_retries=0, backoff=0))
        with client, pytest.raises(EndpointError) as info:
            client.chat([{"role": "user", "content": "hi"}])
        assert KEY not in str(info.value) and KEY not in getattr(info.value, "body", "")
    finally:
        server.close()


def test_writing_examples_is_bounded_as_a_whole(llm, tiny_catalog, tmp_path):
    llm.delay = 3.0
    cat = load_catalog(tiny_catalog)
    client = ChatClient(LLMConfig(base_url=llm.url, model=llm.model, max_retries=0, backoff=0))
    t0 = time.monotonic()
    with client:
        out = write_examples(cat, client, tmp_path / "cache.jsonl", concurrency=2, deadline_s=0.5)
    assert time.monotonic() - t0 < 2.5
    assert out.missing and out.error and "time allowed ran out" in out.error


def test_written_examples_are_cleaned_and_capped(tmp_path):
    assert clean_example("  find\x00 the\n\nweather  ") == "find the weather"
    assert len(clean_example("x" * 84_000)) == MAX_EXAMPLE_CHARS
    cache = tmp_path / "cache.jsonl"
    cache.write_text(json.dumps({"server": "S", "tool": "t", "hash": "h", "examples": ["y" * 84_000, "  ok  "]}) + "\n")
    assert [len(e) for e in load_cache(cache)[("S", "t", "h")]] == [MAX_EXAMPLE_CHARS, 2]


def test_a_cancelled_client_retries_nothing_and_starts_no_call(llm):
    import threading
    import time

    from retrieval.writing.llm import ChatClient, EndpointError, LLMConfig

    llm.delay, llm.fail = 1.0, 10            # slow failing replies: a client would retry them three times
    client = ChatClient(LLMConfig(base_url=llm.url, model=llm.model, max_retries=3, backoff=0))
    got: list = []

    def call():
        try:
            client.chat([{"role": "user", "content": "hello"}])
        except Exception as exc:   # noqa: BLE001 - what the call ended with is the assertion
            got.append(exc)

    worker = threading.Thread(target=call)
    started = time.monotonic()
    worker.start()
    while llm.arrivals == 0 and time.monotonic() - started < 5:
        time.sleep(0.01)
    client.cancel()
    worker.join(10)
    assert time.monotonic() - started < 2.5 and len(got) == 1 and llm.arrivals == 1   # the reply read, no retry
    assert isinstance(got[0], EndpointError) and "cancelled" in str(got[0])
    with pytest.raises(EndpointError, match="cancelled"):
        client.chat([{"role": "user", "content": "again"}])
