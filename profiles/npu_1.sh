# shellcheck shell=bash
# Profile npu_1: ONE Atlas A2 NPU (64 GB HBM), 1 node: for a single-card machine or a first
# long run. Same global batch and hyperparameters as the reference (npu_4), so results stay
# comparable; each step does 4x the work per card, so a run takes ~4x as long.
# Each line is a default: a variable set in the environment wins. Sourced by the launcher.
N_DEVICES=${N_DEVICES:-1}
ASCEND_RT_VISIBLE_DEVICES=${ASCEND_RT_VISIBLE_DEVICES:-0}
# vLLM tensor parallel cannot span more cards than there are (verl's fsdp_workers asserts
# world_size % tensor_model_parallel_size == 0).
ROLLOUT_TP=${ROLLOUT_TP:-1}
# Eager rollout: no ACL graph capture, whose memory pool and capture time a single card
# cannot spare next to the resident actor (the reference's single-card setting).
ENFORCE_EAGER=${ENFORCE_EAGER:-True}
# The unsharded FSDP actor stays on the card during rollout: 1.5e9 params x (4 B fp32
# weights + 8 B Adam states) = 18 GB. vLLM at the reference 0.8 x 64 GB = 51 GB would not
# fit beside it; 0.5 x 64 GB = 32 GB (weights + KV cache) does.
GPU_MEMORY_UTILIZATION=${GPU_MEMORY_UTILIZATION:-0.5}
# A multi-day run: save twice as often as the reference (a crash loses <= 10 steps) and
# validate a quarter as often (5000 test problems on one card cost several training steps).
SAVE_FREQ=${SAVE_FREQ:-10}
TEST_FREQ=${TEST_FREQ:-20}
# ... and keep only the last 2 checkpoints: each is 1.5e9 x 12 B = 18 GB (see preflight.py).
PROFILE_ARGS+=("trainer.max_actor_ckpt_to_keep=2")
