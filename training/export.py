"""Export a fine-tuned cross-encoder to a model folder that :class:`scorer.Scorer` loads.

The folder holds ``model.onnx`` (fp32 or dynamic int8), ``tokenizer.json``, ``config.json``
and a ``MODEL_CARD.md`` stub. It is written to a temporary folder beside the target, loaded
back with :meth:`scorer.Scorer.load`, checked against torch on a few pairs, and only then
renamed into place, so a reader never sees half a folder.

Calibrate the model as shipped: export, score held-out pairs with the exported folder
(``Scorer.pair_logits``), fit with :func:`scorer.fit_platt`, then
:func:`update_calibration`.

Command line::

    python -m training.export runs/ce/final models/toolrank-reranker --max-length 128 \\
        --quantize int8 --name toolrank-reranker-minilm --version 0.1.0
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import uuid
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal, Mapping, Sequence

import numpy as np

from scorer.calibration import Calibration
from retrieval.fsutil import replace_dir
from retrieval.version import package_version
from scorer.record import RECORD_FORMAT_VERSION, format_record
from scorer.reranker import (
    CARD_FILE,
    CONFIG_FILE,
    MODEL_FILE,
    TOKENIZER_FILE,
    TRUNCATION_STRATEGIES,
    ModelConfig,
    PairEncoder,
    Scorer,
)

__all__ = ["ExportError", "export_onnx", "update_calibration", "main"]

logger = logging.getLogger(__name__)

OPSET = 17
# Keys export_onnx owns; extra_config cannot override them.
_RESERVED = {"max_length", "record_format_version", "quantization", "calibration", "truncation", "export_check"}
# fp32 ONNX vs torch on the same token ids: anything above this means a broken export.
FP32_PARITY_WARN = 1e-3
_KNOWN_EXPORT_WARNINGS = (
    r".*legacy TorchScript-based ONNX export",
    r"The feature will be removed",
    r"Converting a tensor to a Python boolean",  # transformers' mask padding check, constant for encoders
    r"Exporting aten::index operator",
)


class ExportError(ValueError):
    """A model or an argument that cannot be exported as given."""


# --------------------------------------------------------------------------- helpers


def _default_check_pairs() -> list[tuple[str, str]]:
    """A few records of different lengths, for the dummy export input and the parity check."""
    tools = [
        SimpleNamespace(server="Gmail", name="send_email", examples=("email Ana the report",),
                        description="Send an email message to one or more recipients with a subject and body."),
        SimpleNamespace(server="GitHub", name="create_issue", examples=(),
                        description="Create a new issue in a repository. " * 12),
        SimpleNamespace(server="Weather", name="get_forecast", examples=(), description=""),
    ]
    requests = [("mail the quarterly report to Ana", "send an email"),
                ("open a bug about the login page crashing on Safari when the password has unicode", None),
                ("rain tomorrow?", "weather forecast")]
    return [format_record(r, n, t) for (r, n), t in zip(requests, tools)]


def _resolve_model(source: Any, tokenizer: Any) -> tuple[Any, Any, str]:
    """(transformers model, transformers tokenizer, base model description) for any accepted source."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, PreTrainedModel

    from . import modeling  # noqa: F401  (registers toolrank's mean-pooling model class)

    if isinstance(source, (str, Path)):
        src = Path(source)
        if not src.is_dir():
            raise ExportError(f"model folder {src} does not exist; pass a Hugging Face or CrossEncoder folder")
        modules_file = src / "modules.json"
        if modules_file.is_file():  # a sentence-transformers CrossEncoder folder
            modules = json.loads(modules_file.read_text(encoding="utf-8"))
            kinds = [m.get("type", "") for m in modules]
            if len(modules) != 1 or not kinds[0].endswith("Transformer"):
                raise ExportError(
                    f"{modules_file}: the CrossEncoder has modules {kinds}; only a single Transformer "
                    "(sequence classification) module can be exported as one ONNX graph"
                )
            src = src / (modules[0].get("path") or "")
        model = AutoModelForSequenceClassification.from_pretrained(
            str(src), attn_implementation="eager", local_files_only=True)
        tok = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(str(src), local_files_only=True)
        return model, tok, str(Path(source))
    if isinstance(source, PreTrainedModel):
        model = source
    elif isinstance(getattr(source, "model", None), PreTrainedModel):  # a CrossEncoder object
        model = source.model
        if tokenizer is None:
            tokenizer = getattr(source, "tokenizer", None)
    else:
        raise ExportError(
            f"cannot export a {type(source).__name__}: pass a model folder, a transformers "
            "sequence-classification model or a sentence-transformers CrossEncoder"
        )
    if tokenizer is None:
        name = getattr(model, "name_or_path", "") or ""
        if not name or not Path(name).is_dir():
            raise ExportError("an in-memory model needs its tokenizer: pass tokenizer=...")
        tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=True)
    return model, tokenizer, str(getattr(model, "name_or_path", "") or "")


