# shellcheck shell=bash
# Stack reference: verl 0.6.0 with vLLM / vllm-ascend 0.9.1 (CANN 8.2.RC1), the stack of the
# reference run (verl commit 634bd935, image quay.io/ascend/vllm-ascend:v0.9.1). The published
# numbers belong to it. Sourced by run_qwen2_5_1_5b.sh.
# shellcheck disable=SC2034  # variables are read by the scripts that source this file
STACK_VENV=.venv-reference                      # the stack's virtual environment (setup.sh makes it on cpu, cuda)
# verl 0.6.0 reads the reward function from the top-level key
STACK_REWARD_KEY=custom_reward_function
# CPU: verl 0.6.0 has no CPU device; cpu_support/verl_cpu_patch.py patches its workers and
# brings its own rollout (rollout.name=hf). Workers are placed as for cuda on one declared
# Ray GPU resource (trainer.device=cpu would wait forever for a resource named "cpu").
STACK_CPU_ROLLOUT=hf
STACK_CPU_TRAINER_DEVICE=cuda
STACK_CPU_ENV=()
STACK_CPU_MICRO_BATCH=16   # responses per actor/ref forward: a step's 16 in one pass (the shared-prompt forward keeps it near 1 GiB)
STACK_CPU_RAY_CPUS=4   # logical Ray CPUs: the TaskRunner and one worker group
STACK_CPU_ARGS=(
  "+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=cpu_support.verl_cpu_patch.apply"
)
