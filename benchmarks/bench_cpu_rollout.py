"""Measure the CPU rollout's throughput: generated tokens per second for one GRPO batch.

Usage::

    python -m benchmarks.bench_cpu_rollout [--prompts 8] [--n 8] [--new-tokens 128] [--threads 2]
                                           [--markdown FILE]

Builds one rollout batch the way verl hands it to the rollout: ``--prompts`` MATH Level-1
training problems (data/verl/math_level1/train.parquet, rendered with the model's chat
template, left-padded), each repeated ``--n`` times in a row (GRPO group size). Then times, on
the same batch and in one process, side by side:

- ``generate``: ``transformers`` ``model.generate`` on every row (what the CPU rollout did
  before: each copy of a prompt prefilled separately), fp32;
- ``rollout fp32`` / ``rollout bf16``: :func:`cpu_support.verl_cpu_patch.sample_responses`
  (one prefill per group, the KV cache shared by index) in fp32 and bf16 (the cpu profile
  uses bf16 only on CPUs with native bf16 matmuls, see profiles/cpu.sh).

Every variant samples with temperature 1, top-p 1 and no top-k (verl's rollout defaults)
and stops a row at its EOS, so the variants do not generate the same number of tokens:
the table counts generated tokens (each response up to and including its EOS) and the
decode steps actually run.

Columns: threads (torch intra-op threads), wall s, decode steps, generated tokens,
tokens/s (generated tokens / wall s), ms per decode step (wall s / decode steps).

The estimated limit printed under the table is arithmetic on rates measured on this machine
in the same run (a square matmul's FLOP/s in the rollout's dtype, and the bandwidth of a
large tensor copy): a decode step must at least read the weights and the KV cache once and
do 2 FLOPs per parameter per row, and the prefill 2 FLOPs per parameter per prompt token.

Errors: a missing model directory or data file exits 2 with one line naming the path.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def build_batch(tokenizer, data: Path, prompts: int, n: int):
    import pyarrow.parquet as pq
    import torch

    rows = pq.read_table(data, columns=["prompt"]).column("prompt").to_pylist()[:prompts]
    texts = [tokenizer.apply_chat_template(list(r), tokenize=False, add_generation_prompt=True) for r in rows]
    texts = [t for t in texts for _ in range(n)]
    tokenizer.padding_side = "left"
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    return enc["input_ids"], enc["attention_mask"].to(torch.long)


def generated(responses, eos: int, pad: int) -> int:
    """Tokens generated up to and including each row's first EOS."""
    import torch

    is_eos = responses == eos
    after = torch.cumsum(is_eos.long(), dim=1) - is_eos.long() > 0
    return int((~after).sum())


def matmul_gflops(dtype, n: int = 1024, repeats: int = 8) -> float:
    """Measured FLOP rate of an n x n matmul in ``dtype`` (GFLOP/s, all torch threads)."""
    import torch

    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n**3 * repeats / (time.perf_counter() - start) / 1e9


