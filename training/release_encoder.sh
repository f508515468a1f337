#!/usr/bin/env bash
# Turn a dense-encoder run (training/train_encoder.py) into the shipped encoder, end to end:
#   full-precision weights kept (safetensors, fp16) -> ONNX int8 export -> exact-integer check ->
#   int8 against full precision on both dev sets (benchmarks/encoder_dev.py) -> the fusion grid on dev
#   (printed; FusionConfig's defaults change only by hand, from this table) -> the confidence models,
#   the proceed threshold and every test figure refitted over the new retrieval (training/refit.sh).
#
#   training/release_encoder.sh runs/enc/best [models/toolrank-encoder] [models/toolrank-reranker]
#
# The default index rebuilds itself: its cache key holds the encoder's files.
# SMITHERY (default ../shared/data/smithery/servers): the Smithery folder for the second dev set.
# STOP_AFTER_GRID=1: stop after the fusion grid (change FusionConfig's defaults, then run training/refit.sh).
set -euo pipefail
src=$1; out=${2:-models/toolrank-encoder}; reranker=${3:-models/toolrank-reranker}
export HF_HUB_OFFLINE=1
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
results="$root/benchmarks/results"

# 1. Export (the release's model card moves aside while the export replaces the folder).
keep=$(mktemp -d)
if [ -f "$out/MODEL_CARD.md" ]; then cp "$out/MODEL_CARD.md" "$keep/MODEL_CARD.md"; fi
python -m training.export_encoder --from "$src" --out "$out"
if [ -f "$keep/MODEL_CARD.md" ]; then mv "$keep/MODEL_CARD.md" "$out/MODEL_CARD.md"; fi
# 2. The full-precision encoder, kept so no release starts again from a quantised graph.
python - "$src" "$out/weights" <<'PY'
import shutil, sys
from pathlib import Path
from sentence_transformers import SentenceTransformer
src, dest = Path(sys.argv[1]), Path(sys.argv[2])
model = SentenceTransformer(str(src), device="cpu", local_files_only=True).half()
shutil.rmtree(dest, ignore_errors=True)
model.save(str(dest), safe_serialization=True)
for extra in ("train_args.json", "dev.json"):
    if (src / extra).exists():
        shutil.copy(src / extra, dest / extra)
print(f"full-precision (fp16) weights: {dest}")
PY
# 3. int8 must not cost quality: the integer kernels exact; the trained weights against the export on dev.
python -m training.int8 check "$out" > "$out/int8_check.json"
smithery="${SMITHERY:-$root/../shared/data/smithery/servers}"
dev_args=()
if [ -d "$smithery" ]; then dev_args=(--smithery "$smithery"); fi
python "$root/benchmarks/encoder_dev.py" "$src" "$out" "${dev_args[@]}" --json "$results/encoder_dev.json" \
    | tee "$results/encoder_dev.txt"
# 4. The fusion constants on dev, with the new encoder.
python "$root/benchmarks/fusion_grid.py" --encoder "$out" | tee "$results/fusion_grid_dev.txt"
if [ -n "${STOP_AFTER_GRID:-}" ]; then exit 0; fi
# 5. Confidence models, the proceed threshold and every test figure.
"$here/refit.sh" "$reranker"
