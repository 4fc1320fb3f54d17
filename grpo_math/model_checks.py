"""The model folder checks preflight.py runs before training and evaluate.py before generating: config.json and
weights, the tokenizer, the chat template's default system prompt. Each returns a list of :class:`Problem`."""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Optional

from grpo_math.io import one_line

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Problem:
    """One finding: ``level`` is "FAIL" (the run cannot work), "WARN" (it can, but check) or "INFO" (what a check
    measured or found in force, shown so that the log says it)."""

    level: str
    message: str

    def __str__(self) -> str:
        return f"preflight: {self.level} {self.message}"


fail = partial(Problem, "FAIL")
warn = partial(Problem, "WARN")
info = partial(Problem, "INFO")


def why(err: BaseException) -> str:
    """``Type: message`` of an exception, on one line."""
    return one_line(f"{type(err).__name__}: {err}", 200)


# ---- model folder
def safetensors_header(file: Path) -> dict:
    """``{name: (shape, dtype)}`` from a safetensors file's header alone (8-byte little-endian length, then a JSON
    map of tensor name -> {dtype, shape, data_offsets}). Raises struct.error / ValueError / KeyError / TypeError."""
    with open(file, "rb") as fh:
        (size,) = struct.unpack("<Q", fh.read(8))
        if size > 100_000_000:
            raise ValueError(f"header length {size} bytes is implausible")
        header = json.loads(fh.read(size))
    return {k: (tuple(v["shape"]), v["dtype"]) for k, v in header.items() if k != "__metadata__"}


def safetensors_parameters(file: Path) -> int:
    """Parameters in one safetensors file, from its header (:func:`safetensors_header`)."""
    return sum(math.prod(shape) for shape, _ in safetensors_header(file).values())


def check_model_dir(model_path: Path) -> list[Problem]:
    """config.json, weights (*.safetensors headers parse), tokenizer files, tokenizer_config.json: what verl loads."""
    where = f"MODEL_PATH={model_path}"
    if not model_path.is_dir():
        return [fail(f"{where}: no such directory: run 'bash setup.sh' or set MODEL_PATH to a Hugging Face model "
                     "folder")]
    problems = []
    config = model_path / "config.json"
    if not config.is_file():
        problems.append(fail(f"{where}: no config.json: expected a Hugging Face model folder (config.json, weights, "
                             "tokenizer)"))
    else:
        try:
            json.loads(config.read_text())
        except ValueError as err:
            problems.append(fail(f"{where}: config.json is not valid JSON ({why(err)}): download the model again"))
    weights = sorted(model_path.glob("*.safetensors"))
    if not (weights or list(model_path.glob("pytorch_model*.bin"))):
        problems.append(fail(f"{where}: no weights (*.safetensors or pytorch_model*.bin): copy the model's weight "
                             "files there"))
    for file in weights:
        try:
            safetensors_parameters(file)
        except (OSError, ValueError, KeyError, TypeError, struct.error) as err:
            problems.append(fail(f"{where}: {file.name} is not a valid safetensors file ({why(err)}): "
                                 "download it again"))
            break
    has = [(model_path / name).is_file() for name in ("tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt")]
    if not (has[0] or has[1] or (has[2] and has[3])):
        problems.append(fail(f"{where}: no tokenizer (tokenizer.json, or vocab.json + merges.txt, or tokenizer.model): "
                             "copy the model's tokenizer files there"))
    if not (model_path / "tokenizer_config.json").is_file():
        problems.append(fail(f"{where}: no tokenizer_config.json: copy the recipe's tokenizer_config.json there "
                             "(setup.sh does)"))
    return problems


# ---- chat template: rendered and tokenized by transformers, as verl does
#: Model types whose tokenizers transformers 5 checks for Mistral's faulty pre-tokenizer regex
#: (transformers/tokenization_utils_tokenizers.py, the fix_mistral_regex warning).
MISTRAL_MODEL_TYPES = ("mistral", "mistral3", "voxtral", "ministral", "pixtral")


def _not_the_mistral_regex_warning(record) -> bool:
    return "with an incorrect regex pattern" not in record.getMessage()


