"""Measure the CPU rollout's throughput: generated tokens per second for one GRPO batch.

Usage::

    python -m benchmarks.bench_cpu_rollout [--prompts 8] [--n 8] [--new-tokens 128] [--threads 2]
                                           [--dtypes fp32,bf16] [--skip-before] [--sdpa] [--rounds 1]
                                           [--skip-generate] [--markdown FILE]

Builds one rollout batch the way verl hands it to the rollout: ``--prompts`` MATH Level-1
training problems (data/verl/math_level1/train.parquet, rendered with the model's chat
template, left-padded), each repeated ``--n`` times in a row (GRPO group size). Then times, on
the same batch and in one process, side by side:

- ``generate``: ``transformers`` ``model.generate`` on every row (what the CPU rollout did
  first: each copy of a prompt prefilled separately), fp32;
- ``rollout fp32`` / ``rollout bf16``: :func:`cpu_support.verl_cpu_patch.sample_responses` on
  the model as the CPU rollout loads it (:func:`~cpu_support.verl_cpu_patch.load_rollout_model`:
  one prefill per group, the group's prompt keys and values stored once and read by the
  shared-prompt decode attention, stopped rows dropped from the decode batch, the decode steps
  run by the lean decode step :class:`~cpu_support.verl_cpu_patch.LeanLlamaDecode`: joined,
  oneDNN-prepacked products; in fp32 also the LM head in vocabulary blocks and the MLPs
  weight-major for the prefill), in fp32 and bf16 (the cpu profile uses bf16 only on CPUs with
  native bf16 matmuls, see profiles/cpu.sh);
- unless ``--skip-before``, ``rollout <dtype> (before)``: the previous decode, the same model
  loaded with ``lean=False``, every decode step through the HF forward (same prefill, same
  shared-prompt attention, same sampling);
- with ``--sdpa``, ``rollout <dtype> (plain SDPA)``: the rollout before the shared prompt,
  ``sample_responses`` on a plain SDPA model (the prompt's keys and values copied to every row of
  a static cache of prompt and response columns, torch's fused SDPA kernel over all of it in
  every decode step, every row computed to the last step, ``nn.Linear`` LM head).

With ``--rounds N`` every timed variant runs N times, the variants alternating within each
round, and the table gives the best and the median round: the CPUs may be shared with other
work (the header gives the load average when the run started), so compare rows of one run.

Every variant samples with temperature 1, top-p 1 and no top-k (verl's rollout defaults)
and stops a row at its EOS, so the variants do not generate the same number of tokens:
the table counts generated tokens (each response up to and including its EOS) and the
decode steps actually run. A rollout and its other variants draw the same random numbers,
so from one seed they sample the same tokens, except where fp32 rounding of the logits moves a
draw that falls among very unlikely tokens to a neighbouring one (5 of the 64 rows within 64
tokens in the default batch).

Columns: rollout, rounds, wall s, decode steps, generated tokens, tokens/s (generated tokens
/ wall s), ms per decode step (wall s / decode steps); "best / median" over the rounds.

The estimated limit printed under the table is arithmetic on rates measured on this machine
in the same run: a decode step must at least read the weights and the KV cache once (at the
bandwidth of a large tensor copy; each group's prompt keys and values once, each row's
response) and do 2 FLOPs per parameter per row, at the FLOP rate that the rollout model's own
matmuls (every layer's projections and MLP, and the LM head, :func:`matmul_units`; the lean decode
step's joined, prepacked products for the rollout) reach with
the decode step's input of ``--prompts`` x ``--n`` rows, not a square matmul's (64-row
products run well below it); the prefill does 2 FLOPs per parameter per prompt token, at the
rate of the first layer's matmuls with the prefill's rows. Attention FLOPs are left out.

Errors: a missing model directory or data file exits 2 with one line naming the path.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from script_utils import cpu_description, write_text_atomic

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


def matmul_units(model, layers=None) -> list:
    """(module, in_features, FLOPs per input row) of the matmuls of a forward pass of ``model``
    as the model runs them: every decoder layer's attention projections, its MLP as one module
    (the rollout's computes its products weight-major), and the LM head (the rollout's in
    vocabulary blocks); only the decoder layers ``layers`` (indices) when given, without LM head."""
    import torch

    def linears(module):
        return [m for m in module.modules() if isinstance(m, torch.nn.Linear)]

    units = []
    decoder = model.base_model.layers
    for index in range(len(decoder)) if layers is None else layers:
        layer = decoder[index]
        units += [(m, m.in_features, 2 * m.in_features * m.out_features) for m in linears(layer.self_attn)]
        units.append((layer.mlp, model.config.hidden_size, sum(2 * m.in_features * m.out_features
                                                                for m in linears(layer.mlp))))
    if layers is None:
        head = model.get_output_embeddings()
        units.append((head, head.in_features, 2 * head.in_features * head.out_features))
    return units


def lean_matmul_units(model) -> list:
    """:func:`matmul_units` of the model's lean decode step (its joined, prepacked products), or
    [] when it has none."""
    lean = getattr(model, "lean_decode", None)
    if lean is None:
        return []
    products = [p for layer in lean.layers for p in (layer.qkv, layer.o, layer.gate_up, layer.down)] + [lean.head]
    return [(p, p.in_features, 2 * p.in_features * p.out_features) for p in products]


def matmul_gflops(units, rows: int, dtype, repeats: int = 3) -> float:
    """FLOP rate (GFLOP/s, all torch threads, best of ``repeats``) of calling every module of
    ``units`` (:func:`matmul_units`) once on a (``rows``, in_features) input in ``dtype``: the
    matmul rate at the shapes a forward pass of that many rows runs (each layer's own weights,
    read from memory as in the model, and each module's own forward)."""
    import torch

    inputs = [torch.randn(rows, features).to(dtype) for _, features, _ in units]
    flops = rows * sum(per_row for _, _, per_row in units)
    best = float("inf")
    with torch.no_grad():
        for _ in range(repeats + 1):  # the first pass warms up
            start = time.perf_counter()
            for (module, _, _), x in zip(units, inputs):
                module(x)
            best = min(best, time.perf_counter() - start)
    return flops / best / 1e9


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


def estimated_limit(*, params: int, layers: int, kv_heads: int, head_dim: int, bytes_per_value: int,
                    prompts: int, n: int, real_prompt: float, new_tokens: int, decode_gflops: float,
                    prefill_gflops: float, copy_gbps: float) -> tuple[float, float, float]:
    """The rollout's limit: (tokens/s if every row runs all ``new_tokens`` decode steps,
    seconds per decode step, prefill seconds). A decode step reads the weights and the KV cache
    once (each group's prompt once, each row's response, on average half of it) at the copy
    bandwidth, or does 2 FLOPs per parameter per row at ``decode_gflops``, whichever is slower;
    the prefill does 2 FLOPs per parameter per prompt token of each group at ``prefill_gflops``."""
    batch = prompts * n
    kv_per_token = 2 * layers * kv_heads * head_dim * bytes_per_value
    bytes_per_step = bytes_per_value * params + kv_per_token * (prompts * real_prompt + batch * new_tokens / 2)
    step_s = max(bytes_per_step / (copy_gbps * 1e9), 2 * params * batch / (decode_gflops * 1e9))
    prefill_s = 2 * params * real_prompt * prompts / (prefill_gflops * 1e9)
    return batch * new_tokens / (prefill_s + new_tokens * step_s), step_s, prefill_s


def best_median(values, higher_is_better: bool = False) -> str:
    best = max(values) if higher_is_better else min(values)
    return f"{best:.1f} / {statistics.median(values):.1f}"


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
    parser.add_argument("--skip-before", action="store_true", help="omit the previous decode (HF forward)")
    parser.add_argument("--sdpa", "--before", action="store_true",
                        help="also time the plain SDPA model's rollout (--before: its former name)")
    parser.add_argument("--rounds", type=int, default=1, help="runs of every variant, alternating")
    parser.add_argument("--skip-generate", action="store_true", help="omit the slow model.generate variant")
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    for path in (args.model / "config.json", args.data):
        if not path.is_file():
            print(f"bench_cpu_rollout: {path}: missing (run 'bash setup.sh --device cpu' first)", file=sys.stderr)
            return 2

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cpu_support.verl_cpu_patch import enable_sdpa_gqa, load_rollout_model, sample_responses

    torch.set_num_threads(args.threads)
    enable_sdpa_gqa()  # as the CPU workers run (verl_cpu_patch.apply)
    load = os.getloadavg()[0]
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    input_ids, attention_mask = build_batch(tokenizer, args.data, args.prompts, args.n)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    real_prompt = attention_mask.sum(1).float().mean().item()
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    names = args.dtypes.split(",")
    rollout_models = {name: load_rollout_model(args.model, dtypes[name]) for name in names}
    before_models = {} if args.skip_before else \
        {name: load_rollout_model(args.model, dtypes[name], lean=False) for name in names}
    sdpa_models = {}

    def sdpa_model(name):
        if name not in sdpa_models:
            sdpa_models[name] = AutoModelForCausalLM.from_pretrained(
                args.model, torch_dtype=dtypes[name], attn_implementation="sdpa").eval()
        return sdpa_models[name]

    def run_generate():
        out = sdpa_model("fp32").generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=True,
                                          temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=args.new_tokens,
                                          eos_token_id=eos, pad_token_id=pad)
        return out[:, input_ids.size(1):]

    def run_rollout(model):
        return lambda: sample_responses(model, input_ids, attention_mask, max_new_tokens=args.new_tokens,
                                        eos_token_ids=eos, pad_token_id=pad, do_sample=True, temperature=1.0,
                                        top_p=1.0, top_k=0)[0]

    variants = [] if args.skip_generate else [("generate fp32", run_generate)]
    for name in names:
        variants.append((f"rollout {name}", run_rollout(rollout_models[name])))
        if not args.skip_before:
            variants.append((f"rollout {name} (before)", run_rollout(before_models[name])))
        if args.sdpa:
            variants.append((f"rollout {name} (plain SDPA)", run_rollout(sdpa_model(name))))
    batch = input_ids.size(0)
    lines = [f"Batch {batch} = {args.prompts} prompts x {args.n} responses, mean real prompt {real_prompt:.0f} "
             f"tokens (padded to {input_ids.size(1)}), up to {args.new_tokens} new tokens, sampling at temperature 1; "
             f"{args.threads} threads on {cpu_description()}; load average {load:.2f} at the start "
             f"({args.rounds} alternating rounds, best / median).", "",
             "| rollout | rounds | wall s | decode steps | generated tokens | tokens/s | ms / decode step |",
             "|---|---|---|---|---|---|---|"]
    runs = {name: [] for name, _ in variants}
    for _ in range(args.rounds):
        for name, fn in variants:
            torch.manual_seed(args.seed)
            start = time.perf_counter()
            responses = fn()
            wall = time.perf_counter() - start
            runs[name].append((wall, responses.size(1), generated(responses, eos, pad)))
            print(f"{name}: {wall:.1f} s, {responses.size(1)} decode steps, {runs[name][-1][2]} tokens", flush=True)
    for name, _ in variants:
        walls, steps, tokens = zip(*runs[name])
        rates = [t / w for t, w in zip(tokens, walls)]
        lines.append(f"| {name} | {len(walls)} | {best_median(walls)} | {statistics.median(steps):.0f} | "
                     f"{statistics.median(tokens):.0f} | {best_median(rates, higher_is_better=True)} | "
                     f"{best_median([1000 * w / s for w, s in zip(walls, steps)])} |")

    first = rollout_models[names[0]]
    cfg = first.config
    params = sum(p.numel() for p in first.parameters())
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    mem_gbps = copy_bandwidth_gbps()
    lines.append("")
    for name in names:
        model = rollout_models[name]
        size = torch.finfo(dtypes[name]).bits // 8
        decode_gflops = matmul_gflops(lean_matmul_units(model) or matmul_units(model), batch, dtypes[name])
        prefill_rows = args.prompts * input_ids.size(1)
        prefill_gflops = matmul_gflops(matmul_units(model, layers=[0]), prefill_rows, dtypes[name], repeats=2)
        limit, step_s, prefill_s = estimated_limit(
            params=params, layers=cfg.num_hidden_layers, kv_heads=cfg.num_key_value_heads, head_dim=head_dim,
            bytes_per_value=size, prompts=args.prompts, n=args.n, real_prompt=real_prompt, new_tokens=args.new_tokens,
            decode_gflops=decode_gflops, prefill_gflops=prefill_gflops, copy_gbps=mem_gbps)
        lines.append(f"Estimated limit in {name}: about {limit:.0f} tokens/s if every row runs all "
                     f"{args.new_tokens} steps ({1000 * step_s:.0f} ms per decode step, prefill {prefill_s:.1f} s), "
                     f"from {decode_gflops:.0f} GFLOP/s measured for the rollout model's matmuls at the decode "
                     f"step's shapes ({batch} rows: every layer's projections and MLP, and the LM head"
                     f"{', as the lean decode step computes them' if lean_matmul_units(model) else ''}), "
                     f"{prefill_gflops:.0f} GFLOP/s at the prefill's ({prefill_rows} rows, first layer) and "
                     f"{mem_gbps:.1f} GB/s for a copy.")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        write_text_atomic(args.markdown, text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
