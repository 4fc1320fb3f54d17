# shellcheck shell=bash
# ALGO=drgrpo: Dr. GRPO, "GRPO done right" (Liu et al. 2025, "Understanding R1-Zero-Like Training",
# arXiv:2503.20783, section 3.2). GRPO divides each response's loss by its length and each group's
# advantages by their standard deviation; the paper shows the first favours long wrong responses
# and the second over-weights questions that are too easy or too hard. Dr. GRPO removes both and
# the KL loss, with the keys verl's GRPO documentation names for it (docs/algo/grpo.md, "DrGRPO").
# Sourced by run_qwen2_5_1_5b.sh after the knobs; KL_LOSS_COEF does not apply.
# shellcheck disable=SC2034  # ALGO_ARGS is read by run_qwen2_5_1_5b.sh
ALGO_ARGS=(
  algorithm.adv_estimator=grpo
  algorithm.norm_adv_by_std_in_grpo=False         # A = r - mean: no division by the group's std
  actor_rollout_ref.actor.use_kl_loss=False       # no ref model and no KL loss
  # each response's token losses are summed, not averaged, then divided by a constant
  actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm
)
# the constant: the paper divides by the generation budget. verl 0.6.0 divides by the padded
# response length, which its rollout pads to MAX_RESPONSE_LENGTH (verl/trainer/ppo/core_algos.py
# agg_loss); verl 0.9.1 takes it from actor.loss_scale_factor (unset: the batch's padded length,
# which varies from step to step)
if [[ $STACK == current ]]; then ALGO_ARGS+=(actor_rollout_ref.actor.loss_scale_factor="$MAX_RESPONSE_LENGTH"); fi
