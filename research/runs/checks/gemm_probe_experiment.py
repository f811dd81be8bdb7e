"""Experiment (stop 19, docs/measurement.md): does a GEMV probe beside the conv probe make VGG's
rows repeat better? Two passes (A, B) over the same 90 ``zoo-zen5`` configs, a fresh forked
process per config; each row records the conv probe (``reference_ms``), a 16 MB GEMV probe timed
in the same bursts (``gemm_ms``; ``ops_*`` around the profiled runs) and the linear ops' share
of the op time. Real measurements; rows appended to the JSONL named on the command line.
The shipped JSONL came from the first version of this script, which warmed up with the ops
campaign's own warm-up; this one warms up on a tiny model through the public API.

    PYTHONPATH=$PWD python research/runs/checks/gemm_probe_experiment.py OUT.jsonl [N_VGG (60)]
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from carb_nas.measure import ReferenceProbe
from carb_nas.measure.campaign import measure_ops
from carb_nas.models import build_model
from carb_nas.space import Config

ROOT = Path(__file__).resolve().parents[2]


class TwoProbe(ReferenceProbe):
    """The conv probe plus one ``Linear(2048, 2048)`` run (16 MB of weights) per burst."""

    def __init__(self) -> None:
        super().__init__()
        self._lin = torch.nn.Linear(2048, 2048).eval()
        self._lx = torch.randn(1, 2048)
        self.gemm: list[float] = []
        self.windows: list[float] = []  # the GEMV median of each closed window, ms
        for _ in range(2):
            self._gemv()

    def _gemv(self) -> float:
        return self.time_call(self._lin, self._lx)

    def run_burst(self) -> None:
        super().run_burst()
        self.gemm.append(self._gemv())

    def start(self) -> None:
        if self.gemm:
            self.windows.append(float(np.median(self.gemm)) * 1e3)
        self.gemm = []
        super().start()


def main() -> None:
    rows = pd.read_csv(ROOT / "carb_nas/data/zoo/cpu_torch_fp32_zoo-zen5.csv")
    rows = rows[rows.reference_ms > 0]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    vgg = rows[rows.family.str.startswith("vgg")].sample(n, random_state=0)
    mbv2 = rows[rows.family == "mobilenet_v2"].sample(max(1, n // 2), random_state=0)
    pick = pd.concat([vgg, mbv2])
    torch.set_num_threads(1)
    tiny = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval()
    measure_ops(tiny, (1, 3, 16, 16), "adaptive", 1)  # JIT oneDNN and the profiler once
    probe = TwoProbe()
    with open(sys.argv[1], "a") as out:
        for p in ("A", "B"):
            for r in pick.itertuples(index=False):
                c = Config(
                    r.family, int(r.depth), float(r.width), int(r.resolution), int(r.batch_size)
                )
                read_end, write_end = os.pipe()
                if os.fork() == 0:
                    os.close(read_end)
                    torch.manual_seed(0)
                    shape = (c.batch_size, 3, c.resolution, c.resolution)
                    row, ops = measure_ops(build_model(c), shape, "adaptive", 3, reference=probe)
                    probe.start()  # closes the window of the profiled runs
                    t = ops["measured_ms"]
                    rec = {
                        "pass": p,
                        "key": r.key,
                        "family": r.family,
                        "latency_ms": row["latency_ms"],
                        "reference_ms": row["reference_ms"],
                        "gemm_ms": probe.windows[0],
                        "ops_gemm_ms": probe.windows[1],
                        "ops_reference_ms": row["ops_reference_ms"],
                        "op_sum_ms": row["op_sum_ms"],
                        "linear_share": float(t[ops["kind"] == "linear"].sum() / t.sum()),
                        "cv": row["latency_cv"],
                    }
                    os.write(write_end, json.dumps(rec).encode())
                    os._exit(0)
                os.close(write_end)
                with os.fdopen(read_end) as f:
                    data = f.read()
                os.wait()
                if data:
                    out.write(data + "\n")
                    out.flush()


if __name__ == "__main__":
    main()
