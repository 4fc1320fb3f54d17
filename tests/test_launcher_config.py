"""The launcher's configuration, composed against the installed verl's own Hydra config.

``DRY_RUN=1 bash run_qwen2_5_1_5b.sh`` prints the exact ``main_ppo`` command; its overrides
are composed with verl's ``ppo_trainer`` config (Hydra compose, no Ray, no device) and checked
by verl's ``validate_config`` (batch divisibility, micro- vs mini-batch, TP vs devices), so a
key misspelt here or renamed by a verl upgrade fails CI.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import REPO
from verl_compose import compose, validate

hydra = pytest.importorskip("hydra")
verl = pytest.importorskip("verl")

LAUNCHER = REPO / "run_qwen2_5_1_5b.sh"


def launcher_overrides(device: str, *extra: str, **env: str) -> list[str]:
    """Hydra overrides the launcher would pass to main_ppo for ``DEVICE=device``, on the reference
    stack unless ``STACK`` is given: this file composes them with this environment's verl 0.6.0."""
    run_env = {**os.environ, "STACK": "reference", "DEVICE": device, "DRY_RUN": "1", **env}
    out = subprocess.run(
        ["bash", str(LAUNCHER), *extra], env=run_env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[1:3] == ["-m", "verl.trainer.main_ppo"], out[:3]
    # hydra.* settings (the run directory) are Hydra's own, not verl's configuration
    return [o for o in out[3:] if not o.startswith("hydra.")]


def test_reference_npu_configuration_composes_and_validates():
    cfg = compose(launcher_overrides("npu"))
    validate(cfg)
    a, r, t = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout, cfg.trainer
    # the reference run's settings (README "Reference run")
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.algorithm.use_kl_in_reward is False
    assert (cfg.data.train_batch_size, cfg.data.max_prompt_length, cfg.data.max_response_length) == (256, 512, 1024)
    assert cfg.data.filter_overlong_prompts is True and cfg.data.truncation == "error"
    assert a.optim.lr == 1e-6 and a.optim.lr_warmup_steps == 10
    assert (a.ppo_mini_batch_size, a.ppo_micro_batch_size_per_gpu) == (256, 8)
    assert a.use_kl_loss is True and a.kl_loss_coef == 0.001 and a.kl_loss_type == "low_var_kl"
    assert a.entropy_coeff == 0 and a.fsdp_config.param_offload is False
    assert cfg.actor_rollout_ref.model.use_remove_padding is False
    assert cfg.actor_rollout_ref.model.enable_gradient_checkpointing is True
    assert cfg.actor_rollout_ref.ref.fsdp_config.param_offload is True
    assert (r.name, r.tensor_model_parallel_size, r.n, r.gpu_memory_utilization) == ("vllm", 2, 8, 0.8)
    assert r.enable_chunked_prefill is False and r.log_prob_micro_batch_size_per_gpu == 8
    assert (t.n_gpus_per_node, t.nnodes, t.device, t.save_freq, t.test_freq, t.total_epochs) == (4, 1, "npu", 20, 5, 10)
    assert (t.project_name, t.experiment_name) == ("verl_grpo_example_math", "qwen2_5_1_5b_math")
    assert list(t.logger) == ["console", "tensorboard"]
    assert cfg.custom_reward_function.path == str(REPO / "new_math_reward.py")
    assert cfg.custom_reward_function.name == "compute_score"


def test_cuda_configuration_composes_and_validates():
    cfg = compose(launcher_overrides("cuda"))
    validate(cfg)
    assert cfg.trainer.device == "cuda"


@pytest.mark.parametrize(("cpu_dtype", "rollout_dtype"), [("bf16", "bfloat16"), ("fp32", "float32")])
def test_cpu_rollout_computes_in_the_actors_dtype(cpu_dtype, rollout_dtype):
    # vLLM's dtype (verl's default bfloat16) is emulated, several times slower, on CPUs without
    # native bf16 matmuls, where the profile picks fp32 for the actor and ref. The cpu profiles run
    # the current stack, whose verl composes them in tests/test_stacks.py; here only the overrides.
    overrides = launcher_overrides("cpu", STACK="current", CPU_DTYPE=cpu_dtype)
    assert f"actor_rollout_ref.rollout.dtype={rollout_dtype}" in overrides
    for role in ("actor", "ref"):
        assert (f"+actor_rollout_ref.{role}.fsdp_config.mixed_precision="
                f"{{param_dtype:{cpu_dtype},reduce_dtype:fp32,buffer_dtype:fp32}}") in overrides


def test_environment_overrides_and_passthrough():
    cfg = compose(launcher_overrides("npu", "trainer.total_epochs=1", N_DEVICES="8", LOGGER="swanlab"))
    assert cfg.trainer.n_gpus_per_node == 8 and cfg.trainer.total_epochs == 1
    assert list(cfg.trainer.logger) == ["console", "swanlab"]


def test_a_misspelt_key_fails_composition():
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):
        compose(launcher_overrides("npu", "actor_rollout_ref.actor.kl_los_coef=0.1"))


@pytest.mark.parametrize(("logger", "backends"), [
    ("tensorboard", ["console", "tensorboard"]), ("console", ["console"]),
    ("tensorboard,swanlab", ["console", "tensorboard", "swanlab"]),
    ("swanlab,console,swanlab", ["console", "swanlab"]),
])
def test_logger_backends(logger, backends):
    assert list(compose(launcher_overrides("npu", LOGGER=logger)).trainer.logger) == backends


