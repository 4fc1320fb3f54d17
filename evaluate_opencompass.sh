#!/usr/bin/env bash
# MATH accuracy the way the reference recipe reports it: OpenCompass's math_gen_a58d9d (4-shot,
# MATHVerifyEvaluator) on one model, through the model's own chat template.
#
# Usage: bash evaluate_opencompass.sh MODEL_DIR
#   MODEL_DIR   a Hugging Face model folder: the base model or a merged checkpoint
#               (merge_checkpoint.sh: outputs/<experiment>/checkpoints/global_step_N/actor/huggingface).
#   Every knob below is an environment variable, e.g. a small CPU run:
#     LIMIT=4 MAX_OUT_LEN=64 bash evaluate_opencompass.sh models/SmolLM2-135M-Instruct
# Needs: bash setup.sh --with-opencompass (the separate OpenCompass environment .venv-opencompass).
# Input: MATH_JSON, written by parquet2json.py from the shipped MATH test split (5,000 problems);
#   at its default path it is created when missing.
# Output: OpenCompass's work folder WORK_DIR/<timestamp>/ (configs/, predictions/<abbr>/math.json
#   with each problem's origin_prompt and prediction, results/<abbr>/math.json with per-problem
#   pred / answer / correct, summary/); the script prints OpenCompass's summary table, then one
#   line: accuracy, problems, the output folder.
# Exit status: 0 on success; 1 on bad input (one line naming the path) or a failed OpenCompass
#   run; 2 on bad usage or knob values.
set -euo pipefail

REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

OC_VENV=${OC_VENV:-$REPO_DIR/.venv-opencompass}            # OpenCompass's own environment (setup.sh --with-opencompass)
MATH_JSON=${MATH_JSON:-$REPO_DIR/data/opencompass/math.json}  # parquet2json.py's output (created here when missing at this default)
DEVICE=${DEVICE:-auto}                                     # npu | cuda | cpu | auto (tools/devices.sh)
BACKEND=${BACKEND:-auto}                                   # hf (HuggingFacewithChatTemplate) | vllm (VLLMwithChatTemplate) | auto: vllm on npu/cuda when the env has it, else hf
MAX_OUT_LEN=${MAX_OUT_LEN:-1024}                           # generated tokens per answer; the reference: 1024 (the recipe's response length)
BATCH_SIZE=${BATCH_SIZE:-32}                               # prompts per generate call; the reference: 32 (one 64 GB card, Qwen2.5-1.5B, 1024 tokens)
LIMIT=${LIMIT:-}                                           # empty: all 5,000 problems; N: the first N (small runs)
NUM_GPUS=${NUM_GPUS:-auto}                                 # devices per OpenCompass task (vLLM: tensor parallel); auto: 0 on cpu, 1 otherwise
MAX_WORKERS=${MAX_WORKERS:-auto}                           # tasks at once (one per device); auto: the visible device count, 1 on cpu
ABBR=${ABBR:-}                                             # model name in OpenCompass's outputs; empty: <experiment>-global_step_N or the folder name
WORK_DIR=${WORK_DIR:-}                                     # OpenCompass's -w folder; empty: outputs/opencompass/<ABBR>
CONFIG=${CONFIG:-$REPO_DIR/opencompass/eval_math.py}       # the OpenCompass config this script drives
CPU_THREADS=${CPU_THREADS:-}                               # torch threads on CPU (OMP_NUM_THREADS); empty: torch's default; 1 on busy shared cores

die() { echo "evaluate_opencompass.sh: $*" >&2; exit "${EXIT:-1}"; }
usage() { sed -n '2,21p' "$0"; }

case ${1:-} in
  -h | --help) usage; exit 0 ;;
  '') EXIT=2 die "missing MODEL_DIR (usage: bash evaluate_opencompass.sh MODEL_DIR; --help)" ;;
