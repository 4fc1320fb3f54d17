# shellcheck shell=bash
# Profile cpu_learn: a CPU GRPO run that visibly learns, through the same launcher and main_ppo.
# SmolLM2-135M-Instruct cannot solve MATH problems, so a reward for correct answers gives GRPO no
# signal. It does sometimes follow parts of the answer contract, so this profile pays for the
# contract's format alone (new_math_reward.compute_score with format_only=True: the share of the
# contract's parts followed, in [0, 1]); most groups of 8 responses then hold different scores. The
# run shows the learning loop working, not a model learning mathematics (docs/cpu_learn.md).
# Everything not set here is the cpu profile's.
# Each line is a default: a variable set in the environment wins. Sourced by the launcher.
# shellcheck disable=SC2034  # variables are read by run_qwen2_5_1_5b.sh
EXPERIMENT_NAME=${EXPERIMENT_NAME:-smollm2_135m_format_cpu}
# the format-only reward, a keyword of the reward through verl's reward_kwargs (the answer is still
# judged and logged as acc); a REWARD_NAME of your own must then take format_only too
PROFILE_ARGS+=("+$STACK_REWARD_KEY.reward_kwargs.format_only=True")
# 4 prompts x 8 responses of up to 64 tokens: the contract's layout fits, and a group of 8
# usually holds a response that follows more of it than the others
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-4}
N_SAMPLES=${N_SAMPLES:-8}
MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-64}
# one PPO update per step (mini-batch = batch), and a learning rate that moves the policy within a
# dozen steps rather than the reference's hundreds (1e-6). 2e-4 drove the KL loss above 1 without
# raising the reward; with this one some runs collapse onto one layout late in the run
# (health_report.py's entropy_collapse, with actor_rollout_ref.actor.calculate_entropy=True). The
# measured run: benchmarks/results/cpu_learn_current.md.
PPO_MINI_BATCH_SIZE=${PPO_MINI_BATCH_SIZE:-4}
ACTOR_LR=${ACTOR_LR:-1e-4}
TOTAL_STEPS=${TOTAL_STEPS:-12}
# validation on the held-out Level-1 problems before training and at the last step; one checkpoint
TEST_FREQ=${TEST_FREQ:-$TOTAL_STEPS}
SAVE_FREQ=${SAVE_FREQ:-$TOTAL_STEPS}
# shellcheck source-path=SCRIPTDIR source=cpu.sh
source "$REPO_DIR/profiles/cpu.sh"
