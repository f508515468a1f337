"""The generator against a real OpenAI-compatible server on loopback (see conftest.FakeLLM)."""

from __future__ import annotations

import ctypes
import json
import math
import socket
import sys
import types
from pathlib import Path

import pytest

from retrieval.catalog.formats import load_catalog
from retrieval.catalog.model import Tool, ToolId
from retrieval.writing.llm import ChatClient, EndpointError, GenerationError, LLMConfig, TokenLogprob
from retrieval.writing.prompting import load_prompt as load_writing_prompt
from retrieval.writing.prompting import parse_examples
from training import generate
from training.judge import (
    LlamaCppJudge,
    MissingDependencyError,
    p_yes_from_logits,
    p_yes_from_logprobs,
    p_yes_from_text,
    render_chat,
)
from training.prompting import JUDGMENT_QUESTION, judgment_messages, load_prompt

#: P(yes) the fake server's log-probabilities give for a yes answer (yes -0.1, no -2.4).
P_YES_FROM_LOGPROBS = 1 / (1 + math.exp(-2.3))

EXACT_QUESTION = ("Would this tool, called with suitable arguments, itself do what the user asked? "
                  "A merely related tool, or one that needs another tool to finish the job, is not enough.")


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def endpoint(llm, *extra: str) -> list[str]:
    return ["--base-url", llm.url, "--model", llm.model, "--no-progress", "--backoff", "0", *extra]


# ---------------------------------------------------------------- examples


def test_examples_written_then_resumed_without_requests(llm, tiny_catalog, tmp_path):
    out = tmp_path / "examples.jsonl"
    assert generate.main(["examples", "--catalog", str(tiny_catalog), "--out", str(out), *endpoint(llm)]) == 0
    got = rows(out)
    assert [(r["server"], r["tool"]) for r in got] == [(t.server, t.name) for t in load_catalog(tiny_catalog)]
    assert all(len(r["examples"]) == 5 and len(set(r["examples"])) == 5 for r in got)
    assert len(llm.requests) == 4
    before = out.read_text()
    assert generate.main(["examples", "--catalog", str(tiny_catalog), "--out", str(out), *endpoint(llm)]) == 0
    assert len(llm.requests) == 4  # nothing asked again
    assert out.read_text() == before


def test_examples_partial_run_resumes_the_rest(llm, tiny_catalog, tmp_path):
    out = tmp_path / "examples.jsonl"
    args = ["examples", "--catalog", str(tiny_catalog), "--out", str(out), "--n", "3", *endpoint(llm)]
    assert generate.main([*args, "--limit", "1"]) == 0
    assert len(rows(out)) == 1 and len(llm.requests) == 1
    assert generate.main(args) == 0
    assert len(llm.requests) == 4
    assert len({(r["server"], r["tool"]) for r in rows(out)}) == 4
    assert all(len(r["examples"]) == 3 for r in rows(out))


def test_unfinished_last_line_is_dropped_and_redone(llm, tiny_catalog, tmp_path):
    out = tmp_path / "examples.jsonl"
    out.write_text('{"server": "Weather", "tool": "get_forecast", "examples": ["a", "b", "c", "d", "e"]}\n'
                   '{"server": "Weather", "tool": "get_al', encoding="utf-8")
    assert generate.main(["examples", "--catalog", str(tiny_catalog), "--out", str(out), *endpoint(llm)]) == 0
    assert len(llm.requests) == 3
    assert len(rows(out)) == 4


def test_unusable_text_is_asked_again(llm, tiny_catalog, tmp_path):
    llm.bad_text = 1
    out = tmp_path / "examples.jsonl"
    assert generate.main(["examples", "--catalog", str(tiny_catalog), "--out", str(out), "--limit", "1",
                          *endpoint(llm)]) == 0
    assert len(llm.requests) == 2 and len(rows(out)) == 1


