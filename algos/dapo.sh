# shellcheck shell=bash
# ALGO=dapo: DAPO (Yu et al. 2025, arXiv:2503.14476), the four changes to GRPO of its section 3,
# with the values of its paper and of verl's DAPO recipe (recipe/dapo/run_dapo_qwen2.5_32b.sh):
# clip-higher, dynamic sampling, token-level loss, overlong reward shaping; no KL loss.
# Sourced by run_qwen2_5_1_5b.sh after the knobs; KL_LOSS_COEF does not apply.
# shellcheck disable=SC2034  # ALGO_ARGS is read by run_qwen2_5_1_5b.sh
if [[ $STACK != current ]]; then
  echo "run_qwen2_5_1_5b.sh: ALGO=dapo on STACK=$STACK; expected STACK=current (dynamic sampling, algorithm.filter_groups, is in verl 0.9.1's trainer; verl 0.6.0's main_ppo ignores it, only verl's separate recipe/dapo trainer reads it)" >&2
  exit 2
fi
# overlong shaping starts this many tokens before the response limit: the paper's 4,096 of 20,480
OVERLONG_BUFFER_LEN=$((MAX_RESPONSE_LENGTH / 5))
ALGO_ARGS=(
  algorithm.adv_estimator=grpo
  algorithm.norm_adv_by_std_in_grpo=True
  actor_rollout_ref.actor.use_kl_loss=False       # section 2.3: no KL term
  # clip-higher (section 3.1): the ratio may rise to 1.28 and fall to 0.8
  actor_rollout_ref.actor.clip_ratio_low=0.2
  actor_rollout_ref.actor.clip_ratio_high=0.28
  actor_rollout_ref.actor.clip_ratio_c=10.0       # the recipe's dual-clip bound for negative advantages
  actor_rollout_ref.actor.loss_agg_mode=token-mean  # section 3.3: every token weighs the same
  # dynamic sampling (section 3.2): a group whose responses all score the same has zero advantages;
  # verl drops it and generates another until the batch is full. The paper filters on accuracy;
  # here on the reward's score, which is what the advantages are computed from.
  algorithm.filter_groups.enable=True
  algorithm.filter_groups.metric=score
  # verl hands a custom replay buffer no group filter (verl/trainer/ppo/v1/trainer_base.py
  # _init_replay_buffer): verl's own buffer then, which the cpu profiles replace for its polling
  trainer.v1.sampler.custom_sampler.path=null
  trainer.v1.sampler.custom_sampler.name=null
  # overlong reward shaping (section 3.4): a linear penalty down to -1 over the last
  # OVERLONG_BUFFER_LEN tokens before the limit, added by verl's DAPO reward manager
  reward.reward_manager.name=dapo
  +reward.reward_kwargs.max_resp_len="$MAX_RESPONSE_LENGTH"
  +reward.reward_kwargs.overlong_buffer_cfg.enable=True
  +reward.reward_kwargs.overlong_buffer_cfg.len="$OVERLONG_BUFFER_LEN"
  +reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0
  +reward.reward_kwargs.overlong_buffer_cfg.log=False
)
