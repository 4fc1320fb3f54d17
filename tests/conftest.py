"""Shared fixtures. ``cpu_run``: the README's main job on CPU (the default stack), run once per
test session.

The tests run in the default stack's environment (README: ``.venv-current/bin/python -m pytest``).
What needs a given stack's verl or transformers runs in that stack's environment as a
subprocess (:func:`run_in_stack`, :func:`json_from_stack`, :func:`verl_reads`): without that
environment the test skips naming it, and fails on CI (:func:`missing_environment`)."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from grpo_math.stacks import STACK_MATRIX, default_stack, stack_python, version_matches

REPO = Path(__file__).resolve().parent.parent
LAUNCHER = REPO / "run_qwen2_5_1_5b.sh"


def vllm_extra(requires: list[str]) -> str | None:
    """The vllm range of verl's ``vllm`` extra, from its metadata requirements (verl 0.6.0: ``>=0.7.3,<=0.9.1``)."""
    for req in requires:
        match = re.match(r"vllm\s*([<>=!~][^;]*);\s*extra\s*==\s*\"vllm\"", req)
        if match:
            return match.group(1).strip()
    return None


def missing_environment(reason: str):
    """Skip a test whose environment setup.sh did not make; on CI, which makes every one, fail."""
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def stack_environment(stack: str) -> Path:
    """The Python of ``stack``'s environment (``STACK_VENV`` of stacks/<stack>.sh); when setup.sh
    has not made it, the test skips naming it (fails on CI)."""
    python = stack_python(stack)
    if not python.exists():
        missing_environment(f"{python} missing (the {stack} stack's environment): "
                            f"bash setup.sh --stack {stack}, or --stack both")
    return python


def run_in_stack(stack: str, args: list[str], env: dict[str, str] | None = None,
                 **kwargs) -> subprocess.CompletedProcess:
    """``python ARGS`` in ``stack``'s environment (:func:`stack_environment`), from the repository
    root with the repository on its path; text output captured."""
    python = stack_environment(stack)
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    kwargs.setdefault("timeout", 600)
    return subprocess.run([str(python), *args], cwd=REPO, env={**os.environ, "PYTHONPATH": path, **(env or {})},
                          capture_output=True, text=True, **kwargs)


def json_from_stack(stack: str, code: str, *argv: str, **kwargs):
    """The JSON value ``code`` (run by :func:`run_in_stack` with ``argv`` as sys.argv[1:]) prints on
    its last line of stdout; the test fails with the stderr's tail if it exits non-zero."""
    proc = run_in_stack(stack, ["-c", code, *argv], **kwargs)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@functools.lru_cache(maxsize=None)
def running_stack() -> str:
    """The stack whose environment runs these tests: the one whose ``STACK_VENV`` is this
    interpreter's, else (a container's Python) the one whose verl pin is the installed verl."""
    here = Path(sys.prefix).resolve()
    for stack in STACK_MATRIX:
        if stack_python(stack).parent.parent.resolve() == here:
            return stack
    from importlib import metadata

    installed = metadata.version("verl")
    for stack, devices in STACK_MATRIX.items():
        if any(version_matches(installed, row["verl"].version) for row in devices.values()):
            return stack
    raise LookupError(f"verl {installed} is no stack's (grpo_math.stacks.STACK_MATRIX)")


