#!/usr/bin/env bash
# Turn a training run into a shipped model folder: export (int8) -> calibrate on dev -> dev eval.
#   training/release.sh runs/ce-l6/final models/toolrank-reranker [extra export flags]
set -euo pipefail
src=$1; out=$2; shift 2
export HF_HUB_OFFLINE=1
# sentence-transformers trains with longest_first truncation: export the same.
hash=$(python -c "from training.pairs import data_hash, DATA_DIR as d; print(data_hash(d/'questions.jsonl', d/'judgments.jsonl', d/'splits.json'))")
python -m training.export "$src" "$out" --truncation longest_first --overwrite --name "$(basename "$out")" \
    --training-data-hash "$hash" "$@"
python -m training.calibrate --model "$out"
toolrank eval --split dev --model "$out" --stages hybrid,scorer --json > "$out/dev_eval.json"
python - "$out/dev_eval.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for s, m in r["stages"].items():
    print(f"{s:8s} top1 {m['top1']:.3f} top5 {m['top5']:.3f}")
PY
