"""Benchmarks of the recipe; run each from the repository root as ``python -m benchmarks.<name>``."""
from __future__ import annotations

import os
from pathlib import Path

#: /proc/cpuinfo flags of native bf16 matrix multiplication (profiles/cpu.sh reads the same flags).
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


def cpu_description(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The machine a CPU benchmark ran on, for its table's header: the CPU model, the number of
    CPUs, and which native bf16 flags it has (e.g. ``Intel(R) Xeon(R) Processor, 2 CPUs, native
    bf16: amx_bf16, avx512_bf16``). Falls back to the CPU count where /proc/cpuinfo is absent."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return f"{os.cpu_count()} CPUs"
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                  if line.startswith("model name")), "unknown CPU")
    flags = set(next((line.split(":", 1)[1].split() for line in text.splitlines()
                      if line.startswith("flags")), []))
    native = [flag for flag in NATIVE_BF16_FLAGS if flag in flags]
    return f"{model}, {os.cpu_count()} CPUs, native bf16: {', '.join(native) if native else 'none'}"
