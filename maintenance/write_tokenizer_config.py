#!/usr/bin/env python3
"""Write the recipe's tokenizer_config.json: Qwen2.5-Instruct's stock file with only the
default system prompt replaced by ``new_math_reward.SYSTEM_PROMPT`` (both branches of the
chat template: with tools and without), so the answer contract is defined in one place.

    python -m maintenance.write_tokenizer_config [--stock PATH] [--out PATH] [--check]

The prompt is inserted into the template's single-quoted Jinja string literals, which
Jinja decodes with Python's unicode-escape rules: backslashes are doubled (``\\boxed`` would
otherwise become a backspace and "oxed"), single quotes escaped and line breaks written as
``\\n`` so that they render as real newlines (the reference recipe escaped them twice and
showed the model a literal backslash-n). The file is written atomically (temp + rename),
in the stock file's JSON layout. ``--check`` exits 1 if the file on disk is not what this
script would write (for CI).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from new_math_reward import QWEN_STOCK_SYSTEM_PROMPT, SYSTEM_PROMPT
from grpo_math.io import write_text_atomic

REPO = Path(__file__).resolve().parent.parent

DEFAULT_STOCK = REPO.parent / "shared" / "data" / "qwen2_5_tokenizer" / "tokenizer_config.json"
DEFAULT_OUT = REPO / "tokenizer_config.json"
#: The stock template states the default prompt exactly twice (tools branch, plain branch).
EXPECTED_OCCURRENCES = 2


def jinja_literal_body(text: str) -> str:
    """``text`` escaped for the inside of a single-quoted Jinja string literal."""
    if not text.isascii():
        raise ValueError("the system prompt must be ASCII (Jinja decodes literals as unicode-escape)")
    return text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n")


def build(stock_text: str, prompt: str = SYSTEM_PROMPT) -> str:
    """The new file's text from the stock file's text."""
    config = json.loads(stock_text)
    template = config["chat_template"]
    found = template.count(QWEN_STOCK_SYSTEM_PROMPT)
    if found != EXPECTED_OCCURRENCES:
        raise ValueError(f"stock chat template states the default system prompt {found} times, "
                         f"expected {EXPECTED_OCCURRENCES}: not the stock Qwen2.5 file?")
    config["chat_template"] = template.replace(QWEN_STOCK_SYSTEM_PROMPT, jinja_literal_body(prompt))
    out = json.dumps(config, indent=2, ensure_ascii=False)
    if stock_text.endswith("\n"):
        out += "\n"
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stock", type=Path, default=DEFAULT_STOCK, help="stock Qwen2.5 tokenizer_config.json")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="file to write")
    ap.add_argument("--check", action="store_true", help="only check that --out is up to date")
    args = ap.parse_args(argv)
    text = build(args.stock.read_text(encoding="utf-8"))
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else None
        if current != text:
            print(f"{args.out} is out of date: run python -m maintenance.write_tokenizer_config", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date")
        return 0
    write_text_atomic(args.out, text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
