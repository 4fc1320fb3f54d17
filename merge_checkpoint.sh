#!/usr/bin/env bash
# Merge a verl FSDP actor checkpoint into a Hugging Face model directory that evaluate.py,
# vLLM and OpenCompass load, carrying the recipe's tokenizer config (its chat template holds
# the system prompt the model was trained with).
#
# Usage: bash merge_checkpoint.sh [-h | --help] [CKPT_DIR [STEP]]
#   -h, --help  print this manual and exit
#   CKPT_DIR  checkpoint root: the launcher's trainer.default_local_dir, holding global_step_N/
#             (first argument, else $CKPT_DIR, else the launcher's default for EXPERIMENT_NAME:
#             outputs/<experiment>/checkpoints; with EXPERIMENT_NAME unset, whichever of
#             outputs/qwen2_5_1_5b_math/checkpoints (reference) and
#             outputs/smollm2_135m_math_cpu/checkpoints (cpu profile) exists).
#   STEP      training step N, an integer, or "latest" (default): the step named in
#             CKPT_DIR/latest_checkpointed_iteration.txt, else the highest global_step_N.
#   Every knob (listed under Knobs) is an environment variable, e.g.
#     CKPT_DIR=outputs/qwen2_5_1_5b_math/checkpoints STEP=280 bash merge_checkpoint.sh
# Output: TARGET_DIR (default CKPT_DIR/global_step_N/actor/huggingface, the folder verl saved the
#   config and tokenizer in) then holds config.json, model weights (*.safetensors, bfloat16, as
#   verl's merger writes them), generation_config.json and the tokenizer files. The merge
#   (python -m verl.model_merger merge --backend fsdp) writes to a temporary sibling folder that
#   replaces TARGET_DIR only once it succeeded and passed tools/check_merged_model.py (every
#   tensor has the shape and dtype config.json implies; a forward pass on CPU gives finite
#   logits): a failed merge leaves TARGET_DIR as it was.
# Tokenizer config (TOKENIZER_POLICY):
#   auto    config.json model_type "qwen2" (Qwen2.5) -> recipe; any other model type (SmolLM2 on
#           the cpu profile is "llama") -> keep, because the recipe's tokenizer_config.json
#           describes Qwen2.5's vocabulary and special tokens and would break another tokenizer.
#   recipe  copy RECIPE_TOKENIZER_CONFIG over the merged tokenizer_config.json; when that file
#           carries a chat_template, drop the merged chat_template.jinja (in transformers 4.56, the
#           pinned version, chat_template.jinja overrides the template in tokenizer_config.json).
#   keep    leave the tokenizer files verl saved with the checkpoint, except one name: a checkpoint
#           of the current stack (transformers 5) names its tokenizer class "TokenizersBackend",
#           which transformers 4.56 (the reference stack's .venv-reference, OpenCompass's
#           environment) cannot load; it becomes "PreTrainedTokenizerFast", the same tokenizer
#           to both versions.
#   Either way the merged tokenizer must load and render a chat prompt, or the merge fails.
# Interpreter (PYTHON): the merger must be the verl of the stack that trained (the checkpoint
#   layout is verl's): the STACK knob in CKPT_DIR/launch_settings.json (written by the launcher;
#   reference when absent) names stacks/<STACK>.sh, whose STACK_VENV's python is used, else python3.
# Exit status: 0 on success or when TARGET_DIR already holds merged weights (FORCE=1 redoes it);
#   1 with one line on stderr for a missing checkpoint root, a missing step, a partial checkpoint
#   (no fsdp_config.json, a missing model_world_size_* shard, no huggingface/config.json), a
#   missing recipe tokenizer config, a failed merge, or a merged model that fails the check
#   ("merged FILE: what differed", e.g. a tensor's shape against config.json's, or non-finite
#   logits); 2 for bad arguments.
set -euo pipefail

REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ME=merge_checkpoint.sh

