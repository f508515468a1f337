"""ONNX export of a tiny BERT cross-encoder: each test checks one thing.

* fp32 ONNX vs torch on the same token ids: ``atol=1e-4`` (measured ~1e-6).
* int8: onnxruntime's integer products vs the exact products of the same graph's quantised
  inputs (training/int8.py): equal, and weights within the 7-bit range that no CPU kernel
  saturates. How far int8 moves quality is a release-time gate on the real checkpoint and dev
  lists (training/release.sh), not a unit test on a random model.
* folder contents and config, without numerics.

The tiny model's weights come from a seeded numpy generator in this file, not from a
library's initialisation code, so a transformers release cannot change them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("onnx")

from scorer import Calibration, Scorer, ScorerLoadError, format_record  # noqa: E402
from training.export import ExportError, export_onnx, update_calibration  # noqa: E402

MAX_LENGTH = 48
REQUEST, NEED = "mail the report to ana", "send email"


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory, tokenizer_json):
    """A random 2-layer, 32-wide BERT cross-encoder (num_labels=1) saved as a HF folder."""
    from tokenizers import Tokenizer
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(tokenizer_json), unk_token="[UNK]", pad_token="[PAD]",
        cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, num_labels=1)
    model = BertForSequenceClassification(config).eval()
    rng = np.random.default_rng(20261201)
    with torch.no_grad():  # every weight from the seeded generator, in a fixed (sorted) order
        for name, tensor in sorted(model.state_dict().items()):
            if not tensor.is_floating_point():
                continue
            if "LayerNorm.weight" in name:
                values = 1.0 + 0.1 * rng.standard_normal(tensor.shape)
            else:  # 0.2 (not BERT's 0.02) so the random logits spread enough to compare
                values = 0.2 * rng.standard_normal(tensor.shape)
            tensor.copy_(torch.from_numpy(values.astype(np.float32)))
    folder = tmp_path_factory.mktemp("tiny_bert")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder, model, tok


@pytest.fixture(scope="module")
def candidates(tool_cls, vocab_words):
    rng = np.random.default_rng(0)
    return [tool_cls(f"Server{i}", f"tool_{i}", " ".join(rng.choice(vocab_words, size=int(rng.integers(0, 60)))))
            for i in range(40)]


@pytest.fixture(scope="module")
def torch_logits(tiny_bert, candidates):
    _, model, tok = tiny_bert
    records = [format_record(REQUEST, NEED, t) for t in candidates]
    enc = tok([q for q, _ in records], [d for _, d in records], truncation="only_second",
              max_length=MAX_LENGTH, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model(**enc).logits.numpy().reshape(-1)


@pytest.fixture(scope="module")
def exported(tiny_bert, tmp_path_factory):
    folder, _, _ = tiny_bert
    out = tmp_path_factory.mktemp("exported")
    extra = {"name": "tiny", "version": "9.9.9", "training_data_hash": "deadbeef"}
    return {q: export_onnx(folder, out / q, max_length=MAX_LENGTH, quantize=q, extra_config=extra)
            for q in ("none", "int8")}


def test_fp32_matches_torch(exported, candidates, torch_logits):
    scorer = Scorer.load(exported["none"], threads=1, batch_size=8)
    logits = scorer.logits(REQUEST, NEED, candidates)
    np.testing.assert_allclose(logits, torch_logits, atol=1e-4, rtol=0)


def test_int8_integer_products_are_exact(exported, tiny_bert, candidates):
    from training.int8 import SAFE_WEIGHT_MAX, int8_check

    _, _, tok = tiny_bert
    records = [format_record(REQUEST, NEED, t) for t in candidates]
    enc = tok([q for q, _ in records], [d for _, d in records], truncation="only_second",
              max_length=MAX_LENGTH, padding=True, return_tensors="np")
    report = int8_check(exported["int8"] / "model.onnx", {k: v.astype(np.int64) for k, v in enc.items()})
    assert report["matmul_integer_ops"] > 0 and report["products_compared"] > 0
    assert report["max_matmul_weight"] <= SAFE_WEIGHT_MAX   # 7-bit weights: no kernel can saturate
    assert report["max_abs_int_diff_vs_exact"] == 0, report


def test_folder_contents_and_config(exported):
    folder = exported["int8"]
    assert sorted(p.name for p in folder.iterdir()) == ["MODEL_CARD.md", "config.json", "model.onnx", "tokenizer.json"]
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no temp dirs left behind
    config = json.loads((folder / "config.json").read_text())
    assert config["name"] == "tiny" and config["version"] == "9.9.9"
    assert config["max_length"] == MAX_LENGTH and config["record_format_version"] == 2
    assert config["record"] == {"max_description_chars": 300, "examples": 0}
    assert config["quantization"] == {"kind": "dynamic", "weight_type": "QInt8", "per_channel": True,
                                      "reduce_range": True, "fp32_matmuls": "feed-forward output projections"}
    assert config["calibration"] == {"kind": "platt", "a": 1.0, "b": 0.0}
    assert config["training_data_hash"] == "deadbeef"
    assert set(config["export_check"]) >= {"pairs", "max_abs_logit_diff_vs_torch", "logit_spread_torch"}
    assert json.loads((exported["none"] / "config.json").read_text())["quantization"] == "none"
    info = Scorer.load(folder).info
    assert info["inputs"] == ["input_ids", "attention_mask", "token_type_ids"]
    assert "TODO(lead)" in (folder / "MODEL_CARD.md").read_text()


def test_update_calibration(exported, tmp_path):
    import shutil

    folder = shutil.copytree(exported["int8"], tmp_path / "copy")
    update_calibration(folder, Calibration(a=2.0, b=-1.0))
    scorer = Scorer.load(folder)
    assert scorer.calibration == Calibration(a=2.0, b=-1.0)
    assert "a=2, b=-1" in (folder / "MODEL_CARD.md").read_text()
    with pytest.raises(ValueError, match="must be > 0"):
        update_calibration(folder, {"a": -2.0})
    with pytest.raises(ScorerLoadError, match="file not found"):
        update_calibration(tmp_path / "missing", Calibration())


def test_refuses_to_overwrite(exported, tiny_bert):
    with pytest.raises(ExportError, match="already exists; pass overwrite=True"):
        export_onnx(tiny_bert[0], exported["none"], max_length=MAX_LENGTH, quantize="none")


def test_argument_errors(tiny_bert, tmp_path):
    folder = tiny_bert[0]
    with pytest.raises(ExportError, match="quantize must be 'none' or 'int8'"):
        export_onnx(folder, tmp_path / "x", max_length=MAX_LENGTH, quantize="int4")
    with pytest.raises(ExportError, match=r"extra_config may not set \['max_length'\]"):
        export_onnx(folder, tmp_path / "x", max_length=MAX_LENGTH, extra_config={"max_length": 3})
    with pytest.raises(ExportError, match="max_length must be an int >= 4"):
        export_onnx(folder, tmp_path / "x", max_length=0)
    with pytest.raises(ExportError, match="does not exist"):
        export_onnx(tmp_path / "nothing", tmp_path / "x", max_length=MAX_LENGTH)


def test_rejects_multi_label_model(tiny_bert, tmp_path):
    from transformers import BertForSequenceClassification

    _, model, tok = tiny_bert
    two = BertForSequenceClassification(model.config.__class__(**{**model.config.to_dict(), "num_labels": 2}))
    with pytest.raises(ExportError, match="num_labels=2; the scorer needs one relevance logit"):
        export_onnx(two, tmp_path / "x", max_length=MAX_LENGTH, tokenizer=tok)


def test_rejects_cross_encoder_with_extra_modules(tiny_bert, tmp_path):
    import shutil

    folder = shutil.copytree(tiny_bert[0], tmp_path / "ce")
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "sentence_transformers.base.modules.dense.Dense"},
    ]))
    with pytest.raises(ExportError, match="only a single Transformer"):
        export_onnx(folder, tmp_path / "x", max_length=MAX_LENGTH)


def test_in_memory_model_export(tiny_bert, tmp_path, candidates, torch_logits):
    _, model, tok = tiny_bert
    out = export_onnx(model, tmp_path / "mem", max_length=MAX_LENGTH, quantize="none", tokenizer=tok)
    logits = Scorer.load(out).logits(REQUEST, NEED, candidates)
    np.testing.assert_allclose(logits, torch_logits, atol=1e-4, rtol=0)
    assert not model.training  # export must not leave the caller's model in training mode


def test_cli_takes_record_settings_from_train_args(tiny_bert, tmp_path):
    import shutil

    from training.export import main

    folder = shutil.copytree(tiny_bert[0], tmp_path / "ckpt")
    (folder / "train_args.json").write_text(json.dumps({"max_length": "40", "max_description_chars": "120"}))
    assert main([str(folder), str(tmp_path / "out"), "--quantize", "none", "--name", "cli", "--version", "1.2.3"]) == 0
    info = Scorer.load(tmp_path / "out").info
    assert (info["name"], info["version"], info["max_length"]) == ("cli", "1.2.3", 40)
    assert info["record"] == {"max_description_chars": 120, "examples": 0}
