# GPU-capable image: CUDA PyTorch base + carb_nas with NVML (nvidia-ml-py) for energy.
# Build:  docker build -t carb-nas .
# Run with the GPU visible (needs the NVIDIA Container Toolkit on the host):
#   docker run --rm --gpus all carb-nas profile search_spaces/resnet.toml --device cuda \
#       --runtime torch --precision fp16 --limit 50 --out /work/campaigns/h200
# NVML's total-energy counter needs no extra privileges; the profiler never changes clocks,
# power limits, persistence or compute mode.
FROM pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime

WORKDIR /opt/carb_nas
COPY pyproject.toml README.md ./
COPY carb_nas ./carb_nas
COPY search_spaces ./search_spaces
# The base image's CUDA torch satisfies no `torch>=2.13` pin, so install the CUDA 12.4 wheel of a
# satisfying release from PyTorch's index, then the package with ONNX Runtime GPU for the
# onnxruntime runtime on CUDA. `rm` replaces the symlink with the real files for a non-editable install.
RUN pip install --no-cache-dir "torch>=2.13,<2.15" --index-url https://download.pytorch.org/whl/cu124 \
 && rm carb_nas/search_spaces && cp -r search_spaces carb_nas/search_spaces \
 && pip install --no-cache-dir ".[parquet]" onnx onnxruntime-gpu onnxscript

WORKDIR /work
ENTRYPOINT ["carb-nas"]
CMD ["--help"]