def launcher_command(stack: str, device: str, *extra: str, **env: str) -> list[str]:
    """The main_ppo command ``DRY_RUN=1 bash run_qwen2_5_1_5b.sh [EXTRA...]`` prints with
    ``STACK=stack DEVICE=device`` and ``env``, one argument a line: PYTHON, -m, verl.trainer.main_ppo,
    the Hydra overrides."""
    run_env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "PROFILE")}
    run_env.update(STACK=stack, DEVICE=device, DRY_RUN="1", **env)
    out = subprocess.run(["bash", str(LAUNCHER), *extra], env=run_env, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[1:3] == ["-m", "verl.trainer.main_ppo"], out[:3]
    return out


def launcher_overrides(stack: str, device: str, *extra: str, **env: str) -> list[str]:
    """The Hydra overrides of :func:`launcher_command` (the hydra.* run directory, Hydra's own, left out)."""
    return [o for o in launcher_command(stack, device, *extra, **env)[3:] if not o.startswith("hydra.")]


def verl_reads(stack: str, launches: dict[str, list[str]]) -> dict[str, dict]:
    """What ``stack``'s own verl reads from each launch (name -> Hydra overrides), composed with
    its Hydra config in its environment by tests/helpers/verl_compose.py, all in one interpreter (importing
    verl takes seconds): name -> verl_compose's answer (the composed ``config``, ``invalid``: what
    verl's validation raised, or None; or ``error`` where composition failed)."""
    proc = run_in_stack(stack, [str(REPO / "tests" / "helpers" / "verl_compose.py")],
                        input=json.dumps(list(launches.values())))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(zip(launches, json.loads(proc.stdout.strip().splitlines()[-1])))


class ComposedLaunches:
    """``composed(stack, name)``: what ``stack``'s verl reads from launch ``name`` (:func:`verl_reads`)
    of the launches ``launches(stack)`` lists, all composed when a test first asks for one of them.
    A missing environment skips before the launcher's dry runs."""

    def __init__(self, launches: Callable[[str], dict[str, list[str]]]):
        self.launches = launches
        self.done: dict[str, dict[str, dict]] = {}

    def __call__(self, stack: str, name: str) -> dict:
        if stack not in self.done:
            stack_environment(stack)
            self.done[stack] = verl_reads(stack, self.launches(stack))
        return self.done[stack][name]


def default_cpu_stack() -> str:
    """The stack the launcher and setup.sh pick on a CPU machine."""
    return default_stack("cpu")


@dataclass
class CpuRun:
    """A finished CPU GRPO run of the launcher: its stack, exit status, folders and timing."""

    stack: str
    returncode: int
    output_dir: Path
    log: str  # main_ppo's whole console (LOG_FILE), then what the launcher printed
    wall_s: float
    terminal: str = ""  # what the launcher printed to the terminal

    @property
    def ckpt_dir(self) -> Path:
        return self.output_dir / "checkpoints"

    @property
    def tensorboard_dir(self) -> Path:
        return self.output_dir / "tensorboard"


def launch_output(proc: subprocess.CompletedProcess, output_dir: Path) -> tuple[str, str]:
    """(the run's whole console: its train.log then the launcher's own output, the terminal
    output alone) of a finished launch."""
    terminal = proc.stdout + proc.stderr
    log_file = output_dir / "train.log"
    return (log_file.read_text(errors="replace") if log_file.is_file() else "") + terminal, terminal


def swanlab_installed(python: str | Path = sys.executable) -> bool:
    """Whether swanlab[dashboard] (its local mode writes through swanboard) is importable by ``python``."""
    return subprocess.run([str(python), "-c", "import swanlab, swanboard"], capture_output=True).returncode == 0


def rollout_rows(output_dir: Path) -> list[dict]:
    """Every response of verl's rollout dump (``trainer.rollout_data_dir=OUTPUT_DIR/rollouts``: one
    JSONL file per global step), in step order."""
    return [json.loads(line) for path in sorted((output_dir / "rollouts").glob("*.jsonl"), key=lambda p: int(p.stem))
            for line in path.read_text().splitlines()]


#: end-to-end tests that neither train nor read the session's training runs: the unit tests' worker
#: takes them first, beside the quick start, instead of queueing them behind the trainings
BESIDE_TRAINING = ("tests/e2e/test_opencompass_run.py", "tests/e2e/test_vllm_weight_sync.py")


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with tests/e2e/ as one file: the end-to-end tests run in one pytest-xdist
    worker, in order (each trains with every core, and they share the session's ``cpu_run``), while
    the other worker takes BESIDE_TRAINING, then the unit tests' files. The files keep their
    collection order, so the end-to-end tests start first (xdist would otherwise queue the largest
    files first). (xdist's ``loadgroup`` cannot group here: it suffixes node ids, which pytest 9.2's
    nodes no longer take.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False

    class E2EAsOneFile(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            e2e = nodeid.startswith("tests/e2e/") and not nodeid.startswith(BESIDE_TRAINING)
            return "tests/e2e" if e2e else super()._split_scope(nodeid)
    return E2EAsOneFile(config, log)


def pytest_collection_modifyitems(config, items):
    """The learning test last: when the unit tests run beside the end-to-end ones (``-n 2 --dist
    loadfile -m ""``), they have finished by then, and its run has the cores to itself."""
    items.sort(key=lambda item: item.nodeid.startswith("tests/e2e/test_cpu_learn.py"))


@pytest.fixture(scope="session")
def cpu_run(tmp_path_factory) -> CpuRun:
    """``bash run_qwen2_5_1_5b.sh`` on CPU as the README's quick start runs it (the default stack;
    profile cpu: SmolLM2-135M, MATH Level 1, 2 GRPO steps), once per test session, with its outputs
    in a temporary folder, and verl's dump of every rollout response with its score in
    ``OUTPUT_DIR/rollouts`` (``trainer.rollout_data_dir``). Needs ``bash setup.sh --device cpu``
    first. Where swanlab[dashboard] is installed in the stack's environment (``setup.sh --with-swanlab``) the run logs to SwanLab as
    well as TensorBoard (``LOGGER=tensorboard,swanlab``), which tests/e2e/test_swanlab.py checks.

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
    python = stack_environment(stack)
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
