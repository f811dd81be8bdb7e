"""Convert a saved ``torch.export`` program to a LiteRT (TFLite) flatbuffer.

Runs in the process that has ``litert-torch`` (this one, or the interpreter named by
``CARB_NAS_LITERT_PYTHON``: litert-torch pins ``typing-extensions<4.13`` through ``xdsl`` and
pulls jax and transformers, so it often lives in an environment of its own). It imports only
torch, numpy and litert-torch, never carb_nas, so it runs as a plain script there::

    python _litert_convert.py '{"program": "m.pt2", "shape": [1, 3, 64, 64],
                                "precision": "int8", "calibration": "calib.npy",
                                "out": "m.tflite"}'

Prints one JSON line: the versions and the scheme used, or ``{"error": ...}`` (exit code 1).
Precisions: ``fp32`` (plain conversion), ``fp16`` (fp16 weights, fp32 compute: ai-edge-quantizer
``float_casting`` on the fp32 flatbuffer), ``int8`` (full-integer static: PT2E with the
symmetric per-channel ``PT2EQuantizer``, calibrated on the given batches, int8 weights and
activations; the float input and output stay float).
"""

from __future__ import annotations

import json
import sys


def _fp16_weights(fp32_path: str, out: str) -> str:
    from ai_edge_quantizer import quantizer as aeq

    qt = aeq.Quantizer(fp32_path)
    qt.update_quantization_recipe(
        regex=".*",
        operation_name="*",
        algorithm_key="float_casting",
        op_config=aeq.qtyping.OpQuantizationConfig(
            weight_tensor_config=aeq.qtyping.TensorQuantizationConfig(
                num_bits=16, dtype=aeq.qtyping.TensorDataType.FLOAT
            ),
            compute_precision=aeq.qtyping.ComputePrecision.FLOAT,
            explicit_dequantize=True,
        ),
    )
    qt.quantize().export_model(out, overwrite=True)
    return "ai-edge-quantizer float_casting: fp16 weights, explicit dequantize, fp32 compute"


def convert(spec: dict) -> dict:
    import litert_torch
    import numpy as np
    import torch

    module = torch.export.load(spec["program"]).module()
    x = torch.zeros(tuple(spec["shape"]), dtype=torch.float32)
    precision = spec["precision"]
    info = {"litert_torch": getattr(litert_torch, "__version__", None) or _version("litert-torch")}
    if precision == "int8":
        from litert_torch.quantize import pt2e_quantizer as pq
        from litert_torch.quantize import quant_config as qc
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        quantizer = pq.PT2EQuantizer().set_global(
            pq.get_symmetric_quantization_config(is_per_channel=True, is_dynamic=False)
        )
        graph = torch.export.export(module, (x,)).module()
        prepared = prepare_pt2e(graph, quantizer)
        for batch in np.load(spec["calibration"]):
            prepared(torch.from_numpy(np.ascontiguousarray(batch[None])))
        quantized = convert_pt2e(prepared, fold_quantize=False)
        model = litert_torch.convert(
            quantized, (x,), quant_config=qc.QuantConfig(pt2e_quantizer=quantizer)
        )
        model.export(spec["out"])
        info["scheme"] = (
            "PT2E static full-integer: symmetric per-channel int8 weights, int8 activations "
            "(PT2EQuantizer, MinMax observers), float input/output"
        )
        info["ai_edge_quantizer"] = None
    else:
        model = litert_torch.convert(module, (x,))
        if precision == "fp16":
            fp32_out = spec["out"] + ".fp32.tflite"
            model.export(fp32_out)
            info["scheme"] = _fp16_weights(fp32_out, spec["out"])
            info["ai_edge_quantizer"] = _version("ai-edge-quantizer")
            import os

            os.unlink(fp32_out)
        else:
            model.export(spec["out"])
            info["scheme"] = "none (fp32)"
    return info


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def main(argv: list[str]) -> int:
    try:
        info = convert(json.loads(argv[1]))
    except Exception as e:  # noqa: BLE001 - reported to the parent as one JSON line
        print(json.dumps({"error": f"{type(e).__name__}: {str(e)[:1500]}"}))
        return 1
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
