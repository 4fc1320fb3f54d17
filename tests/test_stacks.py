"""Both stacks' launches, composed with each stack's own verl (tests/verl_compose.py).

The launcher's ``DRY_RUN=1`` command is composed with the Hydra config of the verl that stack
installs (reference: .venv-reference, verl 0.6.0; current: .venv-current, verl 0.9.1) and validated by
verl; the reward function verl's own loader returns must be the recipe's. Without a stack's
environment the tests for it skip (``bash setup.sh --device cpu --stack current``, or ``--stack both``).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

import script_utils
from conftest import REPO

LAUNCHER = REPO / "run_qwen2_5_1_5b.sh"
PROFILES = ["npu_1", "npu_4", "npu_8", "npu_2x8", "cuda_1", "cuda_4", "cuda_8", "cuda_2x8", "cpu", "cpu_learn"]


def stack_python(stack: str) -> str:
    python = script_utils.stack_python(stack)
    if not python.exists():
        pytest.skip(f"{python} missing: bash setup.sh --device cpu --stack {stack}")
    return str(python)


def dry_run(stack: str, profile: str, *extra: str, **env: str) -> list[str]:
    device = profile.split("_")[0]
    run_env = dict(os.environ, STACK=stack, DEVICE=device, PROFILE=profile, DRY_RUN="1", **env)
    run_env.pop("PYTHON", None)
    out = subprocess.run(["bash", str(LAUNCHER), *extra], env=run_env, capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert lines[1:3] == ["-m", "verl.trainer.main_ppo"], lines[:3]
    python = script_utils.stack_python(stack)
    assert lines[0] == str(python) or not python.exists(), lines[0]
    return lines[3:]


def legacy_reward_key(overrides: list[str]) -> list[str]:
    """The reference's top-level reward key in place of the one verl 0.9.1 reads."""
    return [o.replace("reward.custom_reward_function.", "custom_reward_function.", 1) for o in overrides]


def launches(stack: str) -> dict[str, list[str]]:
    """Every launch this module composes with the stack's verl, by name."""
    profiles = PROFILES if stack == "current" else ["npu_4", "cpu", "cpu_learn"]
    found = {profile: dry_run(stack, profile) for profile in profiles}
    if stack == "current":
        found["npu_4 with the legacy reward key"] = legacy_reward_key(found["npu_4"])
    return found


@pytest.fixture(scope="module")
def composed():
    """composed(stack, name): what the stack's verl reads from that launch. Importing verl takes
    seconds, so each stack composes all its launches in one interpreter."""
    done: dict[str, dict[str, dict]] = {}

    def get(stack: str, name: str) -> dict:
        if stack not in done:
            by_name = launches(stack)
            res = subprocess.run([stack_python(stack), str(REPO / "tests" / "verl_compose.py")],
                                 input=json.dumps(list(by_name.values())), capture_output=True, text=True, cwd=REPO)
            assert res.returncode == 0, res.stderr[-3000:]
            done[stack] = dict(zip(by_name, json.loads(res.stdout.strip().splitlines()[-1])))
        got = done[stack][name]
        assert "error" not in got, f"{stack} stack, {name}: {got.get('error')}"
        return got
    return get


@pytest.mark.parametrize("stack,verl_version", [("reference", "0.6.0"), ("current", "0.9.1")])
@pytest.mark.parametrize("profile,reward_name", [("npu_4", "compute_score"), ("cpu", "compute_score"),
                                                 ("cpu_learn", "compute_format_score")])
def test_verl_loads_the_recipe_reward(composed, stack, verl_version, profile, reward_name):
    got = composed(stack, profile)
    assert got["verl"] == verl_version
    assert got["reward"] == {"file": str(REPO / "new_math_reward.py"), "name": reward_name}


def test_current_ignores_the_legacy_reward_key(composed):
    """The trap the preflight refuses: verl 0.9.1 composes the top-level key and never reads it."""
    assert any(o.startswith("custom_reward_function.path=") for o in legacy_reward_key(dry_run("current", "npu_4")))
    assert composed("current", "npu_4 with the legacy reward key")["reward"] is None


@pytest.mark.parametrize("profile", PROFILES)
def test_current_profiles_compose_and_validate(composed, profile):
    got = composed("current", profile)
    device = profile.split("_")[0]
    assert got["device"] == device
    assert got["rollout"] == "vllm"
    if profile == "npu_2x8" or profile == "cuda_2x8":
        assert (got["nnodes"], got["n_gpus_per_node"]) == (2, 8)
