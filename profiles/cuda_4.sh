# shellcheck shell=bash
# Profile cuda_4: the reference run on 4 CUDA GPUs. Differs from npu_4 only in the device
# verl places workers on; the hyperparameters are the reference ones.
TRAINER_DEVICE=${TRAINER_DEVICE:-cuda}
