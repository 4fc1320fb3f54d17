# shellcheck shell=bash
# NPU environment defaults per stack, from verl's own NPU examples and Ascend docs of the stack's
# verl (sourced; defines functions only). A variable already set (by you or a profile) is kept.
#
# Usage: source tools/npu_env.sh; npu_env_defaults reference|current
#   Exports HCCL_CONNECT_TIMEOUT and HCCL_EXEC_TIMEOUT (both stacks), and on current also
#   RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1 and VLLM_ASCEND_ENABLE_NZ=0; preflight.py
#   prints the values in force and checks them (docs/troubleshooting.md says why each matters).
#   Run directly (bash tools/npu_env.sh [-h | --help]) it prints this text and exits.

# npu_env_defaults STACK -> exports the stack's defaults for unset variables; a one-line error and
# status 2 for a stack it does not know.
npu_env_defaults() {
  case ${1:-} in
    reference)
      # verl 0.6.0's NPU examples connect HCCL with 1500 s
      # (examples/grpo_trainer/run_qwen3_8b_grpo_sglang_1k_spmd_npu.sh at tag v0.6.0)
      export HCCL_CONNECT_TIMEOUT=${HCCL_CONNECT_TIMEOUT:-1500}
      # no verl 0.6.0 example sets it: the reference run's launcher value, kept so the published
      # numbers' runs are unchanged
      export HCCL_EXEC_TIMEOUT=${HCCL_EXEC_TIMEOUT:-360}
      # RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES: none of verl 0.6.0's examples sets it
      # (verl/utils/ray_utils.py honours it); preflight's NPU probe names it as the fix when a
      # Ray worker sees no NPU.
      # VLLM_ASCEND_ENABLE_NZ: vllm-ascend 0.9.1 has no such variable (its NZ weight layout is
      # opt-in, additional_config enable_weight_nz_layout, off by default).
      ;;
    current)
      # verl 0.9's NPU examples: HCCL_CONNECT_TIMEOUT=1500 and HCCL_EXEC_TIMEOUT=3600
      # (examples/grpo_trainer/run_qwen3_5_2b_openr1_fsdp.sh, branch release/v0.9.0)
      export HCCL_CONNECT_TIMEOUT=${HCCL_CONNECT_TIMEOUT:-1500}
      export HCCL_EXEC_TIMEOUT=${HCCL_EXEC_TIMEOUT:-3600}
      # Ray must not narrow ASCEND_RT_VISIBLE_DEVICES per worker: verl's NPU examples of the 0.9
      # line (examples/grpo_trainer/run_qwen3_8b_fsdp.sh) and its Ascend FAQ Q1
      # (docs/ascend_tutorial/faq/faq.rst) export it
      export RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=${RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES:-1}
      # vllm-ascend 0.23.0 casts weights to the FRACTAL_NZ layout unless 0 (vllm_ascend/envs.py,
      # default 1 since 0.11.0), and NZ weights are not updated by the weight sync; verl 0.9 sets
      # 0 in vLLM's workers when unset (verl/workers/rollout/vllm_rollout/utils.py) and its
      # newer NPU guides export it: say so here, where preflight prints it
      export VLLM_ASCEND_ENABLE_NZ=${VLLM_ASCEND_ENABLE_NZ:-0}
      ;;
    *) echo "npu_env_defaults: STACK=${1:-}; expected reference or current" >&2; return 2 ;;
  esac
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then  # run, not sourced: print the manual
  sed -n '2,/^$/s/^# \{0,1\}//p' "$0"
  exit 0
fi