def test_text_that_never_parses_stops_with_exit_2(llm, tiny_catalog, tmp_path, capsys):
    llm.bad_text = 100
    out = tmp_path / "examples.jsonl"
    rc = generate.main(["examples", "--catalog", str(tiny_catalog), "--out", str(out), "--limit", "1",
                        *endpoint(llm)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "no JSON object" in err and "after 3 attempts" in err and "Traceback" not in err


# ---------------------------------------------------------------- questions


def test_questions_by_style_with_needs_and_stable_ids(llm, tiny_catalog, tmp_path):
    splits = tmp_path / "splits.json"
    splits.write_text(json.dumps({"servers": {"Weather": "train", "Mail": "dev"}}))
    out = tmp_path / "questions.jsonl"
    args = ["questions", "--catalog", str(tiny_catalog), "--out", str(out), "--per-tool", "2",
            "--splits", str(splits), *endpoint(llm)]
    assert generate.main(args) == 0
    got = rows(out)
    assert len(got) == 8 and len(llm.requests) == 4
    assert len({r["id"] for r in got}) == 8
    for r in got:
        assert r["id"] == generate.question_id(r["server"], r["tool"], r["style"])
        assert r["query"] == f"a {r['style']} question for {r['tool']}" and r["need"] == f"need {r['tool']}"
        assert r["split"] == {"Weather": "train", "Mail": "dev"}[r["server"]]
    assert generate.main(args) == 0
    assert len(llm.requests) == 4


def test_questions_reject_unknown_style(llm, tiny_catalog, tmp_path, capsys):
    rc = generate.main(["questions", "--catalog", str(tiny_catalog), "--out", str(tmp_path / "q.jsonl"),
                        "--styles", "explicit,sarcastic", *endpoint(llm)])
    assert rc == 2 and "sarcastic" in capsys.readouterr().err


# ---------------------------------------------------------------- judgments


def write_candidates(path: Path) -> Path:
    cands = [{"qid": "q1", "server": "Weather", "tool": "get_alerts"},
             {"qid": "q1", "server": "Mail", "tool": "list_inbox"},
             {"qid": "q2", "server": "Mail", "tool": "list_inbox"}]
    path.write_text("".join(json.dumps(c) + "\n" for c in cands))
    return path


def test_judgments_from_logprobs(llm, tiny_catalog, questions_file, tmp_path):
    out = tmp_path / "judgments.jsonl"
    cands = write_candidates(tmp_path / "cands.jsonl")
    args = ["judgments", "--catalog", str(tiny_catalog), "--questions", str(questions_file),
            "--candidates", str(cands), "--out", str(out), *endpoint(llm)]
    assert generate.main(args) == 0
    got = {(r["qid"], r["server"], r["tool"]): r for r in rows(out)}
    # the labelled tool is always judged beside the listed candidates
    assert set(got) == {("q1", "Weather", "get_alerts"), ("q1", "Mail", "list_inbox"),
                        ("q1", "Weather", "get_forecast"), ("q2", "Mail", "list_inbox"),
                        ("q2", "Mail", "send_email")}
    assert got[("q1", "Weather", "get_forecast")]["p_yes"] == pytest.approx(P_YES_FROM_LOGPROBS, abs=1e-6)
    assert got[("q1", "Mail", "list_inbox")]["p_yes"] == pytest.approx(1 - P_YES_FROM_LOGPROBS, abs=1e-6)
    assert {r["source"] for r in got.values()} == {"logprobs"}
    assert {r["model"] for r in got.values()} == {"fake-model"}
    req = llm.requests[0]
    assert req["logprobs"] is True and req["top_logprobs"] == 5 and req["temperature"] == 0
    assert EXACT_QUESTION in req["messages"][-1]["content"]
    n = len(llm.requests)
    assert generate.main(args) == 0
    assert len(llm.requests) == n


def test_judgments_fall_back_to_verbalised_without_logprobs(llm, tiny_catalog, questions_file, tmp_path):
    llm.logprobs = False
    out = tmp_path / "judgments.jsonl"
    assert generate.main(["judgments", "--catalog", str(tiny_catalog), "--questions", str(questions_file),
                          "--candidates", str(write_candidates(tmp_path / "c.jsonl")), "--out", str(out),
                          "--concurrency", "1", *endpoint(llm)]) == 0
    got = {(r["qid"], r["tool"]): r for r in rows(out)}
    assert {r["source"] for r in got.values()} == {"verbalised"}
    assert got[("q2", "send_email")]["p_yes"] == 0.85 and got[("q2", "list_inbox")]["p_yes"] == 0.05
    # one logprobs request found the endpoint gives none; the rest ask in words only
    assert sum(1 for r in llm.requests if r.get("logprobs")) == 1
    assert len(llm.requests) == 6


def test_judgments_fall_back_when_endpoint_rejects_logprobs(llm, tiny_catalog, questions_file, tmp_path):
    llm.reject_logprobs = True
    out = tmp_path / "judgments.jsonl"
    assert generate.main(["judgments", "--catalog", str(tiny_catalog), "--questions", str(questions_file),
                          "--candidates", str(write_candidates(tmp_path / "c.jsonl")), "--out", str(out),
                          "--concurrency", "1", *endpoint(llm)]) == 0
    assert {r["source"] for r in rows(out)} == {"verbalised"} and len(rows(out)) == 5


def test_method_logprobs_without_logprobs_is_an_error(llm, tiny_catalog, questions_file, tmp_path, capsys):
    llm.logprobs = False
    rc = generate.main(["judgments", "--catalog", str(tiny_catalog), "--questions", str(questions_file),
                        "--candidates", str(write_candidates(tmp_path / "c.jsonl")),
                        "--out", str(tmp_path / "j.jsonl"), "--method", "logprobs", *endpoint(llm)])
    assert rc == 2 and "no log-probabilities" in capsys.readouterr().err


def test_candidates_fn_hook_mines_candidates(llm, tiny_catalog, questions_file, tmp_path):
    seen = []

    def mine(question, k):
        seen.append((question["id"], k))
        return [("Weather", "get_forecast"), ("Mail", "send_email"), ("Mail", "list_inbox")]

    out = tmp_path / "judgments.jsonl"
    rc = generate.main(["judgments", "--catalog", str(tiny_catalog), "--questions", str(questions_file),
                        "--out", str(out), "--k", "1", *endpoint(llm)], candidates_fn=mine)
    assert rc == 0
    assert seen == [("q1", 2), ("q2", 2)]
    # top k=1 other than the labelled tool, plus the labelled tool
    assert sorted((r["qid"], r["tool"]) for r in rows(out)) == [
        ("q1", "get_forecast"), ("q1", "send_email"), ("q2", "get_forecast"), ("q2", "send_email")]


def test_default_candidates_come_from_tool_index(llm, tiny_catalog, questions_file, tmp_path, monkeypatch):
    built = []

    class FakeIndex:
        @classmethod
        def build(cls, catalog):
            built.append(len(catalog))
            return cls()

        def retrieve(self, query, k=100):
            return [types.SimpleNamespace(tool_id=ToolId("Mail", "list_inbox"))][:k]

    monkeypatch.setitem(sys.modules, "retrieval.index.embedded", types.SimpleNamespace(ToolIndex=FakeIndex))
    out = tmp_path / "judgments.jsonl"
    assert generate.main(["judgments", "--catalog", str(tiny_catalog), "--questions", str(questions_file),
                          "--out", str(out), *endpoint(llm)]) == 0
    assert built == [4]
    assert sorted((r["qid"], r["tool"]) for r in rows(out)) == [
        ("q1", "get_forecast"), ("q1", "list_inbox"), ("q2", "list_inbox"), ("q2", "send_email")]


def test_no_candidates_and_no_index_is_a_clear_error(llm, tiny_catalog, questions_file, tmp_path,
                                                     monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "retrieval.index.embedded", None)
    rc = generate.main(["judgments", "--catalog", str(tiny_catalog), "--questions", str(questions_file),
                        "--out", str(tmp_path / "j.jsonl"), *endpoint(llm)])
    assert rc == 2 and "--candidates FILE" in capsys.readouterr().err
    assert llm.requests == []


def test_unknown_candidate_is_an_error(llm, tiny_catalog, questions_file, tmp_path, capsys):
    cands = tmp_path / "c.jsonl"
    cands.write_text(json.dumps({"qid": "q1", "server": "Weather", "tool": "get_tides"}) + "\n")
    rc = generate.main(["judgments", "--catalog", str(tiny_catalog), "--questions", str(questions_file),
                        "--candidates", str(cands), "--out", str(tmp_path / "j.jsonl"), *endpoint(llm)])
    assert rc == 2 and "get_tides" in capsys.readouterr().err and llm.requests == []


# ---------------------------------------------------------------- endpoint failures


@pytest.mark.parametrize("status", [500, 503, 429])
def test_transient_failures_are_retried(llm, tiny_catalog, tmp_path, status):
    llm.fail, llm.fail_status = 2, status
    out = tmp_path / "examples.jsonl"
    assert generate.main(["examples", "--catalog", str(tiny_catalog), "--out", str(out), "--limit", "1",
                          "--concurrency", "1", *endpoint(llm)]) == 0
    assert len(llm.requests) == 3 and len(rows(out)) == 1


def test_retries_give_up_with_a_message(llm, tiny_catalog, tmp_path, capsys):
    llm.fail = 100
    rc = generate.main(["examples", "--catalog", str(tiny_catalog), "--out", str(tmp_path / "e.jsonl"),
                        "--limit", "1", "--max-retries", "2", *endpoint(llm)])
    err = capsys.readouterr().err
    assert rc == 2 and "kept failing after 3 attempts" in err and "HTTP 500" in err
    assert len(llm.requests) == 3


def test_timeouts_are_retried(llm):
    llm.delay = 0.3
    config = LLMConfig(base_url=llm.url, model=llm.model, timeout=0.05, max_retries=1, backoff=0)
    with ChatClient(config) as client, pytest.raises(EndpointError, match="kept failing after 2 attempts"):
        client.chat([{"role": "user", "content": "User request: x\nCandidate tool: a / b: c"}])
    assert llm.arrivals == 2


def test_malformed_reply_is_exit_2_without_traceback(llm, tiny_catalog, tmp_path, capsys):
    llm.malformed = True
    rc = generate.main(["examples", "--catalog", str(tiny_catalog), "--out", str(tmp_path / "e.jsonl"),
                        *endpoint(llm)])
    err = capsys.readouterr().err
    assert rc == 2 and "not JSON" in err and "Traceback" not in err


def test_reply_without_choices_is_malformed(llm, monkeypatch):
    monkeypatch.setattr(llm, "answer", lambda *a: (200, {"object": "list", "data": []}))
    with ChatClient(LLMConfig(base_url=llm.url, model=llm.model)) as client, \
            pytest.raises(GenerationError, match="without a 'choices' list"):
        client.chat([{"role": "user", "content": "hi"}])


def test_connection_refused_is_a_clear_error(tiny_catalog, tmp_path, capsys):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc = generate.main(["examples", "--catalog", str(tiny_catalog), "--out", str(tmp_path / "e.jsonl"),
                        "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "m", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot connect" in err and "Traceback" not in err


def test_wrong_api_key_is_401(llm, tiny_catalog, tmp_path, capsys):
    llm.api_key = "right"
    rc = generate.main(["examples", "--catalog", str(tiny_catalog), "--out", str(tmp_path / "e.jsonl"),
                        "--concurrency", "1", *endpoint(llm), "--api-key", "wrong"])
    err = capsys.readouterr().err
    assert rc == 2 and "401" in err and "TOOLRANK_LLM_API_KEY" in err
    assert len(llm.requests) == 1  # not retried


def test_unknown_model_is_404(llm, tiny_catalog, tmp_path, capsys):
    rc = generate.main(["examples", "--catalog", str(tiny_catalog), "--out", str(tmp_path / "e.jsonl"),
                        "--base-url", llm.url, "--model", "no-such-model", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "404" in err and "no-such-model" in err


def test_settings_come_from_environment(llm, tiny_catalog, tmp_path, monkeypatch):
    llm.api_key = "secret"
    monkeypatch.setenv("TOOLRANK_LLM_BASE_URL", llm.url)
    monkeypatch.setenv("TOOLRANK_LLM_MODEL", llm.model)
    monkeypatch.setenv("TOOLRANK_LLM_API_KEY", "secret")
    out = tmp_path / "e.jsonl"
    assert generate.main(["examples", "--catalog", str(tiny_catalog), "--out", str(out), "--limit", "1"]) == 0
    assert len(rows(out)) == 1  # (with the progress bar on)


def test_output_of_another_kind_is_refused(llm, tiny_catalog, tmp_path, capsys):
    out = tmp_path / "judgments.jsonl"
    out.write_text('{"qid": "q1", "server": "Mail", "tool": "send_email", "p_yes": 1.0}\n')
    rc = generate.main(["examples", "--catalog", str(tiny_catalog), "--out", str(out), *endpoint(llm)])
    assert rc == 2 and "line 1: not a row of this kind" in capsys.readouterr().err
    assert llm.requests == []


def test_missing_endpoint_names_the_variable(tiny_catalog, tmp_path, capsys):
    rc = generate.main(["examples", "--catalog", str(tiny_catalog), "--out", str(tmp_path / "e.jsonl")])
    assert rc == 2 and "TOOLRANK_LLM_BASE_URL" in capsys.readouterr().err


def test_concurrency_is_bounded(llm, tiny_catalog, tmp_path):
    llm.delay = 0.05
    out = tmp_path / "e.jsonl"
    assert generate.main(["examples", "--catalog", str(tiny_catalog), "--out", str(out), "--concurrency", "2",
                          *endpoint(llm)]) == 0
    assert llm.max_in_flight == 2 and len(rows(out)) == 4


def test_usage_error_returns_2(capsys):
    assert generate.main(["summon"]) == 2
    assert generate.main(["--help"]) == 0


# ---------------------------------------------------------------- prompts and P(yes) readers


def test_judgment_prompt_asks_the_exact_question():
    assert JUDGMENT_QUESTION == EXACT_QUESTION
    tool = Tool("Mail", "send_email", "Send an email")
    for mode in ("logprobs", "verbalised"):
        user = judgment_messages("mail bob", "send an email", tool, mode)[-1]["content"]
        assert EXACT_QUESTION in user
        assert "User request: mail bob\nThe assistant is looking for: send an email\n" \
               "Candidate tool: Mail / send_email: Send an email" in user
    assert "The assistant is looking for" not in judgment_messages("x", None, tool, "logprobs")[-1]["content"]
    for name in ("questions", "judgments"):
        assert load_prompt(name).system
    assert load_writing_prompt("examples").system     # index time writes example requests with it too


def test_p_yes_from_logprobs():
    tok = TokenLogprob("Yes", -0.5, {"Yes": -0.5, " yes": -1.5, "No": -2.0, "Maybe": -4.0})
    expected = 1 / (1 + math.exp(-2.0) / (math.exp(-0.5) + math.exp(-1.5)))
    assert p_yes_from_logprobs([TokenLogprob(" ", -0.01, {" ": -0.01}), tok]) == pytest.approx(expected)
    # a word missing from the top list gets the lowest listed log-probability
    only_yes = TokenLogprob("yes", -0.01, {"yes": -0.01, "maybe": -5.0})
    assert p_yes_from_logprobs([only_yes]) == pytest.approx(1 / (1 + math.exp(-4.99)))
    assert p_yes_from_logprobs([TokenLogprob("Sure", -0.1, {"Sure": -0.1})]) is None


@pytest.mark.parametrize("text, p", [('{"p_yes": 0.35}', 0.35), ("```json\n{\"p_yes\": 1}\n```", 1.0),
                                     ("0.7", 0.7), ("I'd say 85%", 0.85), ("Yes.", 1.0), ("no", 0.0),
                                     ("cannot tell", None)])
def test_p_yes_from_text(text, p):
    assert p_yes_from_text(text) == p


def test_parse_examples_needs_enough_distinct():
    assert parse_examples('{"examples": ["a", "b", "b", "c"]}', 3) == ["a", "b", "c"]
    with pytest.raises(GenerationError, match="2 distinct example requests, 3 were asked"):
        parse_examples('{"examples": ["a", "a", "b"]}', 3)


# ---------------------------------------------------------------- llama-cpp path (no llama-cpp here)


class FakeLlama:
    """Stands in for ``llama_cpp.Llama``: the few methods the judge calls, logits through ctypes."""

    vocab = {"yes": 1, "Yes": 2, "no": 3, "No": 4}

    def __init__(self, logits: list[float]):
        self._logits = (ctypes.c_float * len(logits))(*logits)
        self._ctx = types.SimpleNamespace(
            get_logits=lambda: ctypes.cast(self._logits, ctypes.POINTER(ctypes.c_float)))
        self.metadata = {"tokenizer.chat_template":
                         "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
                         "{% if add_generation_prompt %}[assistant]{% endif %}"}
        self.evaluated: list[list[int]] = []

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        word = text.decode()
        if word in self.vocab:
            return [self.vocab[word]]
        return [9] * max(2, len(word.split()))

    def n_vocab(self) -> int:
        return len(self._logits)

    def reset(self) -> None:
        self.evaluated.clear()

    def eval(self, tokens: list[int]) -> None:
        self.evaluated.append(list(tokens))


def test_llama_judge_reads_last_token_logits():
    logits = [0.0, 2.0, 1.0, -1.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0]
    fake = FakeLlama(logits)
    judge = LlamaCppJudge("qwen-1.5b.gguf", llm=fake)
    j = judge("send mail to bob", None, Tool("Mail", "send_email", "Send an email"))
    assert j.source == "logits"
    assert j.p_yes == pytest.approx(p_yes_from_logits([2.0, 1.0], [-1.0, 0.5]))
    assert fake.evaluated and judge.model == "qwen-1.5b.gguf"


def test_render_chat_uses_template_or_chatml():
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert render_chat(msgs, "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                             "{% if add_generation_prompt %}<a>{% endif %}") == "<system>S<user>U<a>"
    assert render_chat(msgs, None) == ("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
                                       "<|im_start|>assistant\n")


def test_llama_backend_without_llama_cpp_is_a_clear_error(tiny_catalog, questions_file, tmp_path,
                                                          monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'toolrank\[llama\]'"):
        LlamaCppJudge(tmp_path / "model.gguf")
    base = ["judgments", "--catalog", str(tiny_catalog), "--questions", str(questions_file),
            "--candidates", str(write_candidates(tmp_path / "c.jsonl")), "--out", str(tmp_path / "j.jsonl"),
            "--backend", "llama-cpp", "--no-progress"]
    assert generate.main(base) == 2
    assert "--gguf" in capsys.readouterr().err
    assert generate.main([*base, "--gguf", str(tmp_path / "model.gguf")]) == 2
    assert "toolrank[llama]" in capsys.readouterr().err
