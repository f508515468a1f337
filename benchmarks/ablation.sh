#!/usr/bin/env bash
# Every figure of the README's quality tables, measured in one go; JSON per run in benchmarks/results/.
#   benchmarks/ablation.sh [MODEL_DIR]      (default: the shipped model)
# Two runs at a time on a 2-core machine; about 40 minutes in all.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-models/toolrank-reranker}
out=benchmarks/results
mkdir -p "$out"
run() { local name=$1; shift; echo "== $name: toolrank eval $*"; toolrank eval --model "$model" --threads 1 --json "$@" > "$out/$name.json"; }
export OMP_NUM_THREADS=1
(run test_ex --split test
 run test_ex_need --split test --use-need
 run test_org30 --split test --org-size 30
 run dev_ex --split dev
 run train_sample --split train --sample 500) &
(run test_noex --split test --no-examples
 run test_noex_need --split test --no-examples --use-need
 run test_abstain --split test --stages hybrid,scorer --abstain --plot "$out/coverage_risk_test.png" --tokens) &
wait
python benchmarks/make_tables.py "$out"
