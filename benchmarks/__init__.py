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


def save_chart(fig, ax, path: Path, ylabel: str, title: str) -> None:
    """Finish a learning-curve chart (labels, grid, legend, title) and write it to ``path`` as a
    PNG all at once (a temporary file renamed over it), closing the figure."""
    import matplotlib.pyplot as plt

    ax.set_xlabel("global step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)