def test_indivisible_batch_fails_validation():
    # 256 prompts x 8 responses cannot be split over 3 devices
    cfg = compose(launcher_overrides("npu", N_DEVICES="3"))
    with pytest.raises((AssertionError, ValueError)):
        validate(cfg)


@pytest.mark.parametrize("env,message", [
    ({"DEVICE": "tpu"}, "DEVICE=tpu"), ({"LOGGER": "wandb"}, "LOGGER=wandb"),
    ({"LOGGER": "tensorboard,wandb"}, "LOGGER=tensorboard,wandb; expected tensorboard, swanlab, console or a comma list"),
    ({"TRAIN_BATCH_SIZE": "0"}, "TRAIN_BATCH_SIZE=0; expected an integer >= 1"),
    ({"N_SAMPLES": "abc"}, "N_SAMPLES=abc; expected an integer >= 1"),
    # every count preflight.py receives is validated here, before preflight runs
    ({"N_DEVICES": "0"}, "N_DEVICES=0; expected an integer >= 1"),
    ({"MICRO_BATCH_PER_DEVICE": "1.5"}, "MICRO_BATCH_PER_DEVICE=1.5; expected an integer >= 1"),
    ({"PPO_MINI_BATCH_SIZE": "-4"}, "PPO_MINI_BATCH_SIZE=-4; expected an integer >= 1"),
    ({"MAX_PROMPT_LENGTH": "512k"}, "MAX_PROMPT_LENGTH=512k; expected an integer >= 1"),
    ({"N_NODES": "2.0"}, "N_NODES=2.0; expected an integer >= 1"),
    ({"ROLLOUT_TP": "two"}, "ROLLOUT_TP=two; expected an integer >= 1"),
    ({"ACTOR_LR": "abc"}, "ACTOR_LR=abc; expected a number >= 0"),
    ({"TOTAL_STEPS": "-1"}, "TOTAL_STEPS=-1; expected null or an integer >= 1"),
    ({"SAVE_FREQ": "x"}, "SAVE_FREQ=x; expected an integer >= 0, or -1 (off)"),
    ({"VAL_BEFORE_TRAIN": "yes"}, "VAL_BEFORE_TRAIN=yes; expected True or False"),
    # checked by the cpu profile before Ray starts (else a worker traceback after start-up)
    ({"CPU_DTYPE": "fp16"}, "CPU_DTYPE=fp16; expected bf16 or fp32"),
])
def test_bad_knob_is_one_line_error(env, message):
    run_env = {**os.environ, "DRY_RUN": "1", "DEVICE": "cpu", **env}
    proc = subprocess.run(["bash", str(LAUNCHER)], env=run_env, capture_output=True, text=True)
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


REFERENCE_ON_CPU = ("run_qwen2_5_1_5b.sh: STACK=reference on DEVICE=cpu; expected STACK=current (verl 0.6.0 has no "
                    "CPU device; the reference stack runs on npu or cuda)")


@pytest.mark.parametrize("args,env", [
    ([], {"DRY_RUN": "1"}), ([], {"DRY_RUN": "1", "PROFILE": "cpu_learn"}), ([], {}), (["--preflight-only"], {}),
], ids=["dry-run", "cpu_learn", "launch", "preflight-only"])
def test_reference_stack_on_cpu_is_refused_before_anything_starts(tmp_path, args, env):
    started = tmp_path / "started"  # the interpreter preflight and main_ppo would run: it must never start
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\ntouch {started}\nexit 1\n")
    python.chmod(0o755)
    run_env = {**os.environ, "STACK": "reference", "DEVICE": "cpu", "PYTHON": str(python),
               "OUTPUT_DIR": str(tmp_path / "out"), **env}
    proc = subprocess.run(["bash", str(LAUNCHER), *args], env=run_env, capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr.splitlines(), proc.stdout) == (2, [REFERENCE_ON_CPU], "")
    assert not started.exists() and not (tmp_path / "out").exists()


def test_a_cpu_profile_on_the_reference_stack_is_refused():
    run_env = {**os.environ, "STACK": "reference", "DEVICE": "cuda", "PROFILE": "cpu", "DRY_RUN": "1"}
    proc = subprocess.run(["bash", str(LAUNCHER)], env=run_env, capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr.splitlines()) == (2, [
        "run_qwen2_5_1_5b.sh: PROFILE=cpu on STACK=reference; expected an npu_* or cuda_* profile (the cpu "
        "profiles run the current stack)"])


def test_swanlab_logger_without_the_package_names_the_setup_line(tmp_path):
    no_swanlab = tmp_path / "python"  # an interpreter on which 'import swanlab' fails
    no_swanlab.write_text("#!/bin/sh\nexit 1\n")
    no_swanlab.chmod(0o755)
    run_env = {**os.environ, "DEVICE": "cpu", "LOGGER": "swanlab", "PYTHON": str(no_swanlab)}
    proc = subprocess.run(["bash", str(LAUNCHER)], env=run_env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "LOGGER=swanlab needs swanlab[dashboard]" in proc.stderr and "bash setup.sh --with-swanlab" in proc.stderr


def test_help_is_the_manual_with_every_knob():
    proc = subprocess.run(["bash", str(LAUNCHER), "--help"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and proc.stderr == ""
    assert "Usage: bash run_qwen2_5_1_5b.sh" in proc.stdout and "--preflight-only" in proc.stdout
    from tools.sync_readme import knobs

    for name, _, meaning in knobs(LAUNCHER):
        assert f"{name}=${{{name}:-" in proc.stdout, name
    assert "set -euo pipefail" not in proc.stdout
