"""cpu_support/prepare_smollm2.py: the CPU profiles' model carries the answer contract's system
prompt in its chat template and the released special tokens."""

from __future__ import annotations

import json

import pytest

from conftest import REPO
from cpu_support import prepare_smollm2

SMOLLM_DIR = REPO / "models" / "SmolLM2-135M-Instruct"
STOCK_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
)


def render(template: str, content: str = "Q") -> str:
    import jinja2

    return jinja2.Template(template).render(messages=[{"role": "user", "content": content}])


def test_contract_prompt_renders_with_real_newlines_and_one_backslash():
    rendered = render(prepare_smollm2.with_contract(STOCK_TEMPLATE))
    contract = prepare_smollm2.contract_system_prompt()
    assert contract in rendered
    assert "\n<think>\n" in rendered and "\\boxed{...}" in rendered and "\\\\boxed" not in rendered


def test_unknown_template_is_refused():
    with pytest.raises(ValueError, match="default system prompt not found"):
        prepare_smollm2.with_contract("{{ messages }}")


@pytest.mark.skipif(not (SMOLLM_DIR / "config.json").exists(), reason="run setup.sh --device cpu first")
def test_converted_model_has_the_released_special_tokens():
    gen = json.loads((SMOLLM_DIR / "generation_config.json").read_text())
    assert (gen["bos_token_id"], gen["eos_token_id"], gen["pad_token_id"]) == (1, 2, 2)
    # transformers 4.56 (the reference stack's, setup.sh --stack both) writes the special tokens to
    # special_tokens_map.json, transformers 5 (the current stack's, plain setup.sh) to tokenizer_config.json
    found = SMOLLM_DIR / "special_tokens_map.json"
    special = json.loads((found if found.is_file() else SMOLLM_DIR / "tokenizer_config.json").read_text())
    assert special["eos_token"] == special["pad_token"] == "<|im_end|>"
