# shellcheck shell=bash
# Stack reference: verl 0.6.0 with vLLM / vllm-ascend 0.9.1 (CANN 8.2.RC1), the stack of the
# reference run (verl commit 634bd935, image quay.io/ascend/vllm-ascend:v0.9.1). The published
# numbers belong to it. Sourced by run_qwen2_5_1_5b.sh.
# shellcheck disable=SC2034  # variables are read by the scripts that source this file
STACK_VENV=.venv-reference                      # the stack's virtual environment (setup.sh makes it on cpu, cuda)
# verl 0.6.0 reads the reward function from the top-level key
STACK_REWARD_KEY=custom_reward_function
# No CPU keys (STACK_CPU_*): verl 0.6.0 has no CPU device, and the launcher refuses this stack on DEVICE=cpu
