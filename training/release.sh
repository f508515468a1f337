#!/usr/bin/env bash
# Turn a distillation run into a shipped model folder, end to end:
#   full-precision weights kept (safetensors, fp16) -> export (int8, 7-bit weights) ->
#   int8-vs-fp32 gate on dev lists -> exact-integer check -> frontier on dev (speed x quality) ->
#   confidence models (with and without example requests; real no-fit lists of the train split) ->
#   proceed threshold on dev -> every test figure (benchmarks/ablation.py).
#
#   training/release.sh runs/ce-long/best models/toolrank-reranker [extra export flags]
#
# SCORE_TOP (default 20): candidates the cross-encoder scores, as the shipped Policy does;
# CAL_QUESTIONS (default 400): dev questions the confidence models are fitted on.
# FRONTIER_QUESTIONS (default 100), FRONTIER_K (default 10,20,30,100), FRONTIER_LENGTHS (default: the
# trained one and 96), FRONTIER_WORKERS (default 2,1): the speed x quality frontier on dev.
# CAL_FEATURES_NOEX (default: all): --features of the day-one confidence model (training/calibrate.py).
# RUNS: benchmarks/ablation.py runs (default: every test figure of docs/results.md).
set -euo pipefail
src=$1; out=$2; shift 2
export HF_HUB_OFFLINE=1
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
nofit="$here/data/nofit.jsonl"
top="${SCORE_TOP:-20}"
limit="${CAL_QUESTIONS:-400}"
frontier_n="${FRONTIER_QUESTIONS:-100}"
frontier=(--k "${FRONTIER_K:-10,20,30,100}" --workers "${FRONTIER_WORKERS:-2,1}")
if [ -n "${FRONTIER_LENGTHS:-}" ]; then frontier+=(--lengths "$FRONTIER_LENGTHS"); fi
runs="${RUNS:-test_ex,test_noex,independent_ex,independent_noex,test_nofit,test_abstain}"
noex_features=()
if [ -n "${CAL_FEATURES_NOEX:-}" ]; then noex_features=(--features "$CAL_FEATURES_NOEX"); fi
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
# 2. Export int8 (the weights folder moves aside while the export replaces the model folder).
keep=$(mktemp -d); mv "$out/weights" "$keep/weights"
python -m training.export "$src" "$out" --overwrite --name "$(basename "$out")" "$@"
mv "$keep/weights" "$out/weights"
# 3. int8 must not cost quality: the same checkpoint in fp32 against the int8 folder on dev lists.
fp32=$(mktemp -d)/fp32
python -m training.export "$src" "$fp32" --quantize none --name fp32-reference "$@"
python -m training.int8 gate "$fp32" "$out" --out "$out/int8_gate.json"
python -m training.int8 check "$out" > /dev/null
# 4. The confidence models and the scorer-alone calibration, on the logits the pipeline really has.
python -m training.calibrate --model "$out" --limit "$limit" --score-top "$top" --modes request,need,abstain,nofit --nofit "$nofit"
python -m training.calibrate --model "$out" --limit "$limit" --score-top "$top" --no-examples --modes request,need,abstain,nofit --nofit "$nofit" \
    "${noex_features[@]}"
# 5. The frontier and the proceed threshold on dev; every test figure.
python "$root/benchmarks/scorer_frontier.py" --model "$out" --n "$frontier_n" --timing 30 "${frontier[@]}" --json "$results/frontier_dev.json" \
    | tee "$results/frontier_dev.txt"
python -m training.thresholds --model "$out" --nofit "$nofit" --limit "$limit" --json "$results/thresholds_dev.json"
python "$root/benchmarks/ablation.py" --model "$out" --score-top "$top" \
    --runs "$runs"
