"""Scorer loading and scoring, against fake ONNX graphs whose "logit" is a token count."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

pytest.importorskip("onnx")

from scorer import Scorer, ScorerLoadError, format_record  # noqa: E402
from scorer.reranker import PairEncoder  # noqa: E402


def expected_length_logits(tokenizer_json, pairs, max_length=32):
    """#tokens + 1000 * #second-segment tokens, as the fake 'length' graph computes it."""
    enc = PairEncoder(tokenizer_json, max_length)
    out = []
    for e in enc.encode(pairs):
        out.append(len(e.ids) + 1000 * sum(e.type_ids))
    return np.array(out, dtype=np.float32)


def test_scores_in_order_with_small_batches(make_model_dir, tokenizer_json, tools):
    scorer = Scorer.load(make_model_dir("length"), threads=1, batch_size=2)
    pairs = [format_record("mail the report to ana", "send email", t) for t in tools]
    logits = scorer.logits("mail the report to ana", "send email", tools)
    assert logits.dtype == np.float32 and logits.shape == (len(tools),)
    np.testing.assert_array_equal(logits, expected_length_logits(tokenizer_json, pairs))
    assert len(set(logits.tolist())) > 2  # lengths really differ, so the order check means something


def test_score_returns_plain_floats(make_model_dir, tools, base_config):
    config = base_config(calibration={"kind": "platt", "a": 0.001, "b": -5.0})
    scorer = Scorer.load(make_model_dir("length", config=config))
    probs = scorer.score("mail the report", None, tools)
    assert len(probs) == len(tools)
    assert all(type(p) is float and 0.0 <= p <= 1.0 for p in probs)
    logits = scorer.logits("mail the report", None, tools)
    np.testing.assert_allclose(probs, scorer.calibration.apply(logits))
    json.dumps(probs)


def test_empty_tools(make_model_dir):
    scorer = Scorer.load(make_model_dir("length"))
    assert scorer.score("anything", None, []) == []
    assert scorer.logits("anything", None, []).shape == (0,)


def test_flat_output_and_no_token_type_ids(make_model_dir, tokenizer_json, tools):
    scorer = Scorer.load(make_model_dir("flat", token_type_ids=False))
    assert scorer.info["inputs"] == ["input_ids", "attention_mask"]
    logits = scorer.logits("rain tomorrow", None, tools)
    pairs = [format_record("rain tomorrow", None, t) for t in tools]
    lengths = [len(e.ids) for e in PairEncoder(tokenizer_json, 32).encode(pairs)]
    np.testing.assert_array_equal(logits, lengths)


def test_truncation_cuts_tool_side_first(make_model_dir, tool_cls):
    scorer = Scorer.load(make_model_dir("length"))  # max_length 32
    long_tool = tool_cls("GitHub", "create_issue", "open a new issue " * 40)
    short_query = scorer.logits("open a bug", None, [long_tool])[0]
    n_tokens, n_second = int(short_query) % 1000, int(short_query) // 1000
    assert n_tokens == 32
    # query side: [CLS] user request : open a bug [SEP] = 8 tokens, kept whole
    assert n_tokens - n_second == 8


def test_overlong_query_falls_back_to_longest_first(make_model_dir, tool_cls):
    scorer = Scorer.load(make_model_dir("length"))
    request = "mail the report to ana " * 20
    short = tool_cls("Weather", "get_forecast", "")
    value = scorer.logits(request, None, [short, tool_cls("Files", "read_file", "read a file")])
    assert np.all(value % 1000 == 32)  # truncated to the budget, no error


def test_does_not_mutate_inputs(make_model_dir, tools):
    scorer = Scorer.load(make_model_dir("length"))
    before = copy.deepcopy(tools)
    scorer.score("mail", "x", tools)
    assert tools == before


def test_record_options_come_from_config(make_model_dir, tool_cls, base_config):
    config = base_config(record={"max_description_chars": 10, "examples": 1}, max_length=64)
    scorer = Scorer.load(make_model_dir("length", config=config))
    tool = tool_cls("Gmail", "send_email", "send an email to a user", ("mail ana",))
    assert scorer.records("r", None, [tool]) == [format_record("r", None, tool, max_description_chars=10, examples=1)]


def test_info_is_json(make_model_dir):
    info = Scorer.load(make_model_dir("length"), threads=1).info
    assert json.loads(json.dumps(info)) == info
    assert info["name"] == "fake-reranker" and info["threads"] == 1
    assert info["record"] == {"max_description_chars": 300, "examples": 0}


# ----------------------------------------------------------------------------- load errors


def test_missing_folder(tmp_path):
    with pytest.raises(ScorerLoadError, match="does not exist; pass a folder written by training/export.py"):
        Scorer.load(tmp_path / "nope")


def test_file_instead_of_folder(make_model_dir):
    with pytest.raises(ScorerLoadError, match="is a file; pass the model folder"):
        Scorer.load(make_model_dir("length") / "model.onnx")


