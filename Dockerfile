# GPU-capable image: CUDA PyTorch base + carb_nas with NVML (nvidia-ml-py) for energy.
# Build:  docker build -t carb-nas .
# Run with the GPU visible (needs the NVIDIA Container Toolkit on the host):
#   docker run --rm --gpus all carb-nas profile search_spaces/resnet.toml --device cuda \
#       --runtime torch --precision fp16 --limit 50 -o /work/campaigns/h200
# NVML's total-energy counter needs no extra privileges; the profiler never changes clocks,
# power limits, persistence or compute mode.
# The base's torch must satisfy the package's `torch>=2.13,<2.15`; pick another tag with
# --build-arg BASE=... (unverified here: this development machine has no Docker engine).
ARG BASE=pytorch/pytorch:2.13.0-cuda12.8-cudnn9-runtime
FROM ${BASE}

WORKDIR /opt/carb_nas
COPY pyproject.toml README.md ./
COPY carb_nas ./carb_nas
COPY search_spaces ./search_spaces
# carb_nas/search_spaces is a symlink to ../search_spaces; setuptools copies its files into the
# wheel. ONNX Runtime GPU gives the onnxruntime runtime its CUDA execution provider.
RUN pip install --no-cache-dir ".[parquet]" onnx onnxruntime-gpu onnxscript \
 && python -c "import pynvml, torch; print('torch', torch.__version__)"

WORKDIR /work
ENTRYPOINT ["carb-nas"]
CMD ["--help"]
