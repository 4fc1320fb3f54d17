# shellcheck shell=bash
# Profile npu_2x8: 2 nodes x 8 Atlas A2 NPUs. Start Ray on both nodes first (README
# "Two nodes": 'ray start --head' here, 'ray start --address=<head>:6379' on the other),
# then run the launcher on the head node only. Global batch and hyperparameters are the
# reference's (2048 responses / 16 cards = 128 a card).
# Each line is a default: a variable set in the environment wins. Sourced by the launcher.
N_NODES=${N_NODES:-2}
N_DEVICES=${N_DEVICES:-8}
ASCEND_RT_VISIBLE_DEVICES=${ASCEND_RT_VISIBLE_DEVICES:-0,1,2,3,4,5,6,7}
# HCCL links between nodes take longer to set up, and 16 ranks wait longer for the slowest
# rollout, than 4 cards in one box: 1200 s instead of the launcher's 360 s (Ascend's ranges:
# HCCL_CONNECT_TIMEOUT 120-7200 s, HCCL_EXEC_TIMEOUT 0-17340 s).
HCCL_CONNECT_TIMEOUT=${HCCL_CONNECT_TIMEOUT:-1200}
HCCL_EXEC_TIMEOUT=${HCCL_EXEC_TIMEOUT:-1200}
PROFILE_ARGS+=(
  # join the cluster that 'ray start' made; fail at once instead of starting a 1-node Ray here
  "+ray_kwargs.ray_init.address=auto"
  # Ray workers on the other node inherit that node's environment, not ours: pass the timeouts
  "+ray_kwargs.ray_init.runtime_env.env_vars.HCCL_CONNECT_TIMEOUT='$HCCL_CONNECT_TIMEOUT'"
  "+ray_kwargs.ray_init.runtime_env.env_vars.HCCL_EXEC_TIMEOUT='$HCCL_EXEC_TIMEOUT'"
  # torch.distributed's host-side timeout (verl default 600 s), matched to HCCL_EXEC_TIMEOUT
  "actor_rollout_ref.nccl_timeout=$HCCL_EXEC_TIMEOUT"
)