def copy_bandwidth_gbps(mib: int = 256, repeats: int = 4) -> float:
    """Measured bandwidth of copying a ``mib`` MiB tensor (GB/s, read + write counted)."""
    import torch

    src = torch.ones(mib * 2**20 // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)
    start = time.perf_counter()
    for _ in range(repeats):
        dst.copy_(src)
    return 2 * src.numel() * 4 * repeats / (time.perf_counter() - start) / 1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--model", type=Path, default=REPO / "models/SmolLM2-135M-Instruct", help="HF model dir")
    parser.add_argument("--data", type=Path, default=REPO / "data/verl/math_level1/train.parquet", help="verl parquet")
    parser.add_argument("--prompts", type=int, default=8, help="distinct prompts (GRPO groups)")
    parser.add_argument("--n", type=int, default=8, help="responses per prompt (GRPO group size)")
    parser.add_argument("--new-tokens", type=int, default=128, help="max new tokens per response")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="torch threads")
    parser.add_argument("--seed", type=int, default=0, help="torch seed before each variant")
    parser.add_argument("--dtypes", default="fp32,bf16", help="rollout dtypes to time, comma-separated (fp32, bf16)")
    parser.add_argument("--skip-generate", action="store_true", help="omit the slow model.generate variant")
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    for path in (args.model / "config.json", args.data):
        if not path.is_file():
            print(f"bench_cpu_rollout: {path}: missing (run 'bash setup.sh --device cpu' first)", file=sys.stderr)
            return 2

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cpu_support.verl_cpu_patch import enable_sdpa_gqa, sample_responses
    from script_utils import write_text_atomic

    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    input_ids, attention_mask = build_batch(tokenizer, args.data, args.prompts, args.n)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    real_prompt = attention_mask.sum(1).float().mean().item()
    models = {dt: AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=dt, attn_implementation="sdpa").eval()
              for dt in (torch.float32, torch.bfloat16)}

    def run_generate():
        out = models[torch.float32].generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=True,
                                             temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=args.new_tokens,
                                             eos_token_id=eos, pad_token_id=pad)
        return out[:, input_ids.size(1):]

    def run_rollout(dtype):
        return lambda: sample_responses(models[dtype], input_ids, attention_mask, max_new_tokens=args.new_tokens,
                                        eos_token_ids=eos, pad_token_id=pad, do_sample=True, temperature=1.0,
                                        top_p=1.0, top_k=0)[0]

    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    variants = [] if args.skip_generate else [("generate fp32 (before)", run_generate)]
    variants.append(("patch: SDPA with enable_gqa", enable_sdpa_gqa))  # as the CPU workers run it
    variants += [(f"rollout {name}", run_rollout(dtypes[name])) for name in args.dtypes.split(",")]
    batch = input_ids.size(0)
    lines = [f"Batch {batch} = {args.prompts} prompts x {args.n} responses, mean real prompt {real_prompt:.0f} "
             f"tokens (padded to {input_ids.size(1)}), up to {args.new_tokens} new tokens, sampling at temperature 1; "
             f"{args.threads} threads, {os.cpu_count()} CPUs.", "",
             "| rollout | wall s | decode steps | generated tokens | tokens/s | ms / decode step |", "|---|---|---|---|---|---|"]
    best = {}
    for name, fn in variants:
        if name.startswith("patch:"):
            fn()
            continue
        torch.manual_seed(args.seed)
        start = time.perf_counter()
        responses = fn()
        wall = time.perf_counter() - start
        tokens = generated(responses, eos, pad)
        steps = responses.size(1)
        lines.append(f"| {name} | {wall:.1f} | {steps} | {tokens} | {tokens / wall:.0f} | {1000 * wall / steps:.0f} |")
        print(lines[-1], flush=True)

    cfg = models[torch.float32].config
    params = sum(p.numel() for p in models[torch.float32].parameters())
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    mem_gbps = copy_bandwidth_gbps()
    mid_context = real_prompt + args.new_tokens / 2
    lines.append("")
    for name in args.dtypes.split(","):
        size = torch.finfo(dtypes[name]).bits // 8
        gflops = matmul_gflops(dtypes[name])
        kv_per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * size
        bytes_per_step = size * params + kv_per_token * mid_context * batch
        step_s = max(bytes_per_step / (mem_gbps * 1e9), 2 * params * batch / (gflops * 1e9))
        prefill_s = 2 * params * real_prompt * args.prompts / (gflops * 1e9)
        best[name] = batch * args.new_tokens / (prefill_s + args.new_tokens * step_s)
        lines.append(f"Estimated limit in {name}: about {best[name]:.0f} tokens/s if every row runs all "
                     f"{args.new_tokens} steps ({1000 * step_s:.0f} ms per decode step, prefill {prefill_s:.1f} s), "
                     f"from {gflops:.0f} GFLOP/s measured for a {name} matmul and {mem_gbps:.1f} GB/s for a copy.")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        write_text_atomic(args.markdown, text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
