"""``models.cpu``: the class flags are what the CPU answers to ``cpuid``, as ONNX Runtime reads them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from models import cpu

ROOT = Path(__file__).resolve().parent.parent


def kernel_flags() -> set[str]:
    lines = Path("/proc/cpuinfo").read_text().splitlines()
    return {flag for line in lines if line.startswith("flags") for flag in line.partition(":")[2].split()}


@pytest.mark.skipif(cpu.cpuid_flags() is None or not Path("/proc/cpuinfo").is_file(), reason="cpuid: x86-64 Linux only")
def test_cpuid_answers_what_the_kernel_lists_natively():
    """Each bit read where the SDM puts it: natively the kernel lists the same class flags as cpuid
    (it drops only what the OS does not enable, never on the machines served here)."""
    asked, listed = cpu.cpuid_flags(), kernel_flags() & set(cpu.CPUID_LEAF_7)
    assert asked == listed, (asked, listed)
    assert set(cpu.cpu()["flags"]) & set(cpu.CPUID_LEAF_7) == asked


@pytest.mark.skipif(shutil.which("qemu-x86_64") is None or cpu.cpuid_flags() is None, reason="qemu-user on x86-64 (make test-avx2)")
def test_an_emulated_avx2_cpu_is_seen_as_one():
    """Under qemu-user, /proc/cpuinfo is the host's; cpuid is the emulated CPU's, and it decides."""
    done = subprocess.run(
        ["qemu-x86_64", "-cpu", "Haswell", sys.executable, "-m", "models.cpu"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip().endswith("(x86_64; avx2)"), done.stdout
