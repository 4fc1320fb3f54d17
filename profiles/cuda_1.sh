# shellcheck shell=bash
# Profile cuda_1: ONE CUDA GPU with >= 64 GB (A100/H100 80 GB class), 1 node. The CUDA
# twin of npu_1: same global batch and hyperparameters as the reference, ~4x the time.
# Each line is a default: a variable set in the environment wins. Sourced by the launcher.
TRAINER_DEVICE=${TRAINER_DEVICE:-cuda}
N_DEVICES=${N_DEVICES:-1}
# vLLM tensor parallel cannot span more cards than there are (verl's fsdp_workers asserts
# world_size % tensor_model_parallel_size == 0).
ROLLOUT_TP=${ROLLOUT_TP:-1}
# The unsharded FSDP actor stays on the GPU during rollout: 1.5e9 params x (4 B fp32
# weights + 8 B Adam states) = 18 GB; vLLM gets half the card instead of the reference's
# 0.8 (CUDA graphs stay on: unlike npu_1, they fit in the remaining memory).
GPU_MEMORY_UTILIZATION=${GPU_MEMORY_UTILIZATION:-0.5}
# A multi-day run: save twice as often as the reference (a crash loses <= 10 steps) and
# validate a quarter as often (5000 test problems on one card cost several training steps).
SAVE_FREQ=${SAVE_FREQ:-10}
TEST_FREQ=${TEST_FREQ:-20}
# ... and keep only the last 2 checkpoints: each is 1.5e9 x 12 B = 18 GB (see preflight.py).
PROFILE_ARGS+=("trainer.max_actor_ckpt_to_keep=2")
