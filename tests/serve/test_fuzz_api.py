"""Schemathesis over the service's own OpenAPI document: no input gives a 5xx.

Cases are generated from ``/openapi.json`` (valid and invalid ones) and sent to the real
retrieval pipeline (ToolIndex with the hash encoder, a fake scorer): read endpoints with a
tenant key, catalog endpoints with an admin key. A small budget runs by default; ``-m slow``
runs a long one and prints the status counts per endpoint group.
"""

from __future__ import annotations

import json
from collections import Counter

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, reject, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from real_app import key, real_client

CATALOG = {("PUT", "/v1/servers/{name}"), ("DELETE", "/v1/servers/{name}")}


def fuzz(tmp_path, per_operation: int, pipeline=None) -> dict[str, Counter]:
    client = real_client(tmp_path, pipeline)
    seen: dict[str, Counter] = {"read (tenant key)": Counter(), "catalog (admin key)": Counter()}
    failures: list[str] = []
    try:
        schema = schemathesis.openapi.from_dict(client.get("/openapi.json").json())
        for result in schema.get_all_operations():
            op = result.ok()
            catalog = (op.method.upper(), op.path) in CATALOG
            group = "catalog (admin key)" if catalog else "read (tenant key)"
            headers = key("ops" if catalog else "acme")
            takes_input = any(True for _ in op.iter_parameters()) or bool(op.get_request_payload_content_types())
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE) if takes_input else (GenerationMode.POSITIVE,):

                @settings(max_examples=per_operation, deadline=None, database=None, phases=[Phase.generate],
                          suppress_health_check=list(HealthCheck))
                @given(case=op.as_strategy(generation_mode=mode))
                def send(case) -> None:
                    kw = case.as_transport_kwargs(base_url="http://testserver")
                    content = kw.get("data")
                    if "json" in kw:  # serialised here: lone surrogates travel as \\ud800 escapes
                        content = json.dumps(kw["json"], ensure_ascii=True, allow_nan=True).encode()
                    sent_headers = {**{k: v for k, v in (kw.get("headers") or {}).items()
                                       if k.lower() not in ("authorization", "x-api-key")}, **headers}
                    if "json" in kw:
                        sent_headers["Content-Type"] = "application/json"
                    try:
                        r = client.request(kw["method"], kw["url"], params=kw.get("params"), headers=sent_headers,
                                           content=content)
                    except (httpx.InvalidURL, httpx.LocalProtocolError, UnicodeError, ValueError):
                        reject()  # the client cannot even send it
                    seen[group][r.status_code] += 1
                    if r.status_code >= 500:
                        failures.append(f"{kw['method']} {kw['url']} -> {r.status_code}: {r.text[:200]}")
                    elif r.status_code >= 400:  # every refusal has the documented error shape
                        assert set(r.json()["error"]) >= {"code", "message"}, r.text

                try:
                    send()
                except Unsatisfiable:  # nothing invalid to send (an operation without parameters)
                    assert mode is GenerationMode.NEGATIVE, f"{op.method} {op.path}: no valid case generated"
    finally:
        client.__exit__(None, None, None)
    assert not failures, "\n".join(failures[:10])
    return seen


def test_no_input_gives_a_5xx(tmp_path):
    seen = fuzz(tmp_path, per_operation=8)
    assert all(sum(c.values()) > 0 for c in seen.values())


@pytest.mark.slow
def test_no_input_gives_a_5xx_long(tmp_path):
    """With the shipped scorer when it is there (the cross-encoder's tokenizer reads every text)."""
    from fakes import HashEncoder, tiny_catalog
    from retrieval.index.embedded import ToolIndex
    from retrieval.pipeline.flow import Pipeline

    pipeline = None
    try:
        from scorer import Scorer, default_model_path
        if (default_model_path() / "model.onnx").exists():
            pipeline = Pipeline(ToolIndex.build(tiny_catalog(), encoder=HashEncoder()), Scorer.load(default_model_path()))
    except ImportError:
        pass
    print(f"fuzz scorer: {'shipped model' if pipeline is not None else 'fake'}")
    seen = fuzz(tmp_path, per_operation=300, pipeline=pipeline)
    for group, counts in seen.items():
        fivexx = sum(n for s, n in counts.items() if s >= 500)
        print(f"fuzz {group}: {sum(counts.values())} requests, {fivexx} x 5xx, statuses {dict(sorted(counts.items()))}")
