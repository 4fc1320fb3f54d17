#!/usr/bin/env python3
"""Evaluate a model on MATH under the recipe's protocol (the training prompt, the training reward and
a strict math-verify check). The machinery is grpo_math/evaluation/; docs/evaluation.md compares
the recipe's protocol with OpenCompass's and shows how far their judges agree."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from grpo_math.evaluation import generate, run
from grpo_math.evaluation.data import LAYOUTS
from grpo_math.io import ArgumentParser, DataError, checked, positive_int

HERE = Path(__file__).resolve().parent
#: The recipe's data.max_response_length (run_qwen2_5_1_5b.sh), OpenCompass's max_out_len in the reference.
DEFAULT_MAX_NEW_TOKENS = 1024


fraction = checked(float, "0 < p <= 1", lambda p: not 0 < p <= 1)
non_negative_float = checked(float, "a number >= 0", lambda x: x < 0)
non_negative_int = checked(int, "an integer >= 0", lambda x: x < 0)
#: comma-separated integers, sorted, each once
int_list = checked(lambda text: sorted({int(x) for x in text.split(",") if x.strip()}), "comma-separated integers")


def default_output_name(model: Path, data: Path) -> str:
    """``<experiment>-global_step_N-<data stem>`` for merge_checkpoint.sh's ``.../<experiment>/
    checkpoints/global_step_N/actor/huggingface``, else ``<model folder name>-<data stem>``."""
    parts = model.resolve().parts
    if len(parts) >= 5 and parts[-4] == "checkpoints" and parts[-3].startswith("global_step_") \
            and parts[-2:] == ("actor", "huggingface"):
        return f"{parts[-5]}-{parts[-3]}-{data.stem}"
    return f"{model.resolve().name}-{data.stem}"


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="evaluate.py", description=__doc__, epilog=(
        "Exit status: 0 done; 1 bad input (one line on stderr naming the file, the field and what was expected; "
        "nothing in the output folder is overwritten); 2 bad arguments."))
    what = p.add_argument_group("what to evaluate")
    what.add_argument("--model", type=Path, metavar="DIR", required=True, help=(
        "Hugging Face model folder (config.json, weights, tokenizer files with a chat template), e.g. a merged "
        "checkpoint, checked before anything is written (grpo_math.model_checks, transformers' AutoConfig; Qwen's "
        "stock system prompt instead of the recipe's: one WARN line)"))
    what.add_argument("--data", type=Path, metavar="FILE", required=True, help="MATH problems, one of: " + "; ".join(
        f"{name} ({', '.join(fields)}): {text}" for name, (fields, text) in LAYOUTS.items()))
    what.add_argument("--limit", type=positive_int, metavar="N", help="the first N problems of the file only")
    dec = p.add_argument_group("decoding")
    dec.add_argument("--max-new-tokens", type=positive_int, default=DEFAULT_MAX_NEW_TOKENS, metavar="T",
                     help="response budget, tokens (default %(default)s: the recipe's data.max_response_length)")
    dec.add_argument("--temperature", type=non_negative_float, default=0.0, metavar="X", help=(
        "0 = greedy (default: verl's validation setting rollout.val_kwargs: temperature 0, top_p 1, top_k -1)"))
    dec.add_argument("--top-p", type=fraction, default=1.0, metavar="P",
                     help="nucleus sampling in (0, 1], used when X > 0 (default %(default)s)")
    dec.add_argument("--n", type=positive_int, default=1, metavar="N",
                     help="samples per problem; N > 1 needs X > 0 (default %(default)s)")
    dec.add_argument("--k", type=int_list, metavar="LIST", help=(
        "comma-separated pass@k values, each <= N (default: 1 and N); unbiased estimator of Chen et al. 2021"))
    dec.add_argument("--seed", type=int, default=0, help="torch / vLLM sampling seed (default %(default)s)")
    eng = p.add_argument_group("engine")
    eng.add_argument("--backend", choices=("auto", "vllm", "hf"), default="auto", help=(
        "auto: vLLM when importable and a CUDA or Ascend NPU device is present, else transformers (hf)"))
    eng.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"), default="auto",
                     help="auto: float32 on CPU, bfloat16 on an accelerator")
    eng.add_argument("--batch-size", type=positive_int, metavar="B", help=(
        "prompts per generate call (default: " + ", ".join(f"{n} {b}" for b, n in generate.DEFAULT_BATCH_SIZE.items())
        + ")"))
    eng.add_argument("--tensor-parallel-size", type=positive_int, default=1, metavar="TP",
                     help="vLLM's tensor parallel size (default %(default)s)")
    eng.add_argument("--gpu-memory-utilization", type=fraction, default=0.8, metavar="F",
                     help="vLLM's share of device memory (default %(default)s)")
    eng.add_argument("--cpu-threads", type=non_negative_int, default=0, metavar="T", help=(
        "torch CPU threads of the transformers backend; 0 (default) keeps torch's; on a shared CPU 1 avoids "
        "oversubscribing its cores"))
    out = p.add_argument_group("output")
    out.add_argument("--output-dir", type=Path, metavar="DIR", help=(
        f"receives {run.RUN_CONFIG_FILE}, {run.SAMPLES_FILE} (resumable) and {run.SUMMARY_FILE}; default "
        "outputs/eval/<experiment>-global_step_N-<data stem> for a merged checkpoint, else "
        "outputs/eval/<model folder>-<data stem>"))
    out.add_argument("--overwrite", action="store_true",
                     help=f"start afresh: remove the output folder's {run.SAMPLES_FILE} and {run.SUMMARY_FILE}")
    return p


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse and cross-check the command line (exit 2 with one line on bad values)."""
    p = build_parser()
    args = p.parse_args(argv)
    if args.n > 1 and args.temperature == 0:
        p.error(f"--n {args.n} needs --temperature > 0 (greedy decoding gives {args.n} identical samples)")
    args.ks = sorted({1, args.n}) if args.k is None else args.k
    if not args.ks or any(k < 1 or k > args.n for k in args.ks):
        p.error(f"--k {','.join(map(str, args.ks))}: each k must satisfy 1 <= k <= n = {args.n}")
    if args.output_dir is None:
        args.output_dir = HERE / "outputs" / "eval" / default_output_name(args.model, args.data)
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """0 on success, 1 on bad input (one line on stderr), 2 on bad arguments."""
    args = parse_args(argv)
    try:
        run.run(args)
    except DataError as exc:
        print(f"evaluate.py: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
