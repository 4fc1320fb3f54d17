# shellcheck shell=bash
# Profile npu_8: 8 Atlas A2 NPUs, 1 node (a full Atlas 800T A2). The reference's global batch
# (256 prompts x 8 responses) and hyperparameters are kept, so the learning curve matches
# npu_4; only the per-card share halves (2048 / 8 = 256 responses a card) and vLLM runs 4
# tensor-parallel-2 replicas instead of 2. Nothing else must change.
# Each line is a default: a variable set in the environment wins. Sourced by the launcher.
N_DEVICES=${N_DEVICES:-8}
ASCEND_RT_VISIBLE_DEVICES=${ASCEND_RT_VISIBLE_DEVICES:-0,1,2,3,4,5,6,7}
