#!/bin/bash
# The next GPU sitting, prepared (about 9 minutes on an H200; no install: the image's
# torch, pandas and nvidia-ml-py do). Results under $OUT, in at most 8 files.
#   1. GPU sitting 2's 26 fp16 configs (research/runs/passes/gpu-h200-2/repeat_specs.json.gz), four
#      passes alternating no probe / launch probe (a, c / b, d): does sitting 2's 1.48x over
#      sitting 1 repeat without its CPU probe (a, c against the shipped rows), and does the
#      launch probe follow the latency between passes (d / b)?
#   2. the seeded draw continued past both sittings, the launch probe in every row.
# Run from the repository root:  OUT=/tmp/out bash benchmarks/gpu_repeat_sitting.sh
# (DEVICE, PRECISION, PASS_MIN and BUDGET_S change the device, the repeat passes' precision,
# minutes per pass and the whole budget: DEVICE=cpu PRECISION=fp32 PASS_MIN=0.1 BUDGET_S=40
# is a dry run of the plumbing on a CPU.)
set -u
DEVICE=${DEVICE:-cuda:0}
PRECISION=${PRECISION:-fp16}
PASS_MIN=${PASS_MIN:-1.5}
BUDGET_S=${BUDGET_S:-510}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/benchmarks
OUT=${OUT:-/tmp/gpu_sitting_out}
W=/tmp/gpu_sitting_work
mkdir -p "$OUT" "$W"
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit,persistence_mode,compute_mode --format=csv > "$OUT/smi.txt" 2>&1
for pass in a b c d; do
  probe=""
  case $pass in b | d) probe=--reference-probe ;; esac
  echo "== repeat pass $pass $probe" | tee -a "$OUT/repeat.log"
  python3 benchmarks/gpu_campaign.py measure --out "$W/repeat-$pass" \
    --specs research/runs/passes/gpu-h200-2/repeat_specs.json.gz --precisions "$PRECISION" --minutes "$PASS_MIN" --device "$DEVICE" \
    $probe 2>&1 | tail -2 | tee -a "$OUT/repeat.log"
done
EL=$(($(date +%s) - T0))
MIN=$(python3 -c "print(round(max(0.5, ($BUDGET_S - $EL) / 60), 2))")
echo "[$EL s] the draw for $MIN min" | tee -a "$OUT/repeat.log"
python3 benchmarks/gpu_campaign.py measure --out "$W/camp" \
  --specs research/runs/passes/gpu-h200/specs.json.gz --skip-in research/runs/passes/gpu-h200 \
  --skip-in research/runs/passes/gpu-h200-2 --minutes "$MIN" --device "$DEVICE" --reference-probe \
  $([ "$DEVICE" = cpu ] && echo --precisions fp32) 2>&1 | tee "$OUT/campaign.log"
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv >> "$OUT/smi.txt" 2>&1
tar czf "$OUT/sitting.tgz" -C "$W" .
echo "done at $(($(date +%s) - T0)) s"
