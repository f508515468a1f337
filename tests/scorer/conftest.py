"""Tiny fixtures for scorer tests: a WordPiece tokenizer, fake ONNX graphs, model folders."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

WORDS = (
    "user request the assistant is looking for candidate tool examples send email mail report to ana "
    "gmail github create issue weather get forecast rain tomorrow search files list read write slack "
    "message a an of and in on with bug login page open new repository"
).split()
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PUNCT = [":", "/", "|", ".", ",", "?", "!", "…", "_", "-", "'"]


@dataclass(frozen=True)
class FakeTool:
    """Duck-typed stand-in for retrieval.catalog.model.Tool (scorer must not need retrieval)."""

    server: str
    name: str
    description: str = ""
    examples: tuple[str, ...] = ()
    server_description: str = ""


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    tokens = SPECIALS + PUNCT + WORDS + ["##s", "##ing", "##ed", "##er"]
    vocab = {t: i for i, t in enumerate(dict.fromkeys(tokens))}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tok.decoder = decoders.WordPiece()
    return tok


@pytest.fixture(scope="session")
def tokenizer_json() -> str:
    return build_tokenizer().to_str()


def fake_onnx_model(kind: str = "length", *, token_type_ids: bool = True) -> bytes:
    """A tiny ONNX graph standing in for a cross-encoder.

    kinds:
      * ``length``: logit = (#tokens) + 1000 * (#second-segment tokens), shape [batch, 1]
        (without token_type_ids: just #tokens).
      * ``flat``: the same as ``length`` but shaped [batch].
      * ``two_labels``: declared output [batch, 2].
      * ``per_token``: output [batch, sequence] (declared with a symbolic 2nd dim; wrong at run time).
      * ``bad_input``: an extra input ``pixel_values``.
    """
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    def int_input(name: str):
        return helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])

    inputs = [int_input("input_ids"), int_input("attention_mask")]
    if token_type_ids:
        inputs.append(int_input("token_type_ids"))
    if kind == "bad_input":
        inputs.append(int_input("pixel_values"))
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    nodes = [
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["mask_f", "axes"], ["n_tok"], keepdims=1),
    ]
    total = "n_tok"
    inits = [axes]
    if token_type_ids:
        inits.append(helper.make_tensor("k", TensorProto.FLOAT, [], [1000.0]))
        nodes += [
            helper.make_node("Cast", ["token_type_ids"], ["tt_f"], to=TensorProto.FLOAT),
            helper.make_node("ReduceSum", ["tt_f", "axes"], ["n_second"], keepdims=1),
            helper.make_node("Mul", ["n_second", "k"], ["n_second_k"]),
            helper.make_node("Add", ["n_tok", "n_second_k"], ["total"]),
        ]
        total = "total"
    if kind in ("length", "bad_input"):
        nodes.append(helper.make_node("Identity", [total], ["logits"]))
        out_shape: list = ["batch", 1]
    elif kind == "flat":
        nodes.append(helper.make_node("Squeeze", [total, "axes"], ["logits"]))
        out_shape = ["batch"]
    elif kind == "two_labels":
        nodes.append(helper.make_node("Concat", [total, total], ["logits"], axis=1))
        out_shape = ["batch", 2]
    elif kind == "per_token":
        nodes.append(helper.make_node("Identity", ["mask_f"], ["logits"]))
        out_shape = ["batch", "sequence"]
    else:
        raise ValueError(kind)
    output = helper.make_tensor_value_info("logits", TensorProto.FLOAT, out_shape)
    graph = helper.make_graph(nodes, "fake_cross_encoder", inputs, [output], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def make_config(**overrides) -> dict:
    config = {
        "name": "fake-reranker",
        "version": "0.0.1",
        "base_model": "none",
        "max_length": 32,
        "record_format_version": 1,
        "record": {"max_description_chars": 300, "examples": 0},
        "calibration": {"kind": "platt", "a": 1.0, "b": 0.0},
        "training_data_hash": "abc",
        "package_version": "0.1.0",
        "quantization": "none",
    }
    config.update(overrides)
    return config


@pytest.fixture
def make_model_dir(tmp_path: Path, tokenizer_json: str) -> Callable[..., Path]:
    """Write a model folder with a fake ONNX graph; returns its path."""
    counter = iter(range(1000))

    def make(kind: str = "length", *, token_type_ids: bool = True, config: dict | str | None = None,
             skip: tuple[str, ...] = ()) -> Path:
        folder = tmp_path / f"model{next(counter)}"
        folder.mkdir()
        if "model.onnx" not in skip:
            (folder / "model.onnx").write_bytes(fake_onnx_model(kind, token_type_ids=token_type_ids))
        if "tokenizer.json" not in skip:
            (folder / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
        if "config.json" not in skip:
            text = config if isinstance(config, str) else json.dumps(config or make_config())
            (folder / "config.json").write_text(text, encoding="utf-8")
        (folder / "MODEL_CARD.md").write_text("# fake\n", encoding="utf-8")
        return folder

    return make


@pytest.fixture
def tools() -> list[FakeTool]:
    return [
        FakeTool("Gmail", "send_email", "Send an email to a user.", ("mail the report to ana",)),
        FakeTool("GitHub", "create_issue", "Create a new issue in a repository. " * 6),
        FakeTool("Weather", "get_forecast", ""),
        FakeTool("Slack", "send_message", "Send a message in slack."),
        FakeTool("Files", "read_file", "Read a file"),
    ]


@pytest.fixture(scope="session")
def tool_cls() -> type[FakeTool]:
    """The duck-typed tool class (import-free access for test modules)."""
    return FakeTool


@pytest.fixture(scope="session")
def base_config() -> Callable[..., dict]:
    """A valid config.json dict; keyword arguments override keys."""
    return make_config


@pytest.fixture(scope="session")
def vocab_words() -> tuple[str, ...]:
    """The tiny tokenizer's whole-word vocabulary."""
    return tuple(WORDS)
