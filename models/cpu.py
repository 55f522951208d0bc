"""The CPU this process runs on: which int8 kernel ONNX Runtime will pick, and what every figure is a fact about.

ONNX Runtime's x86 kernels for uint8 activations × int8 weights (``MatMulIntegerToFloat`` u8×s8)
multiply with ``vpmaddubsw`` where the CPU has no VNNI: each pair of products is added in int16
*with saturation* (255 × 127 × 2 > 32,767), so some dot products come out wrong. With AVX-512
VNNI, AVX-VNNI or AMX the kernel accumulates in int32 and is exact. uint8 × uint8 kernels widen to
int16 before multiplying (``vpmaddwd``) and are exact on every x86 class, at half the speed of the
VNNI u8×s8 kernel (docs/design.md, 5b). ARM64 kernels (NEON ``udot``/``sdot``, i8mm, or widening
multiplies without them) accumulate in int32 on every class. Measured: AVX2 only (emulated) and
AVX-512 VNNI + AMX (native); reasoned from the kernels: AVX-512 without VNNI, ARM64.
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path

# The flags that decide int8 kernels; recorded with every figure.
CLASS_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "avx512_bf16", "amx_bf16", "asimddp", "i8mm")
INT32_ACCUMULATION = {"avx512_vnni", "avx_vnni", "amx_int8"}
BF16_UNITS = {"avx512_bf16", "amx_bf16"}  # bf16 dot products in hardware: OpenVINO computes in bf16 there


@functools.cache
def cpu() -> dict:
    """``{"model", "machine", "flags"}``: the CPU's name, architecture and its ``CLASS_FLAGS``."""
    model, flags = "", set()
    cpuinfo = Path("/proc/cpuinfo")  # Linux (x86 "flags", ARM "Features"); elsewhere no flags
    for line in cpuinfo.read_text().splitlines() if cpuinfo.is_file() else ():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "model name":
            model = model or value
        elif key in ("flags", "Features"):
            flags |= set(value.split())
    return {
        "model": model or platform.processor() or "unknown",
        "machine": platform.machine(),
        "flags": [flag for flag in CLASS_FLAGS if flag in flags],
    }


def is_arm() -> bool:
    return cpu()["machine"].lower() in ("aarch64", "arm64")


def signed_int8_is_exact() -> bool:
    """Whether ONNX Runtime's u8×s8 kernels accumulate in int32 here (VNNI, AMX, ARM64)."""
    return is_arm() or bool(INT32_ACCUMULATION & set(cpu()["flags"]))


def has_bf16_units() -> bool:
    """Whether the CPU multiplies bf16 in hardware (AVX-512 BF16, AMX); elsewhere bf16 is emulated, slower than fp32."""
    return bool(BF16_UNITS & set(cpu()["flags"]))


def has_amx_bf16() -> bool:
    """Whether the CPU has AMX tiles for bf16, where OpenVINO's bf16 is a candidate for ``auto`` (docs/design.md 5c)."""
    return "amx_bf16" in cpu()["flags"]


def describe() -> str:
    """One line for logs and CI: the CPU's name and class flags."""
    info = cpu()
    return f"{info['model']} ({info['machine']}; {' '.join(info['flags']) or 'no AVX2/VNNI/AMX/dot-product flags'})"


if __name__ == "__main__":  # python -m models.cpu: what CI prints
    print(describe())
