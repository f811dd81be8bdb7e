#!/usr/bin/env bash
# Regenerate research/runs/characterization/ and research/runs/transfer/ from the shipped CPU datasets
# (carb_nas/data/datasets/*.csv). Deterministic: fixed draws, seeded models, one thread.
# Usage: research/runs/generate_reports.sh            (CARB=path/to/carb-nas to override)
set -euo pipefail
cd "$(dirname "$0")/.."
CARB=${CARB:-.venv/bin/carb-nas}
D=carb_nas/data/datasets
present=()
for p in cpu_torch_fp32 cpu_onnxruntime_fp32 cpu_onnxruntime_int8; do
  [[ -f "$D/$p.csv" ]] && present+=("$D/$p.csv")
done
"$CARB" characterize "${present[@]}" --report research/runs/characterization/cpu
pair() {  # source target
  if [[ -f "$D/$1.csv" && -f "$D/$2.csv" ]]; then
    "$CARB" transfer "$D/$1.csv" "$D/$2.csv" --few-shot 10,25,50,100 --repeats 5 \
      --report "research/runs/transfer/${1}__to__${2}"
  else
    echo "skip transfer $1 -> $2: dataset missing" >&2
  fi
}
pair cpu_torch_fp32 cpu_onnxruntime_fp32
pair cpu_onnxruntime_fp32 cpu_onnxruntime_int8
pair cpu_torch_fp32 cpu_onnxruntime_int8
