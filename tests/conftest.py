"""Shared fixtures. ``cpu_run``: the README's main job on CPU, run once per test session."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@dataclass
class CpuRun:
    """A finished CPU GRPO run of the launcher: its exit status, folders and timing."""

    returncode: int
    output_dir: Path
    log: str
    wall_s: float

    @property
    def ckpt_dir(self) -> Path:
        return self.output_dir / "checkpoints"

    @property
    def tensorboard_dir(self) -> Path:
        return self.output_dir / "tensorboard"


@pytest.fixture(scope="session")
def cpu_run(tmp_path_factory) -> CpuRun:
    """Run ``bash run_qwen2_5_1_5b.sh`` (DEVICE=cpu: SmolLM2-135M, MATH Level 1, 2 GRPO steps)
    with its outputs in a temporary folder. Needs ``bash setup.sh --device cpu`` first.

    Set ``RECIPE_CPU_RUN_DIR`` to the OUTPUT_DIR of an existing run to reuse it (development).
    """
    reuse = os.environ.get("RECIPE_CPU_RUN_DIR")
    if reuse:
        out = Path(reuse)
        return CpuRun(0, out, (out / "train.log").read_text(errors="replace"), 0.0)
    for needed in ("models/SmolLM2-135M-Instruct/config.json", "data/verl/math_level1/train.parquet"):
        if not (REPO / needed).exists():
            pytest.fail(f"{needed} missing: run 'bash setup.sh --device cpu' first")
    out = tmp_path_factory.mktemp("cpu_run")
    env = {**os.environ, "DEVICE": "cpu", "OUTPUT_DIR": str(out)}
    start = time.monotonic()
    proc = subprocess.run(
        ["bash", str(REPO / "run_qwen2_5_1_5b.sh")], env=env, cwd=out, capture_output=True, text=True, timeout=1800
    )
    return CpuRun(proc.returncode, out, proc.stdout + proc.stderr, time.monotonic() - start)
