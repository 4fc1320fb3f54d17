"""Both stacks' launches, composed with each stack's own verl (tests/helpers/verl_compose.py).

The launcher's ``DRY_RUN=1`` command is composed with the Hydra config of the verl that stack
installs (reference: .venv-reference, verl 0.6.0, its NPU and GPU launches; current:
.venv-current, verl 0.9.1, every profile, the cpu ones included), in that stack's environment
(conftest.verl_reads), and validated by verl; the reward function verl's own
loader returns must be the recipe's. Without a stack's environment its tests skip, naming it
(on CI they fail).
"""

from __future__ import annotations

import pytest

from grpo_math import stacks
from conftest import REPO, ComposedLaunches, launcher_command, launcher_overrides

PROFILES = ["npu_1", "npu_4", "npu_8", "npu_2x8", "cuda_1", "cuda_4", "cuda_8", "cuda_2x8", "cpu", "cpu_learn"]


def dry_run(stack: str, profile: str, **env: str) -> list[str]:
    return launcher_overrides(stack, profile.split("_")[0], PROFILE=profile, **env)


#: The format-only reward as a launch passes it: a keyword argument through verl's reward_kwargs.
FORMAT_ONLY = "+{key}.reward_kwargs.format_only=True"


def legacy_reward_key(overrides: list[str]) -> list[str]:
    """The reference's top-level reward key in place of the one verl 0.9.1 reads."""
    return [o.replace("reward.custom_reward_function.", "custom_reward_function.", 1) for o in overrides]


def launches(stack: str) -> dict[str, list[str]]:
    """Every launch this module composes with the stack's verl, by name."""
    if stack == "reference":  # it does not train on CPU
        return {"npu_4": dry_run(stack, "npu_4"), "cuda_4": dry_run(stack, "cuda_4"),
                "npu_4 with the format reward": dry_run(stack, "npu_4") + [FORMAT_ONLY.format(key="custom_reward_function")]}
    found = {profile: dry_run(stack, profile) for profile in PROFILES}
    found["npu_4 with the legacy reward key"] = legacy_reward_key(found["npu_4"])
    return found


@pytest.fixture(scope="module")
def composed():
    """composed(stack, name): what the stack's verl reads from that launch, which it composes and
    validates. Importing verl takes seconds, so each stack composes all its launches at once."""
    read = ComposedLaunches(launches)

    def get(stack: str, name: str) -> dict:
        got = read(stack, name)
        assert "error" not in got, f"{stack} stack, {name}: {got.get('error')}"
        assert got["invalid"] is None, f"{stack} stack, {name}: {got['invalid']}"
        return got
    return get


@pytest.mark.parametrize("stack", ["reference", "current"])
def test_the_launcher_runs_the_stacks_python(stack):
    python = stacks.stack_python(stack)
    assert launcher_command(stack, "cuda")[0] == (str(python) if python.exists() else "python3")


@pytest.mark.parametrize("stack,launch,reward_name,kwargs", [
    ("reference", "npu_4", "compute_score", {}), ("reference", "cuda_4", "compute_score", {}),
    ("reference", "npu_4 with the format reward", "compute_score", {"format_only": True}),
    ("current", "npu_4", "compute_score", {}), ("current", "cpu", "compute_score", {}),
    ("current", "cpu_learn", "compute_score", {"format_only": True}),
])
def test_verl_loads_the_recipe_reward(composed, stack, launch, reward_name, kwargs):
    """The reward and its keyword arguments (custom_reward_function.reward_kwargs) reach verl's own loader."""
    got = composed(stack, launch)
    assert got["verl"] == stacks.STACK_MATRIX[stack][launch.split("_")[0]]["verl"].version
    assert got["reward"] == {"file": str(REPO / "new_math_reward.py"), "name": reward_name, "kwargs": kwargs}


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
    # the worker-level batch rules validate_config leaves to start-up (tests/unit/test_profiles.py checks
    # them on verl 0.6.0 for the reference stack's launches)
    world = got["n_gpus_per_node"] * got["nnodes"]
    assert world % got["tp"] == 0
    per_device = got["ppo_mini_batch_size"] * got["rollout_n"] // world
    assert per_device > 0 and per_device % got["ppo_micro_batch_size_per_gpu"] == 0