def load_tokenizer(model_path: Path):
    """The model's Hugging Face tokenizer, without transformers 5's Mistral-regex warning (given for any model whose
    config.json names no ``transformers_version``) unless config.json names a Mistral model type."""
    import logging

    from transformers import AutoTokenizer

    kind = model_type(Path(model_path))
    logger = logging.getLogger("transformers.tokenization_utils_tokenizers")
    if kind is not None and kind not in MISTRAL_MODEL_TYPES:
        logger.addFilter(_not_the_mistral_regex_warning)
    try:
        return AutoTokenizer.from_pretrained(str(model_path))
    finally:
        logger.removeFilter(_not_the_mistral_regex_warning)


def prompt_length(tok, messages: list[dict]) -> int:
    """Tokens of ``messages`` templated with the generation prompt, as verl counts a prompt for
    data.filter_overlong_prompts (verl/utils/dataset/rl_dataset.py, maybe_filter_out_long_prompts).
    ``return_dict=False``: transformers 5 otherwise returns a BatchEncoding, whose len() is its 2 keys."""
    return len(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))


def recipe_prompts() -> tuple[str, str]:
    """(recipe system prompt, Qwen's stock one) from new_math_reward.py (raises ImportError)."""
    from new_math_reward import QWEN_STOCK_SYSTEM_PROMPT, SYSTEM_PROMPT

    return SYSTEM_PROMPT, QWEN_STOCK_SYSTEM_PROMPT


#: The WARN message for a chat template carrying Qwen's stock system prompt (evaluate.py looks for it).
STOCK_PROMPT_NOTE = "the chat template's default system prompt is Qwen's stock one"


def model_type(model_path: Path) -> Optional[str]:
    """``model_type`` of the folder's config.json, or None when it cannot be read."""
    try:
        value = json.loads((model_path / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def check_chat_template(model_path: Path, device: str, system_prompt: str, stock_prompt: str,
                        tok=None) -> list[Problem]:
    """Rendered by transformers' apply_chat_template(add_generation_prompt=True), as verl's RLHFDataset does, the
    default system prompt is the recipe's (new_math_reward.SYSTEM_PROMPT, in its tokenizer_config.json), or its
    answer contract (the text after Qwen's identity sentence) behind another identity, as the CPU stand-in model
    carries it (cpu_support/prepare_smollm2.py). Qwen's stock prompt means the copy was forgotten (WARN: training
    works, without the answer format); any other: FAIL on npu/cuda, WARN on cpu. ``tok``: the tokenizer if loaded."""
    where = f"MODEL_PATH={model_path}"
    fix = f"copy {REPO / 'tokenizer_config.json'} over {model_path / 'tokenizer_config.json'}"
    try:
        tok = load_tokenizer(model_path) if tok is None else tok
    except Exception as err:  # noqa: BLE001 - unreadable json, missing files: one line either way
        return [fail(f"{where}: cannot load the tokenizer ({why(err)}): {fix}")]
    if not tok.chat_template:
        return [fail(f"{where}: tokenizer_config.json has no chat_template (nor chat_template.jinja): {fix}")]
    if (model_path / "chat_template.jinja").is_file():  # transformers prefers it to tokenizer_config.json
        fix = f"delete {model_path / 'chat_template.jinja'} (it overrides tokenizer_config.json) and {fix}"
    try:
        text = tok.apply_chat_template([{"role": "user", "content": "What is 1 + 1?"}], add_generation_prompt=True,
                                       tokenize=False)
    except Exception as err:  # noqa: BLE001 - template syntax or raise_exception: one line either way
        return [fail(f"{where}: the chat template does not render ({why(err)}): {fix}")]
    contract = system_prompt[len(stock_prompt):].strip() if system_prompt.startswith(stock_prompt) else ""
    if system_prompt in text or (contract and contract in text):
        return []
    if stock_prompt in text:
        if model_type(model_path) != "qwen2":
            fix = ("set this model's own default system prompt (its chat template) to the recipe's answer contract, "
                   "new_math_reward.SYSTEM_PROMPT without Qwen's identity sentence, as cpu_support/prepare_smollm2.py "
                   "does; the recipe's tokenizer_config.json is for Qwen2 models only")
        return [warn(f"{where}: {STOCK_PROMPT_NOTE}, not the recipe's (new_math_reward.SYSTEM_PROMPT): {fix}")]
    not_ours = f"{where}: the chat template's default system prompt is not the recipe's (new_math_reward.SYSTEM_PROMPT)"
    if device == "cpu":
        return [warn(f"{not_ours}: expected for the cpu profile's stand-in model, wrong for the recipe's Qwen model")]
    return [fail(f"{not_ours}: {fix}")]
