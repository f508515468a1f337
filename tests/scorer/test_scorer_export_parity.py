"""ONNX export of a tiny random BERT cross-encoder: parity with torch, folder contents, errors.

Tolerances (stated here, checked below):
* fp32 ONNX vs torch: ``atol=1e-4`` on logits (measured ~1e-6).
* int8 (dynamic, per-channel) vs torch: max |delta logit| <= 0.15 x the torch logit spread
  (max - min over the candidates), median <= 0.05 x spread, Spearman rank correlation >= 0.9.
  Measured on this fixture: max 0.039 on a spread of 0.63 (6%), Spearman 0.99. A 32-wide
  random model is a worst case for int8; real checkpoints are calibrated after quantising.
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
    torch.manual_seed(0)
    # initializer_range 0.2 (not 0.02) so the random logits spread enough to compare rankings
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, num_labels=1, initializer_range=0.2)
    model = BertForSequenceClassification(config).eval()
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


def test_int8_close_to_torch(exported, candidates, torch_logits):
    from scipy.stats import spearmanr

    logits = Scorer.load(exported["int8"], threads=1).logits(REQUEST, NEED, candidates)
    spread = float(np.ptp(torch_logits))
    assert spread > 0.1  # the fixture must actually separate candidates
    delta = np.abs(logits - torch_logits)
    assert delta.max() <= 0.15 * spread, f"max |delta| {delta.max():.4f} vs spread {spread:.4f}"
    assert np.median(delta) <= 0.05 * spread
    assert spearmanr(logits, torch_logits)[0] >= 0.9


def test_folder_contents_and_config(exported):
    folder = exported["int8"]
    assert sorted(p.name for p in folder.iterdir()) == ["MODEL_CARD.md", "config.json", "model.onnx", "tokenizer.json"]
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no temp dirs left behind
    config = json.loads((folder / "config.json").read_text())
    assert config["name"] == "tiny" and config["version"] == "9.9.9"
    assert config["max_length"] == MAX_LENGTH and config["record_format_version"] == 1
    assert config["record"] == {"max_description_chars": 300, "examples": 0}
    assert config["quantization"] == {"kind": "dynamic", "weight_type": "QInt8", "per_channel": True}
    assert config["calibration"] == {"kind": "platt", "a": 1.0, "b": 0.0}
    assert config["training_data_hash"] == "deadbeef"
    assert config["export_check"]["max_abs_logit_diff_vs_torch"] < 0.15 * config["export_check"]["logit_spread_torch"]
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
