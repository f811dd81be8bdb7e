"""The CPU identity in a platform fingerprint: what tells two CPUs of one model name apart."""

from __future__ import annotations

from carb_nas.measure import Profiler, cpu_identity
from carb_nas.measure._profiler import ISA_FLAGS, parse_cpuinfo

ZEN3 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
stepping\t: 1
microcode\t: 0x1000065
cpu MHz\t\t: 2445.406
cache size\t: 512 KB
flags\t\t: fpu sse2 avx avx2 fma

processor\t: 1
vendor_id\t: SomethingElse
"""
ZEN4 = ZEN3.replace("model\t\t: 1\n", "model\t\t: 17\n").replace(
    "avx2 fma", "avx2 fma avx512f avx512_bf16"
)


def test_two_cpus_of_one_name_have_different_identities():
    a, b = parse_cpuinfo(ZEN3), parse_cpuinfo(ZEN4)
    assert a == {
        "vendor": "AuthenticAMD",
        "family": "25",
        "model": "1",
        "stepping": "1",
        "microcode": "0x1000065",
        "cache": "512 KB",
        "isa": ["avx2", "fma"],
    }  # the first processor only, no clock (it moves between reads)
    assert b["model"] == "17" and b["isa"] == ["avx2", "fma", "avx512f", "avx512_bf16"]
    assert a != b
    assert parse_cpuinfo("") == {}


def test_the_profiler_fingerprint_carries_this_cpu_identity():
    ident = cpu_identity()
    assert set(ident.get("isa", [])) <= set(ISA_FLAGS)
    prof = Profiler("cpu", "torch", "fp32", 1, meter="none", idle_s=0.0)
    try:
        assert prof.fingerprint["cpu"] == ident
        assert prof.fingerprint["cpu_model"]  # the name stays, for the shipped rows' readers
    finally:
        prof.close()
