#!/usr/bin/env bash
# What every release refits and re-measures once its models are in place (release.sh after a new
# cross-encoder, release_encoder.sh after a new dense encoder), the 0.7.0 flow:
#   1. the confidence models with the agents' blind needs (with and without example requests; dev
#      questions + the train split's no-fit requests), side by side, one core each, and the retrieval-only
#      ones on the same lists (0.10.0 also tried fitting day one on the fit catalogs: docs/results.md);
#   2. the agent flow on the fit catalogs (MCP-Zero dev organisations + the training corpora) ->
#      the tail calibration -> the decision zones (printed: change Policy's defaults by hand if they move);
#   3. measured on what nothing was fitted on, side by side: the agent flow on the report catalogs
#      (MCP-Zero test organisations + the held-out corpora) and every stage with and without a need
#      (benchmarks/need_eval.py, paired against BASELINE's confidence models).
#
#   training/refit.sh models/toolrank-reranker
#
# SCORE_TOP (default 10); CAL_QUESTIONS (default 400); CAL_FEATURES / CAL_FEATURES_NOEX (defaults: 0.10.0's);
# FLOW_N (default 100) / REPORT_N (default 150): answerable requests per catalog kind; BASELINE: a folder
# with an earlier release's combiner*.json and config.json (default: none, the tail-less policy);
# LOGS (default runs/refit-logs); MEASURE=0 stops after the zones (step 3 left to the caller);
# TAIL_JUDGE: a folder with a blind judge's items.jsonl and judged_*.jsonl for the fit rows' ranks 11-20
# (benchmarks/judged_flow.py mine-tail): the tail's level from the judge (0.14.0 on; without it the labels').
set -euo pipefail
out=$1
export HF_HUB_OFFLINE=1
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
nofit="$here/data/nofit.jsonl"
needs="$here/data/needs_blind.jsonl"
top="${SCORE_TOP:-10}"
limit="${CAL_QUESTIONS:-400}"
ex_features="${CAL_FEATURES:-logit,logit_gap,log_fused_rank,log_bm25_rank,log_dense_rank,dense_score,dense_gap,bm25_rel,bm25_over_5th,fused_rel,named_other,mentions_server}"
noex_features="${CAL_FEATURES_NOEX:-logit,logit_gap,log_fused_rank,dense_score,fused_rel,named_other,mentions_server}"
retrieval_features=log_fused_rank,log_bm25_rank,log_dense_rank,dense_score,dense_gap,bm25_rel,bm25_over_5th,fused_rel,named_other,mentions_server
results="$root/benchmarks/results"
tail_judge=()
if [ -n "${TAIL_JUDGE:-}" ]; then   # checked before the long steps, not after them
  shopt -s nullglob
  judged=("$TAIL_JUDGE"/judged_*.jsonl)
  shopt -u nullglob
  if [ ! -f "$TAIL_JUDGE/items.jsonl" ] || [ ${#judged[@]} -eq 0 ]; then
    echo "error: TAIL_JUDGE=$TAIL_JUDGE needs items.jsonl and judged_*.jsonl" >&2; exit 2
  fi
  tail_judge=(--judged-items "$TAIL_JUDGE/items.jsonl" --judged "${judged[@]}")
fi
logs="${LOGS:-$root/runs/refit-logs}"
mkdir -p "$logs"
lanes() {   # run the given commands side by side; fail if any fails (its log named)
  local pids=() names=() i=0 rc=0
  for cmd in "$@"; do
    name="$(echo "$cmd" | awk '{print $1"_"$2"_"$3}' | tr -c 'A-Za-z0-9_\n' '_' | head -c 60)_$i"
    bash -c "$cmd" > "$logs/$name.log" 2>&1 & pids+=($!); names+=("$name"); i=$((i + 1))
  done
  for j in "${!pids[@]}"; do
    if ! wait "${pids[$j]}"; then echo "failed: ${names[$j]} (see $logs/${names[$j]}.log)" >&2; rc=1; fi
  done
  return $rc
}

lanes "python -m training.calibrate --model '$out' --limit $limit --score-top $top --threads 1 \
         --modes request,need,abstain,nofit --nofit '$nofit' --needs '$needs' --features $ex_features \
         --save-lists '$logs/lists_ex.npz'" \
      "python -m training.calibrate --model '$out' --limit $limit --score-top $top --threads 1 --no-examples \
         --modes request,need,abstain,nofit --nofit '$nofit' --needs '$needs' --features $noex_features \
         --save-lists '$logs/lists_noex.npz'"
# the retrieval-only models on the same lists
for kind in ex noex; do
  python -m training.calibrate --retrieval-only --limit "$limit" $([ $kind = noex ] && echo --no-examples) \
      --modes request,need,abstain,nofit --needs "$needs" --features "$retrieval_features" \
      --load-lists "$logs/lists_$kind.npz" > "$logs/retrieval_only_$kind.log" 2>&1
done
python "$root/benchmarks/agent_flow.py" --set fit --n "${FLOW_N:-100}" --always-second --model "$out" \
    --out "$results/agent_flow_fit.json" > "$logs/agent_flow_fit.log" 2>&1
# the tail's level from a blind judge of the fit rows' ranks 11-20 (TAIL_JUDGE; candidates it did not read
# are not counted, so rows that moved since need their new ranks 11-20 judged)
python -m training.tail "$results/agent_flow_fit.json" --out "$out/tail_calibration.json" ${tail_judge[@]+"${tail_judge[@]}"}
python -m training.thresholds --flow "$results/agent_flow_fit.json" --json "$results/zones_fit.json"
# read against a blind judge (benchmarks/judged_flow.py mine on the fit rows, judges, then
# --judged-items ITEMS --judged J*.jsonl): 0.13.0 printed 0.80 and kept 0.83 (docs/results.md, "Release 0.13.0")
baseline=()
if [ -n "${BASELINE:-}" ]; then baseline=(--baseline "$BASELINE"); fi
if [ "${MEASURE:-1}" = "0" ]; then echo "refit done (MEASURE=0: the held-out report and need_eval left to the caller)"; exit 0; fi
lanes "python '$root/benchmarks/agent_flow.py' --set report --n ${REPORT_N:-150} --model '$out' --threads 1 \
         --out '$results/agent_flow_report.json'" \
      "python '$root/benchmarks/need_eval.py' --model '$out' --threads 1 ${baseline[*]:-}"
echo "refit done: $out (logs in $logs)"
