# shellcheck shell=bash
# Profile cpu_learn: a CPU GRPO run that visibly learns, through the same launcher and main_ppo.
# SmolLM2-135M-Instruct cannot solve MATH problems (0 of 32 Level-1 responses and 0 of 64
# two-number sums were correct when measured), so a reward for correct answers gives GRPO no
# signal. It does sometimes follow the answer contract (a \boxed{} in about 9 % of responses,
# <think> in 5 %, <answer> in 6 %), so this profile pays for the contract's format alone
# (new_math_reward.compute_format_score, in [0, 1]): the run shows the learning loop working,
# not a model learning mathematics. Everything not set here is the cpu profile's.
# Each line is a default: a variable set in the environment wins. Sourced by the launcher.
# shellcheck disable=SC2034  # variables are read by run_qwen2_5_1_5b.sh
EXPERIMENT_NAME=${EXPERIMENT_NAME:-smollm2_135m_format_cpu}
# the format-only reward (the answer is still judged and logged as acc)
REWARD_NAME=${REWARD_NAME:-compute_format_score}
# 4 prompts x 8 responses: with a ~10 % base rate about half the GRPO groups hold a rewarded
# response; 64 tokens hold the whole contract layout and keep a step within a minute on 2 cores
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-4}
N_SAMPLES=${N_SAMPLES:-8}
MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-64}
# two PPO updates per step (mini-batches of 2 prompts), and a learning rate for tens of steps
# rather than the reference's hundreds (1e-6)
PPO_MINI_BATCH_SIZE=${PPO_MINI_BATCH_SIZE:-2}
ACTOR_LR=${ACTOR_LR:-3e-5}
TOTAL_STEPS=${TOTAL_STEPS:-20}
# validation on the held-out Level-1 problems before training and at the last step; one checkpoint
TEST_FREQ=${TEST_FREQ:-$TOTAL_STEPS}
SAVE_FREQ=${SAVE_FREQ:-$TOTAL_STEPS}
# shellcheck source-path=SCRIPTDIR source=cpu.sh
source "$REPO_DIR/profiles/cpu.sh"
