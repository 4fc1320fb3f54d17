"""Every machine profile (profiles/*.sh) composes against each stack's verl and passes verl's
own validation, differs from the reference (npu_4) only where its header says it must, and
PROFILE=auto picks it from the visible device count. The cpu profiles run on the current stack only.

No device is needed: the launcher's DRY_RUN=1 prints the main_ppo overrides, which each stack's
verl composes with its Hydra config and checks with its validate_config, in that stack's
environment (conftest.verl_reads; without it, that stack's cases skip, naming it). A key renamed
or removed by a verl upgrade fails here.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import LAUNCHER, REPO, ComposedLaunches, launcher_overrides

OmegaConf = pytest.importorskip("omegaconf").OmegaConf

ARO = "actor_rollout_ref"
ONE_CARD = {f"{ARO}.rollout.tensor_model_parallel_size": 1, f"{ARO}.rollout.gpu_memory_utilization": 0.5,
            "trainer.n_gpus_per_node": 1, "trainer.save_freq": 10, "trainer.test_freq": 20,
            "trainer.max_actor_ckpt_to_keep": 2}
TWO_NODES = {"trainer.nnodes": 2, "trainer.n_gpus_per_node": 8, f"{ARO}.nccl_timeout": 1200,
             "ray_kwargs.ray_init.address": "auto"}
HCCL_ENV = "ray_kwargs.ray_init.runtime_env.env_vars"
CUDA = {"trainer.device": "cuda"}

#: profile -> (DEVICE, every composed key whose value differs from the reference npu_4).
#: None: the cpu profile, a different model and engine (checked in test_launcher_config.py).
PROFILES = {
    "npu_4": ("npu", {}),
    "npu_1": ("npu", {**ONE_CARD, f"{ARO}.rollout.enforce_eager": True}),
    "npu_8": ("npu", {"trainer.n_gpus_per_node": 8}),
    "npu_2x8": ("npu", {**TWO_NODES, f"{HCCL_ENV}.HCCL_CONNECT_TIMEOUT": "1200",
                        f"{HCCL_ENV}.HCCL_EXEC_TIMEOUT": "1200"}),
    "cuda_4": ("cuda", CUDA),
    "cuda_1": ("cuda", {**ONE_CARD, **CUDA}),
    "cuda_8": ("cuda", {"trainer.n_gpus_per_node": 8, **CUDA}),
    "cuda_2x8": ("cuda", {**TWO_NODES, **CUDA}),
    "cpu": ("cpu", None),
    "cpu_learn": ("cpu", None),
}


def flat(tree, prefix: str = "") -> dict:
    if isinstance(tree, dict):
        out = {}
        for key, value in tree.items():
            out.update(flat(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: tree}


#: Keys a stack's verl derives from the trainer's: verl 0.9.1's rollout config copies
#: trainer.n_gpus_per_node (verl/trainer/config/rollout/rollout.yaml, ``${oc.select:trainer.n_gpus_per_node,8}``).
DERIVED = {"reference": {}, "current": {f"{ARO}.rollout.n_gpus_per_node": "trainer.n_gpus_per_node"}}


#: (stack, profile) pairs composed: the CPU profiles on the current stack, the CPU default
CASES = [(stack, name) for stack in ("reference", "current") for name in sorted(PROFILES)
         if stack == "current" or PROFILES[name][0] != "cpu"]


@pytest.fixture(scope="module")
def composed():
    """composed(stack, profile): what the stack's verl reads from the profile's launch (its
    composed ``config``, what its validation raised, ``invalid``), all profiles of a stack
    composed in one interpreter."""
    read = ComposedLaunches(lambda stack: {name: launcher_overrides(stack, PROFILES[name][0], PROFILE=name)
                                           for s, name in CASES if s == stack})

    def get(stack: str, profile: str) -> dict:
        got = read(stack, profile)
        assert "error" not in got, got["error"]
        return got
    return get


def test_every_profile_file_is_tested():
    assert sorted(p.stem for p in (REPO / "profiles").glob("*.sh")) == sorted(PROFILES)


@pytest.mark.parametrize("stack,name", CASES)
def test_profile_composes_validates_and_differs_only_where_it_must(composed, stack, name):
    device, expected = PROFILES[name]
    got = composed(stack, name)
    # verl's validate_config: batch divisibility, micro vs mini batch, dataclasses
    assert got["invalid"] is None, got["invalid"]
    cfg = OmegaConf.create(got["config"])
    # verl's worker-level rules (fsdp_workers.py), which validate_config leaves to start-up
    world = cfg.trainer.n_gpus_per_node * cfg.trainer.nnodes
    rollout, actor = cfg[ARO].rollout, cfg[ARO].actor
    assert world % rollout.tensor_model_parallel_size == 0
    per_device = actor.ppo_mini_batch_size * rollout.n // world
    assert per_device > 0 and per_device % actor.ppo_micro_batch_size_per_gpu == 0
    if expected is None:
        return
    values, reference = flat(got["config"]), flat(composed(stack, "npu_4")["config"])
    differs = {k: values.get(k) for k in set(values) | set(reference) if values.get(k) != reference.get(k)}
    derived = {key: expected[source] for key, source in DERIVED[stack].items() if source in expected}
    assert differs == {**expected, **derived}


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_profile_says_what_it_is_for(name):
    text = (REPO / "profiles" / f"{name}.sh").read_text().splitlines()
    assert text[0] == "# shellcheck shell=bash"
    assert text[1].startswith(f"# Profile {name}: ")
    # every default it sets is a VAR=${VAR:-value} line, so the environment always wins
    for line in text:
        if "=" in line and not line.startswith(("#", " ", "PROFILE_ARGS", ")")):
            var = line.split("=", 1)[0]
            assert line.startswith(f"{var}=${{{var}:-"), line


# --------------------------------------------------------------------------------------
# PROFILE=auto: picked from the visible device count
# --------------------------------------------------------------------------------------
def fake_tool(bin_dir: Path, name: str, stdout: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text(f"#!/usr/bin/env bash\ncat <<'EOF'\n{stdout}\nEOF\n")
    (bin_dir / name).chmod(0o755)


def auto_pick(tmp_path: Path, device: str, **env: str) -> tuple[int, str]:
    """(trainer.n_gpus_per_node, the launcher's stderr) of a DRY_RUN with PROFILE unset."""
    run_env = {k: v for k, v in os.environ.items()
               if k not in ("PROFILE", "ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "N_DEVICES")}
    run_env.update(DEVICE=device, DRY_RUN="1", PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}", **env)
    proc = subprocess.run(["bash", str(LAUNCHER)], env=run_env, capture_output=True, text=True, check=True)
    n = [line for line in proc.stdout.splitlines() if line.startswith("trainer.n_gpus_per_node=")]
    return int(n[0].split("=")[1]), proc.stderr.strip()


NPU_SMI = """        Total Count                    : {n}

        NPU ID                         : 0
        Chip Count                     : 1
"""


@pytest.mark.parametrize("visible,profile,n", [
    ("0", "npu_1", 1), ("0,1", "npu_1", 1), ("0,1,2,3", "npu_4", 4), ("4,5,6,7,0,1", "npu_4", 4),
    ("0,1,2,3,4,5,6,7", "npu_8", 8), ("0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15", "npu_8", 8),
])
def test_auto_picks_npu_profile_from_ascend_rt_visible_devices(tmp_path, visible, profile, n):
    count = len(visible.split(","))
    assert auto_pick(tmp_path, "npu", ASCEND_RT_VISIBLE_DEVICES=visible) == (
        n, f"run_qwen2_5_1_5b.sh: PROFILE=auto -> {profile} ({count} NPUs counted)")


def test_auto_picks_npu_profile_from_npu_smi(tmp_path):
    fake_tool(tmp_path / "bin", "npu-smi", NPU_SMI.format(n=8))
    assert auto_pick(tmp_path, "npu") == (8, "run_qwen2_5_1_5b.sh: PROFILE=auto -> npu_8 (8 NPUs counted)")


@pytest.mark.parametrize("gpus,profile,n", [(1, "cuda_1", 1), (4, "cuda_4", 4), (8, "cuda_8", 8)])
def test_auto_picks_cuda_profile_from_nvidia_smi(tmp_path, gpus, profile, n):
    fake_tool(tmp_path / "bin", "nvidia-smi", "\n".join(f"GPU {i}: NVIDIA H100 (UUID: GPU-{i})" for i in range(gpus)))
    assert auto_pick(tmp_path, "cuda") == (n, f"run_qwen2_5_1_5b.sh: PROFILE=auto -> {profile} ({gpus} GPUs counted)")


def test_auto_picks_cuda_profile_from_cuda_visible_devices(tmp_path):
    fake_tool(tmp_path / "bin", "nvidia-smi", "\n".join(f"GPU {i}: NVIDIA H100" for i in range(8)))
    assert auto_pick(tmp_path, "cuda", CUDA_VISIBLE_DEVICES="3")[0] == 1


def test_auto_without_a_count_falls_back_to_the_reference(tmp_path):
    # no *_VISIBLE_DEVICES, no npu-smi / nvidia-smi, no /dev/davinci* on this machine
    assert auto_pick(tmp_path, "npu")[0] == 4
    assert auto_pick(tmp_path, "cuda")[0] == 4


def test_explicit_profile_and_knobs_win_over_auto(tmp_path):
    assert auto_pick(tmp_path, "npu", ASCEND_RT_VISIBLE_DEVICES="0", PROFILE="npu_8") == (8, "")
    assert auto_pick(tmp_path, "npu", ASCEND_RT_VISIBLE_DEVICES="0,1,2,3", N_DEVICES="2")[0] == 2
    assert auto_pick(tmp_path, "cpu") == (1, "")
