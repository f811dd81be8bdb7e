"""Machine kinds: which machine measured each shipped dataset, named once.

Per-op and per-config costs are per machine, so every shipped dataset belongs to exactly one
*machine kind*: a CPU micro-architecture and ISA (or, for GPU rows, the GPU), identified from
the CPU identity record in its rows' fingerprints (``carb_nas.measure.cpu_identity``: vendor,
family, model, ISA) or, for rows measured before that record existed, from the CPU model
name and ISA documented for them (docs/datasets.md).

Kind ids: ``<vendor>-<micro-architecture or ISA>``: ``intel-avx512``, ``amd-zen3``,
``amd-zen4``, ``amd-zen5``, ``amd-epyc-avx512`` (an AMD EPYC with AVX-512 whose generation
was not recorded) and ``nvidia-h200``.

Dataset names: ``<device>/<runtime>/<precision>/<configs>@<kind>``, e.g.
``cpu/torch/fp32/zoo@amd-zen4``: ``configs`` says which configs were measured (``resnet``:
the ResNet design space; ``zoo``: the built-in families; ``zoo-contended``: a larger draw
of them measured on a contended machine) and ``kind`` which machine measured them. A bare
platform (``cpu/torch/fp32``) means :data:`DEFAULT_DATASETS`'s dataset of it. The file
names on disk predate this grammar and stay as they are (model cache keys hash the files'
bytes and stems); ``SHIPPED_FILES`` maps each name to its file, and the file name read with
``/`` for ``_`` (``cpu/torch/fp32/zoo-zen4``) is still accepted as another spelling.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["DEFAULT_DATASETS", "MACHINE_KINDS", "SHIPPED_FILES", "MachineKind"]


@dataclass(frozen=True)
class MachineKind:
    """One kind of machine that measured shipped rows.

    ``id``: the kind id in dataset names; ``device``: ``cpu`` or ``cuda``; ``vendor``:
    ``/proc/cpuinfo``'s vendor id (GPU kinds: the GPU's vendor); ``cpu_model``: the model name
    the rows record (GPU kinds: the GPU's name); ``family_model``: the CPU's family/model as
    recorded, or a sentence saying it was not; ``isa``: the ISA extensions the runtimes
    dispatch on (empty for GPU kinds, whose rows do not time the CPU); ``datasets``: the
    shipped dataset names of this kind.
    """

    id: str
    device: str
    vendor: str
    cpu_model: str
    family_model: str
    isa: tuple[str, ...]
    description: str

    @property
    def datasets(self) -> tuple[str, ...]:
        return tuple(n for n in SHIPPED_FILES if n.rsplit("@", 1)[1] == self.id)


_AVX512 = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16")

MACHINE_KINDS: Mapping[str, MachineKind] = MappingProxyType(
    {
        k.id: k
        for k in (
            MachineKind(
                "intel-avx512",
                "cpu",
                "GenuineIntel",
                "Intel(R) Xeon(R) Processor",
                "not recorded (rows predate the CPU identity record)",
                ("avx2", "fma", "avx512f"),
                "an Intel Xeon with AVX-512; also the kind of the shipped per-node rows "
                "(carb_nas/data/nodes)",
            ),
            MachineKind(
                "amd-zen3",
                "cpu",
                "AuthenticAMD",
                "AMD EPYC",
                "25/1",
                ("avx2", "fma"),
                "an AMD EPYC Zen 3: AVX2, no AVX-512",
            ),
            MachineKind(
                "amd-zen4",
                "cpu",
                "AuthenticAMD",
                "AMD EPYC",
                "25/17",
                _AVX512,
                "an AMD EPYC Zen 4 with AVX-512 (VNNI, BF16)",
            ),
            MachineKind(
                "amd-zen5",
                "cpu",
                "AuthenticAMD",
                "AMD EPYC",
                "26/2",
                (*_AVX512, "avx_vnni"),
                "an AMD EPYC Zen 5 with AVX-512 (VNNI, BF16) and AVX-VNNI",
            ),
            MachineKind(
                "amd-epyc-avx512",
                "cpu",
                "AuthenticAMD",
                "AMD EPYC",
                "not recorded (rows predate the CPU identity record)",
                ("avx2", "fma", "avx512f"),
                "an AMD EPYC with AVX-512 and 32 MiB L3 whose generation was not recorded: "
                "the ResNet-space rows",
            ),
            MachineKind(
                "nvidia-h200",
                "cuda",
                "NVIDIA",
                "NVIDIA H200",
                "GPU (the host CPU is not what the rows time)",
                (),
                "one NVIDIA H200 GPU, energy from its NVML counter",
            ),
        )
    }
)

#: every shipped dataset: its name -> its file (``data/<folder>/<stem>``, a .csv or .parquet)
SHIPPED_FILES: Mapping[str, str] = MappingProxyType(
    {
        "cpu/torch/fp32/resnet@amd-epyc-avx512": "datasets/cpu_torch_fp32",
        "cpu/onnxruntime/fp32/resnet@amd-epyc-avx512": "datasets/cpu_onnxruntime_fp32",
        "cpu/onnxruntime/int8/resnet@amd-epyc-avx512": "datasets/cpu_onnxruntime_int8",
        "cpu/torch/fp32/resnet@amd-zen4": "datasets/cpu_torch_fp32_zen4",
        "cpu/onnxruntime/fp32/resnet@amd-zen4": "datasets/cpu_onnxruntime_fp32_zen4",
        "cpu/torch/fp32/zoo@intel-avx512": "zoo/cpu_torch_fp32_zoo",
        "cpu/openvino/fp32/zoo@intel-avx512": "zoo/cpu_openvino_fp32_zoo",
        "cpu/openvino/int8/zoo@intel-avx512": "zoo/cpu_openvino_int8_zoo",
        "cpu/torch/fp32/zoo@amd-zen3": "zoo/cpu_torch_fp32_zoo-zen3",
        "cpu/torch/fp32/zoo-contended@amd-zen3": "zoo/cpu_torch_fp32_zoo-epyc",
        "cpu/torch/fp32/zoo@amd-zen4": "zoo/cpu_torch_fp32_zoo-zen4",
        "cpu/torch/fp32/zoo@amd-zen5": "zoo/cpu_torch_fp32_zoo-zen5",
        "cpu/openvino/fp32/zoo@amd-zen5": "zoo/cpu_openvino_fp32_zoo-zen5",
        "cpu/openvino/int8/zoo@amd-zen5": "zoo/cpu_openvino_int8_zoo-zen5",
        "cuda/torch/fp16/zoo@nvidia-h200": "zoo/cuda_torch_fp16_zoo-h200",
        "cuda/torch/fp32/zoo@nvidia-h200": "zoo/cuda_torch_fp32_zoo-h200",
    }
)

#: what a bare platform name means: the ResNet rows where the platform has them, else the
#: quiet, probe-timed Zen 5 rows (docs/datasets.md), else the platform's only dataset
DEFAULT_DATASETS: Mapping[str, str] = MappingProxyType(
    {
        "cpu/torch/fp32": "cpu/torch/fp32/resnet@amd-epyc-avx512",
        "cpu/onnxruntime/fp32": "cpu/onnxruntime/fp32/resnet@amd-epyc-avx512",
        "cpu/onnxruntime/int8": "cpu/onnxruntime/int8/resnet@amd-epyc-avx512",
        "cpu/openvino/fp32": "cpu/openvino/fp32/zoo@amd-zen5",
        "cpu/openvino/int8": "cpu/openvino/int8/zoo@amd-zen5",
        "cuda/torch/fp16": "cuda/torch/fp16/zoo@nvidia-h200",
        "cuda/torch/fp32": "cuda/torch/fp32/zoo@nvidia-h200",
    }
)