def _input_names(model: Any) -> list[str]:
    import inspect

    names = ["input_ids", "attention_mask"]
    accepts = "token_type_ids" in inspect.signature(model.forward).parameters
    if accepts and int(getattr(model.config, "type_vocab_size", 0) or 0) > 1:
        names.append("token_type_ids")
    return names


def _clean_tokenizer_json(backend: Any) -> str:
    """The tokenizer without any truncation/padding baked in (the scorer sets its own)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(backend.to_str())
    tok.no_truncation()
    tok.no_padding()
    return tok.to_str(pretty=True)


def _model_card(config: Mapping[str, Any]) -> str:
    cal = config["calibration"]
    return f"""# {config['name']} {config['version']}

Cross-encoder that scores how well an MCP tool fits a request; part of toolrank.

| field | value |
|---|---|
| base model | {config.get('base_model') or 'TODO'} |
| max length (tokens, pair) | {config['max_length']} |
| truncation | {config['truncation']} |
| record format version | {config['record_format_version']} |
| record | max_description_chars={config['record']['max_description_chars']}, examples={config['record']['examples']} |
| quantization | {json.dumps(config['quantization'])} |
| calibration | Platt a={cal['a']:.4g}, b={cal['b']:.4g} |
| training data hash | {config.get('training_data_hash') or 'TODO'} |
| exported by | toolrank {config['package_version']} |

## Training data
TODO(lead): sources, sizes, splits, licences.

## Evaluation
TODO(lead): dev/test hit@1, MRR@10, ECE before/after calibration, latency (benchmarks/scorer_speed.py).

