"""The CPU this process runs on: which int8 kernel ONNX Runtime will pick, and what every figure is a fact about.

ONNX Runtime's x86 kernels for uint8 activations × int8 weights (``MatMulIntegerToFloat`` u8×s8)
multiply with ``vpmaddubsw`` where the CPU has no VNNI: each pair of products is added in int16
*with saturation* (255 × 127 × 2 > 32,767), so some dot products come out wrong. With AVX-512
VNNI, AVX-VNNI or AMX the kernel accumulates in int32 and is exact. uint8 × uint8 kernels widen to
int16 before multiplying (``vpmaddwd``) and are exact on every x86 class, at half the speed of the
VNNI u8×s8 kernel (docs/design.md, 5b). ARM64 kernels (NEON ``udot``/``sdot``, i8mm, or widening
multiplies without them) accumulate in int32 on every class. Measured: AVX2 only (emulated) and
AVX-512 VNNI + AMX (native); reasoned from the kernels: AVX-512 without VNNI, ARM64.

On x86 the flags are asked of the CPU itself with ``cpuid``, as ONNX Runtime asks, and kept where
the kernel lists them too (it leaves out what the OS does not enable). ``/proc/cpuinfo`` alone can
disagree with ``cpuid``: under an emulator such as ``qemu-x86_64 -cpu Haswell`` (``make
test-avx2``) it shows the host's flags while every library sees the emulated CPU.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import platform
from pathlib import Path

# The flags that decide int8 kernels; recorded with every figure.
CLASS_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "avx512_bf16", "amx_bf16", "asimddp", "i8mm")
INT32_ACCUMULATION = {"avx512_vnni", "avx_vnni", "amx_int8"}
BF16_UNITS = {"avx512_bf16", "amx_bf16"}  # bf16 dot products in hardware: OpenVINO computes in bf16 there


# cpuid leaf 7 (subleaf, register, bit) of each x86 class flag (Intel SDM vol. 2A, CPUID).
CPUID_LEAF_7 = {
    "avx2": (0, 1, 5),
    "avx512f": (0, 1, 16),
    "avx512_vnni": (0, 2, 11),
    "amx_bf16": (0, 3, 22),
    "amx_int8": (0, 3, 25),
    "avx_vnni": (1, 0, 4),
    "avx512_bf16": (1, 0, 5),
}
# x86-64 (System V): cpuid(leaf=edi, subleaf=esi) → eax, ebx, ecx, edx written to [rdx]; rbx saved.
CPUID_CODE = bytes.fromhex("53 4989d0 89f8 89f1 0fa2 418900 41895804 41894808 4189500c 5b c3")


def cpuid_flags() -> set[str] | None:
    """The x86 class flags this CPU reports to ``cpuid``; None off x86-64 or where code cannot be made executable."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except (OSError, AttributeError):  # W^X policies (SELinux execmem), or no mmap.PROT_EXEC (Windows)
        return None
    with page:
        page.write(CPUID_CODE)
        registers = ctypes.c_uint32 * 4
        call = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint32, ctypes.POINTER(registers))
        function = call(ctypes.addressof(ctypes.c_char.from_buffer(page)))

        def cpuid(leaf: int, subleaf: int) -> tuple[int, ...]:
            out = registers()
            function(leaf, subleaf, ctypes.byref(out))
            return tuple(out)

        if cpuid(0, 0)[0] < 7:  # no leaf 7: none of these
            return set()
        leaf_7 = {subleaf: cpuid(7, subleaf) for subleaf in (0, 1)}
    return {flag for flag, (subleaf, register, bit) in CPUID_LEAF_7.items() if leaf_7[subleaf][register] >> bit & 1}


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
    if (asked := cpuid_flags()) is not None:
        flags = {flag for flag in flags if flag not in CPUID_LEAF_7 or flag in asked}
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