def test_missing_files_are_named(make_model_dir):
    with pytest.raises(ScorerLoadError, match=r"is missing model\.onnx, tokenizer\.json"):
        Scorer.load(make_model_dir("length", skip=("model.onnx", "tokenizer.json")))
    with pytest.raises(ScorerLoadError, match=r"is missing config\.json"):
        Scorer.load(make_model_dir("length", skip=("config.json",)))


def test_bad_config_json(make_model_dir):
    with pytest.raises(ScorerLoadError, match=r"config\.json: invalid JSON at line 1"):
        Scorer.load(make_model_dir("length", config="{not json"))


@pytest.mark.parametrize("overrides, match", [
    ({"name": None}, "missing or empty required key 'name'"),
    ({"max_length": "128"}, "'max_length' must be an integer >= 4"),
    ({"record_format_version": 3}, "record format version 3, but this toolrank builds versions 1, 2"),
    ({"record": {"server_description_chars": 120}}, "needs record format version 2 \\(this folder says 1\\)"),
    ({"calibration": {"kind": "platt", "a": -1.0, "b": 0.0}}, "bad 'calibration'.*must be > 0"),
    ({"record": {"examples": -1}}, "'examples' must be an integer >= 0"),
    ({"truncation": "middle"}, "'truncation' must be one of"),
])
def test_invalid_config_values(make_model_dir, overrides, match, base_config):
    with pytest.raises(ScorerLoadError, match=match):
        Scorer.load(make_model_dir("length", config=base_config(**overrides)))


def test_config_not_an_object(make_model_dir):
    with pytest.raises(ScorerLoadError, match="expected a JSON object, got list"):
        Scorer.load(make_model_dir("length", config="[]"))


def test_two_label_output_rejected(make_model_dir):
    with pytest.raises(ScorerLoadError, match=r"shape \['batch', 2\]: 2 values per pair.*num_labels=1"):
        Scorer.load(make_model_dir("two_labels"))


def test_per_token_output_rejected_at_load(make_model_dir):
    with pytest.raises(ScorerLoadError, match=r"has shape \[1, \d+\] for a batch of 1; expected \[1, 1\] or \[1\]"):
        Scorer.load(make_model_dir("per_token"))


def test_unexpected_input_rejected(make_model_dir):
    with pytest.raises(ScorerLoadError, match=r"unexpected \['pixel_values'\]"):
        Scorer.load(make_model_dir("bad_input"))


def test_corrupt_onnx_and_tokenizer(make_model_dir):
    folder = make_model_dir("length")
    (folder / "tokenizer.json").write_text("{}", encoding="utf-8")
    with pytest.raises(ScorerLoadError, match=r"tokenizer\.json: cannot be read as a tokenizers file"):
        Scorer.load(folder)
    folder = make_model_dir("length")
    (folder / "model.onnx").write_bytes(b"not a model")
    with pytest.raises(ScorerLoadError, match=r"model\.onnx: onnxruntime cannot load it"):
        Scorer.load(folder)


def test_bad_threads(make_model_dir):
    with pytest.raises(ScorerLoadError, match="threads must be an int >= 1"):
        Scorer.load(make_model_dir("length"), threads=0)


def test_blank_request(make_model_dir, tools):
    scorer = Scorer.load(make_model_dir("length"))
    with pytest.raises(ValueError, match="request is empty"):
        scorer.score(" ", None, tools)


def test_runtime_imports_no_torch():
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, scorer; heavy = [m for m in ('torch', 'transformers', 'sentence_transformers', "
            "'sklearn', 'scipy') if m in sys.modules]; print(heavy); sys.exit(1 if heavy else 0)")
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                            env={"PYTHONPATH": str(root), "PATH": "", "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stdout + result.stderr


def test_pairs_side_by_side_keep_order_and_values(make_model_dir, tokenizer_json, tools):
    """workers > 1 runs one pair a batch on several threads: same logits, same order as one at a time."""
    folder = make_model_dir("length")
    parallel = Scorer.load(folder, threads=2, workers=2, cache_size=0)
    serial = Scorer.load(folder, threads=2, workers=1, cache_size=0)
    assert (parallel.info["workers"], serial.info["workers"]) == (2, 1)
    pairs = [format_record("mail the report to ana", "send email", t) for t in tools]
    expected = expected_length_logits(tokenizer_json, pairs)
    assert len(set(expected.tolist())) > 2
    for scorer in (parallel, serial):
        np.testing.assert_array_equal(scorer.logits("mail the report to ana", "send email", tools), expected)


@pytest.mark.parametrize("workers", [0, 3, True, 1.5])
def test_workers_must_fit_the_threads(make_model_dir, workers):
    with pytest.raises(ScorerLoadError, match="workers"):
        Scorer.load(make_model_dir("length"), threads=2, workers=workers)
