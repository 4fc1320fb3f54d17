"""tokenizer_config.json: the stock Qwen2.5-Instruct file with only the default system prompt
replaced by new_math_reward.SYSTEM_PROMPT, in both chat-template branches (with and without
tools), rendered by the real tokenizer with real newlines.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from maintenance import write_tokenizer_config as W
from new_math_reward import ANSWER_CLOSE, ANSWER_OPEN, QWEN_STOCK_SYSTEM_PROMPT, SYSTEM_PROMPT, THINK_OPEN
from conftest import REPO

STOCK_DIR = REPO.parent / "shared" / "data" / "qwen2_5_tokenizer"
STOCK = STOCK_DIR / "tokenizer_config.json"
OURS = REPO / "tokenizer_config.json"
TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two numbers.",
                                            "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}}]
MESSAGES = [{"role": "user", "content": "What is 1+1?"}]

pytestmark = pytest.mark.skipif(not STOCK.exists(), reason="stock Qwen2.5 tokenizer not found in ../shared")


def _tokenizer_dir(tmp_path: Path, config_text: str) -> Path:
    d = tmp_path / "tok"
    d.mkdir()
    for name in ("vocab.json", "merges.txt", "tokenizer.json"):
        shutil.copy(STOCK_DIR / name, d / name)
    (d / "tokenizer_config.json").write_text(config_text, encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    d = _tokenizer_dir(tmp_path_factory.mktemp("ours"), OURS.read_text(encoding="utf-8"))
    return transformers.AutoTokenizer.from_pretrained(str(d))


def test_file_is_what_the_script_writes():
    assert OURS.read_text(encoding="utf-8") == W.build(STOCK.read_text(encoding="utf-8"))


def test_differs_from_stock_only_in_the_system_prompt():
    stock, ours = json.loads(STOCK.read_text(encoding="utf-8")), json.loads(OURS.read_text(encoding="utf-8"))
    assert stock.keys() == ours.keys()
    assert {k: v for k, v in stock.items() if k != "chat_template"} == \
           {k: v for k, v in ours.items() if k != "chat_template"}
    body = W.jinja_literal_body(SYSTEM_PROMPT)
    assert ours["chat_template"].count(body) == 2  # both branches
    assert ours["chat_template"].replace(body, QWEN_STOCK_SYSTEM_PROMPT) == stock["chat_template"]
    # byte layout kept: only the chat_template line differs
    diff = [i for i, (a, b) in enumerate(zip(STOCK.read_text().splitlines(), OURS.read_text().splitlines())) if a != b]
    assert len(diff) == 1 and '"chat_template"' in OURS.read_text().splitlines()[diff[0]]


def test_renders_without_tools(tokenizer):
    text = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\n" + SYSTEM_PROMPT + "<|im_end|>\n<|im_start|>user\n")


def test_renders_with_tools(tokenizer):
    text = tokenizer.apply_chat_template(MESSAGES, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\n" + SYSTEM_PROMPT + "\n\n# Tools\n")


@pytest.mark.parametrize("tools", [None, TOOLS])
def test_rendered_prompt_has_real_newlines_and_single_backslashes(tokenizer, tools):
    text = tokenizer.apply_chat_template(MESSAGES, tools=tools, tokenize=False, add_generation_prompt=True)
    system = text.split("<|im_end|>")[0] if tools is None else text.split("\n\n# Tools")[0]
    assert "\\n" not in system                       # no literal backslash-n (the reference's bug)
    assert f"\n{THINK_OPEN}\n" in system and f"\n{ANSWER_OPEN}\n\\boxed{{...}}\n{ANSWER_CLOSE}" in system
    assert "\\\\" not in system and "\b" not in system  # \boxed neither doubled nor a backspace


def test_explicit_system_message_still_wins(tokenizer):
    msgs = [{"role": "system", "content": "Be brief."}] + MESSAGES
    text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>\n") and SYSTEM_PROMPT not in text


def test_escaping_of_awkward_prompts(tmp_path):
    transformers = pytest.importorskip("transformers")
    prompt = "It's \\boxed{x} and \\n literal,\nthen a new line; \"quoted\" {{ braces }}"
    d = _tokenizer_dir(tmp_path, W.build(STOCK.read_text(encoding="utf-8"), prompt))
    tok = transformers.AutoTokenizer.from_pretrained(str(d))
    text = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\n" + prompt + "<|im_end|>\n")


def test_write_is_atomic_and_check_mode(tmp_path):
    out = tmp_path / "tokenizer_config.json"
    assert W.main(["--stock", str(STOCK), "--out", str(out), "--check"]) == 1
    assert W.main(["--stock", str(STOCK), "--out", str(out)]) == 0
    assert W.main(["--stock", str(STOCK), "--out", str(out), "--check"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["tokenizer_config.json"]  # no temp file left


def test_refuses_a_non_stock_template():
    with pytest.raises(ValueError, match="expected 2"):
        W.build(json.dumps({"chat_template": "no default prompt here"}))
