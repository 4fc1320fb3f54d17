# shellcheck shell=bash
# Profile cuda_2x8: 2 nodes x 8 CUDA GPUs. The CUDA twin of npu_2x8: start Ray on both nodes
# first (README "Two nodes"), then run the launcher on the head node only.
# Each line is a default: a variable set in the environment wins. Sourced by the launcher.
TRAINER_DEVICE=${TRAINER_DEVICE:-cuda}
N_NODES=${N_NODES:-2}
N_DEVICES=${N_DEVICES:-8}
PROFILE_ARGS+=(
  # join the cluster that 'ray start' made; fail at once instead of starting a 1-node Ray here
  "+ray_kwargs.ray_init.address=auto"
  # NCCL across nodes: 16 ranks wait longer for the slowest rollout than 4 in one box
  "actor_rollout_ref.nccl_timeout=1200"
)
