#!/usr/bin/env bash
# Turn a training run into a shipped model folder:
#   export (int8, 7-bit weights) -> int8-vs-fp32 gate on dev lists -> exact-integer check
#   -> confidence models (with and without example requests; real no-fit lists of the train split)
#   -> dev eval.
#   training/release.sh runs/ce-distill/final models/toolrank-reranker [extra export flags]
set -euo pipefail
src=$1; out=$2; shift 2
export HF_HUB_OFFLINE=1
nofit="$(dirname "$0")/data/nofit.jsonl"
# The training-data hash comes from the run's train_args.json (what it really trained on).
python -m training.export "$src" "$out" --overwrite --name "$(basename "$out")" "$@"
# int8 must not cost quality: the same checkpoint in fp32 against the int8 folder on dev lists (fails the release)
fp32=$(mktemp -d)/fp32
python -m training.export "$src" "$fp32" --quantize none --name fp32-reference "$@"
python -m training.int8 gate "$fp32" "$out" --out "$out/int8_gate.json"
python -m training.int8 check "$out" > /dev/null
python -m training.calibrate --model "$out" --modes request,need,abstain,nofit --nofit "$nofit"
python -m training.calibrate --model "$out" --no-examples --modes request,need,abstain,nofit --nofit "$nofit"
toolrank eval --split dev --model "$out" --stages hybrid,logit,retrieval-confidence,scorer --json > "$out/dev_eval.json"
python - "$out/dev_eval.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for s, m in r["stages"].items():
    print(f"{s:22s} top1 {m['top1']:.3f} top5 {m['top5']:.3f}")
PY
