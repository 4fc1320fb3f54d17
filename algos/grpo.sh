# shellcheck shell=bash
# ALGO=grpo: GRPO as the reference run trained it (Shao et al. 2024, arXiv:2402.03300): group-mean
# and standard-deviation advantages, a KL loss to the ref model, verl's symmetric clip and
# token-mean loss. Sourced by run_qwen2_5_1_5b.sh after the knobs; ALGO_ARGS are Hydra overrides
# placed after the profile's (a variable or override you pass still wins).
# shellcheck disable=SC2034  # ALGO_ARGS is read by run_qwen2_5_1_5b.sh
ALGO_ARGS=(
  algorithm.adv_estimator=grpo
  algorithm.norm_adv_by_std_in_grpo=True          # A = (r - mean) / std within the group
  actor_rollout_ref.actor.use_kl_loss=True        # the reference run's KL loss to the ref model
  actor_rollout_ref.actor.kl_loss_coef="$KL_LOSS_COEF"
  actor_rollout_ref.actor.kl_loss_type=low_var_kl
  actor_rollout_ref.actor.loss_agg_mode=token-mean
)
