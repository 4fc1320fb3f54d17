"""Shared fixtures. ``cpu_run``: the README's main job on CPU (the default stack), run once per
test session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from script_utils import stack_python

REPO = Path(__file__).resolve().parent.parent


def missing_environment(reason: str):
    """Skip a test whose environment setup.sh did not make; on CI, which makes every one, fail."""
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def default_cpu_stack() -> str:
    """The stack the launcher and setup.sh pick on a CPU machine (tools/devices.sh detect_stack)."""
    return subprocess.run(["bash", "-c", f"source {REPO / 'tools' / 'devices.sh'}; detect_stack cpu python3"],
                          capture_output=True, text=True, check=True).stdout.strip()


@dataclass
class CpuRun:
    """A finished CPU GRPO run of the launcher: its stack, exit status, folders and timing."""

    stack: str
    returncode: int
    output_dir: Path
    log: str  # main_ppo's whole console (LOG_FILE), then what the launcher printed
    wall_s: float
    terminal: str = ""  # what the launcher printed to the terminal


def launch_output(proc: subprocess.CompletedProcess, output_dir: Path) -> tuple[str, str]:
    """(the run's whole console: its train.log then the launcher's own output, the terminal
    output alone) of a finished launch."""
    terminal = proc.stdout + proc.stderr
    log_file = output_dir / "train.log"
    return (log_file.read_text(errors="replace") if log_file.is_file() else "") + terminal, terminal

    @property
    def ckpt_dir(self) -> Path:
        return self.output_dir / "checkpoints"

    @property
    def tensorboard_dir(self) -> Path:
        return self.output_dir / "tensorboard"


def swanlab_installed(python: str | Path = sys.executable) -> bool:
    """Whether swanlab[dashboard] (its local mode writes through swanboard) is importable by ``python``."""
    return subprocess.run([str(python), "-c", "import swanlab, swanboard"], capture_output=True).returncode == 0


def rollout_rows(output_dir: Path) -> list[dict]:
    """Every response of verl's rollout dump (``trainer.rollout_data_dir=OUTPUT_DIR/rollouts``: one
    JSONL file per global step), in step order."""
    return [json.loads(line) for path in sorted((output_dir / "rollouts").glob("*.jsonl"), key=lambda p: int(p.stem))
            for line in path.read_text().splitlines()]


@pytest.fixture(scope="session")
def cpu_run(tmp_path_factory) -> CpuRun:
    """``bash run_qwen2_5_1_5b.sh`` on CPU as the README's quick start runs it (the default stack;
    profile cpu: SmolLM2-135M, MATH Level 1, 2 GRPO steps), once per test session, with its outputs
    in a temporary folder, and verl's dump of every rollout response with its score in
    ``OUTPUT_DIR/rollouts`` (``trainer.rollout_data_dir``). Needs ``bash setup.sh --device cpu``
    first. Where swanlab[dashboard] is installed in the stack's environment (``setup.sh --with-swanlab``) the run logs to SwanLab as
    well as TensorBoard (``LOGGER=tensorboard,swanlab``), which tests/test_swanlab.py checks.

    Set ``RECIPE_CPU_RUN_DIR`` to the OUTPUT_DIR of an existing run to reuse it (development).
    """
    reuse = os.environ.get("RECIPE_CPU_RUN_DIR")
    if reuse:
        out = Path(reuse)
        stack = json.loads((out / "checkpoints" / "launch_settings.json").read_text())["knobs"]["STACK"]
        return CpuRun(stack, 0, out, (out / "train.log").read_text(errors="replace"), 0.0)
    for needed in ("models/SmolLM2-135M-Instruct/config.json", "data/verl/math_level1/train.parquet"):
        if not (REPO / needed).exists():
            pytest.fail(f"{needed} missing: run 'bash setup.sh --device cpu' first")
    stack = default_cpu_stack()
    python = stack_python(stack)
    if not python.exists():
        missing_environment(f"{python} missing: bash setup.sh --device cpu --stack {stack}")
    out = tmp_path_factory.mktemp("cpu_run")
    env = {**os.environ, "DEVICE": "cpu", "OUTPUT_DIR": str(out)}
    if swanlab_installed(python):
        env["LOGGER"] = "tensorboard,swanlab"
    for inherited in ("STACK", "PYTHON", "SWANLAB_LOG_DIR", "SWANLAB_MODE", "TENSORBOARD_DIR", "LOG_FILE", "CKPT_DIR"):
        env.pop(inherited, None)  # the launcher derives them from the default stack and OUTPUT_DIR
    start = time.monotonic()
    proc = subprocess.run(
        ["bash", str(REPO / "run_qwen2_5_1_5b.sh"), f"trainer.rollout_data_dir={out / 'rollouts'}"],
        env=env, cwd=out, capture_output=True, text=True, timeout=1800
    )
    log, terminal = launch_output(proc, out)
    return CpuRun(stack, proc.returncode, out, log, time.monotonic() - start, terminal)
