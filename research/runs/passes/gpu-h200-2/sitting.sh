#!/bin/bash
# GPU sitting 2 (stop 41): calibrate-on-arrival benchmark on cuda/torch/fp16, then continue
# the H200 draw. Ends by itself ~545 s after it starts; results under $OUT (<= 8 files).
set -u
export PYTHONUNBUFFERED=1
T0=$(date +%s)
W=/tmp/sit; mkdir -p $W/cal $W/camp
F=name,driver_version,pstate,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw,power.limit,persistence_mode,compute_mode
nvidia-smi --query-gpu=$F --format=csv > $OUT/smi.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $W/pip.log 2>&1 || { echo "pip failed"; tail -5 $W/pip.log; }
export PYTHONPATH=/tmp/site:$PWD:$PWD/benchmarks
python3 -c "import lightgbm" 2>/dev/null || { echo "lightgbm: using the carried libgomp"; export LD_LIBRARY_PATH=$PWD/.whl/lib; }
python3 -c "
import torch,pandas,sklearn,lightgbm,xgboost,skops,numpy,scipy
print('torch',torch.__version__,'cuda',torch.version.cuda,'pandas',pandas.__version__,'sklearn',sklearn.__version__,'numpy',numpy.__version__,'scipy',scipy.__version__,torch.cuda.get_device_name(0),'threads',torch.get_num_threads())
" 2>&1 | tee $OUT/env.txt
lscpu | grep -E "Model name|^CPU\(s\)" >> $OUT/env.txt
timeout 250 python3 benchmarks/calibration.py --platform cuda/torch/fp16 --time-budget-s 45 \
  --n-validate 16 --validate-passes 2 --passes 2 --rows-out $W/cal 2>&1 | tee $OUT/cal.log
tar czf $OUT/cal.tgz -C $W cal pip.log
EL=$(( $(date +%s) - T0 ))
MIN=$(python3 -c "print(round(max(0.5, (520 - $EL) / 60), 2))")
echo "[$EL s] campaign for $MIN min"
python3 benchmarks/gpu_campaign.py measure --out $W/camp --specs research/runs/passes/gpu-h200/specs.json.gz \
  --skip-in research/runs/passes/gpu-h200 --minutes $MIN 2>&1 | tee $OUT/campaign.log
nvidia-smi --query-gpu=$F --format=csv >> $OUT/smi.txt 2>&1
tar czf $OUT/camp.tgz -C $W camp
echo "done at $(( $(date +%s) - T0 )) s"