usage() {  # the header above, then every knob with its default and comment
  sed -n '2,/^set -euo pipefail$/{/^set -euo pipefail$/d;s/^# \{0,1\}//;p}' "$0"
  echo "Knobs (environment variables; default, meaning):"
  sed -n 's/^\([A-Z_]*\)=\${\(.*:-\)\{0,1\}\([^}]*\)}*  *# \(.*\)$/  \1 (\3): \4/p' "$0"
}
for arg in "$@"; do
  case $arg in -h | --help) usage; exit 0 ;; esac
done

PYTHON=${PYTHON:-}                                         # interpreter with verl; default: that of the run's stack (see Interpreter)
EXPERIMENT_NAME=${EXPERIMENT_NAME:-}                       # picks outputs/<experiment>/checkpoints when CKPT_DIR is unset
CKPT_DIR=${1:-${CKPT_DIR:-}}                               # checkpoint root holding global_step_N/ (see Usage)
STEP=${2:-${STEP:-latest}}                                 # step number or "latest"
TARGET_DIR=${TARGET_DIR:-}                                 # merged model folder; default <step>/actor/huggingface
TOKENIZER_POLICY=${TOKENIZER_POLICY:-auto}                 # auto | recipe | keep (see header)
RECIPE_TOKENIZER_CONFIG=${RECIPE_TOKENIZER_CONFIG:-$REPO_DIR/tokenizer_config.json}  # the recipe's Qwen2.5 tokenizer config
FORCE=${FORCE:-0}                                          # 1: merge again even if TARGET_DIR holds weights

die() { echo "$ME: $*" >&2; exit 1; }