## Intended use and limitations
TODO(lead).
"""


def _write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# --------------------------------------------------------------------------- export


def export_onnx(
    model: str | Path | Any,
    out_dir: str | Path,
    *,
    max_length: int,
    quantize: Literal["none", "int8"] = "int8",
    per_channel: bool = True,
    calibration: Calibration | Mapping[str, Any] | None = None,
    extra_config: Mapping[str, Any] | None = None,
    tokenizer: Any = None,
    truncation: Literal["only_second", "longest_first"] = "only_second",
    overwrite: bool = False,
    check_pairs: Sequence[tuple[str, str]] | None = None,
) -> Path:
    """Export a sequence-classification cross-encoder (one logit) to a scorer model folder.

    Args:
        model: A Hugging Face model folder, a sentence-transformers CrossEncoder folder or
            object, or a transformers ``...ForSequenceClassification`` model with ``num_labels=1``.
        out_dir: The model folder to write.
        max_length: Token budget per (query, tool) pair; use the training value.
        quantize: ``"int8"`` (dynamic, QInt8 weights) or ``"none"`` (fp32).
        per_channel: Per-channel weight quantisation (much smaller score shifts than per-tensor).
        calibration: Platt parameters; ``None`` writes the identity (plain sigmoid) to be
            replaced with :func:`update_calibration` after fitting on the exported model.
        extra_config: More ``config.json`` keys: ``name``, ``version``, ``base_model``,
            ``record`` (``max_description_chars``, ``examples``), ``training_data_hash``, …
        tokenizer: The transformers tokenizer, when ``model`` is an in-memory model that
            does not know its folder.
        truncation: How training truncated pairs: ``"only_second"`` (tool side first) or
            ``"longest_first"`` (the sentence-transformers default).
        overwrite: Replace ``out_dir`` if it exists.
        check_pairs: (query_text, tool_text) pairs for the torch-vs-ONNX check; a few
            built-in records by default.

    Returns:
        ``out_dir``, which :meth:`scorer.Scorer.load` accepts.

    Raises:
        ExportError: bad arguments, a model with ``num_labels != 1``, a slow tokenizer,
            or an existing ``out_dir`` without ``overwrite=True``.
    """
    import torch

    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 4:
        raise ExportError(f"max_length must be an int >= 4, got {max_length!r}; use the training max_length")
    if quantize not in ("none", "int8"):
        raise ExportError(f"quantize must be 'none' or 'int8', got {quantize!r}")
    if truncation not in TRUNCATION_STRATEGIES:
        raise ExportError(f"truncation must be one of {TRUNCATION_STRATEGIES}, got {truncation!r}")
    extra = dict(extra_config or {})
    clash = sorted(_RESERVED & set(extra))
    if clash:
        raise ExportError(f"extra_config may not set {clash}: pass them as export_onnx arguments")
    out_dir = Path(out_dir)
    if out_dir.exists() and not overwrite:
        raise ExportError(f"{out_dir} already exists; pass overwrite=True to replace it")
    cal = calibration if isinstance(calibration, Calibration) else Calibration.from_dict(calibration)

    hf_model, hf_tok, base_model = _resolve_model(model, tokenizer)
    num_labels = int(getattr(hf_model.config, "num_labels", 0))
    if num_labels != 1:
        raise ExportError(f"the model has num_labels={num_labels}; the scorer needs one relevance logit "
                          "(train the CrossEncoder with num_labels=1)")
    backend = getattr(hf_tok, "backend_tokenizer", None)
    if backend is None:
        raise ExportError(f"{type(hf_tok).__name__} is not a fast tokenizer; the scorer needs a tokenizer.json "
                          "(load it with use_fast=True)")
    tokenizer_json = _clean_tokenizer_json(backend)
    names = _input_names(hf_model)
    encoder = PairEncoder(tokenizer_json, max_length, truncation)
    pairs = list(check_pairs) if check_pairs else _default_check_pairs()
    feeds = encoder.arrays(encoder.encode(pairs))

    record = {"max_description_chars": 300, "examples": 0, **dict(extra.pop("record", None) or {})}
    config: dict[str, Any] = {
        "name": extra.pop("name", out_dir.name),
        "version": str(extra.pop("version", "0.0.0")),
        "base_model": extra.pop("base_model", base_model),
        "max_length": max_length,
        "record_format_version": RECORD_FORMAT_VERSION,
        "record": record,
        "truncation": truncation,
        "calibration": cal.to_dict(),
        "training_data_hash": extra.pop("training_data_hash", None),
        "package_version": package_version(),
        "quantization": ({"kind": "dynamic", "weight_type": "QInt8", "per_channel": bool(per_channel),
                          "reduce_range": True, "fp32_matmuls": "feed-forward output projections"}
                         if quantize == "int8" else "none"),
        "onnx": {"opset": OPSET, "inputs": names, "output": "logits", "torch": torch.__version__},
        **extra,
    }
    ModelConfig.from_dict(config, where="config to export")  # fail before the slow part

    class _Logits(torch.nn.Module):
        def __init__(self, inner: Any):
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any) -> Any:
            return self.inner(**dict(zip(names, args)), return_dict=True).logits

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the released folder should be readable
    was_training = hf_model.training
    try:
        wrapper = _Logits(hf_model).eval()  # an eval wrapper: export restores *its* mode afterwards
        args = tuple(torch.from_numpy(feeds[n]) for n in names)
        fp32 = tmp / ("model_fp32.onnx" if quantize == "int8" else MODEL_FILE)
        axes = {n: {0: "batch", 1: "sequence"} for n in names} | {"logits": {0: "batch"}}
        with torch.no_grad(), warnings.catch_warnings():
            for message in _KNOWN_EXPORT_WARNINGS:  # harmless for this graph; checked by parity below
                warnings.filterwarnings("ignore", message=message)
            torch.onnx.export(wrapper, args, str(fp32), input_names=names, output_names=["logits"],
                              dynamic_axes=axes, opset_version=OPSET, dynamo=False)
            reference = wrapper(*args).float().numpy().reshape(-1)
        if quantize == "int8":
            from training.int8 import quantize_int8

            quantize_int8(fp32, tmp / MODEL_FILE, per_channel=per_channel)  # 7-bit weights: any CPU
            fp32.unlink()
        (tmp / TOKENIZER_FILE).write_text(tokenizer_json, encoding="utf-8")
        _write_json_atomic(tmp / CONFIG_FILE, config)
        (tmp / CARD_FILE).write_text(_model_card(config), encoding="utf-8")

        exported = Scorer.load(tmp, threads=1).pair_logits(pairs)
        diff = float(np.max(np.abs(exported - reference)))
        config["export_check"] = {"pairs": len(pairs), "max_abs_logit_diff_vs_torch": diff,
                                  "logit_spread_torch": float(np.ptp(reference))}
        _write_json_atomic(tmp / CONFIG_FILE, config)
        if quantize == "none" and diff > FP32_PARITY_WARN:
            logger.warning("fp32 ONNX differs from torch by %.3g on the check pairs: inspect the export", diff)
        logger.info("exported %s (%s) to %s; max |logit diff| vs torch %.4g", config["name"], quantize, out_dir, diff)
        replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        hf_model.train(was_training)
    return out_dir


def update_calibration(model_dir: str | Path, calibration: Calibration | Mapping[str, Any]) -> Path:
    """Write new calibration parameters into a model folder's ``config.json`` (atomically).

    Args:
        model_dir: An exported model folder.
        calibration: The fitted :class:`scorer.Calibration` (or its dict).

    Returns:
        The path of the rewritten ``config.json``.

    Raises:
        scorer.ScorerLoadError: the folder's config is missing or invalid.
        scorer.CalibrationError: invalid calibration parameters.
    """
    path = Path(model_dir) / CONFIG_FILE
    ModelConfig.read(path)
    cal = calibration if isinstance(calibration, Calibration) else Calibration.from_dict(calibration)
    raw = json.loads(path.read_text(encoding="utf-8"))
    raw["calibration"] = cal.to_dict()
    _write_json_atomic(path, raw)
    card = path.parent / CARD_FILE
    if card.is_file():
        text = card.read_text(encoding="utf-8")
        lines = [f"| calibration | Platt a={cal.a:.4g}, b={cal.b:.4g} |" if line.startswith("| calibration |")
                 else line for line in text.splitlines()]
        card.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# --------------------------------------------------------------------------- command line


def _train_args(source: str) -> dict[str, Any]:
    """Record settings saved beside a checkpoint by its training run (``train_args.json``, training/distill.py), if any."""
    path = Path(source) / "train_args.json"
    if not path.is_file():
        return {}
    raw = json.loads(path.read_text(encoding="utf-8"))
    found = {}
    for key in ("max_length", "max_description_chars", "examples", "parameters", "request_tokens",
                "server_description_chars"):
        if raw.get(key) not in (None, "", "None"):
            found[key] = int(raw[key])
    if raw.get("request_cut"):
        found["request_cut"] = str(raw["request_cut"])
    if raw.get("training_data_hash"):  # the hash of what the run really trained on
        found["training_data_hash"] = str(raw["training_data_hash"])
    return found


def main(argv: list[str] | None = None) -> int:
    """``python -m training.export SRC OUT [--max-length N] [--quantize int8|none] ...``.

    ``--max-length``, ``--max-description-chars`` and ``--examples`` default to the values in
    ``SRC/train_args.json`` when the training run saved one, so the record matches training.
    """
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source", help="HF / CrossEncoder model folder")
    p.add_argument("out", type=Path, help="model folder to write")
    p.add_argument("--max-length", type=int, help="default: train_args.json, else required")
    p.add_argument("--quantize", choices=["int8", "none"], default="int8", help="int8 (dynamic quantisation, gated against fp32) or none")
    p.add_argument("--per-tensor", action="store_true", help="per-tensor instead of per-channel int8 weights")
    p.add_argument("--truncation", choices=list(TRUNCATION_STRATEGIES), default="only_second", help="how a pair too long for the model is cut (default: the tool side only)")
    p.add_argument("--name", help="model name written to config.json")
    p.add_argument("--version", default="0.0.0", help="model version written to config.json")
    p.add_argument("--max-description-chars", type=int, help="default: train_args.json, else 300")
    p.add_argument("--examples", type=int, help="default: train_args.json, else 0")
    p.add_argument("--training-data-hash", help="hash of the training data, recorded in config.json")
    p.add_argument("--calibration", type=Path, help="JSON file with {'kind','a','b'}")
    p.add_argument("--overwrite", action="store_true", help="replace an existing model folder")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    trained = _train_args(a.source)
    if trained:
        logger.info("settings from %s/train_args.json: %s", a.source, trained)
    max_length = a.max_length if a.max_length is not None else trained.get("max_length")
    if max_length is None:
        p.error("--max-length is required (no train_args.json beside the checkpoint)")
    for flag, key in (("--max-length", "max_length"), ("--max-description-chars", "max_description_chars"),
                      ("--examples", "examples")):
        given = getattr(a, key)
        if given is not None and key in trained and given != trained[key]:
            logger.warning("%s %s differs from training's %s: the exported record will not match training",
                           flag, given, trained[key])
    record = {
        "max_description_chars": a.max_description_chars if a.max_description_chars is not None
        else trained.get("max_description_chars", 300),
        "examples": a.examples if a.examples is not None else trained.get("examples", 0),
        "parameters": trained.get("parameters", 0),
        "server_description_chars": trained.get("server_description_chars", 0),
        "request_tokens": trained.get("request_tokens", 0),
        "request_cut": trained.get("request_cut", "head_tail"),
    }
    extra: dict[str, Any] = {"version": a.version, "record": record}
    if a.name:
        extra["name"] = a.name
    if a.training_data_hash or trained.get("training_data_hash"):
        extra["training_data_hash"] = a.training_data_hash or trained["training_data_hash"]
    cal = json.loads(a.calibration.read_text(encoding="utf-8")) if a.calibration else None
    out = export_onnx(a.source, a.out, max_length=max_length, quantize=a.quantize, per_channel=not a.per_tensor,
                      calibration=cal, extra_config=extra, truncation=a.truncation, overwrite=a.overwrite)
    logger.info("wrote %s", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