esac
[[ $# -eq 1 ]] || EXIT=2 die "expected one argument MODEL_DIR, got $# (see --help)"
MODEL_DIR=$1

# ---- knob values
for knob in MAX_OUT_LEN BATCH_SIZE; do
  [[ ${!knob} =~ ^[1-9][0-9]*$ ]] || EXIT=2 die "$knob=${!knob}: expected an integer >= 1"
done
[[ -z $LIMIT || $LIMIT =~ ^[1-9][0-9]*$ ]] || EXIT=2 die "LIMIT=$LIMIT: expected empty (all problems) or an integer >= 1"
case $BACKEND in auto | hf | vllm) ;; *) EXIT=2 die "BACKEND=$BACKEND: expected auto, hf or vllm" ;; esac
[[ -z $CPU_THREADS || $CPU_THREADS =~ ^[1-9][0-9]*$ ]] || EXIT=2 die "CPU_THREADS=$CPU_THREADS: expected empty or an integer >= 1"

# ---- inputs: model folder, OpenCompass environment, math.json
[[ -d $MODEL_DIR ]] || die "$MODEL_DIR: model folder not found (expected a Hugging Face model directory)"
MODEL_DIR=$(cd "$MODEL_DIR" && pwd)
[[ -f $MODEL_DIR/config.json ]] || die "$MODEL_DIR/config.json: not found (expected a Hugging Face model directory; merge a verl checkpoint with merge_checkpoint.sh first)"
OC_PY=$OC_VENV/bin/python
[[ -x $OC_VENV/bin/opencompass && -x $OC_PY ]] || die "$OC_VENV/bin/opencompass: not found (expected OpenCompass's environment: bash setup.sh --with-opencompass)"
if [[ ! -f $MATH_JSON ]]; then
  [[ $MATH_JSON == "$REPO_DIR/data/opencompass/math.json" ]] || die "$MATH_JSON: not found (expected parquet2json.py's math.json; python parquet2json.py --output $MATH_JSON)"
  echo "evaluate_opencompass.sh: $MATH_JSON missing; writing it with parquet2json.py" >&2
  "$OC_PY" "$REPO_DIR/parquet2json.py" --output "$MATH_JSON" >&2 || die "$MATH_JSON: parquet2json.py failed"
fi
MATH_JSON=$(cd "$(dirname "$MATH_JSON")" && pwd)/$(basename "$MATH_JSON")

# ---- device, backend, workers
# shellcheck source=tools/devices.sh
source "$REPO_DIR/tools/devices.sh"
[[ $DEVICE == auto ]] && DEVICE=$(detect_device "$OC_PY")
case $DEVICE in npu | cuda | cpu) ;; *) EXIT=2 die "DEVICE=$DEVICE: expected npu, cuda, cpu or auto" ;; esac
if [[ $BACKEND == auto ]]; then
  BACKEND=hf
  if [[ $DEVICE != cpu ]] && "$OC_PY" -c 'import vllm' >/dev/null 2>&1; then BACKEND=vllm; fi
fi
[[ $BACKEND == vllm && $DEVICE == cpu ]] && EXIT=2 die "BACKEND=vllm needs an NPU or GPU (DEVICE=cpu)"
if [[ $NUM_GPUS == auto ]]; then
  if [[ $DEVICE == cpu ]]; then NUM_GPUS=0; else NUM_GPUS=1; fi
fi
[[ $NUM_GPUS =~ ^[0-9]+$ ]] || EXIT=2 die "NUM_GPUS=$NUM_GPUS: expected auto or an integer >= 0"
if [[ $MAX_WORKERS == auto ]]; then
  MAX_WORKERS=1
  if [[ $DEVICE != cpu ]]; then
    n_visible=$(count_visible_devices "$DEVICE")
    ((n_visible > 0)) && MAX_WORKERS=$((n_visible / (NUM_GPUS > 0 ? NUM_GPUS : 1)))
    ((MAX_WORKERS > 0)) || MAX_WORKERS=1
  fi
fi
[[ $MAX_WORKERS =~ ^[1-9][0-9]*$ ]] || EXIT=2 die "MAX_WORKERS=$MAX_WORKERS: expected auto or an integer >= 1"