case $TOKENIZER_POLICY in auto | recipe | keep) ;; *) echo "$ME: TOKENIZER_POLICY=$TOKENIZER_POLICY; expected auto, recipe or keep" >&2; exit 2 ;; esac
case $FORCE in 0 | 1) ;; *) echo "$ME: FORCE=$FORCE; expected 0 or 1" >&2; exit 2 ;; esac
[[ $# -le 2 ]] || { echo "$ME: too many arguments; usage: bash $ME [CKPT_DIR [STEP]]" >&2; exit 2; }
[[ $STEP == latest || $STEP =~ ^[0-9]+$ ]] || { echo "$ME: STEP=$STEP; expected a step number or 'latest'" >&2; exit 2; }

# ---- checkpoint root
if [[ -z $CKPT_DIR ]]; then
  if [[ -n $EXPERIMENT_NAME ]]; then
    CKPT_DIR=$REPO_DIR/outputs/$EXPERIMENT_NAME/checkpoints
  else
    ref=$REPO_DIR/outputs/qwen2_5_1_5b_math/checkpoints
    cpu=$REPO_DIR/outputs/smollm2_135m_math_cpu/checkpoints
    if [[ -d $ref && -d $cpu ]]; then
      die "both $ref and $cpu exist; expected CKPT_DIR (or the first argument) to choose one"
    elif [[ -d $cpu ]]; then
      CKPT_DIR=$cpu
    else
      CKPT_DIR=$ref
    fi
  fi
fi
[[ -d $CKPT_DIR ]] || die "$CKPT_DIR: checkpoint root not found; expected trainer.default_local_dir of a run (holding global_step_N/)"

# ---- interpreter: the stack that wrote the checkpoint (its verl's checkpoint layout and merger)
if [[ -z $PYTHON ]]; then
  settings=$CKPT_DIR/launch_settings.json
  stack=reference
  if [[ -f $settings ]]; then
    stack=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["knobs"].get("STACK", "reference"))' "$settings" 2>/dev/null) \
      || die "$settings: expected the launcher's JSON with a 'knobs' object"
  fi
  [[ -f $REPO_DIR/stacks/$stack.sh ]] || die "$settings: knob STACK=$stack; expected reference or current"
  # shellcheck source=/dev/null
  source "$REPO_DIR/stacks/$stack.sh"  # STACK_VENV
  if [[ -x $REPO_DIR/$STACK_VENV/bin/python ]]; then PYTHON=$REPO_DIR/$STACK_VENV/bin/python; else PYTHON=python3; fi
fi

# ---- step
if [[ $STEP == latest ]]; then
  tracker=$CKPT_DIR/latest_checkpointed_iteration.txt
  if [[ -f $tracker ]]; then
    STEP=$(tr -d '[:space:]' <"$tracker")
    [[ $STEP =~ ^[0-9]+$ ]] || die "$tracker: expected a step number, found '$STEP'"
  else
    STEP=$(find "$CKPT_DIR" -mindepth 1 -maxdepth 1 -type d -name 'global_step_*' -printf '%f\n' \
      | sed -n 's/^global_step_\([0-9][0-9]*\)$/\1/p' | sort -n | tail -n 1)
    if [[ -z $STEP ]]; then
      hint=""
      if [[ $(basename "$CKPT_DIR") =~ ^global_step_([0-9]+)$ ]]; then
        hint=" (it is one: bash merge_checkpoint.sh $(dirname "$CKPT_DIR") ${BASH_REMATCH[1]})"
      elif [[ -d $CKPT_DIR/checkpoints ]]; then
        hint=" (the launcher's are in $CKPT_DIR/checkpoints)"
      fi
      die "$CKPT_DIR: no global_step_N/ folder; expected the checkpoint root holding them$hint"
    fi
  fi
fi
ACTOR_DIR=$CKPT_DIR/global_step_$STEP/actor
if [[ ! -d $CKPT_DIR/global_step_$STEP ]]; then
  saved=$(find "$CKPT_DIR" -mindepth 1 -maxdepth 1 -type d -name 'global_step_*' -printf '%f\n' | sort -V | tr '\n' ' ')
  die "$CKPT_DIR/global_step_$STEP: step $STEP not found; expected one of: ${saved:-(no global_step_N/ folder)}"
fi
[[ -d $ACTOR_DIR ]] || die "$ACTOR_DIR: no actor/ folder; expected a complete verl checkpoint (partial checkpoint)"

HF_CONFIG_DIR=$ACTOR_DIR/huggingface
TARGET_DIR=${TARGET_DIR:-$HF_CONFIG_DIR}
if [[ $FORCE == 0 ]] && compgen -G "$TARGET_DIR/*.safetensors" >/dev/null; then
  echo "$ME: $TARGET_DIR already holds merged weights (FORCE=1 merges again)"
  exit 0
fi

# ---- completeness
[[ -f $ACTOR_DIR/fsdp_config.json ]] || die "$ACTOR_DIR/fsdp_config.json: missing; expected a complete FSDP checkpoint (partial or not FSDP)"
WORLD_SIZE=$("$PYTHON" -c 'import json, sys; print(int(json.load(open(sys.argv[1]))["world_size"]))' "$ACTOR_DIR/fsdp_config.json" 2>/dev/null) \
  || die "$ACTOR_DIR/fsdp_config.json: field 'world_size': expected an integer (or PYTHON=$PYTHON does not run)"
compgen -G "$ACTOR_DIR/model_world_size_*_rank_*.pt" >/dev/null || die "$ACTOR_DIR: no model_world_size_*_rank_*.pt shard; expected $WORLD_SIZE (partial checkpoint)"
for ((rank = 0; rank < WORLD_SIZE; rank++)); do
  shard=$ACTOR_DIR/model_world_size_${WORLD_SIZE}_rank_${rank}.pt
  [[ -s $shard ]] || die "$shard: missing or empty; expected $WORLD_SIZE shards (partial checkpoint)"
done
[[ -f $HF_CONFIG_DIR/config.json ]] || die "$HF_CONFIG_DIR/config.json: missing; expected the huggingface/ config dir verl saves with each checkpoint (partial checkpoint)"

# ---- tokenizer policy
MODEL_TYPE=$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1])).get("model_type", ""))' "$HF_CONFIG_DIR/config.json") \
  || die "$HF_CONFIG_DIR/config.json: not valid JSON; expected a Hugging Face model config"
if [[ $TOKENIZER_POLICY == auto ]]; then
  if [[ $MODEL_TYPE == qwen2 ]]; then TOKENIZER_POLICY=recipe; else TOKENIZER_POLICY=keep; fi
