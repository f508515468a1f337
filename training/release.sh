#!/usr/bin/env bash
# Turn a distillation run into a shipped model folder, end to end:
#   full-precision weights kept (safetensors, fp16) -> export (int8, 7-bit weights) ->
#   int8-vs-fp32 gate on dev lists -> exact-integer check -> confidence models with blind needs, the
#   agent flow, tail calibration and zones, the held-out report and every figure with and without a
#   need (training/refit.sh) -> frontier on dev (speed x quality; FRONTIER=0 skips it).
#
#   training/release.sh runs/ce-long/best models/toolrank-reranker [extra export flags]
#
# SCORE_TOP, CAL_QUESTIONS, CAL_FEATURES_NOEX, FLOW_N, REPORT_N, BASELINE, LOGS: see training/refit.sh.
# FRONTIER_QUESTIONS (default 100), FRONTIER_K (default 10,20,30,100), FRONTIER_LENGTHS (default: the
# trained one and 96), FRONTIER_WORKERS (default 2,1): the speed x quality frontier on dev.
set -euo pipefail
src=$1; out=$2; shift 2
export HF_HUB_OFFLINE=1
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
frontier_n="${FRONTIER_QUESTIONS:-100}"
frontier=(--k "${FRONTIER_K:-10,20,30,100}" --workers "${FRONTIER_WORKERS:-2,1}")
if [ -n "${FRONTIER_LENGTHS:-}" ]; then frontier+=(--lengths "$FRONTIER_LENGTHS"); fi
results="$root/benchmarks/results"

# 1. The full-precision student, kept so no release starts again from a quantised graph.
python - "$src" "$out/weights" <<'PY'
import json, shutil, sys
from pathlib import Path
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer
import training.modeling  # noqa: F401  (the mean-pooling model class)
src, dest = Path(sys.argv[1]), Path(sys.argv[2])
model = AutoModelForSequenceClassification.from_pretrained(src, num_labels=1).to(torch.float16)
shutil.rmtree(dest, ignore_errors=True)
model.save_pretrained(dest, safe_serialization=True)
AutoTokenizer.from_pretrained(src).save_pretrained(dest)
shutil.copy(src / "train_args.json", dest / "train_args.json")
print(f"full-precision (fp16) weights: {dest}")
PY
# 2. Export int8 (the weights folder and the release's model card move aside while the export
#    replaces the model folder; a card the export writes is a template, the kept one is the record).
keep=$(mktemp -d); mv "$out/weights" "$keep/weights"
if [ -f "$out/MODEL_CARD.md" ]; then cp "$out/MODEL_CARD.md" "$keep/MODEL_CARD.md"; fi
python -m training.export "$src" "$out" --overwrite --name "$(basename "$out")" "$@"
mv "$keep/weights" "$out/weights"
if [ -f "$keep/MODEL_CARD.md" ]; then mv "$keep/MODEL_CARD.md" "$out/MODEL_CARD.md"; fi
# 3. int8 must not cost quality: the same checkpoint in fp32 against the int8 folder on dev lists.
fp32=$(mktemp -d)/fp32
python -m training.export "$src" "$fp32" --quantize none --name fp32-reference "$@"
python -m training.int8 gate "$fp32" "$out" --out "$out/int8_gate.json"
python -m training.int8 check "$out" > /dev/null
# 4. Confidence models, the agent flow, tail and zones, and every figure with and without a need.
"$here/refit.sh" "$out"
# 5. The frontier on dev (speed x quality), unless FRONTIER=0.
if [ "${FRONTIER:-1}" = "0" ]; then exit 0; fi
#    After the refit: a whole search calls the scorer only through a confidence model that reads its logit, and the export left the folder without one.
python "$root/benchmarks/scorer_frontier.py" --model "$out" --n "$frontier_n" --timing 30 "${frontier[@]}" --json "$results/frontier_dev.json" \
    | tee "$results/frontier_dev.txt"
