# shellcheck shell=bash
# Profile cpu_learn: a CPU GRPO run that visibly learns, through the same launcher and main_ppo.
# SmolLM2-135M-Instruct cannot solve MATH problems (0 of 32 Level-1 responses and 0 of 64
# two-number sums were correct when measured), so a reward for correct answers gives GRPO no
# signal. It does sometimes follow parts of the answer contract, so this profile pays for the
# contract's format alone (new_math_reward.compute_format_score: the share of the contract's
# parts followed, in [0, 1]). Measured on 128 responses to 16 Level-1 prompts (8 each, 64
# tokens, temperature 1): mean 0.026, 15 responses above 0, and 11 of the 16 groups of 8 had
# reward to compare. The run shows the learning loop working, not a model learning mathematics.
# Everything not set here is the cpu profile's.
# Each line is a default: a variable set in the environment wins. Sourced by the launcher.
# shellcheck disable=SC2034  # variables are read by run_qwen2_5_1_5b.sh
EXPERIMENT_NAME=${EXPERIMENT_NAME:-smollm2_135m_format_cpu}
# the format-only reward (the answer is still judged and logged as acc)
REWARD_NAME=${REWARD_NAME:-compute_format_score}
# 4 prompts x 8 responses of up to 64 tokens: the contract's layout fits, and a group of 8
# usually holds a response that follows more of it than the others
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-4}
N_SAMPLES=${N_SAMPLES:-8}
MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-64}
# one PPO update per step (mini-batch = batch), and a learning rate for a dozen steps rather than
# the reference's hundreds (1e-6). With these settings the training reward rose from 0.06
# (steps 1-3) to 0.62 (steps 10-12) in 501 s on an idle 2-core AMD EPYC with AVX512-BF16 (bf16;
# 0.04 to 0.70 in 502 s with the micro-batch of 8 before);
# with earlier code from 0.07 to 0.27 in 553 s on an idle 2-core Sapphire Rapids (bf16), and in
# another run there from 0.03 to 0.43 with the entropy falling to 0.2; on an AVX2 machine (fp32)
# from 0.07 to 0.28, collapsing from step 9 onto one layout (entropy 0.04: every response
# followed 2 of the 7 parts, so no group had reward variance left). There 5e-5 with two updates
# per step rose more slowly and kept exploring (0.05 over steps 1-3, 0.30 over steps 10-12,
# entropy 1.3 at step 12); 2e-4 with two updates per step drove the KL loss above 1 within 2
# steps and did not rise.
PPO_MINI_BATCH_SIZE=${PPO_MINI_BATCH_SIZE:-4}
ACTOR_LR=${ACTOR_LR:-1e-4}
TOTAL_STEPS=${TOTAL_STEPS:-12}
# validation on the held-out Level-1 problems before training and at the last step; one checkpoint
TEST_FREQ=${TEST_FREQ:-$TOTAL_STEPS}
SAVE_FREQ=${SAVE_FREQ:-$TOTAL_STEPS}
# shellcheck source-path=SCRIPTDIR source=cpu.sh
source "$REPO_DIR/profiles/cpu.sh"