fi
if [[ $TOKENIZER_POLICY == recipe ]]; then
  [[ -f $RECIPE_TOKENIZER_CONFIG ]] || die "$RECIPE_TOKENIZER_CONFIG: missing; expected the recipe's tokenizer_config.json for model_type '$MODEL_TYPE' (or TOKENIZER_POLICY=keep)"
fi
echo "$ME: step $STEP of $CKPT_DIR (world size $WORLD_SIZE, model_type $MODEL_TYPE) -> $TARGET_DIR; tokenizer config: $TOKENIZER_POLICY; python: $PYTHON"

# ---- merge into a temporary sibling, then swap it in
mkdir -p "$(dirname "$TARGET_DIR")"
TMP_DIR=$(mktemp -d "$(dirname "$TARGET_DIR")/.$(basename "$TARGET_DIR").merging.XXXXXX")
OLD_DIR=""
cleanup() {
  if [[ -n $OLD_DIR && -d $OLD_DIR && ! -e $TARGET_DIR ]]; then mv "$OLD_DIR" "$TARGET_DIR"; fi  # restore
  rm -rf "$TMP_DIR"
}
trap cleanup EXIT

"$PYTHON" -m verl.model_merger merge --backend fsdp --local_dir "$ACTOR_DIR" --target_dir "$TMP_DIR" \
  || die "python -m verl.model_merger merge failed for $ACTOR_DIR (see the messages above)"
compgen -G "$TMP_DIR/*.safetensors" >/dev/null || die "$TMP_DIR: the merger wrote no *.safetensors; expected model weights"

if [[ $TOKENIZER_POLICY == recipe ]]; then
  cp "$RECIPE_TOKENIZER_CONFIG" "$TMP_DIR/tokenizer_config.json"
  if "$PYTHON" -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1])).get("chat_template") else 1)' "$RECIPE_TOKENIZER_CONFIG"; then
    rm -f "$TMP_DIR/chat_template.jinja"
  fi
fi
if [[ $TOKENIZER_POLICY == keep ]]; then
  "$PYTHON" - "$TMP_DIR/tokenizer_config.json" <<'PY' || die "$TMP_DIR/tokenizer_config.json: field 'tokenizer_class': could not be rewritten; expected a JSON object"
import json, sys
path = sys.argv[1]
with open(path) as f:
    config = json.load(f)
if config.get("tokenizer_class") == "TokenizersBackend":  # transformers 5's name, unknown to 4.56
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    with open(path, "w") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
PY
fi
"$PYTHON" - "$TMP_DIR" <<'PY' || die "$TMP_DIR: the merged tokenizer does not load or has no chat template (tokenizer policy $TOKENIZER_POLICY)"
import sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
tok.apply_chat_template([{"role": "user", "content": "1+1?"}], add_generation_prompt=True, tokenize=False)
PY

# every merged tensor has the shape and dtype config.json implies, and a forward pass gives finite logits
check=$(PYTHONPATH="$REPO_DIR${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m tools.check_merged_model "$TMP_DIR" 2>&1 >/dev/null) \
  || { check=${check##*$'\n'}; die "merged ${check#*"$TMP_DIR: "}"; }

# mktemp -d makes a 0700 folder and the merger writes 0600 weights: give them the umask's modes
umask_value=$(umask)
chmod "$(printf '%o' $((0777 & ~8#$umask_value)))" "$TMP_DIR"
find "$TMP_DIR" -type f -exec chmod "$(printf '%o' $((0666 & ~8#$umask_value)))" {} +

if [[ -e $TARGET_DIR ]]; then
  OLD_DIR=$(mktemp -d "$(dirname "$TARGET_DIR")/.$(basename "$TARGET_DIR").old.XXXXXX")
  rmdir "$OLD_DIR"
  mv "$TARGET_DIR" "$OLD_DIR"
fi
mv "$TMP_DIR" "$TARGET_DIR"
if [[ -n $OLD_DIR ]]; then rm -rf "$OLD_DIR"; fi
OLD_DIR=""
echo "$ME: merged step $STEP -> $TARGET_DIR"
