#!/usr/bin/env bash
# What every release refits and re-measures once its models are in place (release.sh after a new
# cross-encoder, release_encoder.sh after a new dense encoder): the confidence models (with and
# without example requests; real no-fit lists of the train split), the proceed threshold on dev,
# and every test figure (benchmarks/ablation.py).
#
#   training/refit.sh models/toolrank-reranker
#
# SCORE_TOP (default 10): candidates the cross-encoder scores, as the shipped Policy does;
# CAL_QUESTIONS (default 400): dev questions the confidence models are fitted on;
# CAL_FEATURES_NOEX (default: all): --features of the day-one confidence model (training/calibrate.py);
# RUNS: benchmarks/ablation.py runs (default: every test figure of docs/results.md).
set -euo pipefail
out=$1
export HF_HUB_OFFLINE=1
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
nofit="$here/data/nofit.jsonl"
top="${SCORE_TOP:-10}"
limit="${CAL_QUESTIONS:-400}"
runs="${RUNS:-test_ex,test_noex,independent_ex,independent_noex,test_nofit,test_abstain}"
noex_features=()
if [ -n "${CAL_FEATURES_NOEX:-}" ]; then noex_features=(--features "$CAL_FEATURES_NOEX"); fi
results="$root/benchmarks/results"

python -m training.calibrate --model "$out" --limit "$limit" --score-top "$top" --modes request,need,abstain,nofit --nofit "$nofit"
python -m training.calibrate --model "$out" --limit "$limit" --score-top "$top" --no-examples --modes request,need,abstain,nofit --nofit "$nofit" \
    "${noex_features[@]}"
python -m training.thresholds --model "$out" --nofit "$nofit" --limit "$limit" --json "$results/thresholds_dev.json"
python "$root/benchmarks/ablation.py" --model "$out" --score-top "$top" --runs "$runs"
