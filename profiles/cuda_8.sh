# shellcheck shell=bash
# Profile cuda_8: 8 CUDA GPUs, 1 node. The CUDA twin of npu_8: the reference's global batch
# and hyperparameters, 2048 / 8 = 256 responses a GPU, 4 tensor-parallel-2 vLLM replicas.
# Each line is a default: a variable set in the environment wins. Sourced by the launcher.
TRAINER_DEVICE=${TRAINER_DEVICE:-cuda}
N_DEVICES=${N_DEVICES:-8}