# ---- names and folders
if [[ -z $ABBR ]]; then
  # .../<experiment>/checkpoints/global_step_N/actor/huggingface -> <experiment>-global_step_N
  if [[ $MODEL_DIR =~ /([^/]+)/checkpoints/(global_step_[0-9]+)/actor/huggingface$ ]]; then
    ABBR=${BASH_REMATCH[1]}-${BASH_REMATCH[2]}
  else
    ABBR=$(basename "$MODEL_DIR")
  fi
fi
WORK_DIR=${WORK_DIR:-$REPO_DIR/outputs/opencompass/$ABBR}
mkdir -p "$WORK_DIR" || die "$WORK_DIR: cannot create the output folder"
WORK_DIR=$(cd "$WORK_DIR" && pwd)

# ---- run (one process on CPU; on NPU/GPU OpenCompass's local runner, one task per device)
RUN_MODE=(--max-num-workers "$MAX_WORKERS")
[[ $DEVICE == cpu ]] && RUN_MODE=(--debug)
export OC_MODEL_PATH=$MODEL_DIR OC_MATH_JSON=$MATH_JSON OC_ABBR=$ABBR OC_BACKEND=$BACKEND \
  OC_MAX_OUT_LEN=$MAX_OUT_LEN OC_BATCH_SIZE=$BATCH_SIZE OC_NUM_GPUS=$NUM_GPUS OC_LIMIT=$LIMIT
[[ -n $CPU_THREADS ]] && export OMP_NUM_THREADS=$CPU_THREADS MKL_NUM_THREADS=$CPU_THREADS
export LANG=C.UTF-8 LC_ALL=C.UTF-8      # MATHDataset opens math.json without an explicit encoding
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
RUN_CWD=$WORK_DIR/.cwd                  # OpenCompass writes tmp/, .cache/, icl_inference_output/ into its working directory
mkdir -p "$RUN_CWD"
list_runs() { find "$WORK_DIR" -mindepth 1 -maxdepth 1 -type d -name '[0-9]*_[0-9]*' | sort; }  # <timestamp>/ folders
before=$(list_runs)
echo "evaluate_opencompass.sh: $ABBR ($BACKEND, device $DEVICE, max_out_len $MAX_OUT_LEN, batch $BATCH_SIZE, problems ${LIMIT:-all}) -> $WORK_DIR" >&2
start=$SECONDS
(cd "$RUN_CWD" && "$OC_VENV/bin/opencompass" "$CONFIG" -w "$WORK_DIR" "${RUN_MODE[@]}") ||
  die "OpenCompass failed (config $CONFIG, work folder $WORK_DIR)"
wall_s=$((SECONDS - start))

# ---- report: the new timestamped folder, its summary table, one closing line
OUT_DIR=$(comm -13 <(echo "$before") <(list_runs) | tail -n 1)
[[ -n $OUT_DIR ]] || die "$WORK_DIR: OpenCompass wrote no new output folder"
SUMMARY_CSV=$(find "$OUT_DIR/summary" -name 'summary_*.csv' 2>/dev/null | sort | tail -n 1)
[[ -n $SUMMARY_CSV ]] || die "$OUT_DIR/summary: no summary_*.csv (OpenCompass's evaluation did not finish)"
SUMMARY_MD=${SUMMARY_CSV%.csv}.md
echo
if [[ -f $SUMMARY_MD ]]; then cat "$SUMMARY_MD"; else cat "$SUMMARY_CSV"; fi
ACCURACY=$(awk -F, 'NR > 1 && $1 == "math" {print $NF; exit}' "$SUMMARY_CSV")
[[ -n $ACCURACY && $ACCURACY != - ]] || die "$SUMMARY_CSV: no math accuracy (expected a row 'math' with a score)"
echo "evaluate_opencompass.sh: MATH accuracy $ACCURACY (math_gen_a58d9d, problems ${LIMIT:-all}, $ABBR, ${wall_s} s) -> $OUT_DIR"
